"""Stored message records and batch bodies (docs/protocol.md §4.1–§4.3, §4.6, §9 V2)."""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import struct
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiorocket._protocol.message import (
    BLANK_MAGIC,
    MAGIC_V1,
    MAGIC_V2,
    BatchItem,
    MessageRecord,
    body_crc,
    compress_body,
    decode_batch_body,
    decode_message,
    decode_messages,
    encode_batch_body,
    encode_message,
)
from aiorocket._protocol.msgid import make_offset_msg_id
from aiorocket.errors import ConfigurationError, LocalProtocolError, RemoteProtocolError
from tests._harness.protocol import message_record

# §9 V2: the stored message inside the PULL_MESSAGE response (frame offset 0xD7, 198 bytes).
V2_MESSAGE = bytes.fromhex(
    "000000c6daa320a769c865ed0000000100000000000000000000000000000000"
    "00000800000000000000018bcfe568007f0000010000d4310000018bcfe5687b"
    "7f00000100002a9f0000000000000000000000000000000e48656c6c6f20526f"
    "636b65744d5109546f706963546573740054544147530154616741024b455953"
    "016b65793102554e49515f4b4559013746303030303031333033393132333435"
    "36373830354635453130303030303102434c55535445520144656661756c7443"
    "6c7573746572"
)

V2_RECORD = message_record(
    topic="TopicTest",
    body=b"Hello RocketMQ",
    queue_id=1,
    commit_log_offset=2048,
    born_timestamp=1700000000000,
    born_port=54321,
    store_timestamp=1700000000123,
    store_port=10911,
    properties={
        "TAGS": "TagA",
        "KEYS": "key1",
        "UNIQ_KEY": "7F00000130391234567805F5E1000001",
        "CLUSTER": "DefaultCluster",
    },
    body_crc=1774740973,
    store_size=198,
    magic=MAGIC_V1,
)


def _record(**changes: object) -> MessageRecord:
    return dataclasses.replace(V2_RECORD, **changes)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# §9 V2


def test_magic_constants() -> None:
    assert MAGIC_V1 == 0xDAA320A7
    assert MAGIC_V1 - 2**32 == -626843481
    assert MAGIC_V2 == 0xDAA320AB
    assert MAGIC_V2 - 2**32 == -626843477
    assert BLANK_MAGIC == 0xCBD43194


def test_v2_vector_decode_every_field() -> None:
    assert len(V2_MESSAGE) == 198
    [rec] = decode_messages(V2_MESSAGE)
    assert rec.store_size == 198
    assert rec.magic == MAGIC_V1
    assert rec.body_crc == 1774740973 == 0x69C865ED
    assert rec.queue_id == 1
    assert rec.flag == 0
    assert rec.queue_offset == 0
    assert rec.commit_log_offset == 2048
    assert rec.sys_flag == 0
    assert rec.born_timestamp == 1700000000000
    assert rec.born_host == "127.0.0.1"
    assert rec.born_port == 54321
    assert rec.store_timestamp == 1700000000123
    assert rec.store_host == "127.0.0.1"
    assert rec.store_port == 10911
    assert rec.reconsume_times == 0
    assert rec.prepared_transaction_offset == 0
    assert rec.body == b"Hello RocketMQ"
    assert rec.topic == "TopicTest"
    assert rec.properties == {
        "TAGS": "TagA",
        "KEYS": "key1",
        "UNIQ_KEY": "7F00000130391234567805F5E1000001",
        "CLUSTER": "DefaultCluster",
    }
    assert rec == V2_RECORD
    # The client's offsetMsgId for this message (§9).
    assert (
        make_offset_msg_id(rec.store_host, rec.store_port, rec.commit_log_offset)
        == "7F00000100002A9F0000000000000800"
    )


def test_v2_vector_encode_is_byte_exact() -> None:
    assert encode_message(V2_RECORD) == V2_MESSAGE
    # The record's own crc and size are ignored: they are recomputed.
    assert encode_message(_record(body_crc=0, store_size=0)) == V2_MESSAGE


