"""R11 (docs/reliability.md): the broker dropped the segments below a group's committed offset
(retention under a stopped or slow consumer), so the committed offset is out of range.

Pass when: the configured policy (``offset_out_of_range``) applies once and is logged, the
queue restarts at the oldest stored message ("first", Java's) or at its end ("last"), and
nothing below the broker's minimum is ever asked for again: never a silent rewind to 0.
"""

from __future__ import annotations

import logging

import pytest

from aiorocket import Producer, PushConsumer
from aiorocket.embedded import EmbeddedBroker
from aiorocket.models import ConcurrentContext, Message, MessageQueue, ReceivedMessage
from tests._harness.wait import wait_for
from tests.reliability.helpers import first_consumer

TOPIC = "R11"
Q0 = MessageQueue(TOPIC, "broker-a", 0)


def consumer_of(broker: EmbeddedBroker, got: list[int], policy: str) -> PushConsumer:
    consumer = first_consumer(
        broker.address,
        "r11",
        offset_out_of_range=policy,
        offset_illegal_delay=0.2,
        rebalance_interval=0.5,
        offset_persist_interval=0.2,
    )
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        got.extend(m.queue_offset for m in msgs if m.queue.queue_id == 0)

    return consumer


async def send(producer: Producer, first: int, last: int) -> None:
    for i in range(first, last):
        await producer.send(Message(TOPIC, b"%d" % i), queue=Q0)


@pytest.mark.parametrize(("policy", "restart"), [("first", 15), ("last", 20)])
async def test_r11_committed_offset_below_the_minimum(
    broker: EmbeddedBroker, policy: str, restart: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aiorocket.consumer")
    got: list[int] = []
    async with (
        # the first send creates the topic with one queue
        Producer(namesrv=broker.address, group="r11p", default_topic_queue_nums=1) as producer,
    ):
        await send(producer, 0, 10)
        async with consumer_of(broker, got, policy):
            await wait_for(lambda: len(got) == 10, timeout=10, what="offsets 0..9")
        # committed 10 (graceful close); 10 more arrive and retention takes 0..14
        await send(producer, 10, 20)
        assert broker.drop_below(TOPIC, 0, 15) == 15
        got.clear()
        caplog.clear()
        consumer = consumer_of(broker, got, policy)
        async with consumer:
            await wait_for(
                lambda: (
                    consumer.statistics().queues.get(Q0) is not None
                    and consumer.statistics().queues[Q0].committed_offset >= restart
                ),
                timeout=10,
                what="the queue restarted",
            )
            await send(producer, 20, 25)
            await wait_for(lambda: bool(got) and got[-1] == 24, timeout=10, what="the new messages")
        committed = broker._offsets.query("r11", TOPIC, 0) if broker._offsets else None
    assert got == list(range(restart, 25))  # nothing below the minimum, nothing twice
    assert committed == 25
    resets = [r.getMessage() for r in caplog.records if "out of range" in r.message]
    assert len(resets) == 1, resets  # applied once, and logged
    assert (
        f"offset 10 is out of range (the queue holds 15..20); restarting at {restart}"
        in (resets[0])
    )
