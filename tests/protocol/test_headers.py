"""Typed request/response headers: round trips, real captures, the §9 vectors, typing rules."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._protocol import headers
from aiorocket._protocol.codes import PullSysFlag, RequestCode
from aiorocket._protocol.headers import (
    REQUEST_HEADERS,
    RESPONSE_HEADERS,
    ConsumerSendMsgBackRequestHeader,
    CreateTopicRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    GetRouteInfoRequestHeader,
    Header,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    ResetOffsetRequestHeader,
    SendMessageRequestHeader,
    SendMessageResponseHeader,
    UnregisterClientRequestHeader,
    UpdateConsumerOffsetResponseHeader,
    WireKind,
    decode_request_header,
    decode_send_header,
    header_class,
    wire,
)
from aiorocket.errors import LocalProtocolError, MissingHeaderFieldError
from tests._harness.protocol import pull_header

DATA = Path(__file__).parent.parent / "data"

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1

ALL_HEADERS: list[type[Header]] = sorted(
    (
        obj
        for name in headers.__all__
        if isinstance(obj := getattr(headers, name), type)
        and issubclass(obj, Header)
        and obj is not Header
    ),
    key=lambda c: c.__name__,
)
IDS = [c.__name__ for c in ALL_HEADERS]

# Codes that travel without a header (HEART_BEAT, LOCK/UNLOCK_BATCH_MQ, CHECK_CLIENT_CONFIG,
# GET_BROKER_CLUSTER_INFO, GET_ALL_TOPIC_LIST_FROM_NAMESERVER).
NO_HEADER_CODES = {34, 41, 42, 46, 106, 206}


# --------------------------------------------------------------------------- strategies


def _nullable(cls: type[Header], attr: str) -> bool:
    f = next(f for f in dataclasses.fields(cast(Any, cls)) if f.name == attr)
    return f.default is None


def _value_strategy(cls: type[Header], w: headers.WireField) -> st.SearchStrategy[Any]:
    base: st.SearchStrategy[Any]
    if w.kind is WireKind.STR:
        base = st.text(min_size=1)  # "" reads back as absent
    elif w.kind is WireKind.BOOL:
        base = st.booleans()
    elif w.kind is WireKind.INT:
        base = st.integers(INT_MIN, INT_MAX)
    else:
        base = st.integers(LONG_MIN, LONG_MAX)
    return st.none() | base if _nullable(cls, w.attr) else base


def headers_of(cls: type[Header]) -> st.SearchStrategy[Header]:
    """Instances of ``cls`` with every field drawn from its wire type's range."""
    fields = {w.attr: _value_strategy(cls, w) for w in cls.wire_fields()}
    return st.fixed_dictionaries(fields).map(lambda kw: cast(Any, cls)(**kw))


def _wire_keys(cls: type[Header]) -> list[str]:
    keys = [w.name for w in cls.wire_fields()]
    keys += [w.short for w in cls.wire_fields() if w.short is not None]
    return keys


def _sample(cls: type[Header]) -> Header:
    """A deterministic valid instance: every field set, optional ones too."""
    kw: dict[str, Any] = {}
    for i, w in enumerate(cls.wire_fields()):
        if w.kind is WireKind.STR:
            kw[w.attr] = f"v{i}"
        elif w.kind is WireKind.BOOL:
            kw[w.attr] = True
        else:
            kw[w.attr] = i + 1
    h: Header = cast(Any, cls)(**kw)
    return h


def _decode(cls: type[Header], ext: dict[str, str], *, v2: bool = False) -> Header:
    if cls is SendMessageRequestHeader:
        return SendMessageRequestHeader.from_ext(ext, v2=v2)
    return cls.from_ext(ext)


def _encode(h: Header, *, v2: bool = False) -> dict[str, str]:
    if isinstance(h, SendMessageRequestHeader):
        return h.to_ext(v2=v2)
    return h.to_ext()


# --------------------------------------------------------------------------- declarations


def test_every_header_is_a_frozen_slotted_kw_only_dataclass() -> None:
    assert len(ALL_HEADERS) >= 30
    for cls in ALL_HEADERS:
        params = cast(Any, cls).__dataclass_params__
        assert params.frozen
        assert "__slots__" in cls.__dict__
        assert all(f.kw_only for f in dataclasses.fields(cast(Any, cls)))
        assert cls.__doc__
        h = _sample(cls)
        assert not hasattr(h, "__dict__")
        for w in cls.wire_fields():
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(h, w.attr, getattr(h, w.attr))


