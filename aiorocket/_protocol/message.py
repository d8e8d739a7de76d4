"""Stored message records and batch send bodies (docs/protocol.md §4.1–§4.3, §4.6).

One record layout serves pull bodies, VIEW_MESSAGE_BY_ID, QUERY_MESSAGE, the bodies of
CONSUME_MESSAGE_DIRECTLY / CHECK_TRANSACTION_STATE and the embedded broker's log.

Decoding is strict where Java is lenient: Java's ``MessageDecoder.decodes`` keeps the records
decoded before the first bad one; we reject the whole body with RemoteProtocolError, because a
record that does not parse means the stream (or the peer) cannot be trusted.
"""

from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Final

from aiorocket._protocol import accel
from aiorocket._protocol.codes import MessageSysFlag
from aiorocket._protocol.properties import (
    encode_properties_bytes,
    properties_bytes,
)
from aiorocket.errors import ConfigurationError, LocalProtocolError, RemoteProtocolError

__all__ = [
    "BLANK_MAGIC",
    "DEFAULT_MAX_BODY_SIZE",
    "MAGIC_V1",
    "MAGIC_V2",
    "BatchItem",
    "MessageRecord",
    "body_crc",
    "compress_body",
    "decode_batch_body",
    "decode_message",
    "decode_messages",
    "encode_batch_body",
    "encode_message",
    "inflate_body",
]

#: MessageDecoder.MESSAGE_MAGIC_CODE: 1-byte topic length.
MAGIC_V1: Final[int] = 0xDAA320A7
#: MessageDecoder.MESSAGE_MAGIC_CODE_V2 (5.1+): 2-byte topic length.
MAGIC_V2: Final[int] = 0xDAA320AB
#: CommitLog.BLANK_MAGIC_CODE: end-of-file padding in a commit-log file, never on the wire.
BLANK_MAGIC: Final[int] = 0xCBD43194
#: Default cap on an inflated body, so a small zlib bomb cannot exhaust memory.
DEFAULT_MAX_BODY_SIZE: Final[int] = 64 * 1024 * 1024

_BORN_V6: Final = int(MessageSysFlag.BORNHOST_V6)
_STORE_V6: Final = int(MessageSysFlag.STOREHOST_V6)
_HOSTS_V6: Final = _BORN_V6 | _STORE_V6
_COMPRESSION_TYPE: Final = int(MessageSysFlag.COMPRESSION_TYPE_MASK)
# Type 0 is the legacy value (zlib); 0x300 is ZLIB as set by Java >= 4.9.4 producers.
_ZLIB_TYPES: Final = frozenset({0, int(MessageSysFlag.COMPRESSION_ZLIB)})

_V1_TOPIC_MAX: Final = 127  # Java reads the v1 topic length as a signed byte
_V2_TOPIC_MAX: Final = 32767  # ... and the v2 one as a signed short


def _head_struct(born_v6: bool, store_v6: bool) -> struct.Struct:
    # storeSize, magic, bodyCRC, queueId, flag, queueOffset, commitLogOffset, sysFlag,
    # bornTimestamp, bornHost (IP + port), storeTimestamp, storeHost, reconsumeTimes,
    # preparedTransactionOffset, bodyLength. An IPv4 address is one uint32, IPv6 16 bytes.
    born = "16si" if born_v6 else "Ii"
    store = "16si" if store_v6 else "Ii"
    return struct.Struct(f">iIIiiqqiq{born}q{store}iqi")


# Indexed by (sysFlag & 0x30) >> 4: bit 0 = born host is IPv6, bit 1 = store host is IPv6.
_HEADS: Final = tuple(_head_struct(bool(i & 1), bool(i & 2)) for i in range(4))
_HEAD_V4: Final = _HEADS[0]
# The smallest legal record: IPv4 hosts, empty body, v1 magic, empty topic and properties.
_MIN_RECORD: Final = _HEAD_V4.size + 1 + 2

