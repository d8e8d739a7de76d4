"""The server side: an accept loop whose connections dispatch requests through a code table."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from aiorocket._concurrency import Service, ServiceOwner
from aiorocket._protocol.codes import ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import DEFAULT_MAX_FRAME_SIZE, encode_command_parts
from aiorocket._remoting.connection import Connection, RequestHandler
from aiorocket.errors import ClientClosedError
from aiorocket.tls import TlsMode

__all__ = ["Dispatcher", "Server", "ServerConnection"]

log = logging.getLogger("aiorocket.remoting")

#: The first byte of a TLS record carrying a handshake (RFC 8446 §5.1, ContentType 22): what
#: Java's ``NettyRemotingServer.HandshakeHandler`` looks for in a connection's first byte.
_TLS_HANDSHAKE = 0x16


class Dispatcher:
    """Routes requests by code. Unknown codes get REQUEST_CODE_NOT_SUPPORTED (3) with the
    request's opaque and the connection stays open, as a Java server answers (§1.7)."""

    def __init__(self) -> None:
        self._table: dict[int, RequestHandler] = {}

    def register(self, code: int, handler: RequestHandler) -> None:
        """Serve requests with ``code`` by ``handler`` (replacing any earlier one)."""
        self._table[int(code)] = handler

    def codes(self) -> frozenset[int]:
        """The request codes with a handler."""
        return frozenset(self._table)

    async def __call__(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        handler = self._table.get(cmd.code)
        if handler is None:
            return cmd.make_response(
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                remark=f" request type {cmd.code} not supported",
            )
        return await handler(conn, cmd)


class _Resume:
    """Awaitable that carries on a coroutine already run up to its first suspension: yields
    the future it was waiting for to the task that awaits this, then drives it to the end."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, None], first: Any) -> None:
        self._coro = coro
        self._first = first

    def __await__(self) -> Generator[Any, None, None]:
        coro, step = self._coro, self._first
        while True:
            try:
                yield step
            except BaseException as exc:  # cancellation thrown in by the task
                try:
                    step = coro.throw(exc)
                except StopIteration:
                    return
            else:
                try:
                    step = coro.send(None)
                except StopIteration:
                    return


async def _resume(coro: Coroutine[Any, Any, None], first: Any) -> None:
    await _Resume(coro, first)


class ServerConnection(Connection):
    """A server-side connection that answers in batches and starts some handlers eagerly.

    * Responses are written at the end of the event-loop iteration, all of them in one
      ``writelines``, like the client's requests: the pulls a client sends together are
      answered with one system call instead of one each (a loopback ``send`` costs as much
      CPU as serving a small pull). Requests the server sends itself still flush the
      waiting responses first, so frames keep their order.
    * A request whose code is in ``eager_codes`` runs its handler at once, inside the read
      callback, instead of in a new task: a handler that answers without waiting (a pull
      that found messages) costs no task at all. One that does wait (a held pull) goes on in
      a task of the server's task group from where it stopped. Eager handlers run outside
      any task, so they must not need ``asyncio.current_task()`` before their first wait.
    * With ``response_version`` set, every response carries it as its ``version``: a server
      stamps its own release on each answer (docs/protocol.md §0.3).
    """

    def __init__(
        self, *, eager_codes: frozenset[int], response_version: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._eager_codes = eager_codes
        self._version = response_version

    def send_response(
        self,
        cmd: RemotingCommand,
        body_parts: list[bytes | bytearray | memoryview] | None = None,
    ) -> None:
        """Queue a response for the write at the end of this loop iteration."""
        if self._version is not None:
            cmd.version = self._version
        loop = self._loop
        if loop is None or self.is_closed:
            super().send_response(cmd, body_parts)
            return
        self._cork(encode_command_parts(cmd, body_parts), loop)

    def send_encoded(self, parts: list[bytes | bytearray | memoryview]) -> None:
        """Queue a frame the caller encoded itself (a list it gives up) like a response."""
        loop = self._loop
        if self.is_closed or loop is None:
            return
        self._cork(parts, loop)

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if cmd.code not in self._eager_codes or self._spawn is None:
            super()._dispatch(cmd)
            return
        coro = self._serve(cmd)
        try:
            first = coro.send(None)
        except StopIteration:
            return  # answered already
        task = self._spawn(_resume(coro, first))
        if isinstance(task, asyncio.Task):
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)
        else:  # the server is closing: nothing will resume it
            coro.close()


class Server(ServiceOwner):
    """A TCP server whose connections serve requests with ``handler``.

    Use as an async context manager; `address` is the bound ``(host, port)`` (``port=0``
    picks a free one). Request handlers run as tasks of the server's task group; leaving the
    context closes the listener and every connection and cancels handlers still running (held
    long-poll pulls, for instance).

    With ``ssl_context`` and ``tls_mode`` ``"enforcing"`` or ``"permissive"``, each accepted
    connection is told apart by its first byte, peeked and left in the socket, as Java's
    ``HandshakeHandler`` does: 0x16 starts TLS on it, anything else is served in plain
    (permissive) or closed (enforcing). ``tls_handshake_timeout`` bounds the wait for that
    byte and the handshake.

    Responses leave in one write per event-loop iteration. Requests whose code is in
    ``eager_codes`` start their handler inside the read callback instead of in a new task
    (see `ServerConnection`): list only handlers that need no current task before their
    first ``await``. ``response_version`` (if set) is the ``version`` of every response written
    through `ServerConnection.send_response`; frames a handler encodes itself
    (``send_encoded``) must carry it already.
    """

    def __init__(
        self,
        handler: RequestHandler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        on_disconnect: Callable[[Connection], None] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        tls_mode: TlsMode = "disabled",
        tls_handshake_timeout: float = 10.0,
        eager_codes: frozenset[int] = frozenset(),
        response_version: int | None = None,
    ) -> None:
        if tls_mode != "disabled" and ssl_context is None:
            raise ValueError(f"TLS mode {tls_mode!r} needs an ssl_context")
        self._ssl = ssl_context if tls_mode != "disabled" else None
        self._tls_mode = tls_mode
        self._handshake_timeout = tls_handshake_timeout
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._handler = handler
        self._host = host
        self._port = port
        self._max_frame_size = max_frame_size
        self._eager_codes = frozenset(int(c) for c in eager_codes)
        self._response_version = response_version
        self._on_disconnect = on_disconnect
        self._server: asyncio.Server | None = None
        # Handlers and the accept loop run in the lifecycle's task group, not in the task that
        # entered the server: a crashing handler is logged, never cancels that task.
        self._lifecycle = Service(
            "remoting server",
            startup=self._open,
            shutdown=self._stop_serving,
            abort=self._abort,
            logger=log,
        )
        self.connections: set[Connection] = set()
        self.address: tuple[str, int] = (host, port)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> object:
        try:
            return self._lifecycle.spawn(coro)
        except ClientClosedError:  # not started, or stopped: the request goes unanswered
            coro.close()
            return None

    def _make_protocol(self) -> Connection:
        conn = ServerConnection(
            handler=self._handler,
            spawn=self._spawn,
            max_frame_size=self._max_frame_size,
            eager_codes=self._eager_codes,
            response_version=self._response_version,
        )
        self.connections.add(conn)

        def lost(c: Connection) -> None:
            self.connections.discard(c)
            if self._on_disconnect is not None:
                self._on_disconnect(c)

        conn.add_close_callback(lost)
        return conn

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        if self._ssl is not None:
            self._listener = self._listen()
        else:
            self._server = await loop.create_server(
                self._make_protocol, self._host, self._port, reuse_address=True
            )
        if self._listener is not None:
            name = self._listener.getsockname()
            self._accepting = self._lifecycle.task_group.create_task(
                self._accept_loop(self._listener)
            )
        else:
            assert self._server is not None
            name = self._server.sockets[0].getsockname()
            for s in self._server.sockets:
                if s.family in (socket.AF_INET, socket.AF_INET6):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.address = (str(name[0]), int(name[1]))

    # -- TLS: an own accept loop, so the first byte can be peeked before a transport exists --

    def _listen(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self._host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self._host, self._port))
            sock.listen(1024)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        return sock

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, _ = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and the like: keep serving the others
                log.warning("accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            self._spawn(self._admit(sock))

    async def _admit(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        conn: Connection | None = None
        try:
            sock.setblocking(False)
            if sock.family in (socket.AF_INET, socket.AF_INET6):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            async with asyncio.timeout(self._handshake_timeout):
                first = await _peek_byte(loop, sock)
                if first is None:
                    sock.close()
                    return
                tls = first == _TLS_HANDSHAKE
                if not tls and self._tls_mode == "enforcing":
                    log.warning(
                        "closing plain connection from %s: TLS is enforced on this port",
                        _peer(sock),
                    )
                    sock.close()
                    return
                conn = self._make_protocol()
                if tls:
                    await loop.connect_accepted_socket(
                        lambda: conn,
                        sock,
                        ssl=self._ssl,
                        ssl_shutdown_timeout=self._handshake_timeout,
                    )
                else:
                    await loop.connect_accepted_socket(lambda: conn, sock)
        except (OSError, TimeoutError) as exc:
            # A failed handshake (an untrusted or missing client certificate, a client that
            # gave up) costs that connection only.
            log.info("connection from %s refused: %s", _peer(sock), exc or "timed out")
            if conn is not None:
                self.connections.discard(conn)
            sock.close()
        except asyncio.CancelledError:
            if conn is not None:
                self.connections.discard(conn)
            sock.close()
            raise

    async def _abort(self, started: bool) -> None:
        # A handler crashed (logged by the lifecycle): release the port and the connections.
        await self._stop_serving()

    async def _stop_serving(self) -> None:
        if self._server is not None:
            self._server.close()
        if self._accepting is not None:
            self._accepting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._accepting
            self._accepting = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        conns = list(self.connections)
        for conn in conns:
            conn.close()
        for task in list(self._lifecycle.tasks):
            task.cancel()
        if conns:
            # Bounded: a transport that never reported connection_lost must not hang shutdown.
            waits = [asyncio.ensure_future(c.wait_closed()) for c in conns]
            _, late = await asyncio.wait(waits, timeout=5)
            for wait in late:  # (not left behind as loose tasks)
                wait.cancel()
            if late:
                await asyncio.wait(late)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


async def _peek_byte(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> int | None:
    """The first byte waiting in ``sock``, left there (``MSG_PEEK``); ``None`` at EOF."""
    while True:
        try:
            data = sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(sock.fileno(), _set_done, ready)
            try:
                await ready
            finally:
                loop.remove_reader(sock.fileno())
            continue
        return data[0] if data else None


def _set_done(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _peer(sock: socket.socket) -> str:
    try:
        name = sock.getpeername()
    except OSError:
        return "?"
    return f"{name[0]}:{name[1]}"
