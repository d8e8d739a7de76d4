"""``ChaosProxy``: a TCP proxy that injects network faults between clients and a broker.

Every accepted connection is paired with a fresh connection to the upstream address and bytes
are copied both ways by a reader and a writer task per direction. The faults act on the copy:

* [`ChaosProxy.stall`][aiorocket.testing.ChaosProxy.stall] stops copying without closing anything (a
  black hole: a partition, a frozen peer). Nothing is dropped: what is in flight waits in the proxy
      and in the kernel's
  socket buffers, and flows again after [`heal`][aiorocket.testing.ChaosProxy.heal], as TCP delivers
  it once a partition heals; peers that give up meanwhile time out, as they would on a real network;
* [`ChaosProxy.reset`][aiorocket.testing.ChaosProxy.reset] aborts every connection with a TCP RST on
  both sides;
* [`ChaosProxy.truncate`][aiorocket.testing.ChaosProxy.truncate] lets half of the next frame
  through, then closes the connection (RocketMQ frames are length-prefixed: the proxy follows their
  boundaries, nothing else of the protocol);
* [`ChaosProxy.delay`][aiorocket.testing.ChaosProxy.delay] adds latency to every chunk,
  [`ChaosProxy.bandwidth`][aiorocket.testing.ChaosProxy.bandwidth] caps the rate of each direction
  of each connection;
* [`ChaosProxy.heal`][aiorocket.testing.ChaosProxy.heal] removes every fault.

Clients must send *all* their traffic through the proxy, so the broker's routes must advertise
the proxy's address: [`EmbeddedBroker`][aiorocket.embedded.EmbeddedBroker] takes
``BrokerConfig(advertised_port=proxy.port)`` (the ``embedded_broker`` fixture of the pytest
plugin does it when a test also uses ``chaos_proxy``). A Java broker advertises
``brokerIP1:listenPort``: give the proxy the broker's port on another loopback address
(``ChaosProxy(upstream="127.0.0.1:10911", host="127.0.0.2", port=10911)``) and set
``brokerIP1=127.0.0.2``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from collections import deque
from typing import Literal

from aiorocket._concurrency import AsyncResource

__all__ = ["ChaosProxy", "Direction"]

log = logging.getLogger("aiorocket.testing")

Direction = Literal["upstream", "downstream", "both"]
"""Which way a fault applies: client → upstream, upstream → client, or both."""

_CHUNK = 64 * 1024
_CONNECT_TIMEOUT = 5.0
_LINGER_RST = struct.pack("ii", 1, 0)


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"address {address!r} is not host:port")
    return host, int(port)


class _FrameCursor:
    """Where the bytes written so far stand in the stream of length-prefixed frames
    (4-byte big-endian length, then that many bytes: docs/protocol.md §1.1)."""

    __slots__ = ("_header", "pos", "size")

    def __init__(self) -> None:
        #: bytes of the current frame already written (0: at a frame boundary)
        self.pos = 0
        #: total size of the current frame, prefix included (-1: prefix not complete yet)
        self.size = -1
        self._header = bytearray()

    def advance(self, data: bytes) -> None:
        """Account for ``data`` having been written."""
        i, n = 0, len(data)
        while i < n:
            if self.size < 0:
                head = data[i : i + 4 - len(self._header)]
                self._header += head
                i += len(head)
                self.pos += len(head)
                if len(self._header) == 4:
                    self.size = 4 + int.from_bytes(self._header, "big")
                    self._header.clear()
                    if self.pos >= self.size:  # an empty frame body
                        self.pos, self.size = 0, -1
                continue
            take = min(self.size - self.pos, n - i)
            i += take
            self.pos += take
            if self.pos >= self.size:
                self.pos, self.size = 0, -1

    def cut(self, data: bytes) -> int:
        """How much of ``data`` to write so that a frame is left half-written."""
        if self.pos > 0:
            return 0  # a frame is half-written already
        if len(data) >= 4:
            size = 4 + int.from_bytes(data[:4], "big")
            return max(1, min(size // 2, len(data)))
        return max(1, len(data) // 2)


class _Flow:
    """One direction of a link: a reader task queues chunks, a writer task forwards them."""

    def __init__(
        self, proxy: ChaosProxy, link: _Link, src: asyncio.StreamReader, dst: asyncio.StreamWriter
    ) -> None:
        self.proxy = proxy
        self.link = link
        self.src = src
        self.dst = dst
        self.chunks: deque[tuple[float, bytes] | None] = deque()
        self.ready = asyncio.Event()
        self.cursor = _FrameCursor()
        self.truncate = False

    async def read(self) -> None:
        proxy = self.proxy
        loop = asyncio.get_running_loop()
        try:
            while True:
                await proxy._flowing.wait()
                data = await self.src.read(_CHUNK)
                if not data:
                    break
                self.chunks.append((loop.time() + proxy._delay, data))
                self.ready.set()
        except (ConnectionError, OSError):
            pass
        self.chunks.append(None)
        self.ready.set()

    async def write(self) -> None:
        proxy = self.proxy
        loop = asyncio.get_running_loop()
        try:
            while True:
                while not self.chunks:
                    self.ready.clear()
                    await self.ready.wait()
                item = self.chunks[0]
                if item is None:
                    break
                due, data = item
                if due > loop.time():
                    await asyncio.sleep(due - loop.time())
                await proxy._flowing.wait()
                self.chunks.popleft()
                if self.truncate:
                    n = self.cursor.cut(data)
                    if n:
                        self.dst.write(data[:n])
                        await self.dst.drain()
                    proxy.truncated += 1
                    log.info("chaos proxy: cut a frame on %s", self.link.name)
                    break
                rate = proxy._bandwidth
                if rate is None:
                    self.dst.write(data)
                else:
                    # Paced in slices of 50 ms worth: each leaves once the link would have
                    # carried the previous ones.
                    step = max(1, int(rate / 20))
                    for i in range(0, len(data), step):
                        piece = data[i : i + step]
                        await asyncio.sleep(len(piece) / rate)
                        self.dst.write(piece)
                self.cursor.advance(data)
                proxy.bytes_forwarded += len(data)
                await self.dst.drain()
        except (ConnectionError, OSError):
            pass
        self.link.close()


class _Link:
    """A client connection and its upstream connection."""

    def __init__(
        self,
        proxy: ChaosProxy,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    ) -> None:
        self.proxy = proxy
        self.client_writer = client[1]
        self.upstream_writer = upstream[1]
        peer = client[1].get_extra_info("peername")
        self.name = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "?"
        self.up = _Flow(proxy, self, client[0], upstream[1])
        self.down = _Flow(proxy, self, upstream[0], client[1])
        self.closed = asyncio.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        for flow, what in ((self.up, "up"), (self.down, "down")):
            self.tasks.append(loop.create_task(flow.read(), name=f"chaos {what} read"))
            self.tasks.append(loop.create_task(flow.write(), name=f"chaos {what} write"))

    def flows(self, direction: Direction) -> list[_Flow]:
        if direction == "upstream":
            return [self.up]
        if direction == "downstream":
            return [self.down]
        return [self.up, self.down]

    def close(self, *, rst: bool = False) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for writer in (self.client_writer, self.upstream_writer):
            transport = writer.transport
            if rst:
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RST)
                transport.abort()
            else:
                transport.close()
        current = asyncio.current_task()
        for task in self.tasks:
            if task is not current:
                task.cancel()
        self.proxy._links.discard(self)


class ChaosProxy(AsyncResource):
    """A TCP proxy in front of ``upstream`` that injects network faults on demand.

    ```python
    async with ChaosProxy("127.0.0.1:10911") as proxy:
        ...                 # clients connect to proxy.address
        proxy.stall()       # a black hole: nothing flows, nothing closes
        await asyncio.sleep(30)
        proxy.heal()
    ```

    Args:
        upstream: ``"host:port"`` to forward to; may be set later through
            [`upstream`][aiorocket.testing.ChaosProxy.upstream] (connections accepted without one
            are closed at once).
        host: the address to listen on.
        port: the port to listen on; 0 picks a free one (see
            [`port`][aiorocket.testing.ChaosProxy.port]).

    Fault methods are synchronous and take effect at once; each connection's faults are
    applied by its own tasks, so they also hold for connections accepted later (a stalled
    proxy accepts connections but copies nothing).
    """

    def __init__(self, upstream: str | None = None, *, host: str = "127.0.0.1", port: int = 0):
        if upstream is not None:
            _split_address(upstream)
        self._upstream = upstream
        self._host = host
        self._port = port
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._accepting: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._delay = 0.0
        self._bandwidth: float | None = None
        #: frames cut by [`truncate`][aiorocket.testing.ChaosProxy.truncate] so far
        self.truncated = 0
        #: connections aborted by [`reset`][aiorocket.testing.ChaosProxy.reset] so far
        self.resets = 0
        #: connections accepted so far
        self.accepted = 0
        #: bytes copied so far, both directions
        self.bytes_forwarded = 0

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start listening.

        Raises:
            OSError: the address cannot be bound.
        """
        if self._server is not None:
            return
        self._server = await asyncio.start_server(
            self._accept, self._host, self._port, reuse_address=True
        )
        self._port = int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop listening and close every connection (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for link in list(self._links):
            link.close()
        tasks = [t for link in list(self._links) for t in link.tasks]
        tasks += self._accepting  # (they find the proxy closed and abort)
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        if server is not None:
            await server.wait_closed()

    # -- addresses ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The port the proxy listens on (0 before
        [`start`][aiorocket.testing.ChaosProxy.start])."""
        return self._port

    @property
    def address(self) -> str:
        """``"host:port"`` clients connect to."""
        return f"{self._host}:{self._port}"

    @property
    def upstream(self) -> str | None:
        """Where connections are forwarded; changing it affects new connections only."""
        return self._upstream

    @upstream.setter
    def upstream(self, address: str | None) -> None:
        if address is not None:
            _split_address(address)
        self._upstream = address

    @property
    def connections(self) -> int:
        """Client connections currently open through the proxy."""
        return len(self._links)

    @property
    def stalled(self) -> bool:
        """Whether [`stall`][aiorocket.testing.ChaosProxy.stall] is in effect."""
        return not self._flowing.is_set()

    # -- faults ------------------------------------------------------------------------------

    def stall(self) -> None:
        """Stop copying bytes in both directions, closing nothing (a black hole) until
        [`heal`][aiorocket.testing.ChaosProxy.heal]. Held bytes are delivered after the heal."""
        self._flowing.clear()
        log.info("chaos proxy %s: stalled", self.address)

    def reset(self) -> int:
        """Abort every open connection with a TCP RST, towards the client and the upstream;
        returns how many. New connections are accepted as usual."""
        links = list(self._links)
        for link in links:
            link.close(rst=True)
        self.resets += len(links)
        log.info("chaos proxy %s: reset %d connection(s)", self.address, len(links))
        return len(links)

    def truncate(self, direction: Direction = "downstream") -> int:
        """Cut the next frame sent in ``direction`` on every open connection in half, then
        close that connection (a frame half-written already is cut where it stands). Returns
        how many connections are armed; `truncated` counts the cuts made."""
        links = list(self._links)
        for link in links:
            for flow in link.flows(direction):
                flow.truncate = True
        log.info("chaos proxy %s: truncating on %d connection(s)", self.address, len(links))
        return len(links)

    def delay(self, seconds: float) -> None:
        """Delay every chunk by ``seconds`` from now on (0 removes the delay).

        Raises:
            ValueError: ``seconds`` is negative.
        """
        if seconds < 0:
            raise ValueError("delay must not be negative")
        self._delay = float(seconds)

    def bandwidth(self, bytes_per_s: float | None) -> None:
        """Cap each direction of each connection at ``bytes_per_s`` (``None``: no cap).

        Raises:
            ValueError: ``bytes_per_s`` is not positive.
        """
        if bytes_per_s is not None and bytes_per_s <= 0:
            raise ValueError("bandwidth must be positive")
        self._bandwidth = None if bytes_per_s is None else float(bytes_per_s)

    def heal(self) -> None:
        """Remove every fault: copying resumes, no delay, no bandwidth cap, no pending cut."""
        self._delay = 0.0
        self._bandwidth = None
        for link in self._links:
            link.up.truncate = link.down.truncate = False
        self._flowing.set()
        log.info("chaos proxy %s: healed", self.address)

    # -- plumbing ----------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        upstream = self._upstream
        task = asyncio.current_task()
        if task is not None:
            self._accepting.add(task)
        try:
            if upstream is None:
                raise OSError("the proxy has no upstream address")
            host, port = _split_address(upstream)
            async with asyncio.timeout(_CONNECT_TIMEOUT):
                up = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError) as exc:
            writer.transport.abort()
            log.info("chaos proxy %s: upstream %s unreachable: %s", self.address, upstream, exc)
            return
        finally:
            if task is not None:
                self._accepting.discard(task)
        for w in (writer, up[1]):
            sock = w.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._server is None:  # closed meanwhile
            writer.transport.abort()
            up[1].transport.abort()
            return
        link = _Link(self, (reader, writer), up)
        self._links.add(link)
        link.start()
