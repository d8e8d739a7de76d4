"""The server side: an accept loop whose connections dispatch requests through a code table."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Self

from aiorocket._protocol.codes import ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import DEFAULT_MAX_FRAME_SIZE
from aiorocket._remoting.connection import Connection, RequestHandler

__all__ = ["Dispatcher", "Server"]

log = logging.getLogger("aiorocket.remoting")


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


class Server:
    """A TCP server whose connections serve requests with ``handler``.

    Use as an async context manager; :attr:`address` is the bound ``(host, port)`` (``port=0``
    picks a free one). Request handlers run as tasks of the server's task group; leaving the
    context closes the listener and every connection and cancels handlers still running (held
    long-poll pulls, for instance).
    """

    def __init__(
        self,
        handler: RequestHandler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        on_disconnect: Callable[[Connection], None] | None = None,
    ) -> None:
        self._handler = handler
        self._host = host
        self._port = port
        self._max_frame_size = max_frame_size
        self._on_disconnect = on_disconnect
        self._server: asyncio.Server | None = None
        self._tg: asyncio.TaskGroup | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections: set[Connection] = set()
        self.address: tuple[str, int] = (host, port)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> object:
        if self._tg is None:
            coro.close()
            return None
        task = self._tg.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _make_protocol(self) -> Connection:
        conn = Connection(
            handler=self._handler, spawn=self._spawn, max_frame_size=self._max_frame_size
        )
        self.connections.add(conn)

        def lost(c: Connection) -> None:
            self.connections.discard(c)
            if self._on_disconnect is not None:
                self._on_disconnect(c)

        conn.add_close_callback(lost)
        return conn

    async def __aenter__(self) -> Self:
        self._tg = asyncio.TaskGroup()
        await self._tg.__aenter__()
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                self._make_protocol, self._host, self._port, reuse_address=True
            )
        except BaseException:
            await self._tg.__aexit__(None, None, None)
            self._tg = None
            raise
        sock = self._server.sockets[0]
        name = sock.getsockname()
        self.address = (str(name[0]), int(name[1]))
        for s in self._server.sockets:
            if s.family in (socket.AF_INET, socket.AF_INET6):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return self

    async def close(self) -> None:
        """Stop accepting, close every connection and cancel running handlers."""
        if self._server is not None:
            self._server.close()
        conns = list(self.connections)
        for conn in conns:
            conn.close()
        for task in list(self._tasks):
            task.cancel()
        if conns:
            # Bounded: a transport that never reported connection_lost must not hang shutdown.
            await asyncio.wait([asyncio.ensure_future(c.wait_closed()) for c in conns], timeout=5)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.close()
        finally:
            tg, self._tg = self._tg, None
            if tg is not None:
                await tg.__aexit__(exc_type, exc, tb)
