"""The transport seam: how a `Connection` gets attached to a byte stream.

A connector takes ``(host, port, protocol)`` and connects the protocol to a transport. The real
one is TCP through the running event loop; `memory_pipe` links two protocols in memory so
unit tests of one layer can run a client against a server without sockets. Integration tests
always use real loopback TCP.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

__all__ = ["Connector", "MemoryTransport", "memory_pipe", "tcp_connector", "tls_connector"]

Connector = Callable[[str, int, asyncio.BaseProtocol], Awaitable[None]]


async def tcp_connector(host: str, port: int, protocol: asyncio.BaseProtocol) -> None:
    """Connect ``protocol`` to ``host:port`` over TCP with ``TCP_NODELAY`` (small RPC frames)."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(lambda: protocol, host, port)
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def tls_connector(context: ssl.SSLContext, *, shutdown_timeout: float = 3.0) -> Connector:
    """A connector that opens TCP and then TLS with ``context`` before ``protocol`` sees a
    byte (RocketMQ has no in-band upgrade: the remoting frames travel inside TLS).

    The host connected to is the name checked against the certificate (an IP address is
    matched against the certificate's IP subjectAltNames; no SNI is sent for it). Closing
    waits at most ``shutdown_timeout`` for the peer's close_notify (asyncio's default is 30 s,
    which a vanished broker would add to every client shutdown).
    """

    async def connect(host: str, port: int, protocol: asyncio.BaseProtocol) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await loop.create_connection(
                lambda: protocol,
                host,
                port,
                ssl=context,
                server_hostname=host,
                ssl_shutdown_timeout=shutdown_timeout,
            )
        except (ConnectionResetError, ConnectionAbortedError) as exc:
            # asyncio reports a peer that hung up mid-handshake with an empty message; a
            # plain-only RocketMQ server does exactly that (the ClientHello is no frame).
            raise type(exc)(
                "closed during the TLS handshake (does the server accept TLS?)"
            ) from exc
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    return connect


class MemoryTransport(asyncio.Transport):
    """One end of an in-memory byte pipe; bytes written arrive at the peer protocol."""

    def __init__(self, peer_name: tuple[str, int]) -> None:
        super().__init__()
        self._peer: MemoryTransport | None = None
        self._protocol: asyncio.BaseProtocol | None = None
        self._closing = False
        self._peer_name = peer_name
        self._loop = asyncio.get_running_loop()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._peer_name if name == "peername" else default

    def is_closing(self) -> bool:
        return self._closing

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or self._peer is None:
            return
        peer_proto = self._peer._protocol
        if peer_proto is not None and not self._peer._closing:
            self._loop.call_soon(_deliver, self._peer, bytes(data))

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        self.write(b"".join(list_of_data))

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        # Deliver what is queued first, then tell both sides: the order a socket would give.
        self._loop.call_soon(self._lost)
        if self._peer is not None and not self._peer._closing:
            self._peer._closing = True
            self._loop.call_soon(self._peer._lost)

    def abort(self) -> None:
        self.close()

    def _lost(self) -> None:
        if self._protocol is not None:
            proto, self._protocol = self._protocol, None
            proto.connection_lost(None)


def _deliver(transport: MemoryTransport, data: bytes) -> None:
    proto = transport._protocol
    if isinstance(proto, asyncio.BufferedProtocol):
        # As asyncio's own transports feed a buffered protocol: into the buffers it lends.
        view = memoryview(data)
        while view:
            buf = memoryview(proto.get_buffer(len(view)))
            n = min(len(buf), len(view))
            buf[:n] = view[:n]
            proto.buffer_updated(n)
            view = view[n:]
    elif isinstance(proto, asyncio.Protocol):
        proto.data_received(data)


def memory_pipe(
    client: asyncio.BaseProtocol, server: asyncio.BaseProtocol
) -> tuple[MemoryTransport, MemoryTransport]:
    """Link two protocols through an in-memory pipe and call their ``connection_made``."""
    a = MemoryTransport(("127.0.0.1", 50000))
    b = MemoryTransport(("127.0.0.1", 9876))
    a._peer, b._peer = b, a
    a._protocol, b._protocol = client, server
    client.connection_made(a)
    server.connection_made(b)
    return a, b
