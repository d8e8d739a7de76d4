"""A consumer started before its topic exists (docs/protocol.md §7.5): the embedded name server
answers 17 as a Java one does and creates nothing; the consumer asks again after
``missing_route_retry`` (doubling up to ``route_refresh_interval``), and once the topic is there
it heartbeats the new broker and rebalances at once, long before its next route poll."""

from __future__ import annotations

import asyncio
from typing import Any

import aiorocket as rmq
from aiorocket._consumer.pull_consumer import PullConsumer
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import ReceivedMessage
from tests._harness.wait import wait_for

#: Long timers, so only the missing-route look-ups can explain a prompt start: the route poll
#: (30 s) and the rebalance (20 s) are Java's defaults; the retry is short.
LATE: dict[str, Any] = {
    "route_refresh_interval": 30.0,
    "rebalance_interval": 20.0,
    "missing_route_retry": 0.2,
}


async def _produce(broker: EmbeddedBroker, topic: str, n: int) -> list[bytes]:
    bodies = [f"{topic}-{i}".encode() for i in range(n)]
    async with Producer(namesrv=broker.address, group="late-producer") as producer:
        for body in bodies:
            await producer.send(rmq.Message(topic, body))
    return bodies


async def test_a_push_consumer_started_first_consumes_soon_after_the_first_send(
    broker: EmbeddedBroker,
) -> None:
    got: list[ReceivedMessage] = []
    consumer = rmq.PushConsumer(group="lateG", namesrv=broker.address, **LATE)
    consumer.subscribe("LateT")

    @consumer.listener
    async def on(msgs: list[ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(msgs)

    async with consumer:
        assert consumer.held() == []
        assert "LateT" not in broker.topics  # looking it up created nothing
        await asyncio.sleep(0.5)  # a few look-ups answered 17 meanwhile
        assert "LateT" not in broker.topics
        bodies = await _produce(broker, "LateT", 10)
        # consume_from "last": a young queue still starts at 0 (§6.5), so nothing is skipped
        took = await wait_for(lambda: len(got) >= 10, timeout=8.0, what="10 messages")
        assert sorted(m.body for m in got) == sorted(bodies)
        # far below the 30 s route poll and the 20 s rebalance
        assert took < 5.0
        # the retry topic, created by the heartbeat that followed, is looked up and held too
        await wait_for(
            lambda: {mq.topic for mq in consumer.held()} == {"LateT", "%RETRY%lateG"},
            timeout=5.0,
            what="the topic and the retry topic held",
        )


async def test_a_pull_consumer_started_first_is_assigned_the_topic_once_it_exists(
    broker: EmbeddedBroker,
) -> None:
    consumer = PullConsumer(group="latePG", namesrv=broker.address, **LATE)
    consumer.subscribe("LatePT")
    async with consumer:
        assert consumer.assignment() == set()
        bodies = await _produce(broker, "LatePT", 5)
        got: list[ReceivedMessage] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 8.0
        while len(got) < 5 and loop.time() < deadline:
            got.extend(await consumer.poll(timeout=0.5))
        assert sorted(m.body for m in got) == sorted(bodies)
        await wait_for(
            lambda: {mq.topic for mq in consumer.assignment()} == {"LatePT", "%RETRY%latePG"},
            timeout=5.0,
            what="the topic and the retry topic assigned",
        )
