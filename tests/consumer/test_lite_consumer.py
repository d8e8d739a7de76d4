"""The lite consumer (RocketMQ 5.5 lite topics, docs/protocol.md §12.8) against the embedded
broker over loopback TCP: issue 38's acceptance (1,000 lite topics, 100 subscribed at run time,
half of them unsubscribed), order within a lite topic, redelivery after the invisible time, its
extension, dead letters, a broker taking a lite topic away, and the clear refusal of a 4.x
broker."""

from __future__ import annotations

import asyncio
import time

import pytest

import aiorocket as rmq
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.errors import (
    ConfigurationError,
    InvalidReceiptHandleError,
    ReceiptHandleExpiredError,
)
from examples import agents_lite
from tests._harness.broker import FAST_DELAYS
from tests._harness.lite import (
    check_lite_refused,
    create_lite_parent,
    lite_acceptance,
    lite_consumer,
    receive_until,
    send_lite,
)
from tests._harness.wait import wait_for

TOPIC = "agents"
GROUP = "agents-g"


pytestmark = pytest.mark.broker(delay_levels=FAST_DELAYS)


async def dead_letters(broker: EmbeddedBroker, group: str) -> list[bytes]:
    """The bodies in ``%DLQ%<group>`` (none while it does not exist)."""
    if f"%DLQ%{group}" not in broker.topics:
        return []
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        bodies: list[bytes] = []
        for mq in await reader.queues(f"%DLQ%{group}"):
            bodies += [m.body for m in (await reader.read(mq, 0, 32)).messages]
        return bodies


async def test_acceptance_1000_lite_topics_100_subscribed_at_run_time(
    broker: EmbeddedBroker,
) -> None:
    await lite_acceptance(broker.address, TOPIC, GROUP)


async def test_a_lite_topic_is_read_one_batch_at_a_time(broker: EmbeddedBroker) -> None:
    await create_lite_parent(broker.address, TOPIC, GROUP)
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        sent = await send_lite(p, TOPIC, ["c1"], 5, "x")
    async with lite_consumer(broker.address, GROUP, TOPIC, await_duration=0.5) as c:
        await c.subscribe_lite("c1")
        first = await c.receive(2)
        assert [m.body for m in first] == sent["c1"][:2]
        # the batch blocks the lite topic until it is acked
        assert await c.receive(32) == []
        await c.ack_all(first)
        rest = await receive_until(c, 3, timeout=10)
        assert [m.body for m in rest] == sent["c1"][2:]


async def test_unacked_comes_back_after_its_invisible_time(broker: EmbeddedBroker) -> None:
    await create_lite_parent(broker.address, TOPIC, GROUP)
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        await send_lite(p, TOPIC, ["c1"], 1, "x")
    async with lite_consumer(broker.address, GROUP, TOPIC) as c:
        await c.subscribe_lite("c1")
        [first] = await c.receive(1, invisible_duration=0.5)
        assert first.reconsume_times == 0
        again: list[rmq.PoppedMessage] = []

        async def comes_back() -> bool:
            again.extend(await c.receive(1))
            return bool(again)

        await wait_for(comes_back, timeout=10, what="the unacked message again")
        assert [(m.body, m.reconsume_times) for m in again] == [(first.body, 1)]
        with pytest.raises(ReceiptHandleExpiredError):
            await c.ack(first)
        await c.ack(again[0])


async def test_extended_message_keeps_its_lite_topic_blocked(broker: EmbeddedBroker) -> None:
    await create_lite_parent(broker.address, TOPIC, GROUP)
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        await send_lite(p, TOPIC, ["c1"], 1, "x")
    async with lite_consumer(broker.address, GROUP, TOPIC, await_duration=0.3) as c:
        await c.subscribe_lite("c1")
        [msg] = await c.receive(1, invisible_duration=1.0)
        await c.change_invisible_duration(msg, 30)
        started = time.monotonic()
        while time.monotonic() - started < 2.0:  # past the first invisible time
            assert await c.receive(1) == []
        await c.ack(msg)  # the renewed handle


