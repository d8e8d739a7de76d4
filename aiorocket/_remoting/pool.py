"""Connections keyed by ``host:port``: one per address, shared, re-created after it dies."""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Callable

from aiorocket._protocol.codes import SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import DEFAULT_MAX_FRAME_SIZE
from aiorocket._remoting.connection import Connection, RequestHandler, Spawn
from aiorocket._remoting.transport import Connector, tcp_connector
from aiorocket.errors import ClientClosedError, ConfigurationError, ConnectError

__all__ = ["ConnectionPool", "parse_address"]

log = logging.getLogger("aiorocket.remoting")


def parse_address(address: str) -> tuple[str, int]:
    """Split ``"host:port"`` (IPv6 as ``"[::1]:9876"``).

    Raises:
        ConfigurationError: the address is not ``host:port`` with a port in 1..65535.
    """
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"invalid address {address!r}: expected host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


class ConnectionPool:
    """One `Connection` per address, created on first use and again after it closes.

    Concurrent callers asking for the same address share a single connect attempt. Inbound
    requests on every connection go to ``handler``, run through ``spawn``; requests sent go out
    in ``serialize_type`` (``None``: each command's own dialect).
    """

    def __init__(
        self,
        *,
        handler: RequestHandler | None = None,
        spawn: Spawn | None = None,
        connect_timeout: float = 3.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        request_hook: Callable[[RemotingCommand], None] | None = None,
        connector: Connector = tcp_connector,
        serialize_type: SerializeType | None = None,
    ) -> None:
        #: a new connection with the pool's settings (``name``: its address)
        self._new_connection = functools.partial(
            Connection,
            handler=handler,
            spawn=spawn,
            max_frame_size=max_frame_size,
            request_hook=request_hook,
            serialize_type=serialize_type,
        )
        #: the dialect requests go out in (``None``: each command's own)
        self._stype = serialize_type
        self._connect_timeout = connect_timeout
        self._connector = connector
        self._conns: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[Connection]] = {}
        self._closed = False

    def connections(self) -> dict[str, Connection]:
        """The live connections by address (a copy)."""
        return {a: c for a, c in self._conns.items() if not c.is_closed}

    def get_nowait(self, address: str) -> Connection | None:
        """The live connection to ``address``, or ``None`` if there is none right now (no
        coroutine: the per-request fast path)."""
        conn = self._conns.get(address)
        if conn is not None and not self._closed and not conn.is_closed:
            return conn
        return None

    async def get(self, address: str) -> Connection:
        """Return the live connection to ``address``, connecting if needed.

        Raises:
            ConnectError: the connection could not be established in time.
            ClientClosedError: the pool is closed.
        """
        if self._closed:
            raise ClientClosedError("connection pool is closed")
        conn = self._conns.get(address)
        if conn is not None and not conn.is_closed:
            return conn
        fut = self._connecting.get(address)
        if fut is None:
            fut = asyncio.get_running_loop().create_future()
            self._connecting[address] = fut
            try:
                conn = await self._connect(address)
            except BaseException as exc:
                fut.set_exception(exc if isinstance(exc, Exception) else ConnectError(str(exc)))
                fut.exception()  # mark retrieved: waiters may not exist
                raise
            else:
                fut.set_result(conn)
            finally:
                del self._connecting[address]
            return conn
        return await asyncio.shield(fut)

    async def _connect(self, address: str) -> Connection:
        host, port = parse_address(address)
        conn = self._new_connection(name=address)
        try:
            async with asyncio.timeout(self._connect_timeout):
                await self._connector(host, port, conn)
        except ssl.SSLCertVerificationError as exc:
            raise ConnectError(
                f"TLS certificate verification failed for {address}: {exc.verify_message} "
                "(trust the server's CA with tls_ca=... or a tls=ssl.SSLContext)"
            ) from exc
        except ssl.SSLError as exc:
            # A plain-only server closes on the ClientHello (its first bytes read as an
            # oversized frame length): the handshake then ends in EOF.
            raise ConnectError(
                f"TLS handshake with {address} failed: {exc} (does the server accept TLS?)"
            ) from exc
        except (OSError, TimeoutError) as exc:
            raise ConnectError(f"cannot connect to {address}: {exc or 'timed out'}") from exc
        if self._closed:
            conn.close()
            raise ClientClosedError("connection pool is closed")
        self._conns[address] = conn
        conn.add_close_callback(lambda c: self._forget(address, c))
        log.debug("connected to %s", address)
        return conn

    def _forget(self, address: str, conn: Connection) -> None:
        if self._conns.get(address) is conn:
            del self._conns[address]

    def close_address(self, address: str) -> None:
        """Close the connection to ``address`` if there is one (the next ``get`` reconnects)."""
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        """Close every connection and refuse new ones; waits until they are closed."""
        self._closed = True
        conns = list(self._conns.values())
        self._conns.clear()
        for conn in conns:
            conn.close()
        for conn in conns:
            await conn.wait_closed()