_BATCH_HEAD: Final = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLength
_BATCH_MIN: Final = _BATCH_HEAD.size + 2
_SHORT: Final = struct.Struct(">h")

# Hosts repeat across records (one broker, a few producers): cache their text forms so the
# hot path is a dict lookup. Bounded by clearing, which is cheap and rare.
_CACHE_LIMIT: Final = 4096
_IPV4_TEXT: dict[int, str] = {}
_IPV4_PACKED: dict[str, int] = {}


@dataclass(slots=True)
class MessageRecord:
    """One stored message as laid out in §4.1.

    ``born_host`` and ``store_host`` are textual IPs; ``sys_flag`` bits 0x10 / 0x20 say whether
    each is IPv6 on the wire. After `decode_messages` with ``decompress=True`` the
    ``body`` is inflated while ``sys_flag`` keeps the COMPRESSED bit seen on the wire.
    ``body_crc`` and ``store_size`` are filled in by decoding; encoding recomputes them.
    """

    topic: str
    body: bytes
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    born_port: int
    store_timestamp: int
    store_host: str
    store_port: int
    reconsume_times: int
    prepared_transaction_offset: int
    properties: dict[str, str]
    body_crc: int = 0
    store_size: int = 0
    magic: int = MAGIC_V1


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One record of a batch send body (§4.6); ``properties`` is the raw encoded string."""

    flag: int
    body: bytes
    properties: str


def body_crc(body: bytes | bytearray | memoryview) -> int:
    """The ``bodyCRC`` field: ``UtilAll.crc32`` of the stored bytes, sign bit cleared.

    Never raises for bytes-like input.
    """
    return zlib.crc32(body) & 0x7FFFFFFF


def compress_body(body: bytes | bytearray | memoryview, level: int = 5) -> bytes:
    """Compress a body the way producers do: zlib format (RFC 1950), level 5 by default.

    Set ``MessageSysFlag.COMPRESSED`` on the message that carries the result.

    Raises:
        ConfigurationError: ``level`` is outside -1..9.
    """
    try:
        return zlib.compress(body, level)
    except zlib.error:
        raise ConfigurationError(f"invalid zlib compression level {level}") from None


def _bad(pos: int, what: str) -> RemoteProtocolError:
    return RemoteProtocolError(f"malformed message record at offset {pos}: {what}")


def _ipv4_text(ip: int) -> str:
    if len(_IPV4_TEXT) >= _CACHE_LIMIT:
        _IPV4_TEXT.clear()
    text = f"{ip >> 24}.{(ip >> 16) & 255}.{(ip >> 8) & 255}.{ip & 255}"
    _IPV4_TEXT[ip] = text
    return text


def _ipv6_text(packed: bytes) -> str:
    return str(ipaddress.IPv6Address(packed))


def _inflate(data: bytes, sys_flag: int, limit: int, pos: int) -> bytes:
    ctype = sys_flag & _COMPRESSION_TYPE
    if ctype not in _ZLIB_TYPES:
        # LZ4 (0x100) and ZSTD (0x200) only come from Java producers told to use them (§4.3).
        raise _bad(pos, f"unsupported compression type 0x{ctype:x}")
    inflater = zlib.decompressobj()
    try:
        # One byte over the limit tells "too large" apart from "exactly at the limit".
        out = inflater.decompress(data, max(limit, 0) + 1)
    except zlib.error as exc:
        raise _bad(pos, f"compressed body does not inflate: {exc}") from None
    if len(out) > limit:
        raise _bad(pos, f"compressed body inflates beyond {limit} bytes")
    if not inflater.eof:
        raise _bad(pos, "compressed body is truncated")
    if inflater.unused_data:
        raise _bad(pos, "bytes follow the end of the compressed body")
    return out


def inflate_body(data: bytes, sys_flag: int, limit: int = DEFAULT_MAX_BODY_SIZE) -> bytes:
    """A body sent compressed (``sys_flag`` has COMPRESSED) outside a record, e.g. a pushed
    reply (docs/protocol.md §13), inflated as a record's body is.

    Raises:
        RemoteProtocolError: an unknown compression type, or bytes that do not inflate
            within ``limit``.
    """
    return _inflate(data, sys_flag, limit, 0)


def _v6_head(
    buf: bytes, pos: int, size: int, sys_flag: int, topic_len_size: int
) -> tuple[str, int, int, str, int, int, int, int, int]:
    """The head of a record with an IPv6 host (MessageDecoder: the V6 flags widen the host
    IPs to 16 bytes; the head is read again): born host and port, store time, store host and
    port, reconsume times, prepared offset, body length, and the body's position."""
    head = _HEADS[(sys_flag & _HOSTS_V6) >> 4]
    if head.size + topic_len_size + 2 > size:
        raise _bad(pos, f"storeSize {size} too small for IPv6 hosts")
    (
        _,
        _,
        _,
        _,
        _,
        _,
        _,
        _,
        _,
        born_raw,
        born_port,
        store_ts,
        store_raw,
        store_port,
        reconsume_times,
        prepared_offset,
        body_len,
    ) = head.unpack_from(buf, pos)
    born_host = (
        _ipv6_text(born_raw)
        if sys_flag & _BORN_V6
        else (_IPV4_TEXT.get(born_raw) or _ipv4_text(born_raw))
    )
    store_host = (
        _ipv6_text(store_raw)
        if sys_flag & _STORE_V6
        else (_IPV4_TEXT.get(store_raw) or _ipv4_text(store_raw))
    )
    return (
        born_host,
        born_port,
        store_ts,
        store_host,
        store_port,
        reconsume_times,
        prepared_offset,
        body_len,
        pos + head.size,
    )


