"""``PushConsumer.pause`` / ``resume`` per topic, per queue and for everything, against the
embedded broker: a paused queue is not pulled, nothing new of it reaches the handler, and the
pause outlives rebalances."""

from __future__ import annotations

import asyncio

import pytest

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.errors import ConfigurationError
from aiorocket.models import Message, MessageQueue, ReceivedMessage
from tests._harness.wait import wait_for

from .conftest import FAST, create_topic


def q(topic: str, queue_id: int) -> MessageQueue:
    return MessageQueue(topic, "broker-a", queue_id)


async def one_each(producer: Producer, topic: str, tag: str) -> None:
    """One message to each of the topic's 8 queues."""
    for i in range(8):
        await producer.send(Message(topic, f"{topic}-{i}-{tag}".encode()), queue=q(topic, i))


def consumer_recording(
    broker: EmbeddedBroker, *topics: str
) -> tuple[rmq.PushConsumer, list[ReceivedMessage]]:
    """A member of group pushpause subscribed to ``topics``, and the list its handler appends
    every message to."""
    got: list[ReceivedMessage] = []
    consumer = rmq.PushConsumer(group="pushpause", namesrv=broker.address, **FAST)
    for topic in topics:
        consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(msgs)

    return consumer, got


async def test_pause_and_resume_by_topic_by_queue_and_everything(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    consumer, got = consumer_recording(broker, "PauseA", "PauseB")
    consumer.pause("PauseB")  # before start: its queues start paused
    with pytest.raises(ConfigurationError, match="not subscribed"):
        consumer.pause("PauseC")
    async with consumer:
        await one_each(producer, "PauseA", "1")
        await one_each(producer, "PauseB", "1")
        await wait_for(lambda: len(got) == 8, timeout=10.0, what="PauseA's messages")
        await asyncio.sleep(0.5)
        assert {m.topic for m in got} == {"PauseA"}
        consumer.resume("PauseB")
        await wait_for(
            lambda: len(got) == 16, timeout=10.0, what="PauseB's messages after the resume"
        )

        got.clear()
        consumer.pause(q("PauseA", 3))
        await one_each(producer, "PauseA", "2")
        await wait_for(lambda: len(got) == 7, timeout=10.0, what="7 of PauseA's queues")
        await asyncio.sleep(0.5)
        assert 3 not in {m.queue_id for m in got}
        consumer.resume(q("PauseA", 3))
        await wait_for(lambda: len(got) == 8, timeout=10.0, what="the paused queue's message")
        assert got[-1].queue_id == 3

        got.clear()
        consumer.pause()
        await one_each(producer, "PauseA", "3")
        await one_each(producer, "PauseB", "3")
        await asyncio.sleep(0.5)
        assert got == []
        queues = consumer.statistics().queues
        assert all(s.cached_count == 0 for s in queues.values())  # not pulled either:
        await asyncio.sleep(0.5)
        later = consumer.statistics().queues
        for mq, stats in later.items():  # no pull sent at all (epoch times, float noise)
            assert abs(stats.last_pull_time - queues[mq].last_pull_time) < 0.05, mq
        consumer.resume()
        await wait_for(lambda: len(got) == 16, timeout=10.0, what="everything after resume()")


async def test_a_paused_topic_stays_paused_for_queues_gained_in_a_rebalance(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    a, got_a = consumer_recording(broker, "PauseKeep")
    b, got_b = consumer_recording(broker, "PauseKeep")

    def held(c: rmq.PushConsumer) -> set[int]:
        return {mq.queue_id for mq in c.statistics().queues if mq.topic == "PauseKeep"}

    await create_topic(broker, "PauseKeep")
    async with a:
        a.pause("PauseKeep")
        async with b:
            await wait_for(
                lambda: len(held(a)) == 4 and len(held(b)) == 4, timeout=10.0, what="4 + 4"
            )
            await one_each(producer, "PauseKeep", "1")
            await wait_for(lambda: len(got_b) == 4, timeout=10.0, what="b's share")
        # b left: a holds all eight again, the four it gained as new queues; all paused.
        await wait_for(lambda: len(held(a)) == 8, timeout=10.0, what="a holding every queue")
        await one_each(producer, "PauseKeep", "2")
        await asyncio.sleep(0.5)
        assert got_a == []
        a.resume("PauseKeep")
        await wait_for(lambda: len(got_a) == 12, timeout=10.0, what="a's backlog after the resume")
    assert sorted(m.body for m in got_a + got_b) == sorted(
        f"PauseKeep-{i}-{t}".encode() for i in range(8) for t in ("1", "2")
    )