def test_v2_vector_decode_message_and_input_types() -> None:
    rec, end = decode_message(V2_MESSAGE)
    assert rec == V2_RECORD
    assert end == 198
    body = b"junk" + V2_MESSAGE + V2_MESSAGE
    rec2, end2 = decode_message(body, 4)
    assert rec2 == V2_RECORD
    assert end2 == 202
    assert decode_message(body, end2)[1] == len(body)
    for view in (bytearray(V2_MESSAGE * 2), memoryview(V2_MESSAGE * 2)):
        assert decode_messages(view) == [V2_RECORD, V2_RECORD]


def test_fixed_positions_of_the_layout() -> None:
    # §4.1 handy positions for IPv4 hosts.
    data = encode_message(_record(flag=0x11223344, queue_offset=7, sys_flag=0x8))
    assert struct.unpack_from(">I", data, 4)[0] == MAGIC_V1
    assert struct.unpack_from(">i", data, 16)[0] == 0x11223344
    assert struct.unpack_from(">q", data, 20)[0] == 7
    assert struct.unpack_from(">q", data, 28)[0] == 2048
    assert struct.unpack_from(">i", data, 36)[0] == 0x8
    assert struct.unpack_from(">q", data, 56)[0] == 1700000000123
    assert struct.unpack_from(">i", data, 84)[0] == 14


def test_body_crc_vector() -> None:
    assert body_crc(b"Hello RocketMQ") == 1774740973
    assert body_crc(b"") == 0
    # The sign bit is cleared.
    assert all(body_crc(bytes([i])) < 2**31 for i in range(256))


def test_empty_body() -> None:
    assert decode_messages(b"") == []


# ---------------------------------------------------------------------------------------------
# Hosts, magic v2, compression


def test_ipv6_hosts_widen_the_record() -> None:
    rec = _record(sys_flag=0x30, born_host="2001:db8::1", store_host="::1")
    data = encode_message(rec)
    assert len(data) == 198 + 24
    [got] = decode_messages(data)
    assert got.born_host == "2001:db8::1"
    assert got.store_host == "::1"
    assert got.store_size == len(data)
    # Only the born host is IPv6.
    data = encode_message(_record(sys_flag=0x10, born_host="fe80::2"))
    assert len(data) == 198 + 12
    [got] = decode_messages(data)
    assert (got.born_host, got.store_host) == ("fe80::2", "127.0.0.1")


def test_v2_magic_two_byte_topic_length() -> None:
    topic = "T" * 300
    rec = _record(magic=MAGIC_V2, topic=topic)
    data = encode_message(rec)
    assert len(data) == 198 + 1 + 291
    assert data[4:8] == bytes.fromhex("daa320ab")
    [got] = decode_messages(data)
    assert got.topic == topic
    assert got.magic == MAGIC_V2


def test_compressed_body_is_inflated_and_flag_kept() -> None:
    body = b"RocketMQ " * 1000
    stored = compress_body(body)
    assert stored[:1] == b"\x78"  # zlib format (RFC 1950), not raw deflate or gzip
    for sys_flag in (0x1, 0x301):
        data = encode_message(_record(body=stored, sys_flag=sys_flag))
        [got] = decode_messages(data)
        assert got.body == body
        assert got.sys_flag == sys_flag
        assert got.body_crc == body_crc(stored)
        [raw] = decode_messages(data, decompress=False)
        assert raw.body == stored


def test_compress_body_level() -> None:
    body = bytes(range(256)) * 64
    assert zlib.decompress(compress_body(body, 9)) == body
    assert zlib.decompress(compress_body(body, 0)) == body
    with pytest.raises(ConfigurationError):
        compress_body(body, 42)