async def test_a_message_delivered_too_often_goes_to_the_dlq(broker: EmbeddedBroker) -> None:
    await create_lite_parent(broker.address, TOPIC, GROUP)
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        await send_lite(p, TOPIC, ["c1"], 1, "x")
    async with lite_consumer(
        broker.address, GROUP, TOPIC, max_reconsume_times=1, invisible_duration=0.3
    ) as c:
        await c.subscribe_lite("c1")
        seen: list[int] = []

        async def dead() -> bool:
            seen.extend(m.reconsume_times for m in await c.receive(1))  # never acked
            return bool(await dead_letters(broker, GROUP))

        await wait_for(dead, timeout=20, what="a dead letter")
        assert seen == [0, 1]
        assert await dead_letters(broker, GROUP) == [b"c1:x:0"]


async def test_an_exclusive_group_takes_a_lite_topic_from_its_other_member(
    broker: EmbeddedBroker,
) -> None:
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic(TOPIC, queues=2, message_type="LITE")
        await admin.create_group(GROUP, lite_bind_topic=TOPIC, lite_exclusive=True)
    taken: list[str] = []
    first = lite_consumer(broker.address, GROUP, TOPIC, on_unsubscribed=taken.append)
    second = lite_consumer(broker.address, GROUP, TOPIC)
    async with first, second:
        await first.subscribe_lite("c1", "c2")
        await second.subscribe_lite("c1")
        await wait_for(lambda: taken == ["c1"], timeout=10, what="NOTIFY_UNSUBSCRIBE_LITE")
        assert first.lite_topics == {"c2"}
        async with rmq.Producer(namesrv=broker.address, group="p") as p:
            await send_lite(p, TOPIC, ["c1", "c2"], 2, "x")
        got = await receive_until(second, 2, timeout=10)
        assert {m.body for m in got} == {b"c1:x:0", b"c1:x:1"}
        got = await receive_until(first, 2, timeout=10)
        assert {m.body for m in got} == {b"c2:x:0", b"c2:x:1"}


async def test_subscription_start_options(broker: EmbeddedBroker) -> None:
    await create_lite_parent(broker.address, TOPIC, GROUP)
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        await send_lite(p, TOPIC, ["old", "skip", "at"], 3, "x")
        c = lite_consumer(broker.address, GROUP, TOPIC)
        await c.subscribe_lite("old", start="first")  # before start: applied at start
        async with c:
            await c.subscribe_lite("skip", start="last")
            await c.subscribe_lite("at", start=2)
            got = await receive_until(c, 4, timeout=10)
            assert sorted(m.body for m in got) == [b"at:x:2", b"old:x:0", b"old:x:1", b"old:x:2"]
            await send_lite(p, TOPIC, ["skip"], 1, "y")
            got = await receive_until(c, 1, timeout=10)
            assert [m.body for m in got] == [b"skip:y:0"]


async def test_lite_messages_are_also_in_the_parent_topic(broker: EmbeddedBroker) -> None:
    await create_lite_parent(broker.address, TOPIC, GROUP, queues=2)
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        sent = await send_lite(p, TOPIC, ["c1", "c2"], 2, "x")
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        bodies = []
        for mq in await reader.queues(TOPIC):
            bodies += [m.body for m in (await reader.read(mq, 0, 32)).messages]
    assert sorted(bodies) == sorted(sent["c1"] + sent["c2"])


async def test_a_foreign_message_cannot_be_acked(broker: EmbeddedBroker) -> None:
    await create_lite_parent(broker.address, TOPIC, GROUP)
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        await send_lite(p, TOPIC, ["c1"], 1, "x")
    async with (
        lite_consumer(broker.address, GROUP, TOPIC) as one,
        lite_consumer(broker.address, GROUP, TOPIC) as other,
    ):
        await one.subscribe_lite("c1")
        [msg] = await receive_until(one, 1, timeout=10)
        with pytest.raises(InvalidReceiptHandleError):
            await other.ack(msg)


