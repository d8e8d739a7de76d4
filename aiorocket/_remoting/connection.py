"""One remoting connection: an ``asyncio.BufferedProtocol`` around the sans-IO frame codec.

Reading happens in the protocol's ``data_received`` callback (no reader task to own or leak);
requests the peer sends us (NOTIFY_CONSUMER_IDS_CHANGED from a broker, or anything a client sends
a server) are handed to the owner's ``spawn`` function, so they run in the owner's task group.
Nothing is started by the constructor.

Bytes are received straight into the frame decoder's buffer (``asyncio.BufferedProtocol``):
no allocation per read. Requests that expect a response are written at the end of the current
event-loop iteration:
several pull loops woken by one read each send their next pull, and the frames leave in one
``writelines`` (one system call) instead of one each. Frames keep their order: oneway requests
and responses flush what is waiting before they are written.

Correlation follows docs/protocol.md §1.6: our requests carry an ``opaque`` from this connection's
counter; an inbound frame is a response iff flag bit 0 is set, and a response whose opaque is
not pending (a late answer, or a "oneway" request the peer answered anyway) is dropped and logged.
When the connection dies every pending call fails at once with
[`ConnectionClosedError`][aiorocket.errors.ConnectionClosedError].

Requests go out in the JSON header dialect unless the connection is told to send the binary
one (``serialize_type``, docs/protocol.md §1.5); responses to the peer's requests always take the
dialect of the request, as Java's ``NettyRemotingAbstract`` answers.
Timeouts are kept as deadlines beside the pending calls and one timer per connection, armed for
the soonest, expires them (Java scans its response table the same way, in
``NettyRemotingAbstract.scanResponseTable``); a timer per request costs more than the request.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol, cast

from aiorocket._protocol.codes import FLAG_ONEWAY, ResponseCode, SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import (
    DEFAULT_MAX_FRAME_SIZE,
    NEED_DATA,
    FrameDecoder,
    RequestTemplate,
    encode_command_parts,
)
from aiorocket.errors import (
    ClientClosedError,
    ConnectionClosedError,
    FrameTooLargeError,
    LocalProtocolError,
    RemoteProtocolError,
    RequestTimeoutError,
)

__all__ = ["Connection", "FrameTemplate", "RequestHandler", "Spawn"]

log = logging.getLogger("aiorocket.remoting")

#: Serves one inbound request; returns the response, or ``None`` to send nothing.
RequestHandler = Callable[["Connection", RemotingCommand], Awaitable["RemotingCommand | None"]]


def _tls_hint(exc: RemoteProtocolError) -> str:
    """Why a frame length is absurd when the peer speaks TLS: a TLS record starts with its
    type (0x16 handshake, 0x15 alert) and version 3.x, read here as a length of 350-370 MB."""
    if isinstance(exc, FrameTooLargeError) and (exc.length >> 16) in (0x1603, 0x1503):
        return " (the peer speaks TLS on a connection that is plain TCP on this side)"
    return ""


class Spawn(Protocol):
    """Starts a coroutine in the owner's task group (e.g. ``asyncio.TaskGroup.create_task``)."""

    def __call__(self, coro: Coroutine[Any, Any, None], /) -> object: ...


class FrameTemplate(Protocol):
    """A request encoded once and sent again with a few integers changed: a
    `RequestTemplate` (JSON header) or a template of the
    binary header."""

    def command(self, values: Sequence[int], opaque: int = 0) -> RemotingCommand:
        """The request with ``values`` filled in, as a command."""
        ...

    def encode(self, opaque: int, values: Sequence[int]) -> list[bytes | bytearray | memoryview]:
        """The frame with ``values`` and ``opaque``, as buffers for ``writelines``."""
        ...


_OPAQUE_MASK = 0x7FFFFFFF  # non-negative opaques, as the C++ client does (§1.6)


