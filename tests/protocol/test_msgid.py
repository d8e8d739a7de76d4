"""Offset message ids and client ids (UNIQ_KEY) (docs/protocol.md §4.4, §9)."""

from __future__ import annotations

import ipaddress
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._protocol.msgid import UniqKeyGenerator, make_offset_msg_id, parse_offset_msg_id
from aiorocket.errors import LocalProtocolError, RemoteProtocolError


def _ms(year: int, month: int, day: int = 1) -> int:
    return int(datetime(year, month, day, tzinfo=UTC).timestamp()) * 1000


# ---------------------------------------------------------------------------------------------
# Offset message id


def test_offset_msg_id_vector() -> None:
    msg_id = make_offset_msg_id("127.0.0.1", 10911, 2048)
    assert msg_id == "7F00000100002A9F0000000000000800"
    assert parse_offset_msg_id(msg_id) == ("127.0.0.1", 10911, 2048)
    assert parse_offset_msg_id(msg_id.lower()) == ("127.0.0.1", 10911, 2048)


def test_offset_msg_id_ipv6() -> None:
    msg_id = make_offset_msg_id("2001:db8::7", 10911, 2**40)
    assert len(msg_id) == 56
    assert msg_id == "20010DB8000000000000000000000007" + "00002A9F" + "0000010000000000"
    assert parse_offset_msg_id(msg_id) == ("2001:db8::7", 10911, 2**40)


@pytest.mark.parametrize(
    ("host", "port", "offset"),
    [
        ("localhost", 1, 0),
        ("1.2.3", 1, 0),
        ("", 1, 0),
        ("127.0.0.1", -1, 0),
        ("127.0.0.1", 65536, 0),
        ("127.0.0.1", 1, -1),
        ("127.0.0.1", 1, 2**63),
    ],
)
def test_make_offset_msg_id_rejects(host: str, port: int, offset: int) -> None:
    with pytest.raises(LocalProtocolError):
        make_offset_msg_id(host, port, offset)


@pytest.mark.parametrize(
    "msg_id",
    [
        "",
        "7F00000100002A9F000000000000080",  # 31 chars
        "7F00000100002A9F00000000000008000",  # 33 chars
        "7F00000100002A9F000000000000080G",  # not hex
        "7F 000001 00002A9F00000000000008",  # blanks that bytes.fromhex would skip
        "7F00000100002A9F000000000000080\u0661",  # a non-ASCII digit
        "7F00000100012A9F0000000000000800",  # port 76447
        "7F000001FFFFFFFF0000000000000800",  # port -1
        "7F00000100002A9F8000000000000000",  # negative offset
        "7F00000100002A9F0000000000000800,7F00000100002A9F0000000000000900",  # a batch list
    ],
)
def test_parse_offset_msg_id_rejects(msg_id: str) -> None:
    with pytest.raises(RemoteProtocolError):
        parse_offset_msg_id(msg_id)


_HOSTS = st.one_of(
    st.binary(min_size=4, max_size=4).map(lambda b: str(ipaddress.IPv4Address(b))),
    st.binary(min_size=16, max_size=16).map(lambda b: str(ipaddress.IPv6Address(b))),
)


@settings(max_examples=500, deadline=None)
@given(_HOSTS, st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_offset_msg_id_round_trip(host: str, port: int, offset: int) -> None:
    msg_id = make_offset_msg_id(host, port, offset)
    assert msg_id == msg_id.upper()
    assert len(msg_id) == (32 if "." in host and ":" not in host else 56)
    assert parse_offset_msg_id(msg_id) == (host, port, offset)


@settings(max_examples=800, deadline=None)
@given(
    st.one_of(
        st.text(max_size=60),
        st.text(alphabet="0123456789ABCDEFabcdef", min_size=32, max_size=32),
        st.text(alphabet="0123456789ABCDEF", min_size=56, max_size=56),
        st.text(alphabet="0123456789ABCDEF \n", min_size=32, max_size=32),
    )
)
def test_fuzz_parse_offset_msg_id(msg_id: str) -> None:
    try:
        host, port, offset = parse_offset_msg_id(msg_id)
    except RemoteProtocolError:
        return
    assert make_offset_msg_id(host, port, offset) == msg_id.upper()


# ---------------------------------------------------------------------------------------------
# UNIQ_KEY


def test_uniq_key_vector() -> None:
    # §9: 127.0.0.1, pid 12345, class-loader hash 0x12345678, 100 000 000 ms into the month,
    # counter 1.
    now_ms = _ms(2023, 11, 1) + 100_000_000
    gen = UniqKeyGenerator("127.0.0.1", 12345, 0x12345678)
    assert gen.next(now_ms) == "7F00000130391234567805F5E1000000"
    assert gen.next(now_ms) == "7F00000130391234567805F5E1000001"
    gen1 = UniqKeyGenerator("127.0.0.1", 12345, 0x12345678, counter=1)
    assert gen1.next(now_ms) == "7F00000130391234567805F5E1000001"


def test_uniq_key_masks_pid_and_seed() -> None:
    gen = UniqKeyGenerator("10.0.0.2", 0x12345, -1)
    key = gen.next(_ms(2024, 2, 1))
    assert key == "0A000002" + "2345" + "FFFFFFFF" + "00000000" + "0000"


def test_uniq_key_month_rollover() -> None:
    gen = UniqKeyGenerator("127.0.0.1", 1, 2)
    # The last ms of December: 31 days - 1 ms, beyond int32, so it wraps like Java's (int) cast.
    last = _ms(2024, 1, 1) - 1
    assert gen.next(last)[20:28] == f"{(31 * 86_400_000 - 1) & 0xFFFFFFFF:08X}"
    assert gen.next(_ms(2024, 1, 1))[20:28] == "00000000"
    assert gen.next(_ms(2024, 1, 1) + 5)[20:28] == "00000005"
    # A clock stepped back into the previous month recomputes the month start.
    assert gen.next(_ms(2023, 12, 1) + 7)[20:28] == "00000007"
    # Leap February.
    assert gen.next(_ms(2024, 3, 1) - 1)[20:28] == f"{29 * 86_400_000 - 1:08X}"


def test_uniq_key_counter_wraps() -> None:
    gen = UniqKeyGenerator("127.0.0.1", 1, 2, counter=0xFFFF)
    now = _ms(2024, 5, 6)
    assert gen.next(now).endswith("FFFF")
    assert gen.next(now).endswith("0000")
    assert gen.next(now).endswith("0001")


def test_uniq_key_ipv6() -> None:
    key = UniqKeyGenerator("::1", 1, 2).next(_ms(2024, 5, 1))
    assert len(key) == 56
    assert key.startswith("0" * 31 + "1" + "0001" + "00000002")


def test_uniq_key_bad_ip() -> None:
    with pytest.raises(LocalProtocolError):
        UniqKeyGenerator("not-an-ip", 1, 2)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**44), st.integers(0, 2**16 - 1))
def test_uniq_key_shape(now_ms: int, counter: int) -> None:
    key = UniqKeyGenerator("192.168.0.10", 4242, 7, counter=counter).next(now_ms)
    assert len(key) == 32
    assert key == key.upper()
    assert key[:20] == "C0A8000A" + "1092" + "00000007"
    now = datetime.fromtimestamp(now_ms // 1000, tz=UTC)
    month_start = _ms(now.year, now.month, 1)
    assert int(key[20:28], 16) == (now_ms - month_start) & 0xFFFFFFFF
    assert int(key[28:], 16) == counter