async def test_names_and_arguments_are_checked(broker: EmbeddedBroker) -> None:
    with pytest.raises(ConfigurationError):
        rmq.Message(TOPIC, b"x", lite_topic="has space")
    with pytest.raises(ConfigurationError):
        rmq.Message(TOPIC, b"x", lite_topic="c1", message_group="g")
    await create_lite_parent(broker.address, TOPIC, GROUP)
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        with pytest.raises(ConfigurationError):
            await p.send_batch([rmq.Message(TOPIC, b"x", lite_topic="c1")])
        with pytest.raises(ConfigurationError):
            await p.send(rmq.Message(TOPIC, b"x", lite_topic="c1"), deliver_after=5)
    async with lite_consumer(broker.address, GROUP, TOPIC) as c:
        with pytest.raises(ConfigurationError):
            await c.subscribe_lite("a$b")
        with pytest.raises(ConfigurationError):
            await c.subscribe_lite("x" * 65)
        with pytest.raises(ConfigurationError):
            await c.subscribe_lite("ok", start="middle")  # type: ignore[arg-type]


async def test_a_topic_that_is_not_lite_or_a_group_not_bound_is_refused(
    broker: EmbeddedBroker,
) -> None:
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic("plain", queues=2)
        await admin.create_topic(TOPIC, queues=2, message_type="LITE")
    async with lite_consumer(broker.address, "unbound-g", "plain") as c:
        with pytest.raises(rmq.errors.BrokerError, match="message type not match"):
            await c.receive(1)
    async with lite_consumer(broker.address, "unbound-g", TOPIC) as c:
        with pytest.raises(rmq.errors.BrokerError, match="bind topic not match"):
            await c.receive(1)


@pytest.mark.broker(remoting_version=409)
async def test_a_4x_broker_is_refused_at_start(broker: EmbeddedBroker) -> None:
    await check_lite_refused(broker.address, TOPIC, GROUP)
    # a lite message is a plain message there
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        await p.send(rmq.Message(TOPIC, b"x", lite_topic="c1"))
    assert "%LMQ%$agents$c1" not in broker.store.queues()


async def test_close_removes_the_subscriptions(broker: EmbeddedBroker) -> None:
    await create_lite_parent(broker.address, TOPIC, GROUP)
    registry = broker.lite.registry
    async with lite_consumer(broker.address, GROUP, TOPIC) as c:
        await c.subscribe_lite("c1", "c2")
        client_id = c.client_id
        subscribed = registry.client(client_id)
        assert subscribed is not None
        assert subscribed.lmqs == {"%LMQ%$agents$c1", "%LMQ%$agents$c2"}
        await c.unsubscribe_lite("c2")
        assert subscribed.lmqs == {"%LMQ%$agents$c1"}
    assert registry.client(client_id) is None  # COMPLETE_REMOVE
    assert len(registry) == 0


@pytest.mark.broker(lite_subscription_timeout=0.3, lite_subscription_check_interval=0.3)
async def test_the_periodic_sync_keeps_a_subscription(broker: EmbeddedBroker) -> None:
    # The broker forgets a client whose set did not change for 0.3 s (checked every 0.3 s,
    # set below); the consumer repeats its set every 0.1 s, so it keeps receiving.
    await create_lite_parent(broker.address, TOPIC, GROUP)
    async with lite_consumer(broker.address, GROUP, TOPIC, sync_interval=0.1) as c:
        await c.subscribe_lite("c1")
        await asyncio.sleep(1.0)
        async with rmq.Producer(namesrv=broker.address, group="p") as p:
            await send_lite(p, TOPIC, ["c1"], 1, "x")
        assert [m.body for m in await receive_until(c, 1, timeout=10)] == [b"c1:x:0"]


async def test_the_agents_example(broker: EmbeddedBroker) -> None:
    planner = await agents_lite.main(broker.address, conversations=12)
    assert len(planner.replies) == 12
    for n in range(12):
        assert planner.replies[f"conv-{n}"] == ["answer", "to", "question", str(n)]
    assert broker.lite.registry.clients() == []  # every conversation's lite topic dropped
