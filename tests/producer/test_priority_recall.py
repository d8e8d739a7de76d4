"""RocketMQ 5 priority messages (5.4+) and recall of timer messages (5.3.2+) from the
producer's side, end to end against the embedded broker (docs/protocol.md §12.6, §12.7), and
topic message types (``Admin.create_topic(message_type=)``)."""

from __future__ import annotations

import random

import pytest

import aiorocket as rmq
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.recall import RecallHandle, RecallMessageRequestHeader
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import (
    ConfigurationError,
    IllegalOperationError,
    NoPermissionError,
    UnsupportedFeatureError,
)
from tests._harness.wait import wait_for
from tests.embedded.test_broker_kit import RawClient
from tests.interop.harness import unique_name
from tests.producer.test_producer import pull_all

# Recalls allowed (Apache's ``recallMessageEnable`` is off by default).
pytestmark = pytest.mark.broker(recall_message_enable=True)


async def create(
    broker: EmbeddedBroker, topic: str, queues: int, kind: str | rmq.TopicMessageType | None
) -> None:
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic(topic, queues=queues, message_type=kind)


# -- topic message types ---------------------------------------------------------------------


async def test_a_topic_keeps_its_message_type(broker: EmbeddedBroker) -> None:
    await create(broker, "Typed", 4, "FIFO")
    cfg = broker.topics.get("Typed")
    assert cfg is not None
    assert cfg.message_type == "FIFO"
    await create(broker, "Typed", 4, rmq.TopicMessageType.MIXED)  # message.type is changeable
    cfg = broker.topics.get("Typed")
    assert cfg is not None
    assert cfg.message_type == "MIXED"
    await create(broker, "Plain", 4, None)
    plain = broker.topics.get("Plain")
    assert plain is not None
    assert plain.message_type == "NORMAL"


async def test_a_bad_message_type_is_refused_before_sending(broker: EmbeddedBroker) -> None:
    with pytest.raises(ConfigurationError, match=r"BOGUS.*NORMAL, FIFO"):
        await create(broker, "Bad", 4, "BOGUS")


# -- priority --------------------------------------------------------------------------------


def test_a_priority_message_has_no_other_kind() -> None:
    assert rmq.Message("T", b"x", priority=3).priority == 3
    for bad in (-1, True, 1.5):
        with pytest.raises(ConfigurationError, match="priority must be an int >= 0"):
            rmq.Message("T", b"x", priority=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="no delay_level, message_group or lite_topic"):
        rmq.Message("T", b"x", priority=1, delay_level=2)
    with pytest.raises(ConfigurationError, match="no delay_level, message_group or lite_topic"):
        rmq.Message("T", b"x", priority=1, message_group="g")
    with pytest.raises(ConfigurationError, match="no delay_level, message_group or lite_topic"):
        rmq.Message("T", b"x", priority=1, lite_topic="conv-1")


async def test_priority_picks_the_queue_and_pop_reads_the_highest_first(
    broker: EmbeddedBroker,
) -> None:
    """1,000 messages of priorities 0-9 in random order, sent before any consumer: each is
    stored in queue ``priority`` of the 10-queue PRIORITY topic, and one SimpleConsumer
    receives them by priority, highest first (docs/protocol.md §12.6)."""
    topic, group = unique_name("Prio"), unique_name("prio")
    await create(broker, topic, 10, "PRIORITY")
    priorities = [i % 10 for i in range(1000)]
    random.Random(7).shuffle(priorities)
    async with rmq.Producer(namesrv=broker.address) as producer:
        for i, p in enumerate(priorities):
            result = await producer.send(rmq.Message(topic, f"{i}".encode(), priority=p))
            assert result.queue.queue_id == p
        with pytest.raises(ConfigurationError, match="priority message has no sharding key"):
            await producer.send(rmq.Message(topic, b"x", priority=1), sharding_key="k")
    got: list[int] = []
    consumer = rmq.SimpleConsumer(group=group, namesrv=broker.address, await_duration=1.0)
    consumer.subscribe(topic)
    async with consumer:
        while len(got) < len(priorities):
            msgs = await consumer.receive(max_messages=32)
            assert msgs, f"only {len(got)} of {len(priorities)} arrived"
            got.extend(m.priority for m in msgs if m.priority is not None)
            await consumer.ack_all(msgs)
    assert got == sorted(priorities, reverse=True)


