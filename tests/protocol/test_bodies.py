"""JSON bodies against docs/protocol.md §5 examples, test vector V1 and real client captures."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._protocol import fastjson
from aiorocket._protocol.bodies import (
    CONSUME_FROM_WHERE,
    BrokerData,
    ClusterInfo,
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumerListBody,
    ConsumerRunningInfo,
    HeartbeatData,
    LockBatchRequestBody,
    LockBatchResponseBody,
    ProcessQueueInfo,
    ProducerData,
    QueueData,
    ResetOffsetBody,
    SubscriptionData,
    TopicConsumeStatus,
    TopicList,
    TopicRouteData,
    UnlockBatchRequestBody,
    message_queue_from_dict,
    message_queue_to_dict,
)
from aiorocket.errors import RemoteProtocolError
from aiorocket.models import MessageQueue
from tests._harness.protocol import CLUSTER_5_4, RESET_5_7, ROUTE_5_3

DATA = Path(__file__).parent.parent / "data"

V1_HEADER = (
    b'{"code":34,"flag":0,"language":"JAVA","opaque":1,'
    b'"serializeTypeCurrentRPC":"JSON","version":409}'
)
V1_SHA256 = "3c407ea90b7e80f9e22471407e91457779bf8cd59f711b99c9481770eccfa905"
CONSUMER_LIST_5_5 = b'{"consumerIdList":["192.168.0.10@12345#1","192.168.0.11@999#7"]}'
LOCK_5_6 = (
    b'{"clientId":"192.168.0.10@12345#1","consumerGroup":"GID_demo",'
    b'"mqSet":[{"brokerName":"broker-a","queueId":0,"topic":"TopicTest"}]}'
)
LOCK_OK_5_6 = b'{"lockOKMQSet":[{"brokerName":"broker-a","queueId":0,"topic":"TopicTest"}]}'
RESET_FOR_C_5_7 = (
    b'{"offsetTable":[{"brokerName":"broker-a","offset":1234,"queueId":0,"topic":"T"},'
    b'{"brokerName":"broker-a","offset":99,"queueId":1,"topic":"T"}]}'
)


def _heartbeat_bodies(capture: str) -> list[bytes]:
    bodies = []
    for line in (DATA / "captures" / capture).read_text().splitlines():
        record = json.loads(line)
        if record["code"] != 34:
            continue
        frame = bytes.fromhex(record["frame_hex"])
        header_length = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
        bodies.append(frame[8 + header_length :])
    assert bodies
    return bodies


def _v1_heartbeat() -> HeartbeatData:
    return HeartbeatData(
        client_id="192.168.0.10@12345#1",
        producers=(ProducerData("CLIENT_INNER_PRODUCER"),),
        consumers=(
            ConsumerData(
                group_name="GID_demo",
                consume_type="CONSUME_PASSIVELY",
                message_model="CLUSTERING",
                consume_from_where="CONSUME_FROM_LAST_OFFSET",
                subscriptions=(
                    SubscriptionData("TopicTest", "TagA", ("TagA",), (2598919,), 1700000000000),
                    SubscriptionData("%RETRY%GID_demo", "*", (), (), 1700000000001),
                ),
            ),
        ),
    )


# ---------------------------------------------------------------------------- heartbeat


def test_v1_heartbeat_body_is_byte_exact() -> None:
    body = _v1_heartbeat().to_json()
    assert len(body) == 585
    frame = (4 + len(V1_HEADER) + len(body)).to_bytes(4, "big")
    frame += len(V1_HEADER).to_bytes(4, "big") + V1_HEADER + body
    assert hashlib.sha256(frame).hexdigest() == V1_SHA256
    assert frame == (DATA / "vectors" / "v1.bin").read_bytes()


def test_v1_heartbeat_body_parses_back() -> None:
    body = (DATA / "vectors" / "v1.bin").read_bytes()[8 + len(V1_HEADER) :]
    assert HeartbeatData.from_json(body) == _v1_heartbeat()


def test_cpp_heartbeat_capture() -> None:
    for body in _heartbeat_bodies("cpp-client-1.x.jsonl"):
        assert body.endswith(b"}\n")
        hb = HeartbeatData.from_json(body)
        assert hb.client_id == "19986-127.0.0.1@DEFAULT"
        assert hb.producers == (ProducerData("PG"),)
        (consumer,) = hb.consumers
        # C++ sends ordinals: consumeType 1, messageModel 1, consumeFromWhere 0.
        assert consumer.group_name == "CG"
        assert consumer.consume_type == "CONSUME_PASSIVELY"
        assert consumer.message_model == "CLUSTERING"
        assert consumer.consume_from_where == "CONSUME_FROM_LAST_OFFSET"
        assert consumer.unit_mode is False
        retry, topic = consumer.subscriptions
        assert retry == SubscriptionData("%RETRY%CG", "*", (), (), 1795237078543)
        # subVersion arrives as a string; codeSet holds C++'s atoi() values.
        assert topic == SubscriptionData("TopicA", "tA || tB", ("tA", "tB"), (0, 0), 1795237078543)


def test_ali_ons_heartbeat_capture() -> None:
    first, second = _heartbeat_bodies("ali-ons-3.12.jsonl")
    hb = HeartbeatData.from_json(first)
    assert hb.client_id == "192.0.2.2@20127"
    assert hb.producers == (ProducerData("PG"),)
    (consumer,) = hb.consumers
    assert (consumer.group_name, consumer.consume_type, consumer.message_model) == (
        "CG",
        "CONSUME_PASSIVELY",
        "CLUSTERING",
    )
    assert consumer.consume_from_where == "CONSUME_FROM_LAST_OFFSET"
    # No expressionType from ali-ons: it defaults to TAG.
    assert consumer.subscriptions == (
        SubscriptionData("TopicA", "tA || tB", ("tA", "tB"), (3661, 3662), 1795237098314),
    )
    later = HeartbeatData.from_json(second)
    assert [s.topic for s in later.consumers[0].subscriptions] == ["TopicA", "%RETRY%CG"]
    assert later.consumers[0].subscriptions[1].sub_version == 1795237098829


def test_go_style_subscription_with_string_codes() -> None:
    sub = SubscriptionData.from_json(
        b'{"topic":"T","subString":"TagA","tagsSet":["TagA"],"codeSet":["2598919"],'
        b'"subVersion":1700000000000000000,"expressionType":"TAG","classFilterMode":false}'
    )
    assert sub.code_set == (2598919,)
    assert sub.sub_version == 1700000000000000000


def test_subscription_defaults() -> None:
    sub = SubscriptionData.from_json(b'{"topic":"T","subString":"","expressionType":null}')
    assert sub == SubscriptionData("T", "*", (), (), 0, "TAG", False)
    assert SubscriptionData.from_json(sub.to_json()) == sub


@pytest.mark.parametrize(("ordinal", "name"), list(enumerate(CONSUME_FROM_WHERE)))
def test_consume_from_where_ordinals(ordinal: int, name: str) -> None:
    body = {"groupName": "G", "consumeFromWhere": ordinal, "consumeType": 0, "messageModel": 0}
    data = ConsumerData.from_dict(body)
    assert data.consume_from_where == name
    assert (data.consume_type, data.message_model) == ("CONSUME_ACTIVELY", "BROADCASTING")
    assert ConsumerData.from_dict({**body, "consumeFromWhere": str(ordinal)}) == data


def test_enum_names_pass_through_and_bad_ordinals_fail() -> None:
    data = ConsumerData.from_dict(
        {"groupName": "G", "consumeType": "CONSUME_POP", "messageModel": "CLUSTERING"}
    )
    assert data.consume_type == "CONSUME_POP"
    assert data.consume_from_where == "CONSUME_FROM_LAST_OFFSET"
    # 5.x ConsumeType: CONSUME_ACTIVELY, CONSUME_PASSIVELY, CONSUME_POP
    assert (
        ConsumerData.from_dict({"groupName": "G", "consumeType": 2}).consume_type == "CONSUME_POP"
    )
    for bad in ({"consumeType": 3}, {"messageModel": -1}, {"consumeFromWhere": 6}):
        with pytest.raises(RemoteProtocolError, match="ordinal"):
            ConsumerData.from_dict({"groupName": "G", **bad})


def test_heartbeat_without_data_sets() -> None:
    hb = HeartbeatData.from_json(b'{"clientID":"c"}\n')
    assert hb == HeartbeatData("c")
    assert hb.to_json() == b'{"clientID":"c","consumerDataSet":[],"producerDataSet":[]}'
    assert HeartbeatData.from_json(b'{"clientID":"c","producerDataSet":null}') == hb


#: heartbeat bodies HeartbeatData.from_json refuses (see test_malformed_bodies)
MALFORMED_HEARTBEATS = [
    b"{}",
    b"[]",
    b'{"clientID":5}',
    b'{"clientID":"c","producerDataSet":{}}',
    b'{"clientID":"c","producerDataSet":[{}]}',
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","unitMode":"maybe"}]}',
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{}]}]}',
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
    b'[{"topic":"T","codeSet":[1.5]}]}]}',
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
    b'[{"topic":"T","codeSet":[4294967296]}]}]}',
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
    b'[{"topic":"T","subVersion":"1e3"}]}]}',
    b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":'
    b'[{"topic":"T","tagsSet":[1]}]}]}',
    b"not json",
]


# ---------------------------------------------------------------------------- routes


def test_route_of_5_3_in_both_key_forms() -> None:
    route = TopicRouteData.from_json(ROUTE_5_3)
    assert route == TopicRouteData(
        queue_datas=(QueueData("broker-a", 4, 4, 6, 0),),
        broker_datas=(BrokerData("DefaultCluster", "broker-a", {0: "192.168.1.5:10911"}),),
    )
    quoted = ROUTE_5_3.replace(b"{0:", b'{"0":')
    assert TopicRouteData.from_json(quoted) == route
    assert route.to_json() == quoted
    assert route.broker_datas[0].master_addr == "192.168.1.5:10911"


def test_route_writes_sorted_quoted_ids_and_order_conf() -> None:
    route = TopicRouteData(
        queue_datas=(QueueData("b", 2, 2, 6),),
        broker_datas=(BrokerData("C", "b", {1: "s:1", 0: "m:1"}),),
        order_topic_conf="b:2",
    )
    assert route.to_json() == (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"m:1","1":"s:1"},"brokerName":"b","cluster":"C"}],'
        b'"filterServerTable":{},"orderTopicConf":"b:2","queueDatas":[{"brokerName":"b",'
        b'"perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}'
    )
    assert TopicRouteData.from_json(route.to_json()) == route


def _queues(topic: str, *brokers: tuple[str, int]) -> list[MessageQueue]:
    """Queues 0 to n - 1 of ``topic`` on each (broker, n) of ``brokers``, in that order."""
    return [MessageQueue(topic, name, i) for name, count in brokers for i in range(count)]


def test_publish_and_subscribe_queues() -> None:
    route = TopicRouteData(
        queue_datas=(
            QueueData("broker-c", 2, 2, 6),
            QueueData("broker-a", 3, 2, 6),
            QueueData("broker-b", 2, 2, 4),  # read-only (wipeWritePerm)
            QueueData("broker-d", 2, 2, 6),  # no master
            QueueData("broker-e", 2, 2, 2),  # write-only
            QueueData("broker-f", 2, 2, 6),  # no BrokerData at all
        ),
        broker_datas=(
            BrokerData("C", "broker-a", {0: "a:1"}),
            BrokerData("C", "broker-b", {0: "b:1"}),
            BrokerData("C", "broker-c", {0: "c:1", 1: "c:2"}),
            BrokerData("C", "broker-d", {1: "d:2"}),
            BrokerData("C", "broker-e", {0: "e:1"}),
        ),
    )
    assert route.publish_queues("T") == _queues(
        "T", ("broker-a", 2), ("broker-c", 2), ("broker-e", 2)
    )
    assert route.subscribe_queues("T") == _queues(
        "T", ("broker-a", 3), ("broker-b", 2), ("broker-c", 2), ("broker-d", 2), ("broker-f", 2)
    )


def test_publish_queues_from_order_topic_conf() -> None:
    route = TopicRouteData((QueueData("x", 8, 8, 6),), (), order_topic_conf="b:2;a:1;")
    assert route.publish_queues("T") == _queues("T", ("b", 2), ("a", 1))
    for conf in ("b:x", "b:1;;a:1", "b"):
        with pytest.raises(RemoteProtocolError):
            TopicRouteData((), (), order_topic_conf=conf).publish_queues("T")
    with pytest.raises(RemoteProtocolError):
        TopicRouteData.from_json(b'{"orderTopicConf":"b2"}')


#: route bodies TopicRouteData.from_json refuses
MALFORMED_ROUTES = [
    b'{"brokerDatas":[{"brokerAddrs":{"x":"a"},"brokerName":"b"}]}',
    b'{"brokerDatas":[{"brokerAddrs":{0:1},"brokerName":"b"}]}',
    b'{"brokerDatas":[{"brokerAddrs":{{"a":1}:"a"},"brokerName":"b"}]}',
    b'{"brokerDatas":[{"brokerAddrs":[],"brokerName":"b"}]}',
    b'{"brokerDatas":[{"cluster":"c"}]}',
    b'{"queueDatas":[{"brokerName":"b","perm":"rw"}]}',
    b'{"queueDatas":[{"brokerName":"b","readQueueNums":2147483648}]}',
    b'{"queueDatas":{}}',
]


def test_cluster_info_of_5_4() -> None:
    info = ClusterInfo.from_json(CLUSTER_5_4)
    assert info == ClusterInfo(
        broker_addr_table={
            "broker-a": BrokerData("DefaultCluster", "broker-a", {0: "192.168.1.5:10911"})
        },
        cluster_addr_table={"DefaultCluster": ("broker-a",)},
    )
    assert info.to_json() == CLUSTER_5_4.replace(b"{0:", b'{"0":')


# ---------------------------------------------------------------------------- group bodies


def test_consumer_list_of_5_5() -> None:
    body = ConsumerListBody.from_json(CONSUMER_LIST_5_5)
    assert body.consumer_id_list == ("192.168.0.10@12345#1", "192.168.0.11@999#7")
    assert body.to_json() == CONSUMER_LIST_5_5
    assert ConsumerListBody.from_json(b"{}") == ConsumerListBody(())


def test_lock_bodies_of_5_6() -> None:
    mq = MessageQueue("TopicTest", "broker-a", 0)
    lock = LockBatchRequestBody.from_json(LOCK_5_6)
    assert lock == LockBatchRequestBody("GID_demo", "192.168.0.10@12345#1", (mq,))
    assert lock.to_json() == LOCK_5_6
    unlock = UnlockBatchRequestBody.from_json(LOCK_5_6 + b"\n")
    assert unlock == UnlockBatchRequestBody("GID_demo", "192.168.0.10@12345#1", (mq,))
    assert unlock.to_json() == LOCK_5_6
    assert not isinstance(unlock, LockBatchRequestBody)
    response = LockBatchResponseBody.from_json(LOCK_OK_5_6)
    assert response == LockBatchResponseBody((mq,))
    assert response.to_json() == LOCK_OK_5_6


def test_lock_request_tolerates_5x_member_and_duplicates() -> None:
    body = (
        b'{"clientId":"c","consumerGroup":"g","onlyThisBroker":false,"mqSet":['
        b'{"brokerName":"b","queueId":1,"topic":"T"},{"topic":"T","brokerName":"b","queueId":"1"},'
        b'{"brokerName":"b","queueId":0,"topic":"T"}]}'
    )
    lock = LockBatchRequestBody.from_json(body)
    assert lock.mq_set == (MessageQueue("T", "b", 1), MessageQueue("T", "b", 0))
    with pytest.raises(RemoteProtocolError):
        LockBatchRequestBody.from_json(b'{"clientID":"c","consumerGroup":"g","mqSet":[]}')


def test_reset_offset_bodies_of_5_7() -> None:
    expected = ResetOffsetBody(
        {MessageQueue("T", "broker-a", 0): 1234, MessageQueue("T", "broker-a", 1): 99}
    )
    assert ResetOffsetBody.from_json(RESET_5_7) == expected
    assert ResetOffsetBody.from_json(RESET_FOR_C_5_7) == expected
    assert expected.to_json() == RESET_5_7
    assert expected.to_json_for_cpp() == RESET_FOR_C_5_7
    gson = (
        b'{"offsetTable":[[{"brokerName":"broker-a","queueId":0,"topic":"T"},1234],'
        b'[{"brokerName":"broker-a","queueId":1,"topic":"T"},"99"]]}'
    )
    assert ResetOffsetBody.from_json(gson) == expected
    assert ResetOffsetBody.from_json(b"{}") == ResetOffsetBody({})


#: reset-offset bodies ResetOffsetBody.from_json refuses
MALFORMED_RESET_OFFSETS = [
    b'{"offsetTable":{"T@b:0":1}}',
    b'{"offsetTable":{0:1}}',
    b'{"offsetTable":{{"brokerName":"b","queueId":0}:1}}',
    b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:"x"}}',
    b'{"offsetTable":[[{"brokerName":"b","queueId":0,"topic":"T"}]]}',
    b'{"offsetTable":[5]}',
    b'{"offsetTable":"x"}',
]


@pytest.mark.parametrize(
    ("parser", "body"),
    [
        *((HeartbeatData, body) for body in MALFORMED_HEARTBEATS),
        *((TopicRouteData, body) for body in MALFORMED_ROUTES),
        *((ResetOffsetBody, body) for body in MALFORMED_RESET_OFFSETS),
    ],
)
def test_malformed_bodies(parser: Any, body: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        parser.from_json(body)


def test_message_queue_dict_helpers() -> None:
    mq = MessageQueue("T", "b", 3)
    assert message_queue_to_dict(mq) == {"brokerName": "b", "queueId": 3, "topic": "T"}
    assert message_queue_from_dict(message_queue_to_dict(mq)) == mq
    assert message_queue_from_dict(fastjson.ObjectKey.from_dict(message_queue_to_dict(mq))) == mq
    with pytest.raises(RemoteProtocolError):
        message_queue_from_dict(["T", "b", 3])


# ---------------------------------------------------------------------------- running info etc.


def _running_info() -> ConsumerRunningInfo:
    return ConsumerRunningInfo(
        properties={"PROP_CONSUME_TYPE": "CONSUME_PASSIVELY", "PROP_CONSUMEORDERLY": "false"},
        subscriptions=(SubscriptionData("T", "*", (), (), 5),),
        mq_table={
            MessageQueue("T", "b", 1): ProcessQueueInfo(commit_offset=7, locked=True),
            MessageQueue("T", "b", 0): ProcessQueueInfo(cached_msg_count=3, dropped=True),
        },
        status_table={"T": TopicConsumeStatus(pull_rt=1.5, consume_ok_tps=2.0)},
    )


def test_consumer_running_info_round_trip_with_object_keys() -> None:
    info = _running_info()
    body = info.to_json()
    assert body.startswith(b'{"mqTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{')
    assert b'"droped":true' in body
    assert b'"statusTable":{"T":{"consumeFailedMsgs":0,"consumeFailedTPS":0.0,' in body
    assert body.endswith(
        b'"subscriptionSet":[{"classFilterMode":false,"codeSet":[],"expressionType":"TAG",'
        b'"subString":"*","subVersion":5,"tagsSet":[],"topic":"T"}]}'
    )
    assert ConsumerRunningInfo.from_json(body) == info
    with_stack = ConsumerRunningInfo({}, (), jstack="trace")
    assert with_stack.to_json().startswith(b'{"jstack":"trace","mqTable":{}')
    assert ConsumerRunningInfo.from_json(with_stack.to_json()) == with_stack


def test_minimal_running_info_of_5_8() -> None:
    info = ConsumerRunningInfo.from_json(
        b'{"properties":{"PROP_CLIENT_VERSION":"V4_9_8","n":1,"b":true},'
        b'"subscriptionSet":[],"mqTable":{},"statusTable":{}}'
    )
    assert info.properties == {"PROP_CLIENT_VERSION": "V4_9_8", "n": "1", "b": "true"}
    assert info.mq_table == {}
    assert info.status_table == {}
    assert info.subscriptions == ()


def test_consume_status_writes_non_finite_rates_as_zero() -> None:
    status = TopicConsumeStatus(pull_tps=float("nan"), consume_rt=float("inf"))
    assert status.to_dict()["pullTPS"] == 0.0
    assert status.to_dict()["consumeRT"] == 0.0
    with pytest.raises(RemoteProtocolError):
        TopicConsumeStatus.from_dict({"pullTPS": "NaN"})


def test_consume_message_directly_result() -> None:
    result = ConsumeMessageDirectlyResult(False, True, "CR_SUCCESS", None, 12)
    body = result.to_json()
    assert (
        body
        == b'{"autoCommit":true,"consumeResult":"CR_SUCCESS","order":false,"spentTimeMills":12}'
    )
    assert ConsumeMessageDirectlyResult.from_json(body) == result
    parsed = ConsumeMessageDirectlyResult.from_json(b'{"consumeResult":1,"remark":"r"}')
    assert parsed == ConsumeMessageDirectlyResult(False, True, "CR_LATER", "r", 0)
    with pytest.raises(RemoteProtocolError):
        ConsumeMessageDirectlyResult.from_json(b'{"consumeResult":9}')


def test_topic_list() -> None:
    topics = TopicList(("A", "B"))
    assert topics.to_json() == b'{"topicList":["A","B"]}'
    assert TopicList.from_json(topics.to_json()) == topics
    with_addr = TopicList(("A",), "1.2.3.4:10911")
    assert with_addr.to_json() == b'{"brokerAddr":"1.2.3.4:10911","topicList":["A"]}'
    assert TopicList.from_json(with_addr.to_json()) == with_addr


# ---------------------------------------------------------------------------- fuzzing

_PARSERS: list[Any] = [
    SubscriptionData,
    HeartbeatData,
    TopicRouteData,
    ClusterInfo,
    ConsumerListBody,
    LockBatchRequestBody,
    UnlockBatchRequestBody,
    LockBatchResponseBody,
    ResetOffsetBody,
    ConsumerRunningInfo,
    ConsumeMessageDirectlyResult,
    TopicList,
]

_V1_BODY = (DATA / "vectors" / "v1.bin").read_bytes()[8 + len(V1_HEADER) :]
_SAMPLES: list[tuple[Any, bytes]] = [
    (SubscriptionData, SubscriptionData("T", "a || b", ("a", "b"), (97, 98), 1).to_json()),
    (HeartbeatData, _V1_BODY),
    (HeartbeatData, _heartbeat_bodies("cpp-client-1.x.jsonl")[0]),
    (TopicRouteData, ROUTE_5_3),
    (TopicRouteData, ROUTE_5_3.replace(b'"filterServerTable"', b'"orderTopicConf":"a:1","x"')),
    (ClusterInfo, CLUSTER_5_4),
    (ConsumerListBody, CONSUMER_LIST_5_5),
    (LockBatchRequestBody, LOCK_5_6),
    (UnlockBatchRequestBody, LOCK_5_6),
    (LockBatchResponseBody, LOCK_OK_5_6),
    (ResetOffsetBody, RESET_5_7),
    (ResetOffsetBody, RESET_FOR_C_5_7),
    (ConsumerRunningInfo, _running_info().to_json()),
    (
        ConsumeMessageDirectlyResult,
        ConsumeMessageDirectlyResult(True, False, "CR_LATER", "x", 3).to_json(),
    ),
    (TopicList, TopicList(("A",), "b").to_json()),
]

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**65), max_value=2**65)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
    | st.sampled_from(["0", "1", "-1", "true", "9" * 30, "", "CR_SUCCESS"])
)
_json = st.recursive(
    _scalars,
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.dictionaries(st.text(max_size=6) | st.integers(-3, 3), kids, max_size=3)
    ),
    max_leaves=8,
)


def _check(parser: Any, data: bytes) -> None:
    """Parsing gives a body or RemoteProtocolError; a body re-encodes to itself."""
    try:
        body = parser.from_json(data)
    except RemoteProtocolError:
        return
    assert parser.from_json(body.to_json()) == body


@st.composite
def _mutated(draw: st.DrawFn, value: Any) -> Any:
    if draw(st.integers(0, 6)) == 0:
        return draw(_json)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if draw(st.integers(0, 8)) != 0:  # sometimes drop the member
                out[key] = draw(_mutated(item))
        return out
    if isinstance(value, list):
        return [draw(_mutated(item)) for item in value]
    return value


@pytest.mark.parametrize("parser", _PARSERS, ids=lambda p: p.__name__)
@settings(max_examples=60, deadline=None)
@given(data=st.binary(max_size=40) | st.text(max_size=40).map(str.encode))
def test_arbitrary_bytes_into_from_json(parser: Any, data: bytes) -> None:
    _check(parser, data)


@pytest.mark.parametrize("parser", _PARSERS, ids=lambda p: p.__name__)
@settings(max_examples=60, deadline=None)
@given(value=_json)
def test_arbitrary_json_into_from_json(parser: Any, value: Any) -> None:
    _check(parser, fastjson.dumps(value))


@pytest.mark.parametrize(
    ("parser", "sample"), _SAMPLES, ids=[f"{p.__name__}-{i}" for i, (p, _) in enumerate(_SAMPLES)]
)
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_mutated_bodies_into_from_json(parser: Any, sample: bytes, data: st.DataObject) -> None:
    _check(parser, fastjson.dumps(data.draw(_mutated(fastjson.loads(sample)))))
