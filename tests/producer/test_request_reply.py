"""Request/reply against the embedded broker over loopback TCP: the round trip, many
requests in flight each matched to its reply, timeouts, late replies, and the broker's
routing (the reply topic, the push to REPLY_TO_CLIENT, storing the reply)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from aiorocket import (
    Admin,
    ConcurrentContext,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
    create_reply_message,
)
from aiorocket._protocol import properties as mp
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import BrokerSystemError, NotARequestError, ReplyTimeoutError
from tests._harness.wait import wait_for
from tests.producer.test_producer import pull_all

TOPIC = "rpcT"
CONSUMER: dict[str, Any] = {
    "consume_from": "first",
    "rebalance_interval": 0.5,
    "pull_suspend_timeout": 0.5,
    "shutdown_grace": 1.0,
}

Answer = Callable[[Producer, ReceivedMessage], Awaitable[None]]


@pytest.fixture
async def broker(broker: EmbeddedBroker) -> EmbeddedBroker:
    """The suite's broker, with ``TOPIC`` created."""
    async with Admin(namesrv=broker.address) as admin:
        await admin.create_topic(TOPIC, queues=4)
    return broker


async def echo(producer: Producer, msg: ReceivedMessage) -> None:
    await producer.reply(msg, b"re:" + msg.body)


@pytest.fixture
async def responder(broker: EmbeddedBroker) -> AsyncIterator[list[Answer]]:
    """A push consumer of ``TOPIC`` answering each request with the answer the test put
    first in the yielded list (``echo`` unless replaced)."""
    answer: list[Answer] = [echo]
    consumer = PushConsumer(group="rpcResponder", namesrv=broker.address, **CONSUMER)
    consumer.subscribe(TOPIC)
    async with Producer(namesrv=broker.address, group="rpcReplies") as replies:

        @consumer.listener
        async def on_request(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
            for msg in msgs:
                await answer[0](replies, msg)

        async with consumer:
            await wait_for(lambda: consumer.held(), timeout=10, what="queues")
            yield answer


async def test_a_request_gets_its_reply(broker: EmbeddedBroker, responder: list[Answer]) -> None:
    async with Producer(namesrv=broker.address, group="rpcRequester") as producer:
        reply = await producer.request(Message(TOPIC, b"ping", tags="q"), timeout=10)
    assert reply.body == b"re:ping"
    assert reply.topic == "DefaultCluster_REPLY_TOPIC"
    props = reply.properties
    assert props[mp.MSG_TYPE] == "reply"
    assert props[mp.REPLY_TO_CLIENT] == producer.client_id
    assert props[mp.TTL] == "10000"
    assert int(props[mp.REPLY_ARRIVE_TIME]) >= int(props[mp.REPLY_PUSH_TIME])
    assert len(props[mp.CORRELATION_ID]) == 36  # a UUID, as Java's CorrelationIdUtil


async def test_requests_in_flight_each_get_their_own_reply(
    broker: EmbeddedBroker, responder: list[Answer]
) -> None:
    async def slow_echo(producer: Producer, msg: ReceivedMessage) -> None:
        # answer out of order: later requests may be answered first
        await asyncio.sleep(int(msg.body) % 5 / 100)
        await echo(producer, msg)

    responder[0] = slow_echo
    async with Producer(namesrv=broker.address, group="rpcRequester") as producer:
        replies = await asyncio.gather(
            *(producer.request(Message(TOPIC, str(i).encode()), timeout=20) for i in range(200))
        )
    assert [r.body for r in replies] == [f"re:{i}".encode() for i in range(200)]
    assert producer.unmatched_replies == 0


async def test_a_request_nobody_answers_times_out_saying_so(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="rpcRequester") as producer:
        with pytest.raises(ReplyTimeoutError, match=r"no reply came within 0\.5 s") as info:
            await producer.request(Message(TOPIC, b"anyone?"), timeout=0.5)
    assert info.value.topic == TOPIC
    # the request itself was stored: a consumer arriving later sees it
    assert [m.body for m in await pull_all(broker.address, TOPIC)] == [b"anyone?"]


async def test_a_late_reply_is_dropped_and_counted(
    broker: EmbeddedBroker, responder: list[Answer]
) -> None:
    timed_out = asyncio.Event()

    async def late(producer: Producer, msg: ReceivedMessage) -> None:
        await timed_out.wait()
        await echo(producer, msg)

    responder[0] = late
    async with Producer(namesrv=broker.address, group="rpcRequester") as producer:
        with pytest.raises(ReplyTimeoutError):
            await producer.request(Message(TOPIC, b"slow"), timeout=1)
        timed_out.set()
        await wait_for(lambda: producer.unmatched_replies == 1, timeout=10, what="late reply")
        responder[0] = echo
        # the producer still works: the next request is answered
        assert (await producer.request(Message(TOPIC, b"next"), timeout=10)).body == b"re:next"


async def test_the_broker_stores_replies_and_refuses_one_for_an_absent_client(
    broker: EmbeddedBroker,
) -> None:
    request = ReceivedMessage.create(
        topic=TOPIC,
        body=b"q",
        properties={
            mp.CLUSTER: "DefaultCluster",
            mp.REPLY_TO_CLIENT: "10.0.0.9@gone",
            mp.CORRELATION_ID: "c-1",
        },
    )
    async with Producer(namesrv=broker.address, group="rpcReplies", retries=0) as producer:
        with pytest.raises(BrokerSystemError, match=r"channel of <10\.0\.0\.9@gone> not found"):
            await producer.reply(request, b"a")
    # storeReplyMessageEnable: the reply is in the reply topic all the same
    stored = await pull_all(broker.address, "DefaultCluster_REPLY_TOPIC")
    assert [(m.body, m.properties[mp.CORRELATION_ID]) for m in stored] == [(b"a", "c-1")]


def test_only_a_request_can_be_replied_to() -> None:
    plain = ReceivedMessage.create(topic=TOPIC, body=b"x", properties={mp.CLUSTER: "C"})
    with pytest.raises(NotARequestError, match="REPLY_TO_CLIENT, CORRELATION_ID"):
        create_reply_message(plain, b"y")