def test_public_names_are_documented() -> None:
    for name in headers.__all__:
        obj = getattr(headers, name)
        if callable(obj):
            assert obj.__doc__, name


def test_field_tables_follow_remoting_md() -> None:
    def table(cls: type[Header]) -> list[tuple[str, WireKind, bool]]:
        return [(w.name, w.kind, w.required) for w in cls.wire_fields()]

    s, i, lg, b = WireKind.STR, WireKind.INT, WireKind.LONG, WireKind.BOOL
    assert table(PullMessageRequestHeader) == [
        ("consumerGroup", s, True),
        ("topic", s, True),
        ("queueId", i, True),
        ("queueOffset", lg, True),
        ("maxMsgNums", i, True),
        ("sysFlag", i, True),
        ("commitOffset", lg, True),
        ("suspendTimeoutMillis", lg, True),
        ("subscription", s, False),
        ("subVersion", lg, True),
        ("expressionType", s, False),
        ("bname", s, False),
    ]
    send = SendMessageRequestHeader.wire_fields()
    assert [w.short for w in send] == list("abcdefghijklmn")
    assert [w.name for w in send if w.required] == [
        "producerGroup",
        "topic",
        "defaultTopic",
        "defaultTopicQueueNums",
        "queueId",
        "sysFlag",
        "bornTimestamp",
        "flag",
    ]
    assert table(UnregisterClientRequestHeader) == [
        ("clientID", s, True),
        ("producerGroup", s, False),
        ("consumerGroup", s, False),
    ]
    assert table(GetConsumerRunningInfoRequestHeader) == [
        ("consumerGroup", s, True),
        ("clientId", s, True),
        ("jstackEnable", b, False),
    ]
    assert table(ResetOffsetRequestHeader) == [
        ("topic", s, True),
        ("group", s, True),
        ("timestamp", lg, True),
        ("isForce", b, True),
    ]
    assert table(GetRouteInfoRequestHeader) == [
        ("topic", s, True),
        ("acceptStandardJsonOnly", b, False),
    ]
    assert [w.name for w in SendMessageResponseHeader.wire_fields()] == [
        "msgId",
        "queueId",
        "queueOffset",
        "transactionId",
        "MSG_REGION",
        "TRACE_ON",
        "recallHandle",
    ]


def test_registries() -> None:
    expected = {
        10, 11, 12, 14, 15, 17, 29, 30, 31, 32, 33, 35, 36, 37, 38, 39, 40,
        105, 220, 221, 222, 307, 309, 310, 320, 324, 325, 326, 361,
    }  # fmt: skip
    assert set(REQUEST_HEADERS) == expected
    assert not NO_HEADER_CODES & set(REQUEST_HEADERS)
    assert REQUEST_HEADERS[RequestCode.SEND_MESSAGE_V2] is SendMessageRequestHeader
    assert REQUEST_HEADERS[RequestCode.RESET_CONSUMER_CLIENT_OFFSET] is ResetOffsetRequestHeader
    assert RESPONSE_HEADERS[RequestCode.PULL_MESSAGE] is PullMessageResponseHeader
    assert RESPONSE_HEADERS[RequestCode.SEND_BATCH_MESSAGE] is SendMessageResponseHeader
    for cls in [*REQUEST_HEADERS.values(), *RESPONSE_HEADERS.values()]:
        assert cls in ALL_HEADERS
    with pytest.raises(TypeError):
        cast(Any, REQUEST_HEADERS)[999] = Header
    for code in NO_HEADER_CODES | {4242}:
        assert decode_request_header(code, {"topic": "t"}) is None


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_round_trip(cls: type[Header], data: st.DataObject) -> None:
    h = data.draw(headers_of(cls))
    ext = _encode(h)
    assert all(type(k) is str and type(v) is str for k, v in ext.items())
    assert set(ext) <= {w.name for w in cls.wire_fields()}
    assert _decode(cls, ext) == h
    assert _decode(cls, dict(ext)) == h