def test_inflate_limit() -> None:
    stored = compress_body(b"\0" * 10_000)
    data = encode_message(_record(body=stored, sys_flag=0x1))
    assert decode_messages(data, max_body_size=10_000)[0].body == b"\0" * 10_000
    with pytest.raises(RemoteProtocolError, match="beyond"):
        decode_messages(data, max_body_size=9_999)
    # Not decompressing means not inflating, so no limit applies.
    assert decode_messages(data, decompress=False, max_body_size=1)[0].body == stored
    empty = encode_message(_record(body=compress_body(b""), sys_flag=0x1))
    assert decode_messages(empty, max_body_size=0)[0].body == b""


@pytest.mark.parametrize("ctype", [0x100, 0x200, 0x400, 0x700])
def test_unsupported_compression_types(ctype: int) -> None:
    data = encode_message(_record(body=compress_body(b"x"), sys_flag=0x1 | ctype))
    with pytest.raises(RemoteProtocolError, match="unsupported compression"):
        decode_messages(data)
    # Stored bodies pass through untouched when not decompressing.
    assert decode_messages(data, decompress=False)[0].sys_flag == 0x1 | ctype


def test_compression_type_without_compressed_bit_is_ignored() -> None:
    data = encode_message(_record(sys_flag=0x200))
    assert decode_messages(data)[0].body == b"Hello RocketMQ"


@pytest.mark.parametrize(
    "stored",
    [
        b"Hello RocketMQ",  # not compressed at all
        compress_body(b"abc" * 100)[:-3],  # truncated
        compress_body(b"abc") + b"junk",  # trailing bytes after the stream
        zlib.compress(b"abc")[:2] + b"\xff" * 10,  # corrupt deflate data
        b"",
    ],
)
def test_bad_compressed_bodies(stored: bytes) -> None:
    data = encode_message(_record(body=stored, sys_flag=0x1))
    with pytest.raises(RemoteProtocolError):
        decode_messages(data)


# ---------------------------------------------------------------------------------------------
# Strict decoding


def _patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    buf = bytearray(data)
    struct.pack_into(fmt, buf, offset, value)
    return bytes(buf)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (V2_MESSAGE[:-1], "storeSize"),
        (V2_MESSAGE + b"\0\0\0", "trailing"),
        (V2_MESSAGE + V2_MESSAGE[:90], "trailing"),
        (V2_MESSAGE + V2_MESSAGE[:100], "storeSize"),
        (V2_MESSAGE + V2_MESSAGE[:150], "storeSize"),
        (_patched(V2_MESSAGE, 0, ">i", 90), "storeSize"),
        (_patched(V2_MESSAGE, 0, ">i", -1), "storeSize"),
        (_patched(V2_MESSAGE, 0, ">i", 197), "propertiesLength"),
        (_patched(V2_MESSAGE + b"\0", 0, ">i", 199), "propertiesLength"),
        (_patched(V2_MESSAGE, 4, ">I", 0xDAA320A8), "magic"),
        (_patched(V2_MESSAGE, 4, ">I", BLANK_MAGIC), "magic"),
        (_patched(V2_MESSAGE, 84, ">i", -1), "bodyLength"),
        (_patched(V2_MESSAGE, 84, ">i", 200), "bodyLength"),
        (_patched(V2_MESSAGE, 84, ">i", 13), "propertiesLength"),
        (_patched(V2_MESSAGE, 0x66, ">B", 0x80), "negative"),
        (_patched(V2_MESSAGE, 0x66, ">B", 0x7F), "topic length"),
        (_patched(V2_MESSAGE, 0x70, ">h", 85), "propertiesLength"),
        (_patched(V2_MESSAGE, 0x70, ">h", -1), "propertiesLength"),
        (_patched(V2_MESSAGE, 0x67, ">B", 0xFF), "UTF-8"),
        (_patched(V2_MESSAGE, 0x72, ">B", 0xC3), "UTF-8"),
        # The IPv6 flags on a record written with IPv4 hosts: the fields no longer line up.
        (_patched(V2_MESSAGE, 36, ">i", 0x30), "bodyLength"),
    ],
)
def test_malformed_records_are_rejected(data: bytes, match: str) -> None:
    with pytest.raises(RemoteProtocolError, match=match):
        decode_messages(data)


