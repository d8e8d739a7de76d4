"""The fastjson dialect reader and the compact writer (docs/protocol.md §5.1)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._protocol.fastjson import (
    _STANDARD,
    MAX_DEPTH,
    ObjectKey,
    _parse_tolerant,
    dumps,
    loads,
)
from aiorocket.errors import LocalProtocolError, RemoteProtocolError
from aiorocket.models import MessageQueue
from tests._harness.protocol import CLUSTER_5_4, RESET_5_7, ROUTE_5_3


def _mq_key(topic: str, broker: str, queue_id: int) -> ObjectKey:
    return ObjectKey.from_dict({"topic": topic, "brokerName": broker, "queueId": queue_id})


# ---------------------------------------------------------------------------- fastjson quirks


def test_bare_integer_keys_become_ints() -> None:
    assert loads(b'{0:"a",-1:"b",10:"c"}') == {0: "a", -1: "b", 10: "c"}


def test_route_example_of_5_3() -> None:
    route = loads(ROUTE_5_3)
    assert route["brokerDatas"][0]["brokerAddrs"] == {0: "192.168.1.5:10911"}
    assert route["queueDatas"][0] == {
        "brokerName": "broker-a",
        "perm": 6,
        "readQueueNums": 4,
        "topicSysFlag": 0,
        "writeQueueNums": 4,
    }
    assert route["filterServerTable"] == {}


def test_quoted_route_keys_stay_strings() -> None:
    assert loads(ROUTE_5_3.replace(b"{0:", b'{"0":'))["brokerDatas"][0]["brokerAddrs"] == {
        "0": "192.168.1.5:10911"
    }


def test_cluster_info_example_of_5_4() -> None:
    info = loads(CLUSTER_5_4)
    assert info["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {0: "192.168.1.5:10911"}
    assert info["clusterAddrTable"] == {"DefaultCluster": ["broker-a"]}


def test_object_keys_of_reset_offset_body() -> None:
    table = loads(RESET_5_7)["offsetTable"]
    assert table == {_mq_key("T", "broker-a", 0): 1234, _mq_key("T", "broker-a", 1): 99}
    key = next(iter(table))
    assert key.to_dict() == {"brokerName": "broker-a", "queueId": 0, "topic": "T"}
    assert key.get("queueId") == 0
    assert key.get("missing", 7) == 7


def test_object_key_is_canonical_whatever_the_member_order() -> None:
    a = loads(b'{{"topic":"T","queueId":1,"brokerName":"b"}:1}')
    b = loads(b'{{"brokerName":"b","topic":"T","queueId":1}:1}')
    assert a == b
    assert hash(next(iter(a))) == hash(next(iter(b)))


def test_nested_object_keys_freeze_arrays_and_objects() -> None:
    doc = loads(b'{{"a":[1,{"b":2}],"c":{"d":null}}:true}')
    (key,) = doc
    assert key.to_dict() == {"a": [1, {"b": 2}], "c": {"d": None}}
    assert doc[key] is True


def test_any_json_value_may_be_a_key() -> None:
    doc = loads(b'{true:1,false:2,null:3,1.5:4,[1,"x"]:5,"s":6,-7:7}')
    assert doc == {True: 1, False: 2, None: 3, 1.5: 4, (1, "x"): 5, "s": 6, -7: 7}


def test_string_values_with_digits_and_colons_are_untouched() -> None:
    doc = loads(b'{0:"x,123:y","k":"a,5:b",1:",1:{2:3}"}')
    assert doc == {0: "x,123:y", "k": "a,5:b", 1: ",1:{2:3}"}
    # The same values through the standard path.
    assert loads(b'{"k":"a,5:b"}') == {"k": "a,5:b"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b'{"a":1}\n', {"a": 1}),
        (b'{0:"a"}\n', {0: "a"}),
        (b' \r\n\t{ 0 : "a" , 1:[ ] } \n', {0: "a", 1: []}),
        (b"[]\n", []),
    ],
)
def test_whitespace_and_trailing_newline_accepted(body: bytes, expected: Any) -> None:
    # The C++ client ends its JSON with "\n" (its heartbeat captures end with "}\n").
    assert loads(body) == expected


def test_str_and_bytes_like_input() -> None:
    assert loads('{0:"é"}') == {0: "é"}
    assert loads(bytearray(b'{0:"a"}')) == {0: "a"}
    assert loads(memoryview(b'{"a":[1]}')) == {"a": [1]}
    with pytest.raises(TypeError):
        loads(123)  # type: ignore[arg-type]


def test_numbers() -> None:
    doc = loads(b"{0:[0,-0,12,-34,1.5,-2.5e3,1E2,1e-2,12345678901234567890123]}")
    values = doc[0]
    assert values == [0, 0, 12, -34, 1.5, -2500.0, 100.0, 0.01, 12345678901234567890123]
    assert [type(v) for v in values] == [int, int, int, int, float, float, float, float, int]


def test_unicode_escapes_and_surrogate_pairs() -> None:
    text = '{0:"\\u00e9\\ud83d\\ude00\\n\\t\\"\\\\\\/\\b\\f\\r","\\u0041":1}'
    assert loads(text) == {0: 'é😀\n\t"\\/\b\f\r', "A": 1}
    # A lone surrogate survives as it does with json.loads.
    assert loads('{0:"\\ud800x"}') == {0: "\ud800x"}
    assert loads('{0:"\\ud800\\u0041"}') == {0: "\ud800A"}
    assert loads('{0:"\\udc00"}') == {0: "\udc00"}


def test_raw_control_characters_in_strings_are_tolerated() -> None:
    assert loads(b'{"a":"x\x01y\nz"}') == {"a": "x\x01y\nz"}
    assert loads(b'{0:"x\x01y"}') == {0: "x\x01y"}


def test_duplicate_keys_last_wins() -> None:
    assert loads(b'{0:"a",0:"b"}') == {0: "b"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "NaN",
        "[NaN]",
        "{0:NaN}",
        "Infinity",
        "{0:-Infinity}",
        "[1e400]",
        "{0:-1e400}",
        "{",
        "}",
        "[1,]",
        "[,1]",
        '{"a":1,}',
        "{0:1,}",
        '{"a" 1}',
        "{0 1}",
        "{0:}",
        "{:1}",
        "01",
        "{0:01}",
        "-",
        "1.",
        ".5",
        "1e",
        "+1",
        "tru",
        "nul",
        "[1 2]",
        "{} {}",
        '"abc',
        '{0:"abc}',
        '"\\x41"',
        '"\\u12"',
        '"\\u12g4"',
        '"\\ud800\\uzzzz"',
        "\ufeff{}",
        "[\u0663]",
        "'a'",
        "{0:'a'}",
        "[1]x",
        "{0:[}",
    ],
)
def test_invalid_input_raises_remote_protocol_error(text: str) -> None:
    with pytest.raises(RemoteProtocolError):
        loads(text)
    with pytest.raises(RemoteProtocolError):
        loads(text.encode("utf-8"))


def test_invalid_utf8_raises_remote_protocol_error() -> None:
    for raw in (b'{"a":"\xff"}', b'{0:"\xc3"}', b'"\xed\xa0\x80"'):
        with pytest.raises(RemoteProtocolError):
            loads(raw)


def test_huge_integer_raises_remote_protocol_error() -> None:
    with pytest.raises(RemoteProtocolError):
        loads("[" + "9" * 10_000 + "]")
    with pytest.raises(RemoteProtocolError):
        loads("{0:" + "9" * 10_000 + "}")


def test_depth_cap_of_the_tolerant_reader() -> None:
    inner = MAX_DEPTH - 1
    ok = "{0:" + "[" * inner + "]" * inner + "}"
    assert loads(ok) is not None
    too_deep = "{0:" + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "}"
    with pytest.raises(RemoteProtocolError, match="nesting"):
        loads(too_deep)


def test_very_deep_standard_json_raises_remote_protocol_error() -> None:
    with pytest.raises(RemoteProtocolError):
        loads("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RemoteProtocolError):
        loads('{"a":' * 50_000 + "1" + "}" * 50_000)


# ---------------------------------------------------------------------------- dumps


def test_dumps_is_compact_and_keeps_order() -> None:
    assert dumps({"b": [1, 2.5, None, True], "a": {"x": "y"}}) == (
        b'{"b":[1,2.5,null,true],"a":{"x":"y"}}'
    )


def test_dumps_quotes_integer_keys() -> None:
    # The Go client splits route JSON on "," and ":" and strips quotes (§5.1).
    assert dumps({"brokerAddrs": {0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}}) == (
        b'{"brokerAddrs":{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}}'
    )
    assert (
        dumps({1.5: 1, True: 2, None: 3})
        == json.dumps({1.5: 1, True: 2, None: 3}).replace(" ", "").encode()
    )


def test_dumps_writes_object_keys() -> None:
    mq = MessageQueue("T", "broker-a", 0)
    assert dumps({"offsetTable": {mq: 1234, MessageQueue("T", "broker-a", 1): 99}}) == RESET_5_7
    assert dumps(loads(RESET_5_7)) == RESET_5_7
    assert dumps({_mq_key("T", "b", 2): {1: "x"}}) == (
        b'{{"brokerName":"b","queueId":2,"topic":"T"}:{"1":"x"}}'
    )
    assert dumps({(1, "a"): 0}) == b'{[1,"a"]:0}'


def test_dumps_utf8_and_lone_surrogates() -> None:
    assert dumps({"k": "é😀"}) == '{"k":"é😀"}'.encode()
    assert dumps({"k": "\ud800"}) == b'{"k":"\\ud800"}'
    assert loads(dumps({"k": "\ud800", 0: "é"})) == {"k": "\ud800", "0": "é"}


@dataclass
class _Bean:
    x: int


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        {"a": float("inf")},
        {float("nan"): 1},
        {_mq_key("T", "b", 0): float("-inf")},
        _Bean(1),
        {"a": _Bean(1)},
        {_mq_key("T", "b", 0): _Bean(1)},
        MessageQueue("T", "b", 0),
        {"s": {1, 2}},
        {frozenset(): 1},
        b"bytes",
        {MessageQueue("T", "b", "0"): 1},  # type: ignore[arg-type]
    ],
)
def test_dumps_refuses_unencodable_values(value: Any) -> None:
    with pytest.raises(LocalProtocolError):
        dumps(value)


def test_dumps_refuses_cycles_and_deep_nesting() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(LocalProtocolError):
        dumps(cyclic)
    cyclic_key: dict[Any, Any] = {_mq_key("T", "b", 0): None}
    cyclic_key["self"] = cyclic_key
    with pytest.raises(LocalProtocolError):
        dumps(cyclic_key)
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(LocalProtocolError):
        dumps(deep)


# ---------------------------------------------------------------------------- properties

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)


def _json_values(keys: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        _scalars,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=16,
    )


_object_keys = st.dictionaries(
    st.text(max_size=6), _scalars | st.lists(_scalars, max_size=3), max_size=4
).map(ObjectKey.from_dict)


def _as_read_back(value: Any) -> Any:
    # Documented: int keys are written quoted, so they come back as str; object keys as-is.
    if isinstance(value, dict):
        return {(str(k) if isinstance(k, int) else k): _as_read_back(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_read_back(v) for v in value]
    return value


@settings(max_examples=400, deadline=None)
@given(_json_values(st.text(max_size=8) | st.integers(-(2**63), 2**63)))
def test_loads_dumps_round_trip_int_keys_come_back_as_str(value: Any) -> None:
    assert loads(dumps(value)) == _as_read_back(value)


@settings(max_examples=300, deadline=None)
@given(_json_values(st.text(max_size=8) | st.integers() | _object_keys))
def test_loads_dumps_round_trip_object_keys(value: Any) -> None:
    assert loads(dumps(value)) == _as_read_back(value)


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        MessageQueue, st.text(max_size=10), st.text(max_size=10), st.integers(-(2**31), 2**31)
    ),
    st.integers(),
)
def test_message_queue_keys_read_back_as_object_keys(mq: MessageQueue, offset: int) -> None:
    (key,) = loads(dumps({mq: offset}))
    assert key.to_dict() == {
        "brokerName": mq.broker_name,
        "queueId": mq.queue_id,
        "topic": mq.topic,
    }


@settings(max_examples=300, deadline=None)
@given(
    _json_values(st.text(max_size=8)),
    st.sampled_from([None, 0, 2]),
    st.sampled_from([(",", ":"), (", ", ": "), (" ,\n", " :\t")]),
    st.booleans(),
)
def test_tolerant_reader_agrees_with_json_on_standard_json(
    value: Any, indent: int | None, separators: tuple[str, str], ascii_only: bool
) -> None:
    text = json.dumps(value, indent=indent, separators=separators, ensure_ascii=ascii_only)
    assert _parse_tolerant(text + "\n") == json.loads(text)


def _loads_or_protocol_error(data: bytes | str) -> None:
    with contextlib.suppress(RemoteProtocolError):
        loads(data)


@settings(max_examples=700, deadline=None)
@given(st.text(alphabet='{}[]:,"\\0123456789-+.eEtrufalsn \n\tuU{}ab', max_size=40))
def test_near_json_text_gives_a_value_or_remote_protocol_error(text: str) -> None:
    _loads_or_protocol_error(text)
    # Differential check: whatever the standard reader accepts, the tolerant one reads alike.
    try:
        expected = _STANDARD(text)
    except (ValueError, RecursionError):
        return
    assert _parse_tolerant(text) == expected


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=40))
def test_arbitrary_text_gives_a_value_or_remote_protocol_error(text: str) -> None:
    _loads_or_protocol_error(text)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=60))
def test_arbitrary_bytes_give_a_value_or_remote_protocol_error(data: bytes) -> None:
    _loads_or_protocol_error(data)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_mutated_fastjson_gives_a_value_or_remote_protocol_error(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from([ROUTE_5_3, CLUSTER_5_4, RESET_5_7]))
    cut = data.draw(st.integers(0, len(base)))
    end = data.draw(st.integers(cut, min(len(base), cut + 4)))
    insert = data.draw(st.binary(max_size=4) | st.sampled_from([b"{", b"[", b'"', b":", b","]))
    _loads_or_protocol_error(base[:cut] + insert + base[end:])
