"""asyncio I/O around the sans-IO codec: connections, the connection pool, the server side."""

from aiorocket._remoting.connection import Connection, RequestHandler, Spawn
from aiorocket._remoting.pool import ConnectionPool, parse_address
from aiorocket._remoting.server import Dispatcher, Server
from aiorocket._remoting.transport import Connector, memory_pipe, tcp_connector, tls_connector

__all__ = [
    "Connection",
    "ConnectionPool",
    "Connector",
    "Dispatcher",
    "RequestHandler",
    "Server",
    "Spawn",
    "memory_pipe",
    "parse_address",
    "tcp_connector",
    "tls_connector",
]