def test_ipv6_flags_on_a_record_too_small_for_them() -> None:
    minimal = encode_message(_record(body=b"", topic="", properties={}))
    assert len(minimal) == 91  # the smallest legal record
    with pytest.raises(RemoteProtocolError, match="too small for IPv6"):
        decode_messages(_patched(minimal, 36, ">i", 0x30))


def test_one_bad_record_rejects_the_whole_body() -> None:
    bad = _patched(V2_MESSAGE, 4, ">I", 0)
    with pytest.raises(RemoteProtocolError):
        decode_messages(V2_MESSAGE + V2_MESSAGE + bad)


def test_decode_message_bad_offsets() -> None:
    for offset in (-1, 198, 500, 1):
        with pytest.raises(RemoteProtocolError):
            decode_message(V2_MESSAGE, offset)


def test_v2_magic_negative_topic_length_is_rejected() -> None:
    data = bytearray(encode_message(_record(magic=MAGIC_V2)))
    data[0x66] = 0x80  # the high byte of the 2-byte topic length
    with pytest.raises(RemoteProtocolError):
        decode_messages(bytes(data))


# ---------------------------------------------------------------------------------------------
# Encoding errors


@pytest.mark.parametrize(
    "changes",
    [
        {"topic": "T" * 128},  # v1 carries at most 127 bytes
        {"topic": "é" * 64},  # ... UTF-8 bytes, not characters
        {"topic": "T" * 32768, "magic": MAGIC_V2},
        {"topic": "\ud800"},
        {"magic": 0},
        {"magic": BLANK_MAGIC},
        {"properties": {"k": "v" * 40000}},
        {"properties": {"": "v"}},
        {"properties": {"k": "a\x02b"}},
        {"properties": {"k": "\udc00"}},
        {"born_host": "localhost"},
        {"born_host": "1.2.3"},
        {"born_host": "1.2.3.256"},
        {"born_host": "01.2.3.4"},
        {"born_host": " 1.2.3.4"},
        {"born_host": "1.2.3.+4"},
        {"born_host": "::1"},  # IPv6 text without BORNHOST_V6
        {"store_host": "::1"},
        {"sys_flag": 0x10},  # BORNHOST_V6 with an IPv4 text
        {"sys_flag": 0x20},
        {"queue_id": 2**31},
        {"flag": -(2**31) - 1},
        {"queue_offset": 2**63},
        {"born_port": 2**31},
        {"sys_flag": 2**31},
    ],
)
def test_encode_rejects(changes: dict[str, object]) -> None:
    with pytest.raises(LocalProtocolError):
        encode_message(_record(**changes))


def test_encode_v1_topic_at_limit() -> None:
    data = encode_message(_record(topic="T" * 127))
    assert decode_messages(data)[0].topic == "T" * 127


def test_encode_does_not_modify_the_record() -> None:
    rec = _record(body_crc=5, store_size=7)
    encode_message(rec)
    assert (rec.body_crc, rec.store_size) == (5, 7)


# ---------------------------------------------------------------------------------------------
# Property-based round trips and fuzzing

_NO_SURROGATES = st.characters(codec="utf-8")
_PROP_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"),
    min_size=1,
    max_size=10,
)
_IPV4 = st.binary(min_size=4, max_size=4).map(lambda b: f"{b[0]}.{b[1]}.{b[2]}.{b[3]}")
_IPV6 = st.binary(min_size=16, max_size=16).map(lambda b: str(ipaddress.IPv6Address(b)))
_I32 = st.integers(-(2**31), 2**31 - 1)
_I64 = st.integers(-(2**63), 2**63 - 1)