class Connection(asyncio.BufferedProtocol):
    """A framed, multiplexed connection carrying requests in both directions.

    Args:
        handler: serves requests sent by the peer; ``None`` answers every request with
            REQUEST_CODE_NOT_SUPPORTED (code 3), as a Java peer with no processor does.
        spawn: runs inbound-request handlers in the owner's task group; required when
            ``handler`` is given.
        max_frame_size: the frame cap enforced on received frames.
        request_hook: called on every outgoing request before it is encoded (ACL signing).
        serialize_type: the header dialect of the requests sent; ``None`` keeps each
            command's own (JSON unless it says otherwise).
    """

    def __init__(
        self,
        *,
        handler: RequestHandler | None = None,
        spawn: Spawn | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        request_hook: Callable[[RemotingCommand], None] | None = None,
        serialize_type: SerializeType | None = None,
        name: str = "",
    ) -> None:
        if handler is not None and spawn is None:
            raise ValueError("a request handler needs a spawn function")
        self._handler = handler
        self._spawn = spawn
        self._hook = request_hook
        self._stype = serialize_type
        self._binary = serialize_type is SerializeType.ROCKETMQ
        #: requests and responses received per header dialect (plain counters: indexing a
        #: list with the IntEnum costs a few times more on this per-frame path)
        self._json_requests = self._binary_requests = 0
        self._json_responses = self._binary_responses = 0
        self._decoder = FrameDecoder(max_frame_size=max_frame_size)
        self._transport: asyncio.Transport | None = None
        #: encoded requests waiting for the end of this loop iteration (None: no flush due)
        self._corked: list[bytes | bytearray | memoryview] | None = None
        #: opaque -> (future, deadline on the loop clock, timeout) of each call in flight
        self._pending: dict[int, tuple[asyncio.Future[RemotingCommand], float, float]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the timer that expires overdue calls, and the deadline it is armed for
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = math.inf
        self._next_opaque = 0
        #: whether the peer ever sent a byte (see connection_lost)
        self._heard = False
        self._closed = False
        self._close_exc: BaseException | None = None
        self._lost = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._close_callbacks: list[Callable[[Connection], None]] = []
        self._serving: set[asyncio.Task[None]] = set()
        self.name = name
        self.peer: tuple[str, int] = ("", 0)
        #: free slot for the owner (the embedded broker keeps its channel state here)
        self.context: Any = None

    # -- asyncio.BufferedProtocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)
        # Cached: asyncio.get_running_loop() costs a getpid() system call on CPython 3.11.
        self._loop = asyncio.get_running_loop()
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = (str(peer[0]), int(peer[1]))

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self._heard = True
        self._decoder.buffer_updated(nbytes)
        self._process()

    def data_received(self, data: bytes) -> None:
        """Take bytes from a transport that does not lend buffers."""
        self._heard = True
        self._decoder.feed(data)
        self._process()

    def _process(self) -> None:
        decoder = self._decoder
        while True:
            try:
                cmd = decoder.next_command()
            except RemoteProtocolError as exc:
                # The stream position can no longer be trusted: close this connection only.
                log.warning("closing %s: %s%s", self._label(), exc, _tls_hint(exc))
                self._abort(exc)
                return
            if cmd is NEED_DATA:
                return
            if cmd.flag & 1:
                if cmd.serialize_type:
                    self._binary_responses += 1
                else:
                    self._json_responses += 1
                entry = self._pending.pop(cmd.opaque, None)
                if entry is None:
                    log.debug(
                        "%s: dropped response with unknown opaque %d", self._label(), cmd.opaque
                    )
                elif not entry[0].done():
                    entry[0].set_result(cmd)
            else:
                if cmd.serialize_type:
                    self._binary_requests += 1
                else:
                    self._json_requests += 1
                self._dispatch(cmd)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._close_exc is None:
            self._close_exc = exc
        hint = ""
        if self._pending and not self._heard and self._is_plain():
            # A RocketMQ server in TLS enforcing mode closes a plain connection without a word
            # (Java's HandshakeHandler): say so rather than leave a bare "closed".
            hint = (
                " by the peer before any response (a server in TLS enforcing mode closes plain"
                " connections: does it need tls=True?)"
            )
        err = ConnectionClosedError(f"connection to {self._label()} closed{hint}")
        if self._close_exc is not None:
            err.__cause__ = self._close_exc
        pending, self._pending = self._pending, {}
        for fut, _, _ in pending.values():
            if not fut.done():
                fut.set_exception(err)
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        self._writable.set()
        self._lost.set()
        # A handler whose connection is gone cannot answer: stop it (a held long-poll pull,
        # for instance, is discarded when its client disconnects, §6.4).
        for task in list(self._serving):
            task.cancel()
        for cb in self._close_callbacks:
            try:
                cb(self)
            except Exception:  # a callback's bug must not stop the others
                log.exception("close callback failed")

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    # -- public API ---------------------------------------------------------------------------

    @property
    def is_closed(self) -> bool:
        """True once the connection is closing or closed."""
        return self._closed or self._transport is None or self._transport.is_closing()

    @property
    def requests_received(self) -> dict[SerializeType, int]:
        """Requests the peer sent so far, per header dialect (both dialects listed)."""
        return {
            SerializeType.JSON: self._json_requests,
            SerializeType.ROCKETMQ: self._binary_requests,
        }

    @property
    def responses_received(self) -> dict[SerializeType, int]:
        """Responses received so far, per header dialect (both dialects listed); unmatched
        ones included."""
        return {
            SerializeType.JSON: self._json_responses,
            SerializeType.ROCKETMQ: self._binary_responses,
        }

    @property
    def pending_count(self) -> int:
        """Requests sent and still waiting for their response."""
        return len(self._pending)

    def add_close_callback(self, callback: Callable[[Connection], None]) -> None:
        """Call ``callback(self)`` once the connection is lost (immediately if it already is)."""
        if self._lost.is_set():
            callback(self)
        else:
            self._close_callbacks.append(callback)

    async def request(self, cmd: RemotingCommand, *, timeout: float = 3.0) -> RemotingCommand:
        """Send ``cmd`` and wait for its response.

        Raises:
            ConnectionClosedError: the connection is closed or dies before the response.
            RequestTimeoutError: no response within ``timeout`` seconds.
            LocalProtocolError: ``cmd`` cannot be encoded.
        """
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        deadline = loop.time() + timeout
        opaque = self._send_request(cmd, oneway=False, entry=(fut, deadline, timeout), loop=loop)
        return await self._response(loop, opaque, fut, deadline)

    async def request_template(
        self, template: FrameTemplate, values: Sequence[int], *, timeout: float = 3.0
    ) -> RemotingCommand:
        """Send ``template`` with ``values`` filled in and wait for its response: the same as
        ``request(template.command(values))``, without encoding the header again.

        Raises:
            ConnectionClosedError: the connection is closed or dies before the response.
            RequestTimeoutError: no response within ``timeout`` seconds.
        """
        if self._hook is not None or (self._binary and isinstance(template, RequestTemplate)):
            # A request hook (ACL signing) must see, and may change, the whole command; a JSON
            # template on a binary connection is re-encoded as a command.
            return await self.request(template.command(values), timeout=timeout)
        if self.is_closed:
            raise ConnectionClosedError(f"connection to {self._label()} is closed")
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[RemotingCommand] = loop.create_future()
        deadline = loop.time() + timeout
        opaque = self._take_opaque()
        self._pending[opaque] = (fut, deadline, timeout)
        self._cork(template.encode(opaque, values), loop)
        # (what _response does, inline: one coroutine less per pull)
        if deadline < self._sweep_at:
            self._arm_sweep(loop, deadline)
        try:
            return await fut
        finally:
            self._pending.pop(opaque, None)

    async def _response(
        self,
        loop: asyncio.AbstractEventLoop,
        opaque: int,
        fut: asyncio.Future[RemotingCommand],
        deadline: float,
    ) -> RemotingCommand:
        if deadline < self._sweep_at:
            self._arm_sweep(loop, deadline)
        try:
            return await fut
        finally:
            self._pending.pop(opaque, None)

    async def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send ``cmd`` with flag bit 1 (no response expected) and wait for write capacity.

        Raises:
            ConnectionClosedError: the connection is closed.
        """
        self._send_request(cmd, oneway=True, entry=None)
        await self.drain()

    def send_response(
        self,
        cmd: RemotingCommand,
        body_parts: list[bytes | bytearray | memoryview] | None = None,
    ) -> None:
        """Write a response (or any frame) now; silently dropped if the connection is gone."""
        if self.is_closed:
            return
        assert self._transport is not None
        parts = encode_command_parts(cmd, body_parts)
        if self._corked:  # after the requests corked before it
            parts = [*self._corked, *parts]
            self._corked.clear()
        self._transport.writelines(parts)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if not self._writable.is_set():
            await self._writable.wait()

    def close(self) -> None:
        """Close the connection; pending calls fail with
        [`ConnectionClosedError`][aiorocket.errors.ConnectionClosedError]."""
        if self._corked and not self.is_closed:
            self._flush()  # requests made before the close still leave, as written ones do
        self._closed = True
        if self._close_exc is None:
            self._close_exc = ClientClosedError("closed locally")
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    async def wait_closed(self) -> None:
        """Wait until the connection is lost."""
        await self._lost.wait()

    # -- internals ----------------------------------------------------------------------------

    def _is_plain(self) -> bool:
        t = self._transport
        return t is not None and t.get_extra_info("ssl_object") is None

    def _label(self) -> str:
        return self.name or f"{self.peer[0]}:{self.peer[1]}"

    def _send_request(
        self,
        cmd: RemotingCommand,
        *,
        oneway: bool,
        entry: tuple[asyncio.Future[RemotingCommand], float, float] | None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> int:
        """Encode and queue ``cmd``; written now, or (given ``loop``) at the end of this loop
        iteration together with the other requests made meanwhile. Returns its opaque."""
        if self.is_closed:
            raise ConnectionClosedError(f"connection to {self._label()} is closed")
        opaque = cmd.opaque = self._take_opaque()
        cmd.flag = (cmd.flag | FLAG_ONEWAY) if oneway else (cmd.flag & ~(FLAG_ONEWAY | 1))
        if self._stype is not None:
            cmd.serialize_type = self._stype
        if self._hook is not None:
            self._hook(cmd)
        parts = encode_command_parts(cmd)  # may raise LocalProtocolError: nothing sent then
        if entry is not None:
            self._pending[opaque] = entry
        if loop is None:
            # Written now (a oneway send waits for write capacity next), after anything corked.
            assert self._transport is not None
            corked = self._corked
            if corked:
                parts = [*corked, *parts]
                corked.clear()
            self._transport.writelines(parts)
        else:
            self._cork(parts, loop)
        return opaque

    def _take_opaque(self) -> int:
        self._next_opaque = opaque = (self._next_opaque + 1) & _OPAQUE_MASK
        return opaque

    def _cork(
        self, parts: list[bytes | bytearray | memoryview], loop: asyncio.AbstractEventLoop
    ) -> None:
        """Queue ``parts`` (a list the caller gives up) for the write at the end of this
        loop iteration."""
        corked = self._corked
        if corked is None:
            self._corked = parts
            loop.call_soon(self._flush)
        else:
            corked += parts

    def _flush(self) -> None:
        """Write the requests corked during this loop iteration, in one call."""
        parts, self._corked = self._corked, None
        if parts and not self.is_closed:
            assert self._transport is not None
            self._transport.writelines(parts)

    def _arm_sweep(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
        self._sweep_at = when
        self._sweep = loop.call_at(when, self._expire_overdue)

    def _expire_overdue(self) -> None:
        """Fail the calls whose deadline has passed; re-arm for the soonest of the others."""
        self._sweep = None
        self._sweep_at = math.inf
        loop = self._loop
        assert loop is not None
        # A timer may run a clock tick before its time: what is due within 1 µs is overdue.
        now = loop.time() + 1e-6
        soonest = math.inf
        overdue: list[int] = []
        for opaque, (_, deadline, _) in self._pending.items():
            if deadline <= now:
                overdue.append(opaque)
            elif deadline < soonest:
                soonest = deadline
        for opaque in overdue:
            fut, _, timeout = self._pending.pop(opaque)
            if not fut.done():
                fut.set_exception(
                    RequestTimeoutError(f"no response from {self._label()} within {timeout:g} s")
                )
        if soonest < math.inf and not self._closed:
            self._arm_sweep(loop, soonest)

    def _abort(self, exc: BaseException) -> None:
        self._closed = True
        self._close_exc = exc
        if self._transport is not None:
            self._transport.abort()

    def _dispatch(self, cmd: RemotingCommand) -> None:
        if self._handler is None or self._spawn is None:
            # Java answers code 3 even to oneway requests it has no processor for (§1.7).
            self.send_response(
                cmd.make_response(
                    ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                    remark=f" request type {cmd.code} not supported",
                )
            )
            return
        task = self._spawn(self._serve(cmd))
        if isinstance(task, asyncio.Task):
            self._serving.add(task)
            task.add_done_callback(self._serving.discard)

    async def _serve(self, cmd: RemotingCommand) -> None:
        assert self._handler is not None
        try:
            response = await self._handler(self, cmd)
        except asyncio.CancelledError:
            raise
        except (RemoteProtocolError, LocalProtocolError) as exc:
            # A malformed header field: Java answers SYSTEM_ERROR with the reason (§1.7).
            response = cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        except Exception as exc:
            log.exception("handler for request code %d failed", cmd.code)
            response = cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}"
            )
        if response is not None and not cmd.flag & FLAG_ONEWAY:
            try:
                self.send_response(response)
            except LocalProtocolError:
                log.exception("cannot encode the response to request code %d", cmd.code)
                self.send_response(
                    cmd.make_response(ResponseCode.SYSTEM_ERROR, remark="unencodable response")
                )
