"""Message properties encoding (docs/protocol.md §4.5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._protocol import properties
from aiorocket._protocol.properties import (
    MAX_PROPERTIES_SIZE,
    decode_properties,
    encode_properties,
    encode_properties_bytes,
)
from aiorocket.errors import LocalProtocolError, RemoteProtocolError

V2_PROPERTIES = (
    "TAGS\x01TagA\x02KEYS\x01key1\x02UNIQ_KEY\x017F00000130391234567805F5E1000001"
    "\x02CLUSTER\x01DefaultCluster"
)
V2_DICT = {
    "TAGS": "TagA",
    "KEYS": "key1",
    "UNIQ_KEY": "7F00000130391234567805F5E1000001",
    "CLUSTER": "DefaultCluster",
}


def _java_string2message_properties(text: str) -> dict[str, str]:
    """``MessageDecoder.string2messageProperties`` transcribed index by index, as reference."""
    result: dict[str, str] = {}
    length = len(text)
    index = 0
    while index < length:
        new_index = text.find("\x02", index)
        if new_index < 0:
            new_index = length
        if new_index - index >= 3:
            kv = text.find("\x01", index)
            if index < kv < new_index - 1:
                result[text[index:kv]] = text[kv + 1 : new_index]
        index = new_index + 1
    return result


def test_key_constants() -> None:
    assert properties.KEYS == "KEYS"
    assert properties.TAGS == "TAGS"
    assert properties.WAIT == "WAIT"
    assert properties.DELAY == "DELAY"
    assert properties.RETRY_TOPIC == "RETRY_TOPIC"
    assert properties.REAL_TOPIC == "REAL_TOPIC"
    assert properties.REAL_QID == "REAL_QID"
    assert properties.TRAN_MSG == "TRAN_MSG"
    assert properties.PGROUP == "PGROUP"
    assert properties.MIN_OFFSET == "MIN_OFFSET"
    assert properties.MAX_OFFSET == "MAX_OFFSET"
    assert properties.ORIGIN_MESSAGE_ID == "ORIGIN_MESSAGE_ID"
    assert properties.RECONSUME_TIME == "RECONSUME_TIME"
    assert properties.MAX_RECONSUME_TIMES == "MAX_RECONSUME_TIMES"
    assert properties.MSG_REGION == "MSG_REGION"
    assert properties.TRACE_ON == "TRACE_ON"
    assert properties.UNIQ_KEY == "UNIQ_KEY"
    assert properties.CONSUME_START_TIME == "CONSUME_START_TIME"
    assert properties.CLUSTER == "CLUSTER"
    assert properties.SHARDING_KEY == "__SHARDINGKEY"


def test_decode_v2_vector() -> None:
    assert decode_properties(V2_PROPERTIES) == V2_DICT
    assert decode_properties(V2_PROPERTIES.encode()) == V2_DICT
    assert list(decode_properties(V2_PROPERTIES)) == ["TAGS", "KEYS", "UNIQ_KEY", "CLUSTER"]


def test_encode_v2_vector_is_java_form() -> None:
    assert encode_properties(V2_DICT) == V2_PROPERTIES
    assert encode_properties_bytes(V2_DICT) == V2_PROPERTIES.encode()


def test_decode_trailing_separator_from_cpp_capture() -> None:
    # The properties of a SEND_MESSAGE from the C++ client capture: note the final \x02.
    text = (
        "KEYS\x01k1\x02TAGS\x01tA\x02UNIQ_KEY\x010100007F0000B45D00008D486D6D0100"
        "\x02WAIT\x01true\x02color\x01red\x02"
    )
    assert decode_properties(text) == {
        "KEYS": "k1",
        "TAGS": "tA",
        "UNIQ_KEY": "0100007F0000B45D00008D486D6D0100",
        "WAIT": "true",
        "color": "red",
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", {}),
        ("\x02", {}),
        ("\x02\x02\x02", {}),
        ("a\x01b", {"a": "b"}),
        ("a\x01b\x02", {"a": "b"}),
        ("\x01b", {}),  # empty key dropped
        ("a\x01", {}),  # empty value dropped
        ("a\x01\x02b\x01c", {"b": "c"}),
        ("ab", {}),  # no separator: dropped
        ("abc", {}),
        ("a\x01b\x01c", {"a": "b\x01c"}),  # the value is everything after the first \x01
        ("a\x011\x02a\x012", {"a": "2"}),  # repeated key: the last wins
        ("a\x011\x02a\x01", {"a": "1"}),  # ... unless the later one is dropped
        ("\x02\x02a\x01b\x02\x02", {"a": "b"}),
        ("\x01\x01\x01", {}),
        ("k\x01\x01", {"k": "\x01"}),
        ("ключ\x01значение", {"ключ": "значение"}),
    ],
)
def test_decode_follows_java_rules(text: str, expected: dict[str, str]) -> None:
    assert decode_properties(text) == expected
    assert decode_properties(text.encode()) == expected
    assert _java_string2message_properties(text) == expected


@pytest.mark.parametrize("data", [b"\xff", b"a\x01\xc3", b"TAGS\x01\xed\xa0\x80"])
def test_decode_invalid_utf8(data: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        decode_properties(data)


def test_encode_empty() -> None:
    assert encode_properties({}) == ""
    assert encode_properties_bytes({}) == b""


def test_encode_keeps_order() -> None:
    assert encode_properties({"b": "1", "a": "2"}) == "b\x011\x02a\x012"


@pytest.mark.parametrize(
    "props",
    [
        {"": "v"},
        {"k": ""},
        {"k\x01": "v"},
        {"k": "v\x01"},
        {"k\x02": "v"},
        {"k": "v\x02x"},
        {"a": "1", "b\x02c": "2"},
        {"a": "1", "": "2"},
        {"a": "\x01\x02"},
    ],
)
def test_encode_rejects_what_the_format_cannot_carry(props: dict[str, str]) -> None:
    with pytest.raises(LocalProtocolError):
        encode_properties(props)
    with pytest.raises(LocalProtocolError):
        encode_properties_bytes(props)


def test_encode_bytes_size_limit() -> None:
    # "k" + \x01 + value: exactly at the limit is fine, one byte more is not.
    at_limit = {"k": "v" * (MAX_PROPERTIES_SIZE - 2)}
    assert len(encode_properties_bytes(at_limit)) == MAX_PROPERTIES_SIZE
    with pytest.raises(LocalProtocolError):
        encode_properties_bytes({"k": "v" * (MAX_PROPERTIES_SIZE - 1)})
    # The limit counts UTF-8 bytes, not characters.
    with pytest.raises(LocalProtocolError):
        encode_properties_bytes({"k": "é" * (MAX_PROPERTIES_SIZE // 2)})


def test_encode_bytes_rejects_lone_surrogates() -> None:
    with pytest.raises(LocalProtocolError):
        encode_properties_bytes({"k": "\ud800"})


_PROP_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\x01\x02"),
    min_size=1,
    max_size=16,
)


@settings(max_examples=800, deadline=None)
@given(st.dictionaries(_PROP_TEXT, _PROP_TEXT, max_size=8), st.booleans())
def test_round_trip(props: dict[str, str], trailing: bool) -> None:
    text = encode_properties(props)
    assert "\x02" not in text[-1:]
    assert decode_properties(text) == props
    data = encode_properties_bytes(props)
    assert decode_properties(data + (b"\x02" if trailing else b"")) == props
    assert list(decode_properties(data)) == list(props)


@settings(max_examples=800, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab\x01\x02é"), max_size=24))
def test_decode_matches_java_reference(text: str) -> None:
    assert decode_properties(text) == _java_string2message_properties(text)


@settings(max_examples=800, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_decode_bytes_raises_only_remote_protocol_error(data: bytes) -> None:
    try:
        result = decode_properties(data)
    except RemoteProtocolError:
        return
    assert result == _java_string2message_properties(data.decode())