@st.composite
def _records(draw: st.DrawFn) -> tuple[MessageRecord, bytes]:
    """A record ready to encode, and the body a decompressing reader must return."""
    magic = draw(st.sampled_from([MAGIC_V1, MAGIC_V2]))
    topic_max = 127 if magic == MAGIC_V1 else 400
    topic = draw(
        st.text(alphabet=_NO_SURROGATES, max_size=40).filter(lambda t: len(t.encode()) <= topic_max)
    )
    born_v6 = draw(st.booleans())
    store_v6 = draw(st.booleans())
    # Other sysFlag bits travel untouched; clear the ones this test sets on purpose.
    sys_flag = draw(_I32) & ~0x731
    sys_flag |= (0x10 if born_v6 else 0) | (0x20 if store_v6 else 0)
    body = draw(st.binary(max_size=300))
    stored = body
    if draw(st.booleans()):
        stored = compress_body(body, draw(st.integers(0, 9)))
        sys_flag |= 0x1 | draw(st.sampled_from([0, 0x300]))
    rec = MessageRecord(
        topic=topic,
        body=stored,
        queue_id=draw(_I32),
        flag=draw(_I32),
        queue_offset=draw(_I64),
        commit_log_offset=draw(_I64),
        sys_flag=sys_flag,
        born_timestamp=draw(_I64),
        born_host=draw(_IPV6 if born_v6 else _IPV4),
        born_port=draw(_I32),
        store_timestamp=draw(_I64),
        store_host=draw(_IPV6 if store_v6 else _IPV4),
        store_port=draw(_I32),
        reconsume_times=draw(_I32),
        prepared_transaction_offset=draw(_I64),
        properties=draw(st.dictionaries(_PROP_TEXT, _PROP_TEXT, max_size=5)),
        magic=magic,
    )
    return rec, body


def _expected(rec: MessageRecord, encoded: bytes, body: bytes) -> MessageRecord:
    return dataclasses.replace(rec, body=body, body_crc=body_crc(rec.body), store_size=len(encoded))


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_records(), max_size=4))
def test_round_trip(pairs: list[tuple[MessageRecord, bytes]]) -> None:
    encoded = [encode_message(rec) for rec, _ in pairs]
    data = b"".join(encoded)
    expected = [_expected(rec, enc, body) for (rec, body), enc in zip(pairs, encoded, strict=True)]
    assert decode_messages(data) == expected
    stored = [
        dataclasses.replace(e, body=rec.body) for e, (rec, _) in zip(expected, pairs, strict=True)
    ]
    assert decode_messages(data, decompress=False) == stored
    # Re-encoding what was decoded without inflating gives the same bytes back.
    assert b"".join(encode_message(r) for r in stored) == data


def _assert_only_protocol_error(data: bytes, **options: object) -> list[MessageRecord] | None:
    try:
        return decode_messages(data, **options)  # type: ignore[arg-type]
    except RemoteProtocolError:
        return None


@settings(max_examples=1500, deadline=None)
@given(st.binary(max_size=400))
def test_fuzz_arbitrary_bytes(data: bytes) -> None:
    _assert_only_protocol_error(data)


@st.composite
def _mutations(draw: st.DrawFn) -> tuple[bytes, bytes, list[int]]:
    """A valid body, a mutation of it, and the record boundaries of the valid body."""
    pairs = draw(st.lists(_records(), min_size=1, max_size=3))
    encoded = [encode_message(rec) for rec, _ in pairs]
    data = b"".join(encoded)
    bounds = [0]
    for enc in encoded:
        bounds.append(bounds[-1] + len(enc))
    kind = draw(st.sampled_from(["truncate", "flip", "overwrite", "insert", "delete"]))
    i = draw(st.integers(0, len(data) - 1))
    if kind == "truncate":
        mutated = data[:i]
    elif kind == "flip":
        mutated = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    elif kind == "overwrite":
        chunk = draw(st.binary(min_size=1, max_size=4))
        mutated = data[:i] + chunk + data[i + len(chunk) :]
    elif kind == "insert":
        mutated = data[:i] + draw(st.binary(min_size=1, max_size=4)) + data[i:]
    else:
        mutated = data[:i] + data[i + draw(st.integers(1, 4)) :]
    return data, mutated, bounds


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutations())
def test_fuzz_mutated_encodings(case: tuple[bytes, bytes, list[int]]) -> None:
    data, mutated, bounds = case
    result = _assert_only_protocol_error(mutated, max_body_size=4096)
    if len(mutated) < len(data) and data.startswith(mutated) and len(mutated) not in bounds:
        # A truncation inside a record is never accepted.
        assert result is None
    _assert_only_protocol_error(mutated, decompress=False)


