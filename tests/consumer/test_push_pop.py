"""Push consumption over POP (``consume_mode="pop"`` and ``"server"``) against the embedded
broker: the same handlers, acks instead of offsets, retries through the invisible time, the
invisible time extended while a handler runs, more members than queues, and a group switched
between pull and POP by the broker's assignment."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded.broker import EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.clock import advance
from tests._harness.wait import wait_for
from tests.consumer.conftest import create_topic, push_consumer

TOPIC = "PushPop"
#: POP settings that keep tests quick: short invisible time, fast retries
POP: dict[str, Any] = {
    "consume_mode": "pop",
    "consume_from": "first",
    "invisible_duration": 1.0,
    "pop_retry_delays": (0.2,),
    "pull_suspend_timeout": 1.0,
    "pull_timeout": 3.0,
}


pytestmark = pytest.mark.broker(
    default_queues=2, delay_levels=FAST_DELAYS, pop_revive_interval=0.05
)


async def send(broker: EmbeddedBroker, n: int, prefix: str = "m") -> set[bytes]:
    # The first send creates the topic with 2 queues (a route lookup creates nothing).
    async with rmq.Producer(
        namesrv=broker.address, group="push-pop-producer", default_topic_queue_nums=2
    ) as p:
        bodies = {f"{prefix}{i}".encode() for i in range(n)}
        await asyncio.gather(*(p.send(rmq.Message(TOPIC, b)) for b in bodies))
    return bodies


@pytest.mark.manual_clock
async def test_pop_mode_delivers_everything_once(broker: EmbeddedBroker) -> None:
    bodies = await send(broker, 300)
    got: Counter[bytes] = Counter()
    consumer = push_consumer(broker, "pp-g", TOPIC, **POP)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.update(m.body for m in msgs)

    async with consumer:
        await wait_for(lambda: set(got) == bodies, timeout=20, what="every message")
        assert consumer.held() == []  # no queue is held: the broker hands out messages
        await wait_for(lambda: broker.pop_in_flight == 0, timeout=10, what="every ack")
        await advance(broker, 1.5)  # past the invisible time: acked messages do not return
        assert broker.pop_revived == 0
    assert set(got.values()) == {1}


@pytest.mark.manual_clock
async def test_failed_message_is_retried_through_its_invisible_time(broker: EmbeddedBroker) -> None:
    await send(broker, 1)
    attempts: list[int] = []
    consumer = push_consumer(broker, "pp-retry", TOPIC, **POP)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        attempts.extend(m.reconsume_times for m in msgs)
        if len(attempts) < 3:
            raise RuntimeError("not yet")

    async with consumer:
        await wait_for(lambda: len(attempts) == 3, timeout=20, what="three attempts")
        await wait_for(lambda: broker.pop_in_flight == 0, timeout=10, what="the ack")
        revived = broker.pop_revived  # the two failed attempts
        await advance(broker, 1.5)  # past the invisible time: the acked attempt stays done
        assert broker.pop_revived == revived
    assert attempts == [0, 1, 2]


async def test_slow_handler_keeps_its_message_invisible(broker: EmbeddedBroker) -> None:
    # A handler running until its handle was renewed 3 times (each renewal comes when a third
    # of the invisible time is left: twice the invisible time): extended, never delivered
    # twice.
    await send(broker, 1)
    calls: list[float] = []
    finished: list[bool] = []
    consumer = push_consumer(broker, "pp-slow", TOPIC, **POP)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        calls.append(asyncio.get_running_loop().time())
        [msg] = msgs
        assert isinstance(msg, rmq.PoppedMessage)
        handles = {msg.receipt_handle}

        def renewed_thrice() -> bool:
            handles.add(msg.receipt_handle)
            return len(handles) > 3

        await wait_for(renewed_thrice, timeout=20, what="three extensions")
        finished.append(True)

    async with consumer:
        await wait_for(lambda: len(calls) == 1, timeout=10, what="the first call")
        await wait_for(lambda: finished and broker.pop_in_flight == 0, timeout=20, what="the ack")
        assert broker.pop_revived == 0
    assert len(calls) == 1


async def test_more_members_than_queues(broker: EmbeddedBroker) -> None:
    counts: Counter[int] = Counter()
    members = []
    for i in range(3):
        c = push_consumer(broker, "pp-many", TOPIC, **POP, concurrency=2, pull_batch_size=4)

        async def handle(
            msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext, i: int = i
        ) -> None:
            counts[i] += len(msgs)
            await asyncio.sleep(0.01)

        c.register_listener(handle)
        members.append(c)
    await create_topic(broker, TOPIC, queues=2)
    async with members[0], members[1], members[2]:
        for k in range(20):  # a steady flow while all three wait in the broker
            await send(broker, 10, f"k{k}-")
            await asyncio.sleep(0.05)
        await wait_for(lambda: sum(counts.values()) >= 200, timeout=30, what="200 messages")
    # 2 queues, 3 members: with POP every member takes a share (pull would idle one).
    assert all(counts[i] > 0 for i in range(3)), counts


async def test_server_mode_follows_the_brokers_assignment(broker: EmbeddedBroker) -> None:
    await send(broker, 20)
    got: list[rmq.ReceivedMessage] = []
    consumer = push_consumer(
        broker, "pp-server", TOPIC, **{**POP, "consume_mode": "server"}, rebalance_interval=0.3
    )

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(msgs)

    def pulled() -> int:
        # The group's %RETRY% topic is always pulled (the broker assigns it PULL).
        return sum(1 for mq in consumer.held() if mq.topic == TOPIC)

    async with consumer, rmq.Admin(namesrv=broker.address) as admin:
        await wait_for(lambda: len(got) >= 20, timeout=20, what="20 pulled messages")
        assert pulled() == 2  # PULL (the default): the queues are held
        await admin.set_consume_mode("pp-server", TOPIC, "pop")
        await wait_for(lambda: pulled() == 0, timeout=10, what="the switch to POP")
        await send(broker, 20, "pop")
        await wait_for(lambda: len(got) >= 40, timeout=20, what="20 popped messages")
        await admin.set_consume_mode("pp-server", TOPIC, "pull")
        await wait_for(lambda: pulled() == 2, timeout=10, what="the switch back")
        await send(broker, 20, "pull")
        await wait_for(lambda: len(got) >= 60, timeout=20, what="20 pulled messages again")
    assert len({m.body for m in got}) == 60  # every round's messages, none lost


def test_pop_settings_are_checked() -> None:
    with pytest.raises(rmq.errors.ConfigurationError, match="clustering"):
        rmq.PushConsumer(
            group="g", namesrv="127.0.0.1:9876", consume_mode="pop", message_model="broadcasting"
        )
    with pytest.raises(rmq.errors.ConfigurationError, match="pop_retry_delays"):
        rmq.PushConsumer(group="g", namesrv="127.0.0.1:9876", pop_retry_delays=())
    with pytest.raises(rmq.errors.ConfigurationError, match="consume_mode"):
        rmq.PushConsumer(group="g", namesrv="127.0.0.1:9876", consume_mode="push")