def _topic_and_properties(
    buf: bytes, pos: int, q: int, end: int, topic_len_size: int, size: int
) -> tuple[str, dict[str, str]]:
    """A record's topic and properties, from ``q`` (after the body) to ``end``."""
    if topic_len_size == 1:
        topic_len = buf[q]
        if topic_len > 127:  # _V1_TOPIC_MAX
            raise _bad(pos, f"topic length byte {topic_len} is negative as a Java byte")
        q += 1
    else:
        topic_len = (buf[q] << 8) | buf[q + 1]
        if topic_len > 32767:  # _V2_TOPIC_MAX
            raise _bad(pos, "topic length is negative as a Java short")
        q += 2
    t = q + topic_len
    if t + 2 > end:
        raise _bad(pos, f"topic length {topic_len} overruns the record")
    props_len = (buf[t] << 8) | buf[t + 1]
    # The properties must end the record exactly (storeSize agrees with the fields).
    if t + 2 + props_len != end or props_len > 32767:  # MAX_PROPERTIES_SIZE
        raise _bad(pos, f"propertiesLength {props_len} disagrees with storeSize {size}")
    try:
        topic = buf[q:t].decode()
        properties: dict[str, str] = {}
        if props_len:
            # MessageDecoder.string2messageProperties, inlined: the consumer hot path.
            for item in buf[t + 2 : end].decode().split("\x02"):
                key, _, value = item.partition("\x01")
                if key and value:
                    properties[key] = value
    except UnicodeDecodeError as exc:
        raise _bad(pos, f"topic or properties are not UTF-8: {exc}") from None
    return topic, properties


