"""QueueReader and SyncQueueReader against the embedded broker over loopback TCP.

These need no Spark: the reader is the part of the Spark bridge that talks to brokers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from aiorocket import (
    Message,
    MessageQueue,
    Producer,
    QueueReader,
    ReadStatus,
    ReceivedMessage,
    SyncQueueReader,
)
from aiorocket._reader import InlineReader
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from aiorocket.errors import (
    ClientClosedError,
    ConfigurationError,
    PullNotFoundError,
    TopicNotExistError,
)
from tests.spark._support import BrokerThread, produce

TOPIC = "ReaderT"


pytestmark = pytest.mark.broker(default_queues=4)


async def _fill(addr: str, topic: str, n: int, *, queue_id: int = 0, **settings: object) -> None:
    """``n`` messages into one queue, tags alternating a/b, keys ``k<i> x``."""
    async with Producer(namesrv=addr, group="reader-test", **settings) as p:
        mq = MessageQueue(topic, "broker-a", queue_id)
        for lo in range(0, n, 200):
            await p.send_batch(
                [
                    Message(
                        topic,
                        f"m{i}".encode(),
                        tags="a" if i % 2 else "b",
                        keys=[f"k{i}", "x"],
                        properties={"seq": str(i)},
                    )
                    for i in range(lo, min(n, lo + 200))
                ],
                queue=mq,
            )


async def test_queues_and_offsets(broker: EmbeddedBroker) -> None:
    await _fill(broker.address, TOPIC, 100, queue_id=2)
    async with QueueReader(namesrv=broker.address) as reader:
        mqs = await reader.queues(TOPIC)
        assert mqs == [MessageQueue(TOPIC, "broker-a", i) for i in range(4)]
        assert await reader.min_offsets(mqs) == dict.fromkeys(mqs, 0)
        assert await reader.max_offsets(mqs) == {mqs[0]: 0, mqs[1]: 0, mqs[2]: 100, mqs[3]: 0}
        assert await reader.min_offset(mqs[2]) == 0
        assert await reader.max_offset(mqs[2]) == 100


@pytest.mark.broker(default_queues=4, auto_create_topics=False)
async def test_unknown_topic_without_auto_create(broker: EmbeddedBroker) -> None:
    async with QueueReader(namesrv=broker.address) as reader:
        with pytest.raises(TopicNotExistError):
            await reader.queues("NoSuchTopic")


async def test_read_statuses(broker: EmbeddedBroker) -> None:
    await _fill(broker.address, TOPIC, 100)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    async with QueueReader(namesrv=broker.address) as reader:
        found = await reader.read(mq, 10, 5)
        assert found.status is ReadStatus.FOUND
        assert [m.queue_offset for m in found.messages] == [10, 11, 12, 13, 14]
        assert (found.next_offset, found.min_offset, found.max_offset) == (15, 0, 100)
        m = found.messages[0]
        assert isinstance(m, ReceivedMessage)
        assert (m.topic, m.broker_name, m.queue_id, m.body) == (TOPIC, "broker-a", 0, b"m10")
        assert (m.tags, m.keys, m.properties["seq"]) == ("b", ["k10", "x"], "10")
        assert len(m.msg_id) == 32

        at_end = await reader.read(mq, 100)
        assert (at_end.status, at_end.messages, at_end.next_offset) == (ReadStatus.NO_NEW, [], 100)

        beyond = await reader.read(mq, 150)
        assert beyond.status is ReadStatus.OFFSET_ILLEGAL
        assert beyond.next_offset == 100

        tagged = await reader.read(mq, 0, 32, expression="a")
        assert tagged.status is ReadStatus.FOUND
        assert all(m.tags == "a" for m in tagged.messages)
        assert [m.queue_offset for m in tagged.messages][:3] == [1, 3, 5]

        nothing = await reader.read(mq, 0, 32, expression="zzz")
        assert nothing.status is ReadStatus.NO_MATCHED
        assert nothing.messages == []
        assert nothing.next_offset > 0

        with pytest.raises(ConfigurationError):
            await reader.read(mq, -1)
        with pytest.raises(ConfigurationError):
            await reader.read(mq, 0, 0)


async def test_read_range_is_exact_and_repeatable(broker: EmbeddedBroker) -> None:
    await _fill(broker.address, TOPIC, 300)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    async with QueueReader(namesrv=broker.address) as reader:
        first = [m.queue_offset async for m in reader.read_range(mq, 7, 250)]
        assert first == list(range(7, 250))
        again = [m.body async for m in reader.read_range(mq, 7, 250, pipeline=1)]
        assert again == [f"m{i}".encode() for i in range(7, 250)]

        lists = [x async for x in reader.read_range_batches(mq, 0, 300)]
        assert all(len(x) <= 32 for x in lists)
        assert sum(len(x) for x in lists) == 300

        odd = [m.queue_offset async for m in reader.read_range(mq, 10, 101, expression="a")]
        assert odd == list(range(11, 101, 2))

        assert [m async for m in reader.read_range(mq, 40, 40)] == []


async def test_read_range_past_the_end(broker: EmbeddedBroker) -> None:
    await _fill(broker.address, TOPIC, 50)
    mq = MessageQueue(TOPIC, "broker-a", 0)
    async with QueueReader(namesrv=broker.address) as reader:
        with pytest.raises(PullNotFoundError):
            _ = [m async for m in reader.read_range(mq, 0, 80)]
        got = [m.queue_offset async for m in reader.read_range(mq, 0, 80, tolerate_loss=True)]
        assert got == list(range(50))


async def test_offset_for_timestamp(broker: EmbeddedBroker) -> None:
    mq = MessageQueue(TOPIC, "broker-a", 0)
    for burst in range(3):
        await _fill(broker.address, TOPIC, 64, queue_id=0)
        if burst < 2:
            await asyncio.sleep(0.05)
    async with QueueReader(namesrv=broker.address) as reader:
        msgs = [m async for m in reader.read_range(mq, 0, 192)]
        stamps = [m.store_timestamp for m in msgs]
        assert stamps == sorted(stamps)
        for probe in (stamps[64], stamps[128], stamps[64] - 1, stamps[100], stamps[0]):
            want = next(i for i, t in enumerate(stamps) if t >= probe)
            assert await reader.offset_for_timestamp(mq, probe) == want
        assert await reader.offset_for_timestamp(mq, 0) == 0
        assert await reader.offset_for_timestamp(mq, stamps[-1] + 1) == 192
        empty = MessageQueue(TOPIC, "broker-a", 3)
        assert await reader.offset_for_timestamp(empty, stamps[0]) == 0


async def test_consumer_group_offsets(broker: EmbeddedBroker) -> None:
    await _fill(broker.address, TOPIC, 10)
    async with QueueReader(namesrv=broker.address) as reader:
        mqs = await reader.queues(TOPIC)
        # A young broker answers 0 for a group that never committed (docs/protocol.md §6.5).
        assert await reader.committed_offset("reader-group", mqs[0]) == 0
        await reader.commit("reader-group", mqs[0], 7)
        assert await reader.committed_offset("reader-group", mqs[0]) == 7
        await reader.commit_many("reader-group", {mqs[0]: 9, mqs[1]: 0})
        assert await reader.committed_offset("reader-group", mqs[0]) == 9
        with pytest.raises(ConfigurationError):
            await reader.commit("reader-group", mqs[0], -1)


async def test_namespace(broker: EmbeddedBroker) -> None:
    await _fill(broker.address, "NsTopic", 5, namespace="tenant")
    async with QueueReader(namesrv=broker.address, namespace="tenant") as reader:
        mq = MessageQueue("NsTopic", "broker-a", 0)
        assert await reader.max_offset(mq) == 5
        msgs = [m async for m in reader.read_range(mq, 0, 5)]
        assert {m.topic for m in msgs} == {"NsTopic"}
        await reader.commit("g", mq, 3)
        assert await reader.committed_offset("g", mq) == 3
    async with QueueReader(namesrv=broker.address) as plain:
        assert await plain.max_offset(MessageQueue("tenant%NsTopic", "broker-a", 0)) == 5
        assert (
            await plain.committed_offset("tenant%g", MessageQueue("tenant%NsTopic", "broker-a", 0))
            == 3
        )


async def test_closed_reader_refuses_calls(broker: EmbeddedBroker) -> None:
    reader = QueueReader(namesrv=broker.address)
    with pytest.raises(ClientClosedError):
        await reader.max_offset(MessageQueue(TOPIC, "broker-a", 0))
    async with reader:
        pass
    with pytest.raises(ClientClosedError):
        await reader.max_offset(MessageQueue(TOPIC, "broker-a", 0))
    with pytest.raises(ClientClosedError):
        await reader.start()


@pytest.fixture
def broker_in_thread(tmp_path: Path) -> Iterator[BrokerThread]:
    bt = BrokerThread(tmp_path / "broker", BrokerConfig(default_queues=4))
    yield bt
    bt.close()


def test_sync_reader(broker_in_thread: BrokerThread) -> None:
    addr = broker_in_thread.address
    mq = MessageQueue("SyncT", "broker-a", 1)
    produce(addr, "SyncT", 500, queue=mq)
    with SyncQueueReader(namesrv=addr, prefetch=2) as reader:
        assert reader.queues("SyncT")[1] == mq
        assert reader.max_offset(mq) == 500
        assert reader.read(mq, 0, 3).status is ReadStatus.FOUND
        assert [m.queue_offset for m in reader.read_range(mq, 5, 400)] == list(range(5, 400))
        # Leaving an iteration early stops its pulls; the reader stays usable.
        for i, msgs in enumerate(reader.read_range_batches(mq, 0, 500)):
            assert msgs
            if i == 2:
                break
        assert reader.read(mq, 499).messages[0].queue_offset == 499
        with pytest.raises(PullNotFoundError):
            list(reader.read_range(mq, 0, 600))
        assert reader.offset_for_timestamp(mq, 0) == 0
        reader.commit("sync-group", mq, 12)
        assert reader.committed_offset("sync-group", mq) == 12
    with pytest.raises(ClientClosedError):
        reader.max_offset(mq)
    reader.close()  # a second close is harmless


def test_inline_reader_raw_chunks(broker_in_thread: BrokerThread) -> None:
    """Raw chunks decode to what read_range_batches yields (tag filter included), an
    iteration left early leaves the reader usable, and the end of the queue is reported."""
    addr = broker_in_thread.address
    mq = MessageQueue("InlineT", "broker-a", 2)
    produce(addr, "InlineT", 300, queue=mq)
    with SyncQueueReader(namesrv=addr) as sync:
        want = [
            m.queue_offset for ms in sync.read_range_batches(mq, 7, 290, expression="a") for m in ms
        ]
    assert want
    reader = InlineReader(namesrv=addr)
    with pytest.raises(ClientClosedError):
        list(reader.read_range_raw(mq, 0, 10))
    with reader:
        chunks = list(reader.read_range_raw(mq, 7, 290, expression="a", pipeline=3))
        assert [c.hi for c in chunks] == [*range(39, 290, 32), 290]
        # The tag strings to re-check travel with the chunk (brokers filter by hash only).
        assert {c.tags for c in chunks} == {frozenset({"a"})}
        got = [m.queue_offset for c in chunks for m in c.messages(mq.broker_name)]
        assert got == want
        for i, _chunk in enumerate(reader.read_range_raw(mq, 0, 300)):
            if i == 1:
                break
        with pytest.raises(PullNotFoundError):
            list(reader.read_range_raw(mq, 0, 400))
        ended = list(reader.read_range_raw(mq, 280, 400, tolerate_loss=True))
        assert [m.queue_offset for c in ended for m in c.messages("broker-a")] == list(
            range(280, 300)
        )
    with pytest.raises(ClientClosedError):
        list(reader.read_range_raw(mq, 0, 10))
    reader.close()  # a second close is harmless


@pytest.mark.parametrize("blocking", [SyncQueueReader, InlineReader])
def test_both_blocking_readers_have_every_method(
    broker_in_thread: BrokerThread, blocking: type[SyncQueueReader | InlineReader]
) -> None:
    """One blocking face, two places for its loop: what one reader answers, the other does."""
    addr = broker_in_thread.address
    mq = MessageQueue("BothT", "broker-a", 3)
    produce(addr, "BothT", 100, queue=mq)
    with blocking(namesrv=addr) as reader:
        assert reader.queues("BothT")[3] == mq
        assert reader.max_offsets([mq]) == {mq: 100}
        raw = list(reader.read_range_raw(mq, 10, 90, expression="a"))
        decoded = [m.queue_offset for c in raw for m in c.messages(mq.broker_name)]
        assert decoded == [m.queue_offset for m in reader.read_range(mq, 10, 90, expression="a")]
        assert decoded == list(range(10, 90, 2))
        with pytest.raises(ConfigurationError):
            next(reader.read_range_batches(mq, 0, 10, pipeline=0))
        reader.commit_many("both-group", {mq: 40})
        assert reader.committed_offset("both-group", mq) == 40