@settings(max_examples=250, deadline=None)
@given(h=headers_of(SendMessageRequestHeader), v2=st.booleans())
def test_send_round_trip_under_both_namings(h: Header, v2: bool) -> None:
    assert isinstance(h, SendMessageRequestHeader)
    ext = h.to_ext(v2=v2)
    if v2:
        assert set(ext) <= set("abcdefghijklmn")
    assert SendMessageRequestHeader.from_ext(ext, v2=v2) == h
    assert decode_send_header(310 if v2 else 10, ext) == h
    assert decode_request_header(320 if v2 else 10, ext) == h


def test_to_ext_renders_strings_and_omits_none() -> None:
    h = PullMessageRequestHeader(
        consumer_group="CG",
        topic="T",
        queue_id=3,
        queue_offset=-0,
        max_msg_nums=32,
        sys_flag=PullSysFlag.COMMIT_OFFSET | PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION,
        commit_offset=-1,
        suspend_timeout_millis=15000,
        sub_version=LONG_MAX,
    )
    assert h.to_ext() == {
        "consumerGroup": "CG",
        "topic": "T",
        "queueId": "3",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "7",
        "commitOffset": "-1",
        "suspendTimeoutMillis": "15000",
        "subVersion": str(LONG_MAX),
    }
    assert UpdateConsumerOffsetResponseHeader().to_ext() == {}
    assert UpdateConsumerOffsetResponseHeader.from_ext({"x": "y"}) == (
        UpdateConsumerOffsetResponseHeader()
    )


def test_int_enum_values_encode_as_decimal() -> None:
    class Flag(enum.IntFlag):
        A = 1
        B = 4

    h = SendMessageRequestHeader(
        producer_group="P", topic="T", queue_id=0, born_timestamp=1, sys_flag=Flag.A | Flag.B
    )
    assert h.to_ext(v2=True)["f"] == "5"


@pytest.mark.parametrize(
    ("value", "kind"),
    [(INT_MAX + 1, "int"), (INT_MIN - 1, "int")],
)
def test_to_ext_refuses_ints_java_cannot_hold(value: int, kind: str) -> None:
    h = GetRouteInfoRequestHeader(topic="t")
    assert h.to_ext() == {"topic": "t"}
    bad = ConsumerSendMsgBackRequestHeader(offset=1, group="g", delay_level=value)
    with pytest.raises(LocalProtocolError, match=f"delayLevel={value} does not fit a Java {kind}"):
        bad.to_ext()
    with pytest.raises(LocalProtocolError, match="does not fit a Java long"):
        ConsumerSendMsgBackRequestHeader(offset=LONG_MAX + 1, group="g", delay_level=0).to_ext()


# --------------------------------------------------------------------------- real peers


def _coerce(raw: dict[str, Any]) -> dict[str, str]:
    # docs/protocol.md §1.8: numbers to decimal text, booleans to "true"/"false".
    out: dict[str, str] = {}
    for k, v in raw.items():
        if isinstance(v, bool):
            out[k] = "true" if v else "false"
        elif isinstance(v, int | float):
            out[k] = str(v)
        else:
            out[k] = v
    return out


def _captures() -> list[tuple[str, int, dict[str, str]]]:
    out = []
    for path in sorted((DATA / "captures").glob("*.jsonl")):
        for i, line in enumerate(path.read_text().splitlines()):
            header = json.loads(line)["header"]
            out.append((f"{path.stem}:{i}", header["code"], _coerce(header.get("extFields", {}))))
    return out


CAPTURES = _captures()


def test_captures_cover_both_clients() -> None:
    assert {name.split(":")[0] for name, _, _ in CAPTURES} == {"ali-ons-3.12", "cpp-client-1.x"}
    assert len(CAPTURES) >= 30


@pytest.mark.parametrize(("name", "code", "ext"), CAPTURES, ids=[c[0] for c in CAPTURES])
def test_captured_request_parses(name: str, code: int, ext: dict[str, str]) -> None:
    h = decode_request_header(code, ext)
    if code in NO_HEADER_CODES:
        assert h is None
        return
    assert h is not None
    assert type(h) is REQUEST_HEADERS[code]
    v2 = code in (310, 320)
    assert _decode(type(h), _encode(h, v2=v2), v2=v2) == h