def _decode_run(
    buf: bytes, pos: int, n: int, decompress: bool, max_body_size: int, single: bool
) -> tuple[list[MessageRecord], int]:
    """Decode records from ``pos`` up to ``n`` (or just one if ``single``).

    Return them and the offset after the last. One loop with locals bound up front: this is
    the consumer's hot path where the compiled codec is missing (accel.py).
    """
    out: list[MessageRecord] = []
    append = out.append
    record = MessageRecord
    unpack_v4 = _HEAD_V4.unpack_from
    head_v4_size = _HEAD_V4.size
    ipv4_text = _IPV4_TEXT
    min_record = _MIN_RECORD
    while pos < n:
        if n - pos < min_record:
            raise _bad(pos, f"{n - pos} trailing bytes are not a whole record")
        (
            size,
            magic,
            crc,
            queue_id,
            flag,
            queue_offset,
            commit_log_offset,
            sys_flag,
            born_ts,
            born_ip,
            born_port,
            store_ts,
            store_ip,
            store_port,
            reconsume_times,
            prepared_offset,
            body_len,
        ) = unpack_v4(buf, pos)
        if size < min_record or size > n - pos:
            raise _bad(pos, f"storeSize {size} with {n - pos} bytes left")
        end = pos + size
        # Literals rather than the module constants: a global lookup per record adds up.
        topic_len_size = 1 if magic == 0xDAA320A7 else 2 if magic == 0xDAA320AB else 0  # V1, V2
        if not topic_len_size:
            raise _bad(pos, f"unknown magic code 0x{magic:08X}")

        if sys_flag & 0x30:  # BORNHOST_V6 | STOREHOST_V6
            v6 = _v6_head(buf, pos, size, sys_flag, topic_len_size)
            born_host, born_port, store_ts, store_host = v6[:4]
            store_port, reconsume_times, prepared_offset, body_len, p = v6[4:]
        else:
            born_host = ipv4_text.get(born_ip) or _ipv4_text(born_ip)
            store_host = ipv4_text.get(store_ip) or _ipv4_text(store_ip)
            p = pos + head_v4_size

        # From here on, every length is checked against the record end before it is used.
        if body_len < 0 or p + body_len + topic_len_size + 2 > end:
            raise _bad(pos, f"bodyLength {body_len} overruns the record")
        q = p + body_len
        body = buf[p:q]
        topic, properties = _topic_and_properties(buf, pos, q, end, topic_len_size, size)

        if sys_flag & 0x1 and decompress:  # COMPRESSED
            body = _inflate(body, sys_flag, max_body_size, pos)

        append(
            record(
                topic,
                body,
                queue_id,
                flag,
                queue_offset,
                commit_log_offset,
                sys_flag,
                born_ts,
                born_host,
                born_port,
                store_ts,
                store_host,
                store_port,
                reconsume_times,
                prepared_offset,
                properties,
                crc,
                size,
                magic,
            )
        )
        pos = end
        if single:
            break
    return out, pos


