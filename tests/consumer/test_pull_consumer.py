"""The pull consumer against the embedded broker over real loopback TCP: reading (``async for``,
``poll``), positions and commits, seeks, pause/resume, rebalance listeners, retries, flow
control, errors."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket._consumer.pull_consumer import PullConsumer
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.errors import (
    ClientClosedError,
    ConfigurationError,
    OffsetOutOfRangeError,
    QueueNotAssignedError,
    SubscriptionConflictError,
)
from aiorocket.models import Message, MessageQueue, ReceivedMessage
from tests._harness.wait import wait_for

from .conftest import FAST, create_topic

#: pull consumer settings that keep tests quick
PULL: dict[str, Any] = {"rebalance_interval": 1.0, "consume_from": "first"}


def q(topic: str, queue_id: int) -> MessageQueue:
    return MessageQueue(topic, "broker-a", queue_id)


async def fill(
    producer: Producer, topic: str, per_queue: int, queues: Iterable[int] = range(8), tag: str = ""
) -> list[bytes]:
    """Send ``per_queue`` messages to each queue; their bodies ``<topic>-<queue>-<i>``."""
    bodies: list[bytes] = []
    for qid in queues:
        batch = [f"{topic}-{qid}-{i}{tag}".encode() for i in range(per_queue)]
        await producer.send_batch([Message(topic, b) for b in batch], queue=q(topic, qid))
        bodies.extend(batch)
    return bodies


async def drain(consumer: PullConsumer, n: int, timeout: float = 15.0) -> list[ReceivedMessage]:
    """Poll until ``n`` messages came (fails after ``timeout``)."""
    got: list[ReceivedMessage] = []
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while len(got) < n:
        left = deadline - loop.time()
        if left <= 0:
            raise AssertionError(f"got {len(got)} of {n} messages")
        got.extend(await consumer.poll(max_messages=64, timeout=min(left, 1.0)))
    return got


def offsets_by_queue(msgs: Iterable[ReceivedMessage]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for m in msgs:
        out[m.queue_id].append(m.queue_offset)
    return dict(out)


async def broker_offset(broker: EmbeddedBroker, group: str, mq: MessageQueue) -> int | None:
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        return await reader.committed_offset(group, mq)


# -- reading ---------------------------------------------------------------------------------


async def test_async_for_and_poll_hand_out_every_message_once_in_queue_order(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    bodies = await fill(producer, "PullAll", 50)
    consumer = PullConsumer(group="pall", namesrv=broker.address, **PULL)
    consumer.subscribe("PullAll")
    got: list[ReceivedMessage] = []
    async with consumer:
        assert {mq for mq in consumer.assignment() if mq.topic == "PullAll"} == {
            q("PullAll", i) for i in range(8)
        }
        async for msg in consumer:
            got.append(msg)
            if len(got) == 150:
                break
        while len(got) < 400:
            batch = await consumer.poll(max_messages=64, timeout=5)
            assert 0 < len(batch) <= 64
            got.extend(batch)
        assert await consumer.poll(timeout=0.2) == []
        await consumer.commit()
        for i in range(8):
            assert consumer.position(q("PullAll", i)) == 50
            assert await consumer.committed(q("PullAll", i)) == 50
    assert sorted(m.body for m in got) == sorted(bodies)
    for offsets in offsets_by_queue(got).values():
        assert offsets == list(range(50))  # each queue in order, nothing twice
    assert all(m.topic == "PullAll" for m in got)
    assert await broker_offset(broker, "pall", q("PullAll", 3)) == 50


async def test_an_idle_consumer_parks_one_long_poll_per_queue(broker: EmbeddedBroker) -> None:
    await create_topic(broker, "PullIdle")
    consumer = PullConsumer(group="pidle", namesrv=broker.address, **PULL)
    consumer.subscribe("PullIdle")
    async with consumer:
        await asyncio.sleep(0.5)
        owned = consumer._queues.entries.values()
        before = {o.mq: o.pq.last_pull_time for o in owned}
        assert await consumer.poll(timeout=1.0) == []
        after = {o.mq: o.pq.last_pull_time for o in owned}
    assert len(before) == 9  # 8 queues and %RETRY%pidle
    assert before == after  # no pull was sent while idle: every one is held by the broker


async def test_queues_work_before_start_and_assign_reads_only_those_queues(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    await fill(producer, "PullAssign", 10)
    consumer = PullConsumer(group="passign", namesrv=broker.address, **PULL)
    queues = await consumer.queues("PullAssign")
    assert queues == [q("PullAssign", i) for i in range(8)]
    consumer.assign(queues[2:4])
    assert consumer.assignment() == {q("PullAssign", 2), q("PullAssign", 3)}
    async with consumer:
        got = await drain(consumer, 20)
        assert await consumer.poll(timeout=0.3) == []
        assert consumer.assignment() == {q("PullAssign", 2), q("PullAssign", 3)}
    assert offsets_by_queue(got) == {2: list(range(10)), 3: list(range(10))}


async def test_push_and_pull_members_of_one_group_share_the_queues(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    pushed: list[ReceivedMessage] = []
    push = rmq.PushConsumer(group="mixed", namesrv=broker.address, consume_from="first", **FAST)
    push.subscribe("PullMixed")

    @push.listener
    async def handle(msgs: list[ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        pushed.extend(msgs)

    pull = PullConsumer(group="mixed", namesrv=broker.address, **PULL)
    pull.subscribe("PullMixed")
    await create_topic(broker, "PullMixed")
    async with push, pull:

        def split() -> tuple[set[int], set[int]]:
            a = {mq.queue_id for mq in push.statistics().queues if mq.topic == "PullMixed"}
            b = {mq.queue_id for mq in pull.assignment() if mq.topic == "PullMixed"}
            return a, b

        await wait_for(
            lambda: len(split()[0]) == 4 and len(split()[1]) == 4, timeout=10.0, what="4 + 4"
        )
        a, b = split()
        assert a | b == set(range(8))
        bodies = await fill(producer, "PullMixed", 25)
        pulled = await drain(pull, 100)
        await wait_for(lambda: len(pushed) == 100, timeout=10.0, what="100 pushed")
        assert await pull.poll(timeout=0.3) == []
    assert sorted(m.body for m in pushed + pulled) == sorted(bodies)
    assert {m.queue_id for m in pulled} == b
    assert {m.queue_id for m in pushed} == a


# -- commits ---------------------------------------------------------------------------------


async def test_a_clean_close_commits_everything_handed_out(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    bodies = await fill(producer, "PullClose", 25)
    # The auto-commit timer never fires here: only the close can commit.
    settings = {**PULL, "auto_commit_interval": 60.0}
    first: list[bytes] = []
    consumer = PullConsumer(group="pclose", namesrv=broker.address, **settings)
    consumer.subscribe("PullClose")
    async with consumer:
        async for msg in consumer:
            first.append(msg.body)
            if len(first) == 77:
                break
    again = PullConsumer(group="pclose", namesrv=broker.address, **settings)
    again.subscribe("PullClose")
    async with again:
        second = [m.body for m in await drain(again, 200 - 77)]
        assert await again.poll(timeout=0.3) == []
    assert not set(first) & set(second)  # duplicates 0
    assert sorted(first + second) == sorted(bodies)  # lost 0


async def test_leaving_async_with_by_an_exception_commits_only_what_was_acknowledged(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    bodies = await fill(producer, "PullFail", 25)
    settings = {**PULL, "auto_commit_interval": 60.0}
    consumer = PullConsumer(group="pfail", namesrv=broker.address, **settings)
    consumer.subscribe("PullFail")
    b1: list[ReceivedMessage] = []

    async def fail_on_the_second_batch() -> None:
        async with consumer:
            b1.extend(await consumer.poll(max_messages=10))
            b2 = await consumer.poll(max_messages=10)  # acknowledges b1
            assert len(b1) == len(b2) == 10
            raise RuntimeError("failed on b2")

    with pytest.raises(RuntimeError, match="failed on b2"):
        await fail_on_the_second_batch()
    again = PullConsumer(group="pfail", namesrv=broker.address, **settings)
    again.subscribe("PullFail")
    async with again:
        rest = [m.body for m in await drain(again, 190)]
        assert await again.poll(timeout=0.3) == []
    assert sorted(rest) == sorted(set(bodies) - {m.body for m in b1})  # b2 comes again


async def test_auto_commit_writes_the_acknowledged_position_every_interval(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    await fill(producer, "PullAuto", 100, queues=[0])
    mq = q("PullAuto", 0)
    consumer = PullConsumer(group="pauto", namesrv=broker.address, auto_commit_interval=0.2, **PULL)
    consumer.assign([mq])
    async with consumer:
        b1 = await consumer.poll(max_messages=10)
        assert [m.queue_offset for m in b1] == list(range(10))
        await asyncio.sleep(0.6)
        # b1 is in the application's hands: not committed yet.
        assert await broker_offset(broker, "pauto", mq) == 0
        await consumer.poll(max_messages=10)  # back for more: b1 is done
        await wait_for_offset(broker, "pauto", mq, 10)
        await asyncio.sleep(0.5)
        assert await broker_offset(broker, "pauto", mq) == 10  # not the second batch
        await consumer.commit()
        assert await broker_offset(broker, "pauto", mq) == 20


async def wait_for_offset(
    broker: EmbeddedBroker, group: str, mq: MessageQueue, offset: int, timeout: float = 5.0
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (got := await broker_offset(broker, group, mq)) != offset:
        if loop.time() > deadline:
            raise AssertionError(f"committed offset of {mq} is {got}, not {offset}")
        await asyncio.sleep(0.05)


async def test_manual_commits_are_the_only_commits(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    await fill(producer, "PullManual", 30, queues=[0])
    mq = q("PullManual", 0)
    consumer = PullConsumer(
        group="pmanual",
        namesrv=broker.address,
        auto_commit=False,
        auto_commit_interval=0.1,
        **PULL,
    )
    consumer.assign([mq])
    async with consumer:
        await consumer.poll(max_messages=10)
        await consumer.poll(max_messages=10)
        await asyncio.sleep(0.4)
        # Nothing committed (a young broker answers 0 for a new group, docs/protocol.md §6.5).
        assert await broker_offset(broker, "pmanual", mq) in (None, 0)
        await consumer.commit({mq: 5})
        assert await broker_offset(broker, "pmanual", mq) == 5
        assert await consumer.committed(mq) == 5
        await consumer.poll(max_messages=10)
    assert await broker_offset(broker, "pmanual", mq) == 5  # close wrote nothing more
    again = PullConsumer(group="pmanual", namesrv=broker.address, **PULL)
    again.assign([mq])
    async with again:
        got = await drain(again, 25)
    assert [m.queue_offset for m in got] == list(range(5, 30))


async def test_messages_filtered_out_by_tag_move_the_position_on(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    mq = q("PullTags", 0)
    for i in range(12):
        await producer.send(Message("PullTags", b"%d" % i, tags="A" if i < 2 else "B"), queue=mq)
    consumer = PullConsumer(group="ptags", namesrv=broker.address, **PULL)
    consumer.subscribe("PullTags", "A")
    async with consumer:
        got = await drain(consumer, 2)
        assert [m.tags for m in got] == ["A", "A"]
        assert await consumer.poll(timeout=0.5) == []
        # The ten B messages after them are not the application's: done with as well.
        assert consumer.position(mq) == 12
        await consumer.commit()
    assert await broker_offset(broker, "ptags", mq) == 12


# -- seeks -----------------------------------------------------------------------------------


async def test_seek_rereads_exactly_from_the_offset(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    await fill(producer, "PullSeek", 100, queues=[0])
    mq = q("PullSeek", 0)
    consumer = PullConsumer(group="pseek", namesrv=broker.address, **PULL)
    consumer.assign([mq])
    async with consumer:
        assert [m.queue_offset for m in await drain(consumer, 100)] == list(range(100))
        await consumer.seek(mq, 40)
        assert consumer.position(mq) == 40
        first = await consumer.poll(max_messages=5)
        assert [m.queue_offset for m in first] == [40, 41, 42, 43, 44]
        # Buffered messages after 44 are dropped by the next seek.
        await consumer.seek(mq, 90)
        again = await drain(consumer, 10)
        assert [m.queue_offset for m in again] == list(range(90, 100))
        assert await consumer.poll(timeout=0.3) == []
        await consumer.seek_to_beginning(mq)
        assert [m.queue_offset for m in await drain(consumer, 100)] == list(range(100))
        await consumer.seek_to_end(mq)
        assert consumer.position(mq) == 100
        assert await consumer.poll(timeout=0.3) == []
        await producer.send(Message("PullSeek", b"late"), queue=mq)
        late = await drain(consumer, 1)
        assert [(m.queue_offset, m.body) for m in late] == [(100, b"late")]
        assert await consumer.poll(timeout=0.3) == []


async def test_seek_to_time_rereads_the_messages_stored_from_then_on(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    # Six batches (a batch is stored in one millisecond) with a moment between each two.
    mq = q("PullTime", 0)
    moments: list[datetime] = []
    for b in range(6):
        if b:
            await asyncio.sleep(0.03)
            moments.append(datetime.now(UTC))
            await asyncio.sleep(0.03)
        await fill(producer, "PullTime", 7, queues=[0], tag=f"-{b}")
    consumer = PullConsumer(group="ptime", namesrv=broker.address, **PULL)
    consumer.assign([mq])
    async with consumer:
        await drain(consumer, 42)
        for b, moment in enumerate(moments, start=1):
            await consumer.seek_to_time(mq, moment)
            assert consumer.position(mq) == 7 * b, b
        await consumer.seek_to_time(mq, moments[2])
        got = await drain(consumer, 21)
        assert [m.body for m in got] == [
            f"PullTime-0-{i}-{b}".encode() for b in (3, 4, 5) for i in range(7)
        ]
        assert await consumer.poll(timeout=0.3) == []
        await consumer.seek_to_time(mq, moments[0] - timedelta(hours=1))
        assert consumer.position(mq) == 0
        await consumer.seek_to_time(mq, moments[-1] + timedelta(hours=1))
        assert consumer.position(mq) == 42
        assert await consumer.poll(timeout=0.3) == []


# -- pause -----------------------------------------------------------------------------------


async def test_pause_stops_a_queues_deliveries_and_pulls_until_resumed(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    q0, q1 = q("PullPause", 0), q("PullPause", 1)
    await fill(producer, "PullPause", 40, queues=[0, 1])
    consumer = PullConsumer(group="ppause", namesrv=broker.address, **PULL)
    consumer.assign([q0, q1])
    async with consumer:
        await wait_for(
            lambda: all(o.pq.cached_count == 40 for o in consumer._queues.entries.values()),
            timeout=10.0,
            what="both queues prefetched",
        )
        before = await consumer.poll(max_messages=5)
        consumer.pause(q0)
        assert consumer.paused() == {q0}
        from_q1 = sum(1 for m in before if m.queue_id == 1)
        after = await drain(consumer, 40 - from_q1)
        assert {m.queue_id for m in after} == {1}  # nothing of q0 once paused
        assert await consumer.poll(timeout=0.3) == []  # q0's buffered messages wait
        cached = consumer._queues.entries[q0].pq.cached_count
        await fill(producer, "PullPause", 20, queues=[0], tag="-late")
        assert await consumer.poll(timeout=0.5) == []
        assert consumer._queues.entries[q0].pq.cached_count == cached  # and it was not pulled:
        pulled_at = consumer._queues.entries[q0].pq.last_pull_time
        assert await consumer.poll(timeout=0.5) == []
        assert consumer._queues.entries[q0].pq.last_pull_time == pulled_at  # no pull sent at all
        consumer.resume(q0)
        assert consumer.paused() == set()
        seen = [m.queue_offset for m in before if m.queue_id == 0]
        rest = await drain(consumer, 60 - len(seen))
        assert await consumer.poll(timeout=0.3) == []
    assert seen + [m.queue_offset for m in rest] == list(range(60))  # in order, none lost


async def test_a_pause_survives_a_rebalance_that_keeps_the_queue(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    a = PullConsumer(group="pkeep", namesrv=broker.address, **PULL)
    a.subscribe("PullKeep")
    b = PullConsumer(group="pkeep", namesrv=broker.address, **PULL)
    b.subscribe("PullKeep")
    await create_topic(broker, "PullKeep")
    async with a:
        a.pause(*a.assignment())
        async with b:

            def topic_queues(c: PullConsumer) -> set[MessageQueue]:
                return {mq for mq in c.assignment() if mq.topic == "PullKeep"}

            await wait_for(
                lambda: len(topic_queues(a)) == 4 and len(topic_queues(b)) == 4,
                timeout=10.0,
                what="4 + 4 queues",
            )
            kept = topic_queues(a)
            assert kept <= a.paused()  # the queues a kept are still paused
            assert not a.paused() & topic_queues(b)  # the ones it lost are forgotten
            await fill(producer, "PullKeep", 10)
            got_b = await drain(b, 40)
            assert {m.queue_id for m in got_b} == {mq.queue_id for mq in topic_queues(b)}
            assert await a.poll(timeout=0.5) == []
            a.resume(*kept)
            got_a = await drain(a, 40)
            assert {m.queue_id for m in got_a} == {mq.queue_id for mq in kept}


# -- rebalance listeners ---------------------------------------------------------------------


async def test_listeners_see_the_changes_and_revoked_queues_are_committed_first(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    events: list[tuple[str, str, list[MessageQueue], dict[MessageQueue, int]]] = []
    during_revoke: list[ReceivedMessage] = []

    def listeners(name: str, consumer: list[PullConsumer]) -> dict[str, Any]:
        async def on_assigned(queues: list[MessageQueue]) -> None:
            events.append((name, "assigned", queues, {}))

        async def on_revoked(queues: list[MessageQueue]) -> None:
            positions = {mq: consumer[0].position(mq) for mq in queues}
            events.append((name, "revoked", queues, positions))
            # The queues being revoked deliver nothing more, buffered messages included.
            during_revoke.extend(await consumer[0].poll(max_messages=1000, timeout=0))

        return {"on_assigned": on_assigned, "on_revoked": on_revoked}

    bodies = await fill(producer, "PullListen", 20)
    # Only a revocation (or the close) can commit: the timer would wait a minute.
    settings = {**PULL, "auto_commit_interval": 60.0}
    ref_a: list[PullConsumer] = []
    a = PullConsumer(group="plisten", namesrv=broker.address, **settings, **listeners("a", ref_a))
    ref_a.append(a)
    a.subscribe("PullListen")
    ref_b: list[PullConsumer] = []
    b = PullConsumer(group="plisten", namesrv=broker.address, **settings, **listeners("b", ref_b))
    ref_b.append(b)
    b.subscribe("PullListen")
    async with a:
        everything = sorted(a.assignment())
        assert events == [("a", "assigned", everything, {})]
        got = await drain(a, 160)
        assert sorted(m.body for m in got) == sorted(bodies)
        assert await a.poll(timeout=0.1) == []  # back for more: all 160 are processed
        more = await fill(producer, "PullListen", 5, tag="-more")
        await wait_for(
            lambda: sum(o.pq.cached_count for o in a._queues.entries.values()) == 40,
            timeout=10.0,
            what="the next 40 buffered",
        )
        async with b:
            await wait_for(
                lambda: len(events) >= 3, timeout=10.0, what="a's revocation and b's assignment"
            )
            revoked = next(e for e in events if e[:2] == ("a", "revoked"))
            assigned_b = next(e for e in events if e[:2] == ("b", "assigned"))
            lost = [mq for mq in revoked[2] if mq.topic == "PullListen"]
            assert len(lost) == 4
            assert set(revoked[2]) <= set(assigned_b[2])
            assert revoked[3] == {mq: 20 if mq.topic == "PullListen" else 0 for mq in revoked[2]}
            assert not set(revoked[2]) & a.assignment()
            for mq in lost:
                # Written by the revocation, before the queue changed hands.
                assert await broker_offset(broker, "plisten", mq) == 20
            assert len(during_revoke) == 20  # the buffered messages of the four queues kept
            kept = {mq.queue_id for mq in a.assignment() if mq.topic == "PullListen"}
            assert {m.queue_id for m in during_revoke} == kept
            assert {m.body for m in during_revoke} < set(more)


# -- retries ---------------------------------------------------------------------------------


async def test_reconsume_later_brings_the_message_back_through_the_retry_topic(
    broker: EmbeddedBroker, producer: Producer, tmp_path: Path
) -> None:
    sent = await producer.send(Message("PullRetry", b"again", tags="t", keys=["k1"]))
    consumer = PullConsumer(group="pretry", namesrv=broker.address, **PULL)
    consumer.subscribe("PullRetry")
    async with consumer:
        [first] = await drain(consumer, 1)
        assert first.reconsume_times == 0
        await consumer.reconsume_later(first)
        [second] = await drain(consumer, 1)
        await consumer.reconsume_later(second, delay_level=1)
        [third] = await drain(consumer, 1)
    for m, times in ((second, 1), (third, 2)):
        assert (m.topic, m.body, m.tags, m.msg_id) == ("PullRetry", b"again", "t", sent.msg_id)
        assert m.reconsume_times == times
    broadcast = PullConsumer(
        group="pretry-b",
        namesrv=broker.address,
        message_model="broadcasting",
        offset_store_dir=tmp_path,
        **PULL,
    )
    broadcast.subscribe("PullRetry")
    async with broadcast:
        [m] = await drain(broadcast, 1)
        with pytest.raises(ConfigurationError, match="broadcasting"):
            await broadcast.reconsume_later(m)


async def test_broadcasting_members_each_read_everything_and_keep_local_offsets(
    broker: EmbeddedBroker, producer: Producer, tmp_path: Path
) -> None:
    bodies = await fill(producer, "PullBroadcast", 5)
    members = [
        PullConsumer(
            group="pbcast",
            namesrv=broker.address,
            message_model="broadcasting",
            offset_store_dir=tmp_path,
            instance_name=f"m{i}",
            **PULL,
        )
        for i in range(2)
    ]
    for m in members:
        m.subscribe("PullBroadcast")
    async with members[0], members[1]:
        for m in members:
            assert sorted(x.body for x in await drain(m, 40)) == sorted(bodies)
    again = PullConsumer(
        group="pbcast",
        namesrv=broker.address,
        message_model="broadcasting",
        offset_store_dir=tmp_path,
        instance_name="m0",
        **PULL,
    )
    again.subscribe("PullBroadcast")
    async with again:
        assert await again.poll(timeout=0.5) == []  # its file says it read everything


# -- flow control ----------------------------------------------------------------------------


async def test_a_slow_reader_holds_each_queue_at_the_pull_threshold(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    await fill(producer, "PullSlow", 200)
    consumer = PullConsumer(
        group="pslow",
        namesrv=broker.address,
        pull_threshold_for_queue=40,
        pull_batch_size=16,
        **PULL,
    )
    consumer.subscribe("PullSlow")
    peak = 0
    read = 0
    async with consumer:
        for _ in range(40):
            read += len(await consumer.poll(max_messages=5))
            await asyncio.sleep(0.01)
            peak = max(peak, *(o.pq.cached_count for o in consumer._queues.entries.values()))
    assert read == 200
    # Pulls pause above 40 cached messages, so one more batch of 16 is the most.
    assert 40 <= peak <= 40 + 16


# -- errors ----------------------------------------------------------------------------------


async def test_misuse_gives_typed_errors_with_one_line_messages(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    errors: list[BaseException] = []

    def caught(exc: pytest.ExceptionInfo[BaseException]) -> None:
        errors.append(exc.value)

    await fill(producer, "PullErr", 10, queues=[0])
    q0, q1 = q("PullErr", 0), q("PullErr", 1)
    with pytest.raises(ConfigurationError, match="concurrency") as e0:
        PullConsumer(group="perr", namesrv=broker.address, concurrency=4)
    caught(e0)

    def not_async(queues: list[MessageQueue]) -> None:
        pass

    with pytest.raises(ConfigurationError, match="on_revoked") as e1:
        PullConsumer(group="perr", namesrv=broker.address, on_revoked=not_async)  # type: ignore[arg-type]
    caught(e1)
    subscribed = PullConsumer(group="perr", namesrv=broker.address)
    subscribed.subscribe("PullErr")
    with pytest.raises(SubscriptionConflictError) as e2:
        subscribed.assign([q0])
    caught(e2)
    consumer = PullConsumer(group="perr", namesrv=broker.address, **PULL)
    consumer.assign([q0])
    with pytest.raises(SubscriptionConflictError) as e3:
        consumer.subscribe("PullErr")
    caught(e3)
    with pytest.raises(ConfigurationError, match="not been started") as e4:
        await consumer.poll()
    caught(e4)
    with pytest.raises(ConfigurationError, match="subscribe to a topic or assign"):
        await PullConsumer(group="perr", namesrv=broker.address).start()
    async with consumer:
        with pytest.raises(QueueNotAssignedError) as e5:
            await consumer.seek(q1, 0)
        caught(e5)
        assert e5.value.queue == q1
        with pytest.raises(QueueNotAssignedError):
            consumer.pause(q1)
        with pytest.raises(QueueNotAssignedError):
            await consumer.commit({q1: 0})
        with pytest.raises(OffsetOutOfRangeError) as e6:
            await consumer.seek(q0, 11)
        caught(e6)
        assert (e6.value.offset, e6.value.min_offset, e6.value.max_offset) == (11, 0, 10)
        with pytest.raises(OffsetOutOfRangeError) as e7:
            await consumer.seek(q0, -1)
        caught(e7)
        await consumer.seek(q0, 10)  # the end is a legal position
        with pytest.raises(ConfigurationError, match="cannot assign"):
            consumer.assign([q1])
    with pytest.raises(ClientClosedError) as e8:
        await consumer.poll()
    caught(e8)
    assert [m async for m in consumer] == []  # iteration over a closed consumer just ends
    for exc in errors:
        assert str(exc), repr(exc)
        assert "\n" not in str(exc), repr(exc)


async def test_namespaces_stay_out_of_what_the_application_sees(
    broker: EmbeddedBroker,
) -> None:
    async with Producer(
        namesrv=broker.address, group="nsp", namespace="tenant", default_topic_queue_nums=8
    ) as producer:
        await fill(producer, "PullNs", 3, queues=[0, 1])
    consumer = PullConsumer(group="pns", namesrv=broker.address, namespace="tenant", **PULL)
    consumer.subscribe("PullNs")
    async with consumer:
        assert {mq for mq in consumer.assignment() if not mq.topic.startswith("%")} == {
            q("PullNs", i) for i in range(8)
        }
        got = await drain(consumer, 6)
        assert {m.topic for m in got} == {"PullNs"}
        await consumer.seek(q("PullNs", 1), 1)
        assert [m.queue_offset for m in await drain(consumer, 2)] == [1, 2]
        await consumer.commit({q("PullNs", 0): 2})
    assert await broker_offset(broker, "tenant%pns", q("tenant%PullNs", 0)) == 2
