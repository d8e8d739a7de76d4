"""Server-side assignment (docs/protocol.md §12.3): QUERY_ASSIGNMENT over the group's
registered POP consumers, SET_MESSAGE_REQUEST_MODE / GET_ALL_MESSAGE_REQUEST_MODE and their
persistence, and the POP codes of a broker answering as 4.x."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path

from aiorocket._protocol.admin_bodies import ConsumerConnection
from aiorocket._protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.pop import (
    MessageRequestModeWrapper,
    QueryAssignmentRequestBody,
    QueryAssignmentResponseBody,
    SetMessageRequestModeRequestBody,
)
from aiorocket.embedded.topics import TopicConfig
from tests.embedded import pop_kit as pk
from tests.embedded.test_broker_kit import RawClient, running_broker


async def _join(c: RawClient, client_id: str, group: str, topic: str) -> None:
    consumer = ConsumerData(
        group_name=group,
        consume_type="CONSUME_POP",  # a 5.x POP consumer's heartbeat
        message_model="CLUSTERING",
        consume_from_where="CONSUME_FROM_LAST_OFFSET",
        subscriptions=(SubscriptionData(topic, "*", (), (), 1),),
    )
    body = HeartbeatData(client_id, (), (consumer,)).to_json()
    resp = await c.request(RequestCode.HEART_BEAT, body=body)
    assert resp.code == 0, resp.remark


async def _query(
    c: RawClient,
    client_id: str,
    topic: str = "T",
    *,
    group: str = "G",
    strategy: str = "AVG",
    model: str = "CLUSTERING",
) -> list[tuple[int, str]] | None:
    """The (queue id, mode) pairs assigned, ``None`` for no answer."""
    body = QueryAssignmentRequestBody(topic, group, client_id, strategy, model).to_json()
    resp = await c.request(RequestCode.QUERY_ASSIGNMENT, body=body)
    assert resp.code == 0, resp.remark
    answer = QueryAssignmentResponseBody.from_json(resp.body).message_queue_assignments
    if answer is None:
        return None
    assert all(a.message_queue.broker_name == "broker-a" for a in answer)
    return sorted((a.message_queue.queue_id, a.mode) for a in answer)


async def _set_mode(c: RawClient, topic: str, mode: str, share: int = 0) -> int:
    body = SetMessageRequestModeRequestBody(topic, "G", mode, share).to_json()
    return (await c.request(RequestCode.SET_MESSAGE_REQUEST_MODE, body=body)).code


def _qs(*queues: int, mode: str = "PULL") -> list[tuple[int, str]]:
    return [(q, mode) for q in queues]


async def test_assignment_by_mode_and_strategy(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker, AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(RawClient(broker.address)) for _ in range(3)]
        await clients[0].create_topic("T")  # 4 queues
        for i, c in enumerate(clients):
            await _join(c, f"c{i + 1}", "G", "T")
        c = clients[0]
        # PULL by default: AllocateMessageQueueAveragely over c1 < c2 < c3
        assert [await _query(c, f"c{i}") for i in (1, 2, 3)] == [_qs(0, 1), _qs(2), _qs(3)]
        by_circle = [await _query(c, f"c{i}", strategy="AVG_BY_CIRCLE") for i in (1, 2, 3)]
        assert by_circle == [_qs(0, 3), _qs(1), _qs(2)]
        assert await _query(c, "c1", model="BROADCASTING") == _qs(0, 1, 2, 3)
        # no answer: unknown strategy, client outside the group, topic or group unknown
        assert await _query(c, "c1", strategy="CONSISTENT_HASH") is None
        assert await _query(c, "stranger") == []
        assert await _query(c, "c1", "Nope") is None
        assert await _query(c, "c1", group="Nobody") is None
        # POP sharing nothing: every client pops every queue, as queue -1
        assert await _set_mode(c, "T", "POP", 0) == 0
        for i in (1, 2, 3):
            assert await _query(c, f"c{i}") == [(-1, "POP")]
        # POP sharing one neighbour's queues (allocate4Pop)
        assert await _set_mode(c, "T", "POP", 1) == 0
        assert [await _query(c, f"c{i}") for i in (1, 2, 3)] == [
            _qs(0, 1, 2, mode="POP"),
            _qs(2, 3, mode="POP"),
            _qs(0, 1, 3, mode="POP"),
        ]
        # more clients than queues: each its own queue, in turn
        broker.topics.put(TopicConfig(name="Small", read_queue_nums=2, write_queue_nums=2))
        for i, cl in enumerate(clients):
            await _join(cl, f"c{i + 1}", "G", "Small")
        assert await _set_mode(c, "Small", "POP", 1) == 0
        assert [await _query(c, f"c{i}", "Small") for i in (1, 2, 3)] == [
            _qs(0, mode="POP"),
            _qs(1, mode="POP"),
            _qs(0, mode="POP"),
        ]
        # retry topics are read by PULL, and their mode cannot be set
        await clients[0].route("%RETRY%G")
        assert await _query(c, "c1", "%RETRY%G") == _qs(0)
        assert await _set_mode(c, "%RETRY%G", "POP") == ResponseCode.NO_PERMISSION
        assert await _set_mode(c, "Nope", "POP") == ResponseCode.TOPIC_NOT_EXIST


async def test_the_mode_table_is_kept_across_restarts(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker, RawClient(broker.address) as c:
        await c.create_topic("T")
        assert await _set_mode(c, "T", "POP", 2) == 0
    saved = json.loads((tmp_path / "config" / "messageRequestMode.json").read_bytes())
    assert saved == {
        "messageRequestModeMap": {
            "T": {"G": {"consumerGroup": "G", "mode": "POP", "popShareQueueNum": 2, "topic": "T"}}
        }
    }
    async with running_broker(tmp_path) as broker, RawClient(broker.address) as c:
        resp = await c.request(RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
        table = MessageRequestModeWrapper.from_json(resp.body).message_request_mode_map
        assert table["T"]["G"] == SetMessageRequestModeRequestBody("T", "G", "POP", 2)
        await _join(c, "c1", "G", "T")
        assert await _query(c, "c1") == [(-1, "POP")]


async def test_default_request_mode_pop() -> None:
    async with (
        running_broker(default_message_request_mode="POP") as broker,
        RawClient(broker.address) as c,
    ):
        await c.create_topic("T")
        await _join(c, "c1", "G", "T")
        assert await _query(c, "c1") == [(-1, "POP")]


async def test_a_broker_answering_as_4x_does_not_know_pop() -> None:
    async with running_broker(remoting_version=409) as broker, RawClient(broker.address) as c:
        await c.create_topic("T")
        resp, _ = await pk.pop(c, "G", "T")
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        resp = await c.request(RequestCode.QUERY_ASSIGNMENT, body=b"{}")
        assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED


async def test_a_pop_consumer_heartbeat_is_listed() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await _join(c, "c1", "G", "T")
        resp = await c.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": "G"})
        assert resp.code == 0
        assert json.loads(resp.body) == {"consumerIdList": ["c1"]}
        resp = await c.request(RequestCode.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": "G"})
        assert ConsumerConnection.from_json(resp.body).consume_type == "CONSUME_POP"