# ---------------------------------------------------------------------------------------------
# Batch bodies (§4.6)


def test_batch_layout() -> None:
    items = [
        BatchItem(flag=3, body=b"hello", properties="TAGS\x01tA\x02UNIQ_KEY\x01ABC"),
        BatchItem(flag=0, body=b"", properties=""),
    ]
    data = encode_batch_body(items)
    first_len = 22 + 5 + 20
    assert struct.unpack_from(">iiiii", data, 0) == (first_len, 0, 0, 3, 5)
    assert data[20:25] == b"hello"
    assert struct.unpack_from(">h", data, 25)[0] == 20
    assert data[27:first_len] == b"TAGS\x01tA\x02UNIQ_KEY\x01ABC"
    assert data[first_len:] == struct.pack(">iiiiih", 22, 0, 0, 0, 0, 0)
    assert decode_batch_body(data) == items
    assert decode_batch_body(b"") == []
    assert encode_batch_body([]) == b""


def test_batch_magic_and_crc_are_ignored_on_decode() -> None:
    data = bytearray(encode_batch_body([BatchItem(1, b"x", "a\x01b")]))
    struct.pack_into(">II", data, 4, 0xDAA320A7, 12345)
    assert decode_batch_body(bytes(data)) == [BatchItem(1, b"x", "a\x01b")]


@pytest.mark.parametrize(
    "data",
    [
        b"\0" * 21,
        struct.pack(">iiiiih", 21, 0, 0, 0, 0, 0),
        struct.pack(">iiiiih", 23, 0, 0, 0, 0, 0),
        struct.pack(">iiiiih", 22, 0, 0, 0, -1, 0),
        struct.pack(">iiiiih", 22, 0, 0, 0, 1, 0),
        struct.pack(">iiiiih", 22, 0, 0, 0, 0, -1),
        struct.pack(">iiiiih", 22, 0, 0, 0, 0, 1),
        struct.pack(">iiiiih", 23, 0, 0, 0, 0, 1) + b"\xff",
        struct.pack(">iiiiih", 22, 0, 0, 0, 0, 0) + b"\0",
    ],
)
def test_batch_malformed(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_batch_body(data)


def test_batch_encode_errors() -> None:
    with pytest.raises(LocalProtocolError):
        encode_batch_body([BatchItem(0, b"", "k\x01" + "v" * 32766)])
    with pytest.raises(LocalProtocolError):
        encode_batch_body([BatchItem(0, b"", "\ud800")])
    with pytest.raises(LocalProtocolError):
        encode_batch_body([BatchItem(2**31, b"", "")])


_BATCH_ITEMS = st.builds(
    BatchItem,
    flag=_I32,
    body=st.binary(max_size=200),
    properties=st.text(alphabet=_NO_SURROGATES, max_size=30),
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_BATCH_ITEMS, max_size=6))
def test_batch_round_trip(items: list[BatchItem]) -> None:
    assert decode_batch_body(encode_batch_body(items)) == items


@settings(max_examples=800, deadline=None)
@given(st.lists(_BATCH_ITEMS, min_size=1, max_size=3), st.data())
def test_fuzz_batch(items: list[BatchItem], data: st.DataObject) -> None:
    valid = encode_batch_body(items)
    i = data.draw(st.integers(0, len(valid) - 1))
    mutated = data.draw(
        st.sampled_from(
            [
                valid[:i],
                valid[:i] + bytes([valid[i] ^ 0xFF]) + valid[i + 1 :],
                valid[:i] + b"\x7f" + valid[i:],
                data.draw(st.binary(max_size=80)),
            ]
        )
    )
    with contextlib.suppress(RemoteProtocolError):
        decode_batch_body(mutated)