def _capture(prefix: str, code: int, nth: int = 0) -> dict[str, str]:
    found = [ext for name, c, ext in CAPTURES if name.startswith(prefix) and c == code]
    return found[nth]


def test_cpp_send_v1_long_names() -> None:
    h = decode_send_header(10, _capture("cpp", 10))
    assert h == SendMessageRequestHeader(
        producer_group="PG",
        topic="TopicA",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=0,
        sys_flag=0,
        born_timestamp=1795237078541,
        flag=0,
        properties=(
            "KEYS\x01k1\x02TAGS\x01tA\x02UNIQ_KEY\x010100007F0000B45D00008D486D6D0100"
            "\x02WAIT\x01true\x02color\x01red\x02"
        ),
        reconsume_times=0,
        unit_mode=False,  # "0"
        batch=False,  # "0": only "true" is true
    )


def test_ali_ons_send_v2_raw_numbers_and_booleans() -> None:
    h = decode_send_header(310, _capture("ali-ons", 310))
    assert (h.producer_group, h.topic, h.queue_id, h.born_timestamp) == (
        "PG",
        "TopicA",
        1,
        1795237098830,
    )
    assert h.unit_mode is False
    assert h.batch is False
    assert h.max_reconsume_times is None
    assert h.broker_name is None


def test_pull_requests_from_both_clients() -> None:
    ali = PullMessageRequestHeader.from_ext(_capture("ali-ons", 11))
    cpp = PullMessageRequestHeader.from_ext(_capture("cpp", 11))
    assert ali.sys_flag == cpp.sys_flag == PullSysFlag.SUSPEND | PullSysFlag.SUBSCRIPTION
    assert ali.commit_offset == cpp.commit_offset == -1
    assert ali.suspend_timeout_millis == cpp.suspend_timeout_millis == 15000
    assert ali.subscription == "tA || tB"
    assert cpp.subscription == "*"
    assert cpp.sub_version == 1795237078543
    assert cpp.expression_type is None


def test_cpp_unregister_empty_group_reads_as_absent() -> None:
    consumer = UnregisterClientRequestHeader.from_ext(_capture("cpp", 35, 0))
    producer = UnregisterClientRequestHeader.from_ext(_capture("cpp", 35, 1))
    assert consumer == UnregisterClientRequestHeader(
        client_id="19986-127.0.0.1@DEFAULT", consumer_group="CG"
    )
    assert producer.producer_group == "PG"
    assert producer.consumer_group is None
    ali = UnregisterClientRequestHeader.from_ext(_capture("ali-ons", 35, 1))
    assert ali == UnregisterClientRequestHeader(client_id="192.0.2.2@20127", producer_group="PG")


# --------------------------------------------------------------------------- §9 vectors

V3_EXT = {
    "a": "PID_demo",
    "b": "TopicTest",
    "c": "TBW102",
    "d": "4",
    "e": "1",
    "f": "0",
    "g": "1700000000000",
    "h": "0",
    "i": (
        "KEYS\x01key1\x02TAGS\x01TagA\x02UNIQ_KEY\x01"
        "7F00000130391234567805F5E1000001\x02WAIT\x01true"
    ),
    "j": "0",
    "k": "false",
    "m": "false",
    "n": "broker-a",
}


def test_v3_send_v2_vector() -> None:
    expected = SendMessageRequestHeader(
        producer_group="PID_demo",
        topic="TopicTest",
        default_topic="TBW102",
        default_topic_queue_nums=4,
        queue_id=1,
        sys_flag=0,
        born_timestamp=1700000000000,
        flag=0,
        properties=V3_EXT["i"],
        reconsume_times=0,
        unit_mode=False,
        max_reconsume_times=None,
        batch=False,
        broker_name="broker-a",
    )
    assert decode_send_header(RequestCode.SEND_MESSAGE_V2, V3_EXT) == expected
    assert decode_send_header(RequestCode.SEND_BATCH_MESSAGE, V3_EXT) == expected
    assert expected.to_ext(v2=True) == V3_EXT
    assert list(expected.to_ext(v2=True)) == list(V3_EXT)  # Java's a..n order
    long_names = expected.to_ext(v2=False)
    assert long_names["producerGroup"] == "PID_demo"
    assert long_names["bname"] == "broker-a"
    # The broker chooses the naming by code alone: short keys under code 10 are missing fields.
    with pytest.raises(MissingHeaderFieldError) as info:
        decode_send_header(RequestCode.SEND_MESSAGE, V3_EXT)
    assert info.value.field == "producerGroup"
    with pytest.raises(ValueError, match="not a send"):
        decode_send_header(RequestCode.PULL_MESSAGE, V3_EXT)


