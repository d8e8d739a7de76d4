"""A custom allocation strategy that raises: the rebalance logs it and keeps the previous
assignment (Java ``RebalanceImpl.rebalanceByTopic``); the next rebalance asks it again."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket._protocol.allocation import allocate_averagely
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message
from tests._harness.wait import wait_for

from .conftest import create_topic, push_consumer


class FailsOnThirdCall:
    """Allocates averagely, but raises on its third call."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(
        self, queues: Sequence[rmq.MessageQueue], cids: Sequence[str], cid: str
    ) -> Sequence[rmq.MessageQueue]:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("strategy bug")
        return allocate_averagely(queues, cids, cid)


async def test_a_failing_strategy_keeps_the_queues_held_and_is_asked_again(
    broker: EmbeddedBroker, producer: Producer, caplog: pytest.LogCaptureFixture
) -> None:
    await create_topic(broker, "Alloc", queues=4)
    strategy = FailsOnThirdCall()
    got: list[bytes] = []
    consumer = push_consumer(
        broker, "alloc", "Alloc", allocation=strategy, rebalance_interval=0.2, consume_from="first"
    )

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    async with consumer:
        await wait_for(lambda: strategy.calls >= 3, timeout=10.0, what="the failing call")
        held = {q.queue for q in consumer.statistics().queues.values() if q.queue.topic == "Alloc"}
        assert len(held) == 4
        failures = [r for r in caplog.records if "allocation strategy" in r.getMessage()]
        assert [r.levelno for r in failures] == [logging.ERROR]
        assert "FailsOnThirdCall" in failures[0].getMessage()
        assert "strategy bug" in failures[0].getMessage()
        # the next rounds ask it again, and the consumer kept consuming its queues
        await wait_for(lambda: strategy.calls >= 5, timeout=10.0, what="later rebalances")
        bodies = [b"after %d" % i for i in range(8)]
        for body in bodies:
            await producer.send(Message("Alloc", body))
        await wait_for(lambda: set(bodies) <= set(got), timeout=10.0, what="later messages")
        now = {q.queue for q in consumer.statistics().queues.values() if q.queue.topic == "Alloc"}
        assert now == held