def decode_message(
    buf: bytes | bytearray | memoryview,
    offset: int = 0,
    *,
    decompress: bool = True,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> tuple[MessageRecord, int]:
    """Decode the one record that starts at ``offset``; return it and the offset after it.

    Bytes after the record are left alone. See `decode_messages` for the options.

    Raises:
        RemoteProtocolError: the record is malformed or its body does not inflate.
    """
    data = buf if type(buf) is bytes else bytes(buf)
    if offset < 0:
        raise RemoteProtocolError(f"negative record offset {offset}")
    n = len(data)
    if offset >= n:
        raise RemoteProtocolError(f"no message record at offset {offset} of {n} bytes")
    records, end = _decode_run_impl(data, offset, n, decompress, max_body_size, True)
    return records[0], end


def decode_messages(
    body: bytes | bytearray | memoryview,
    *,
    decompress: bool = True,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
) -> list[MessageRecord]:
    """Decode a pull response body: stored records back to back, no count (§4.2).

    With ``decompress`` a record whose ``sys_flag`` has COMPRESSED gets its body inflated
    (zlib; the flag stays set); otherwise bodies are returned as stored.

    Raises:
        RemoteProtocolError: any record is malformed (bad storeSize, magic or lengths, text
            that is not UTF-8, trailing bytes that are not a whole record), or a compressed
            body uses LZ4/ZSTD, does not inflate, or inflates beyond ``max_body_size``.
            Nothing is returned for the records before the bad one.
    """
    data = body if type(body) is bytes else bytes(body)
    return _decode_run_impl(data, 0, len(data), decompress, max_body_size, False)[0]


# The record decoder in use: _decode_run, or its compiled twin (accel.py).
_DecodeRun = Callable[[bytes, int, int, bool, int, bool], tuple[list[MessageRecord], int]]
_decode_run_impl: _DecodeRun = _decode_run


def _select(ext: ModuleType | None) -> None:
    """Decode records with the compiled (``ext``) or the pure-Python loop (see ``accel.use``)."""
    global _decode_run_impl
    _decode_run_impl = ext.decode_run if ext is not None else _decode_run


if (_ext := accel.extension()) is not None:
    _ext.configure_message(MessageRecord, _bad, _inflate, _ipv6_text, _ipv4_text, _IPV4_TEXT)
accel.register(_select)


def _pack_ipv4(host: str) -> int | None:
    """Parse dotted-decimal IPv4 text to an int and cache it; None if it is not one.

    encode_message looks in the cache itself before calling this.
    """
    parts = host.split(".")
    if len(parts) != 4:
        return None
    value = 0
    for part in parts:
        # Dotted decimal only: no signs, blanks, non-ASCII digits or octal-looking zeros.
        if not (part.isascii() and part.isdigit()) or len(part) > 3 or part[0] == "0" != part:
            return None
        octet = int(part)
        if octet > 255:
            return None
        value = (value << 8) | octet
    if len(_IPV4_PACKED) >= _CACHE_LIMIT:
        _IPV4_PACKED.clear()
    _IPV4_PACKED[host] = value
    return value


def _pack_ipv6(host: str) -> bytes | None:
    try:
        return ipaddress.IPv6Address(host).packed
    except ValueError:
        return None


def _host_field(host: str, v6: int, which: str) -> int | bytes:
    if v6:
        packed6 = _pack_ipv6(host)
        if packed6 is None:
            raise LocalProtocolError(
                f"{which} {host!r} is not an IPv6 address, yet sys_flag says so"
            )
        return packed6
    packed4 = _pack_ipv4(host)
    if packed4 is None:
        raise LocalProtocolError(
            f"{which} {host!r} is not an IPv4 address; set the sys_flag V6 bit for IPv6"
        )
    return packed4


def encode_message(rec: MessageRecord) -> bytes:
    """Encode ``rec`` in the stored layout (§4.1), as a broker writes it to a pull body.

    ``body_crc`` and ``store_size`` are computed (the record's own values are ignored and the
    record is not modified); the body is written exactly as given, so a caller that sets
    COMPRESSED must pass the compressed bytes. Host widths follow ``sys_flag`` 0x10 / 0x20.

    Raises:
        LocalProtocolError: unknown ``magic``; a topic over 127 UTF-8 bytes with v1 magic
            (32767 with v2); invalid or oversized properties; a host that is not an IP of the
            width ``sys_flag`` says; an integer field out of its wire range; lone surrogates.
    """
    try:
        topic = rec.topic.encode()
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"the topic is not encodable: {exc}") from None
    props = encode_properties_bytes(rec.properties)
    magic = rec.magic
    topic_len = len(topic)
    if magic == MAGIC_V1:
        if topic_len > _V1_TOPIC_MAX:
            raise LocalProtocolError(
                f"topic is {topic_len} bytes; v1 records carry at most {_V1_TOPIC_MAX}"
            )
        topic_prefix = bytes((topic_len,))
    elif magic == MAGIC_V2:
        if topic_len > _V2_TOPIC_MAX:
            raise LocalProtocolError(f"topic is {topic_len} bytes; at most {_V2_TOPIC_MAX}")
        topic_prefix = topic_len.to_bytes(2, "big")
    else:
        raise LocalProtocolError(f"unknown magic code {magic!r}")
    sys_flag = rec.sys_flag
    head = _HEADS[(sys_flag & _HOSTS_V6) >> 4]
    # The IPv4 cache is consulted inline: the broker encodes every message it stores.
    born: int | bytes | None = None if sys_flag & _BORN_V6 else _IPV4_PACKED.get(rec.born_host)
    if born is None:
        born = _host_field(rec.born_host, sys_flag & _BORN_V6, "born_host")
    store: int | bytes | None = None if sys_flag & _STORE_V6 else _IPV4_PACKED.get(rec.store_host)
    if store is None:
        store = _host_field(rec.store_host, sys_flag & _STORE_V6, "store_host")
    body = rec.body
    size = head.size + len(body) + len(topic_prefix) + topic_len + 2 + len(props)
    try:
        fixed = head.pack(
            size,
            magic,
            zlib.crc32(body) & 0x7FFFFFFF,
            rec.queue_id,
            rec.flag,
            rec.queue_offset,
            rec.commit_log_offset,
            sys_flag,
            rec.born_timestamp,
            born,
            rec.born_port,
            rec.store_timestamp,
            store,
            rec.store_port,
            rec.reconsume_times,
            rec.prepared_transaction_offset,
            len(body),
        )
    except struct.error as exc:
        raise LocalProtocolError(f"a message field is out of range: {exc}") from None
    return b"".join((fixed, body, topic_prefix, topic, len(props).to_bytes(2, "big"), props))


