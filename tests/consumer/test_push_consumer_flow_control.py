"""Push consumer: flow control, per queue and per topic, bounds the message cache."""

from __future__ import annotations

import asyncio

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message
from tests._harness.wait import wait_for

from .conftest import FAST


async def test_topic_thresholds_are_shared_by_its_queues(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    for q in range(8):
        mq = rmq.MessageQueue("TopicCap", "broker-a", q)
        await producer.send_batch([Message("TopicCap", b"x") for _ in range(60)], queue=mq)
    release = asyncio.Event()
    consumer = rmq.PushConsumer(
        group="topic-cap",
        namesrv=broker.address,
        pull_threshold_for_topic=40,  # 40 / 8 queues = 5 per queue
        pull_batch_size=8,
        concurrency=2,
        **FAST,
    )
    consumer.subscribe("TopicCap")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        await release.wait()

    async with consumer:
        await wait_for(
            lambda: (
                sum(
                    q.cached_count
                    for mq, q in consumer.statistics().queues.items()
                    if mq.topic == "TopicCap"
                )
                >= 8 * 6
            ),
            timeout=10.0,
            what="every queue filled up to its share",
        )
        await asyncio.sleep(0.2)
        cached = [
            q.cached_count
            for mq, q in consumer.statistics().queues.items()
            if mq.topic == "TopicCap"
        ]
        release.set()
    assert all(c <= 5 + 8 for c in cached), cached


async def test_flow_control_bounds_the_cache_with_a_slow_handler(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = rmq.MessageQueue("Slow", "broker-a", 0)
    body = b"s" * 1000
    await producer.send_batch([Message("Slow", body) for _ in range(600)], queue=queue)
    threshold, batch = 40, 16
    consumer = rmq.PushConsumer(
        group="slow",
        namesrv=broker.address,
        pull_threshold_for_queue=threshold,
        pull_batch_size=batch,
        concurrency=4,
        **FAST,
    )
    consumer.subscribe("Slow")
    done = 0

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        nonlocal done
        await asyncio.sleep(0.005)
        done += len(msgs)

    peak = 0
    async with consumer:
        while done < 400:
            stats = consumer.statistics()
            q = stats.queues.get(queue)
            if q is not None:
                peak = max(peak, q.cached_count)
                assert q.cached_count <= threshold + batch
                assert q.cached_bytes <= (threshold + batch) * len(body)
            await asyncio.sleep(0.002)
        stats = consumer.statistics()
    assert peak > threshold  # the cache did fill up to the limit
    assert stats.flow_control_pauses > 0
    assert stats.pull_errors == 0