async def test_a_priority_on_a_delayed_message_is_dropped(broker: EmbeddedBroker) -> None:
    # SendMessageProcessor: the message's kind is DELAY, so its priority is removed and it
    # keeps the queue the producer chose
    topic = unique_name("PrioDelay")
    await create(broker, topic, 4, None)
    async with rmq.Producer(namesrv=broker.address) as producer:
        # what a client that does not check the kinds would send (Java's MessageAccessor)
        props = {"_SYS_MSG_PRIORITY_": "3", "DELAY": "1"}
        await producer.send(rmq.Message.with_properties(topic, b"d", props))

    async def stored() -> bool:
        return bool(await pull_all(broker.address, topic))

    await wait_for(stored, timeout=20, what="the delayed message")
    (rec,) = await pull_all(broker.address, topic)
    assert "_SYS_MSG_PRIORITY_" not in rec.properties


@pytest.mark.broker(remoting_version=479)  # 5.3.3
async def test_priority_needs_a_5_4_broker(broker: EmbeddedBroker) -> None:
    async with (
        rmq.Producer(namesrv=broker.address) as producer,
    ):
        with pytest.raises(UnsupportedFeatureError, match=r"older than 5\.4"):
            await producer.send(rmq.Message("Old", b"x", priority=1))


# -- recall ----------------------------------------------------------------------------------


async def test_a_recalled_timer_message_never_arrives(broker: EmbeddedBroker) -> None:
    topic = unique_name("Recall")
    await create(broker, topic, 4, "DELAY")
    async with rmq.Producer(namesrv=broker.address) as producer:
        kept = await producer.send(rmq.Message(topic, b"kept"), deliver_after=1.0)
        doomed = await producer.send(rmq.Message(topic, b"doomed"), deliver_after=1.0)
        assert doomed.recall_handle is not None
        handle = RecallHandle.decode(doomed.recall_handle)
        assert (handle.topic, handle.message_id) == (topic, doomed.msg_id)
        assert await producer.recall(doomed, topic=topic) == doomed.msg_id
    await wait_for(lambda: broker.timers.cancelled == 1, timeout=20, what="the cancellation")

    async def kept_arrived() -> bool:
        return bool(await pull_all(broker.address, topic))

    await wait_for(kept_arrived, timeout=20, what="the other timer message")
    assert [r.body for r in await pull_all(broker.address, topic)] == [b"kept"]
    assert kept.recall_handle is not None


async def test_recalling_a_delivered_message_says_so(broker: EmbeddedBroker) -> None:
    topic = unique_name("RecallLate")
    await create(broker, topic, 4, "DELAY")
    async with rmq.Producer(namesrv=broker.address) as producer:
        sent = await producer.send(rmq.Message(topic, b"late"), deliver_after=0.2)

        async def delivered() -> bool:
            return bool(await pull_all(broker.address, topic))

        await wait_for(delivered, timeout=20, what="the delivery")
        with pytest.raises(IllegalOperationError, match="has been delivered and cannot be"):
            await producer.recall(sent)
        assert sent.recall_handle is not None
        # the broker refuses it too, had the client asked
        header = RecallMessageRequestHeader(
            topic=topic, recall_handle=sent.recall_handle, broker_name="broker-a"
        )
    async with RawClient(broker.address) as raw:
        resp = await raw.request(RequestCode.RECALL_MESSAGE, header.to_ext())
        assert (resp.code, resp.remark) == (
            ResponseCode.ILLEGAL_OPERATION,
            "recall failed, timestamp invalid",
        )


async def test_only_a_timer_message_can_be_recalled(broker: EmbeddedBroker) -> None:
    topic = unique_name("RecallPlain")
    await create(broker, topic, 4, None)
    async with rmq.Producer(namesrv=broker.address) as producer:
        plain = await producer.send(rmq.Message(topic, b"plain"))
        assert plain.recall_handle is None
        with pytest.raises(ConfigurationError, match="no recall handle: only a timer message"):
            await producer.recall(plain)
        with pytest.raises(ConfigurationError, match="is not a recall handle"):
            await producer.recall("not-a-handle")


@pytest.mark.broker  # recalls not allowed, as by default
async def test_a_broker_forbidding_recalls_says_how_to_allow_them(broker: EmbeddedBroker) -> None:
    async with (
        rmq.Producer(namesrv=broker.address) as producer,
    ):
        sent = await producer.send(rmq.Message("Forbid", b"x"), deliver_after=30)
        with pytest.raises(NoPermissionError, match="operation is forbidden") as info:
            await producer.recall(sent)
        assert "recallMessageEnable=true" in " ".join(info.value.__notes__)


@pytest.mark.broker(remoting_version=409)
async def test_a_4x_broker_cannot_recall(broker: EmbeddedBroker) -> None:
    async with (
        rmq.Producer(namesrv=broker.address) as producer,
    ):
        sent = await producer.send(rmq.Message("Old", b"x"))
        with pytest.raises(UnsupportedFeatureError, match="cannot recall messages"):
            await producer.recall(sent)
