"""The simple consumer (RocketMQ 5.x POP) against the embedded broker over loopback TCP:
receive, ack, batch ack, retries through the invisible time, its extension, dead letters,
long polling, receipt-handle errors, and a group with more members than queues."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.errors import (
    InvalidReceiptHandleError,
    ReceiptHandleExpiredError,
    RequestCodeNotSupportedError,
)
from tests._harness.broker import FAST_DELAYS
from tests._harness.clock import advance
from tests._harness.pop import drain_together
from tests._harness.wait import wait_for
from tests.consumer.conftest import create_topic, dlq_reader

TOPIC = "PopTopic"


# Revive scans often, so messages come back soon after their (short) invisible time.
pytestmark = pytest.mark.broker(
    default_queues=2, delay_levels=FAST_DELAYS, pop_revive_interval=0.05
)


@asynccontextmanager
async def simple(
    broker: EmbeddedBroker, group: str = "simple-g", **settings: Any
) -> AsyncIterator[rmq.SimpleConsumer]:
    consumer = rmq.SimpleConsumer(
        group=group,
        namesrv=broker.address,
        consume_from="first",
        **{"await_duration": 2.0, **settings},
    )
    consumer.subscribe(TOPIC)
    async with consumer:
        yield consumer


async def send(broker: EmbeddedBroker, n: int, topic: str = TOPIC) -> set[bytes]:
    # The first send creates the topic with 2 queues (a route lookup creates nothing).
    async with rmq.Producer(
        namesrv=broker.address, group="pop-producer", default_topic_queue_nums=2
    ) as p:
        bodies = [f"m{i}".encode() for i in range(n)]
        # 1,000 in flight at most: each send must be answered within its 3 s, and 20,000 at
        # once queue longer than that behind one connection on a busy machine
        for start in range(0, n, 1000):
            chunk = bodies[start : start + 1000]
            await asyncio.gather(*(p.send(rmq.Message(topic, b)) for b in chunk))
    return set(bodies)


async def receive_all(
    consumer: rmq.SimpleConsumer, want: int, *, ack: bool = True, timeout: float = 20.0
) -> list[rmq.PoppedMessage]:
    got: list[rmq.PoppedMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msgs = await consumer.receive(16)
        got.extend(msgs)
        if ack and msgs:
            await consumer.ack_all(msgs)
    return got


@pytest.mark.manual_clock
async def test_receive_ack_and_nothing_comes_back(broker: EmbeddedBroker) -> None:
    bodies = await send(broker, 40)
    async with simple(broker, invisible_duration=1.0) as c:
        got = await receive_all(c, 40)
        assert sorted(m.body for m in got) == sorted(bodies)
        assert all(m.topic == TOPIC and m.reconsume_times == 0 for m in got)
        assert all(m.receipt_handle.count(" ") == 7 for m in got)
        await advance(broker, 1.5)  # past the invisible time: acked messages stay gone
        assert broker.pop_revived == 0
        assert await c.receive(16) == []


async def test_unacked_message_comes_back_with_one_more_delivery(broker: EmbeddedBroker) -> None:
    await send(broker, 1)
    async with simple(broker, invisible_duration=0.5) as c:
        [first] = await receive_all(c, 1, ack=False)
        [again] = await receive_all(c, 1, ack=False, timeout=10)
        assert again.body == first.body
        assert again.reconsume_times == first.reconsume_times + 1
        assert again.receipt_handle != first.receipt_handle
        await c.ack(again)


@pytest.mark.manual_clock
async def test_extended_message_is_not_redelivered_meanwhile(broker: EmbeddedBroker) -> None:
    await send(broker, 1)
    async with simple(broker, invisible_duration=0.6, await_duration=0.3) as c:
        [msg] = await receive_all(c, 1, ack=False)
        before = msg.receipt_handle
        for _ in range(2):
            await asyncio.sleep(0.4)
            await c.change_invisible_duration(msg, 0.8)
        assert msg.receipt_handle != before  # renewed in place
        # 1.6 s after the pop (0.6 s invisible, extended twice): not delivered again.
        assert await receive_all(c, 1, ack=False, timeout=0.5) == []
        await c.ack(msg)
        await advance(broker, 1.0)  # past every invisible time: the acked message stays gone
        assert broker.pop_revived == 0
        assert await receive_all(c, 1, ack=False, timeout=0.5) == []


async def test_dead_letter_after_max_attempts(broker: EmbeddedBroker) -> None:
    await send(broker, 1)
    reader, dlq = dlq_reader(broker, "simple-dlq-reader", "simple-g")
    async with simple(broker, invisible_duration=0.3, max_reconsume_times=1) as c:
        deliveries = []
        reading = False
        deadline = time.monotonic() + 15
        while not dlq and time.monotonic() < deadline:
            deliveries.extend(await c.receive(16))  # never acked
            if len(deliveries) >= 2 and not reading:
                await reader.start()
                reading = True
        assert [m.reconsume_times for m in deliveries] == [0, 1]
        await wait_for(lambda: len(dlq) == 1, timeout=10, what="the dead letter")
        assert dlq[0].body == deliveries[0].body
        await reader.close()


async def test_receipt_handle_errors(broker: EmbeddedBroker) -> None:
    await send(broker, 2)
    async with simple(broker, invisible_duration=0.3) as c, simple(broker, "other-g") as other:
        msgs = await receive_all(c, 2, ack=False)
        with pytest.raises(InvalidReceiptHandleError, match="not received by this consumer"):
            await other.ack(msgs[0])
        plain = rmq.ReceivedMessage.create(topic=TOPIC, body=b"x")
        with pytest.raises(InvalidReceiptHandleError):
            await c.ack(plain)
        await asyncio.sleep(0.4)
        with pytest.raises(ReceiptHandleExpiredError):
            await c.ack(msgs[0])
        with pytest.raises(ReceiptHandleExpiredError):
            await c.change_invisible_duration(msgs[1], 5)
        with pytest.raises(rmq.errors.ConfigurationError):
            await c.receive(33)


async def test_idle_receive_waits_in_the_broker_and_wakes_on_a_send(
    broker: EmbeddedBroker,
) -> None:
    await create_topic(broker, TOPIC, queues=2)
    async with simple(broker, await_duration=2.0) as c:
        t0 = time.monotonic()
        assert await c.receive() == []
        assert 1.8 <= time.monotonic() - t0 < 4.0
        waiting = asyncio.ensure_future(c.receive())
        await asyncio.sleep(0.2)
        await send(broker, 1)
        got = await waiting  # woken by the send, well before the 2 s wait ends
        assert len(got) == 1


async def test_a_broker_without_pop_is_a_clear_error(broker: EmbeddedBroker) -> None:
    await create_topic(broker, TOPIC, queues=2)
    async with simple(broker) as c:
        broker.fail_next(RequestCode.POP_MESSAGE, ResponseCode.REQUEST_CODE_NOT_SUPPORTED)
        with pytest.raises(RequestCodeNotSupportedError, match="POP"):
            await c.receive()


async def test_four_consumers_share_a_two_queue_topic(broker: EmbeddedBroker) -> None:
    n = 20_000
    bodies = await send(broker, n)
    async with (
        simple(broker, "share-g") as a,
        simple(broker, "share-g") as b,
        simple(broker, "share-g") as c,
        simple(broker, "share-g") as d,
    ):
        seen, counts = await drain_together((a, b, c, d), n, timeout=60)
    assert set(seen) == bodies  # lost 0
    assert len(seen) == n  # and none twice (everything acked in time)
    assert all(counts[i] >= n // 10 for i in range(4)), counts


def test_simple_consumer_settings() -> None:
    with pytest.raises(rmq.errors.ConfigurationError, match="push consumer setting"):
        rmq.SimpleConsumer(group="g", namesrv="127.0.0.1:9876", concurrency=4)
    with pytest.raises(rmq.errors.ConfigurationError, match="invisible_duration"):
        rmq.SimpleConsumer(group="g", namesrv="127.0.0.1:9876", invisible_duration=0)
    assert "SimpleConsumer" in repr(rmq.SimpleConsumer(group="g", namesrv="127.0.0.1:9876"))