def encode_batch_body(items: Sequence[BatchItem]) -> bytes:
    """Encode a SEND_BATCH_MESSAGE body (``MessageDecoder.encodeMessages``, §4.6).

    Magic and bodyCRC are written as 0 (the broker recomputes the CRC); bodies are written as
    given (batches are never compressed).

    Raises:
        LocalProtocolError: properties not encodable or over 32767 bytes, or a flag outside
            int32.
    """
    parts: list[bytes] = []
    for item in items:
        props = properties_bytes(item.properties, "batch properties")
        body = item.body
        try:
            head = _BATCH_HEAD.pack(_BATCH_MIN + len(body) + len(props), 0, 0, item.flag, len(body))
        except struct.error as exc:
            raise LocalProtocolError(f"a batch field is out of range: {exc}") from None
        parts += (head, body, _SHORT.pack(len(props)), props)
    return b"".join(parts)


def decode_batch_body(body: bytes | bytearray | memoryview) -> list[BatchItem]:
    """Decode a batch send body into its records (what a broker does with ``batch=true``).

    The magic and bodyCRC fields are not checked: the Java broker ignores both.

    Raises:
        RemoteProtocolError: a totalSize, bodyLength or propertiesLength is negative,
            disagrees with the others or overruns the body; trailing bytes that are not a
            whole record; properties that are not UTF-8.
    """
    data = body if type(body) is bytes else bytes(body)
    n = len(data)
    pos = 0
    out: list[BatchItem] = []
    while pos < n:
        if n - pos < _BATCH_MIN:
            raise RemoteProtocolError(
                f"malformed batch record at offset {pos}: {n - pos} trailing bytes"
            )
        total, _magic, _crc, flag, body_len = _BATCH_HEAD.unpack_from(data, pos)
        if total < _BATCH_MIN or total > n - pos:
            raise RemoteProtocolError(
                f"malformed batch record at offset {pos}: totalSize {total} "
                f"with {n - pos} bytes left"
            )
        end = pos + total
        p = pos + _BATCH_HEAD.size
        if body_len < 0 or p + body_len + 2 > end:
            raise RemoteProtocolError(
                f"malformed batch record at offset {pos}: bodyLength {body_len} overruns it"
            )
        q = p + body_len
        (props_len,) = _SHORT.unpack_from(data, q)
        if props_len < 0 or q + 2 + props_len != end:
            raise RemoteProtocolError(
                f"malformed batch record at offset {pos}: propertiesLength {props_len} "
                f"disagrees with totalSize {total}"
            )
        try:
            props = data[q + 2 : end].decode()
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(
                f"malformed batch record at offset {pos}: properties are not UTF-8: {exc}"
            ) from None
        out.append(BatchItem(flag, data[p:q], props))
        pos = end
    return out