def test_v3_send_response() -> None:
    ext = {
        "msgId": "7F00000100002A9F0000000000000800",
        "queueId": "1",
        "queueOffset": "0",
        "MSG_REGION": "DefaultRegion",
        "TRACE_ON": "true",
    }
    h = SendMessageResponseHeader.from_ext(ext)
    assert h == SendMessageResponseHeader(
        msg_id="7F00000100002A9F0000000000000800",
        queue_id=1,
        queue_offset=0,
        msg_region="DefaultRegion",
        trace_on=True,
    )
    assert h.to_ext() == ext


def test_v2_pull_response() -> None:
    ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": "1", "minOffset": "0", "maxOffset": "1"}
    h = PullMessageResponseHeader.from_ext(ext)
    assert h == PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=1, min_offset=0, max_offset=1
    )
    assert h.to_ext() == ext


# --------------------------------------------------------------------------- typing rules


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=IDS)
def test_missing_or_empty_mandatory_field(cls: type[Header]) -> None:
    ext = _encode(_sample(cls))
    assert _decode(cls, ext) == _sample(cls)
    for w in cls.wire_fields():
        if not w.required:
            continue
        for broken in ({k: v for k, v in ext.items() if k != w.name}, {**ext, w.name: ""}):
            with pytest.raises(MissingHeaderFieldError) as info:
                _decode(cls, broken)
            assert info.value.field == w.name
            assert str(info.value) == f"the custom field <{w.name}> is null"


@pytest.mark.parametrize(
    "raw",
    ["15000.0", "1e3", " 1", "1 ", "1_000", "0x10", "", "-", "+", "--1", "+-1", "١٢", "²", "abc"],
)
def test_malformed_numbers(raw: str) -> None:
    base = _encode(_sample(ConsumerSendMsgBackRequestHeader))
    with pytest.raises(MissingHeaderFieldError) as info:
        ConsumerSendMsgBackRequestHeader.from_ext({**base, "delayLevel": raw})
    assert info.value.field == "delayLevel"
    if raw:
        assert str(info.value) == "the custom field <delayLevel> is not a number"
    # An optional number that does not parse is left unset, as Java does.
    h = ConsumerSendMsgBackRequestHeader.from_ext({**base, "maxReconsumeTimes": raw})
    assert h.max_reconsume_times is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0", 0),
        ("-1", -1),
        ("+5", 5),
        ("007", 7),
        (str(INT_MAX), INT_MAX),
        (str(INT_MIN), INT_MIN),
        ("0000000000002147483647", INT_MAX),
        (str(INT_MAX + 1), None),
        (str(INT_MIN - 1), None),
        ("9" * 5000, None),
    ],
)
def test_int_range(raw: str, expected: int | None) -> None:
    base = {"offset": "1", "group": "g"}
    if expected is None:
        with pytest.raises(MissingHeaderFieldError, match="is not a number"):
            ConsumerSendMsgBackRequestHeader.from_ext({**base, "delayLevel": raw})
    else:
        h = ConsumerSendMsgBackRequestHeader.from_ext({**base, "delayLevel": raw})
        assert h.delay_level == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (str(LONG_MAX), LONG_MAX),
        (str(LONG_MIN), LONG_MIN),
        ("-" + "0" * 30 + "1", -1),
        (str(LONG_MAX + 1), None),
        (str(LONG_MIN - 1), None),
    ],
)
def test_long_range(raw: str, expected: int | None) -> None:
    base = {"delayLevel": "0", "group": "g"}
    if expected is None:
        with pytest.raises(MissingHeaderFieldError, match="offset> is not a number"):
            ConsumerSendMsgBackRequestHeader.from_ext({**base, "offset": raw})
    else:
        assert ConsumerSendMsgBackRequestHeader.from_ext({**base, "offset": raw}).offset == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        ("True", True),
        ("tRuE", True),
        ("false", False),
        ("FALSE", False),
        ("1", False),  # Boolean.parseBoolean: "1" is false (§1.8)
        ("0", False),
        ("yes", False),
        (" true", False),
    ],
)
def test_booleans(raw: str, expected: bool) -> None:
    h = SendMessageRequestHeader.from_ext({**V3_EXT, "m": raw, "k": raw}, v2=True)
    assert h.batch is expected
    assert h.unit_mode is expected
    reset = ResetOffsetRequestHeader.from_ext(
        {"topic": "t", "group": "g", "timestamp": "0", "isForce": raw}
    )
    assert reset.is_force is expected
    route = GetRouteInfoRequestHeader.from_ext({"topic": "t", "acceptStandardJsonOnly": raw})
    assert route.accept_standard_json_only is expected


