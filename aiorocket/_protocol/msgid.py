"""Message ids: the broker's offset id and the producer's client id, UNIQ_KEY (§4.4).

Sans-IO: the caller passes the current time in; nothing here reads a clock.
"""

from __future__ import annotations

import ipaddress
import struct
from datetime import UTC, datetime, timedelta
from typing import Final

from aiorocket.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "UniqKeyGenerator",
    "make_offset_msg_id",
    "parse_offset_msg_id",
]

_OFFSET_V4: Final = struct.Struct(">4siq")  # store IP, store port, commitLogOffset
_OFFSET_V6: Final = struct.Struct(">16siq")
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


# A broker builds an offset id for every message it stores, always with its own address:
# remember the parsed form instead of running ipaddress each time. Bounded by clearing.
_PACKED_IPS: dict[str, bytes] = {}
_CACHE_LIMIT: Final = 256


def _pack_ip(host: str) -> bytes:
    """The 4 or 16 address bytes of a textual IP; LocalProtocolError otherwise."""
    packed = _PACKED_IPS.get(host)
    if packed is None:
        try:
            packed = ipaddress.ip_address(host).packed
        except ValueError:
            raise LocalProtocolError(f"{host!r} is not an IP address") from None
        if len(_PACKED_IPS) >= _CACHE_LIMIT:
            _PACKED_IPS.clear()
        _PACKED_IPS[host] = packed
    return packed


def make_offset_msg_id(host: str, port: int, commit_log_offset: int) -> str:
    """Build the offset message id (``MessageDecoder.createMessageId``).

    Upper-case hex of the store host's IP, its port (int32) and the commit-log offset
    (int64): 32 characters for IPv4, 56 for IPv6.

    Raises:
        LocalProtocolError: ``host`` is not a textual IP, ``port`` is outside 0..65535 or
            ``commit_log_offset`` is negative or beyond int64.
    """
    ip = _pack_ip(host)
    if not 0 <= port <= 0xFFFF:
        raise LocalProtocolError(f"port {port} is outside 0..65535")
    if not 0 <= commit_log_offset < 1 << 63:
        raise LocalProtocolError(f"commit-log offset {commit_log_offset} is outside int64 >= 0")
    layout = _OFFSET_V4 if len(ip) == 4 else _OFFSET_V6
    return layout.pack(ip, port, commit_log_offset).hex().upper()


def parse_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """Split an offset message id into ``(store host, store port, commit-log offset)``.

    The length tells IPv4 (32 hex chars) from IPv6 (56). Either hex case is accepted. The
    host comes back as text (``"127.0.0.1"``, or the compressed IPv6 form).

    Raises:
        RemoteProtocolError: wrong length, a non-hex character, a port outside 0..65535
            (Java's ``InetSocketAddress`` refuses it too) or a negative offset.
    """
    if len(msg_id) == 32:
        layout = _OFFSET_V4
    elif len(msg_id) == 56:
        layout = _OFFSET_V6
    else:
        raise RemoteProtocolError(
            f"offset message id {msg_id!r} has {len(msg_id)} characters, not 32 or 56"
        )
    # bytes.fromhex alone would also accept blanks, so check the characters first.
    if not _HEX_DIGITS.issuperset(msg_id):
        raise RemoteProtocolError(f"offset message id {msg_id!r} is not hexadecimal")
    ip, port, offset = layout.unpack(bytes.fromhex(msg_id))
    if not 0 <= port <= 0xFFFF:
        raise RemoteProtocolError(f"offset message id {msg_id!r} has port {port}")
    if offset < 0:
        raise RemoteProtocolError(f"offset message id {msg_id!r} has a negative offset")
    if len(ip) == 4:
        host = f"{ip[0]}.{ip[1]}.{ip[2]}.{ip[3]}"
    else:
        host = str(ipaddress.IPv6Address(ip))
    return host, port, offset


def _month_bounds(now_ms: int) -> tuple[int, int]:
    """Epoch ms of the start of the UTC month containing ``now_ms``, and of the next one."""
    now = _EPOCH + timedelta(milliseconds=now_ms)
    start = datetime(now.year, now.month, 1, tzinfo=UTC)
    if now.month == 12:
        nxt = datetime(now.year + 1, 1, 1, tzinfo=UTC)
    else:
        nxt = datetime(now.year, now.month + 1, 1, tzinfo=UTC)
    # timedelta // timedelta is exact integer arithmetic: no float rounding of large epochs.
    one_ms = timedelta(milliseconds=1)
    return (start - _EPOCH) // one_ms, (nxt - _EPOCH) // one_ms


class UniqKeyGenerator:
    """Generates client message ids (the ``UNIQ_KEY`` property), ``MessageClientIDSetter``.

    Each id is upper-case hex of: the producer's IP (4 bytes, or 16 for IPv6), the process id's
    low 16 bits, ``seed`` (Java uses the class-loader hash, C++ a random int), the ms since the
    start of the current month (int32, wrapping like Java's cast) and a 16-bit wrapping counter.
    That is 32 hex characters for IPv4 and 56 for IPv6.

    The month starts in UTC (Java uses local time; the id is opaque, only uniqueness matters,
    and UTC keeps this sans-IO code free of the host's time zone). Not thread-safe; asyncio
    callers share one instance per process.
    """

    __slots__ = ("_counter", "_month_end", "_month_start", "_prefix")

    def __init__(self, ip: str, pid: int, seed: int, *, counter: int = 0) -> None:
        """Fix the id prefix for this producer process.

        ``pid`` keeps its low 16 bits and ``seed`` its low 32 bits; ``counter`` is the value
        the first id carries.

        Raises:
            LocalProtocolError: ``ip`` is not a textual IPv4 or IPv6 address.
        """
        packed = _pack_ip(ip)
        prefix = packed + (pid & 0xFFFF).to_bytes(2, "big") + (seed & 0xFFFFFFFF).to_bytes(4, "big")
        self._prefix = prefix.hex().upper()
        self._counter = counter & 0xFFFF
        self._month_start = 0
        self._month_end = 0  # empty window: the first call computes the month

    def next(self, now_ms: int) -> str:
        """Return the next id for wall-clock time ``now_ms`` (ms since the Unix epoch).

        Never raises for a ``now_ms`` within ``datetime``'s range.
        """
        if not self._month_start <= now_ms < self._month_end:
            # Recompute on a month change, and also if the clock stepped back a month.
            self._month_start, self._month_end = _month_bounds(now_ms)
        counter = self._counter
        self._counter = (counter + 1) & 0xFFFF
        return f"{self._prefix}{(now_ms - self._month_start) & 0xFFFFFFFF:08X}{counter:04X}"