def test_optional_fields_absent_or_empty_take_their_defaults() -> None:
    route = GetRouteInfoRequestHeader.from_ext({"topic": "t", "acceptStandardJsonOnly": ""})
    assert route.accept_standard_json_only is None
    info = GetConsumerRunningInfoRequestHeader.from_ext({"consumerGroup": "g", "clientId": "c"})
    assert info.jstack_enable is False
    go_pull = {
        **pull_header(
            consumer_group="g",
            topic="t",
            sys_flag=2,
            suspend_timeout_millis=20000,
        ).to_ext(),
        "subscription": "",  # Go sends it empty when not posting the subscription
        "expressionType": "",
    }
    h = PullMessageRequestHeader.from_ext(go_pull)
    assert h.subscription is None
    assert h.expression_type is None
    topic = CreateTopicRequestHeader.from_ext(
        {
            "topic": "t",
            "defaultTopic": "TBW102",
            "readQueueNums": "8",
            "writeQueueNums": "8",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "order": "false",
        }
    )
    assert topic.topic_sys_flag is None
    assert topic.order is False


def test_unknown_keys_are_ignored() -> None:
    ext = {
        "topic": "TopicA",
        "AccessKey": "",
        "Signature": "x",
        "OnsChannel": "ALIYUN",
        "SecurityToken": "t",
        "lo": "true",
        "ns": "n",
    }
    assert GetRouteInfoRequestHeader.from_ext(ext) == GetRouteInfoRequestHeader(topic="TopicA")


# --------------------------------------------------------------------------- fuzz


def _fuzz_ext(cls: type[Header]) -> st.SearchStrategy[dict[str, str]]:
    keys: st.SearchStrategy[str] = st.text(max_size=8)
    if _wire_keys(cls):
        keys = st.sampled_from(_wire_keys(cls)) | keys
    values = (
        st.text(max_size=12)
        | st.integers(LONG_MIN * 4, LONG_MAX * 4).map(str)
        | st.sampled_from(["true", "FALSE", "1", "0", "", "-", "+7", " 3", "1.0", "١"])
    )
    return st.dictionaries(keys, values, max_size=20)


@pytest.mark.parametrize("cls", ALL_HEADERS, ids=IDS)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_fuzz_from_ext(cls: type[Header], data: st.DataObject) -> None:
    ext = data.draw(_fuzz_ext(cls))
    v2 = data.draw(st.booleans()) if cls is SendMessageRequestHeader else False
    try:
        h = _decode(cls, ext, v2=v2)
    except MissingHeaderFieldError as exc:
        missing = exc.field
    else:
        assert _decode(cls, _encode(h, v2=v2), v2=v2) == h
        return
    assert missing in _wire_keys(cls)


# --------------------------------------------------------------------------- declaration checks


def test_header_class_rejects_bad_declarations() -> None:
    with pytest.raises(TypeError, match="must say INT or LONG"):

        @header_class
        class NoIntKind(Header):
            n: int = wire("n", required=True)

    with pytest.raises(TypeError, match="needs a default"):

        @header_class
        class OptionalWithoutDefault(Header):
            s: str = wire("s")

    with pytest.raises(TypeError, match="must default to None"):

        @header_class
        class NullableWithValue(Header):
            s: str | None = wire("s", default="x")

    with pytest.raises(TypeError, match="not declared with wire"):

        @header_class
        class PlainField(Header):
            s: str = "x"

    with pytest.raises(TypeError, match="__post_init__"):

        @header_class
        class WithPostInit(Header):
            s: str = wire("s", required=True)

            def __post_init__(self) -> None:
                pass
