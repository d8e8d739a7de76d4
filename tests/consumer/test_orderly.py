"""Orderly consumption against the embedded broker over loopback TCP: per-queue
sequencing, SUSPEND, COMMIT/ROLLBACK without auto-commit, the retry limit, broker locks (held,
renewed, released after the running handler, released at shutdown), broadcasting."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket._client.instance import ClientInstance
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message
from aiorocket.settings import ClientSettings
from tests._harness.broker import FAST_DELAYS
from tests._harness.send import fill_queue
from tests._harness.wait import wait_for
from tests.consumer.conftest import FAST, consume_directly, dlq_reader, push_consumer

#: orderly consumers in these tests: quick rebalances, renewals and releases
ORDERLY: dict[str, Any] = {
    **FAST,
    "rebalance_interval": 0.5,
    "lock_renew_interval": 0.5,
    "lock_expiry": 2.0,
    "unlock_delay": 0.2,
    "pull_suspend_timeout": 1.0,
    "consume_from": "first",
}


def orderly_consumer(
    broker: EmbeddedBroker, group: str, topic: str, **settings: Any
) -> rmq.PushConsumer:
    """An orderly push consumer of ``group`` subscribed to ``topic``: ``settings`` over
    :data:`ORDERLY`."""
    return push_consumer(broker, group, topic, orderly=True, **{**ORDERLY, **settings})


async def other_client_can_lock(broker: EmbeddedBroker, group: str, mq: rmq.MessageQueue) -> bool:
    """Whether a foreign client id could take ``mq``'s lock now (it unlocks right after)."""
    client = ClientInstance(ClientSettings(namesrv=(broker.address,), instance_name="probe"))
    client.start(asyncio.create_task)
    try:
        await client.fetch_route(mq.topic)
        addr = client.master_address(mq.broker_name)
        assert addr is not None
        got = await client.lock_batch(addr, group, [mq])
        if got:
            await client.unlock_batch(addr, group, [mq])
        return mq in got
    finally:
        await client.close()


async def test_each_queue_is_consumed_in_order_one_call_at_a_time(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    keys = [f"k{i}" for i in range(12)]
    for n in range(30):
        for k in keys:
            await producer.send(Message("Ord", f"{k}:{n}".encode()), sharding_key=k)
    seqs: dict[str, list[int]] = defaultdict(list)
    running: dict[int, int] = defaultdict(int)
    overlaps = 0
    consumer = orderly_consumer(broker, "ord", "Ord", consume_batch_size=3)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        nonlocal overlaps
        assert isinstance(ctx, rmq.OrderlyContext)
        assert {m.queue_id for m in msgs} == {ctx.queue.queue_id}
        running[ctx.queue.queue_id] += 1
        overlaps += running[ctx.queue.queue_id] > 1
        await asyncio.sleep(0.001)
        for m in msgs:
            k, n = m.body.decode().split(":")
            seqs[k].append(int(n))
        running[ctx.queue.queue_id] -= 1

    async with consumer:
        await wait_for(
            lambda: sum(map(len, seqs.values())) >= 360, timeout=10.0, what="all messages"
        )
        stats = consumer.statistics()
    assert overlaps == 0
    assert all(seq == list(range(30)) for seq in seqs.values()), seqs
    assert len(stats.queues) == 9  # with %RETRY%ord, subscribed in clustering mode as in Java
    assert all(q.locked and q.last_lock_time > 0 for q in stats.queues.values())


async def test_suspend_redelivers_the_message_after_the_suspend_time_and_nothing_after_it(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = await fill_queue(producer, "Susp", [b"%d" % i for i in range(6)])
    seen: list[tuple[int, int, float]] = []
    consumer = orderly_consumer(broker, "susp", "Susp")

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext
    ) -> rmq.OrderlyStatus | None:
        (m,) = msgs
        n = int(m.body)
        seen.append((n, m.reconsume_times, time.monotonic()))
        if n == 2 and m.reconsume_times == 0:
            assert ctx.suspend_millis == 1000  # the consumer's suspend_delay
            ctx.suspend_millis = 400
            return rmq.OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        if n == 4 and m.reconsume_times < 2:
            raise RuntimeError("an exception suspends too")
        return None

    async with consumer:
        await wait_for(lambda: len(seen) == 9, timeout=10.0, what="9 deliveries")
        await asyncio.sleep(0.3)
        stats = consumer.statistics()
    assert [(n, r) for n, r, _ in seen] == [
        (0, 0), (1, 0), (2, 0), (2, 1), (3, 0), (4, 0), (4, 1), (4, 2), (5, 0)
    ]  # fmt: skip
    assert seen[3][2] - seen[2][2] >= 0.39  # ctx.suspend_millis
    assert seen[6][2] - seen[5][2] >= 0.99  # the default suspend_delay
    assert stats.queues[queue].committed_offset == 6
    assert stats.topics["Susp"].consumed_failed_total == 3


async def test_rollback_and_commit_without_auto_commit(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    """Seed 002: with auto-commit off, SUCCESS leaves messages uncommitted, COMMIT commits
    everything consumed so far, ROLLBACK puts all of it back; with auto-commit on, COMMIT and
    ROLLBACK count as SUCCESS."""
    queue = await fill_queue(producer, "Manual", [b"%d" % i for i in range(6)])
    seen: list[int] = []
    rolled: set[int] = set()
    plan = {2: rmq.OrderlyStatus.COMMIT, 4: rmq.OrderlyStatus.COMMIT}
    consumer = orderly_consumer(broker, "manual", "Manual")

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext
    ) -> rmq.OrderlyStatus | None:
        ctx.auto_commit = False
        ctx.suspend_millis = 50
        n = int(msgs[0].body)
        seen.append(n)
        if n in (2, 4) and n not in rolled:
            rolled.add(n)
            return rmq.OrderlyStatus.ROLLBACK
        return plan.get(n, rmq.OrderlyStatus.SUCCESS)

    async with consumer:
        await wait_for(lambda: len(seen) == 11, timeout=10.0, what="11 deliveries")
        await asyncio.sleep(0.3)
        committed = consumer.statistics().queues[queue].committed_offset
    # 0 1 2(rollback) -> 0 1 2(commit) 3 4(rollback) -> 3 4(commit) 5(success, uncommitted)
    assert seen == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4, 5]
    assert committed == 5
    # A new member starts where the commits left off: 5 comes again.
    again: list[int] = []
    auto = orderly_consumer(broker, "manual", "Manual")

    @auto.listener
    async def handle_auto(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext
    ) -> rmq.OrderlyStatus:
        again.append(int(msgs[0].body))
        return rmq.OrderlyStatus.ROLLBACK  # with auto-commit: a success

    async with auto:
        await producer.send(Message("Manual", b"6"), queue=queue)
        await wait_for(lambda: len(again) == 2, timeout=10.0, what="two deliveries")
        await asyncio.sleep(0.3)
        assert auto.statistics().queues[queue].committed_offset == 7
    assert again == [5, 6]


async def test_a_message_past_max_reconsume_times_goes_to_the_dlq_and_the_queue_moves_on(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = await fill_queue(
        producer, "OrdPoison", [b"poison" if i == 2 else b"%d" % i for i in range(5)]
    )
    seen: list[tuple[bytes, int]] = []
    consumer = orderly_consumer(
        broker, "ord-poison", "OrdPoison", max_reconsume_times=2, suspend_delay=0.05
    )

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        seen.extend((m.body, m.reconsume_times) for m in msgs)
        if msgs[0].body == b"poison":
            raise ValueError("poison")

    reader, dlq = dlq_reader(broker, "ord-dlq-reader", "ord-poison")

    async with consumer:
        await wait_for(lambda: len(seen) == 7, timeout=10.0, what="7 deliveries")
        await asyncio.sleep(0.3)
        assert consumer.statistics().queues[queue].committed_offset == 5
    assert seen == [
        (b"0", 0), (b"1", 0), (b"poison", 0), (b"poison", 1), (b"poison", 2), (b"3", 0), (b"4", 0)
    ]  # fmt: skip
    async with reader:
        await wait_for(lambda: len(dlq) == 1, timeout=10.0, what="the DLQ message")
    assert dlq[0].body == b"poison"


@pytest.mark.broker(default_queues=4, delay_levels=FAST_DELAYS, lock_lease=0.6)
async def test_locks_are_held_renewed_past_the_lease_and_released_at_shutdown(
    broker: EmbeddedBroker,
) -> None:
    async with Producer(namesrv=broker.address, group="p") as producer:
        await producer.send(
            Message("Locked", b"x"), queue=rmq.MessageQueue("Locked", "broker-a", 0)
        )
    got: list[bytes] = []
    # Renewed every 0.2 s: three renewals per lease of the broker (0.6 s).
    consumer = orderly_consumer(broker, "locked", "Locked", lock_renew_interval=0.2)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        got.extend(m.body for m in msgs)

    mq = rmq.MessageQueue("Locked", "broker-a", 1)
    async with consumer:
        await wait_for(lambda: got == [b"x"], timeout=10.0, what="the message")
        assert not await other_client_can_lock(broker, "locked", mq)
        await asyncio.sleep(0.9)  # past the broker's 0.6 s lease: renewals keep it
        assert not await other_client_can_lock(broker, "locked", mq)
        assert all(q.locked for q in consumer.statistics().queues.values())
    assert await other_client_can_lock(broker, "locked", mq)  # unlocked at shutdown


async def test_rebalance_waits_for_the_running_handler_before_another_member_gets_the_queue(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    """The consume lock (Java ``ProcessQueue.consumeLock``): a queue moved by rebalance is unlocked only after the
    handler running on it returned, so the new owner never overlaps with it."""
    calls: list[tuple[str, int, float, float]] = []
    started = asyncio.Event()
    members: dict[str, rmq.PushConsumer] = {}
    q7 = rmq.MessageQueue("Handover", "broker-a", 7)

    def moved_to_b() -> bool:
        return "b" in members and q7 not in members["a"].statistics().queues

    def make(name: str, slow: bool) -> rmq.PushConsumer:
        c = orderly_consumer(broker, "handover", "Handover")

        @c.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
            t0 = time.monotonic()
            if slow and msgs[0].body == b"slow":
                started.set()
                # Runs on until a's rebalance gave queue 7 up to b (which waits for it).
                await wait_for(moved_to_b, timeout=10.0, what="queue 7 given up by a")
            calls.append((name, ctx.queue.queue_id, t0, time.monotonic()))

        members[name] = c
        return c

    for q in range(8):
        body = b"slow" if q == 7 else b"fast"
        await producer.send(
            Message("Handover", body), queue=rmq.MessageQueue("Handover", "broker-a", q)
        )
    a = make("a", slow=True)
    b = make("b", slow=False)
    async with a:
        await asyncio.wait_for(started.wait(), 10)
        async with b:  # b joins: queue 7 (averagely: the upper half) moves to b
            for q in range(8):
                await producer.send(
                    Message("Handover", b"after"), queue=rmq.MessageQueue("Handover", "broker-a", q)
                )
            await wait_for(
                lambda: any(n == "b" and q == 7 for n, q, _, _ in calls),
                timeout=10.0,
                what="b on 7",
            )
    a7 = [c for c in calls if c[0] == "a" and c[1] == 7]
    b7 = [c for c in calls if c[0] == "b" and c[1] == 7]
    assert a7
    assert b7
    assert max(end for *_, end in a7) <= min(start for *_, start, _ in b7)


async def test_broadcasting_orderly_consumers_each_get_everything_in_order(
    broker: EmbeddedBroker, producer: Producer, tmp_path: Path
) -> None:
    for n in range(20):
        for k in ("a", "b", "c"):
            await producer.send(Message("Bcast", f"{k}:{n}".encode()), sharding_key=k)
    seqs: dict[tuple[int, str], list[int]] = defaultdict(list)
    consumers = []
    for i in range(2):
        c = orderly_consumer(
            broker,
            "bcast-ord",
            "Bcast",
            message_model="broadcasting",
            offset_store_dir=tmp_path / "offsets",
            instance_name=f"i{i}",
        )

        async def handle(
            msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext, i: int = i
        ) -> None:
            for m in msgs:
                k, n = m.body.decode().split(":")
                seqs[i, k].append(int(n))

        c.register_listener(handle)
        consumers.append(c)
    async with consumers[0], consumers[1]:
        await wait_for(
            lambda: sum(map(len, seqs.values())) >= 120, timeout=10.0, what="everything twice"
        )
        assert not any(q.locked for q in consumers[0].statistics().queues.values())
    assert all(seq == list(range(20)) for seq in seqs.values())
    assert len(seqs) == 6


def test_orderly_settings() -> None:
    from aiorocket.errors import ConfigurationError
    from aiorocket.settings import ConsumerSettings, build_settings

    s = build_settings(ConsumerSettings, {"namesrv": "h:1", "group": "g", "orderly": True})
    assert (s.lock_renew_interval, s.lock_expiry, s.max_continuous_consume_time) == (20, 30, 60)
    assert (s.suspend_delay, s.unlock_delay) == (1.0, 20.0)
    assert s.effective_max_reconsume_times == 2**31 - 1
    limited = build_settings(
        ConsumerSettings,
        {"namesrv": "h:1", "group": "g", "orderly": True, "max_reconsume_times": 3},
    )
    assert limited.effective_max_reconsume_times == 3
    with pytest.raises(ConfigurationError):
        build_settings(ConsumerSettings, {"namesrv": "h:1", "group": "g", "suspend_delay": 60})
    ctx = rmq.OrderlyContext(rmq.MessageQueue("T", "b", 0))
    assert (ctx.auto_commit, ctx.suspend_millis) == (True, 1000)
    assert {s.name for s in rmq.OrderlyStatus} == {
        "SUCCESS", "SUSPEND_CURRENT_QUEUE_A_MOMENT", "COMMIT", "ROLLBACK"
    }  # fmt: skip


async def test_a_dropped_queue_still_consuming_is_unlocked_late_or_at_shutdown(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    """``unlockDelay``: a queue dropped with messages still cached keeps its lock for
    ``unlock_delay`` after its handler returned; a shutdown releases it at once."""
    q7 = rmq.MessageQueue("Delay", "broker-a", 7)
    for i in range(20):
        await producer.send(Message("Delay", b"%d" % i), queue=q7)
    b_on_q7: list[float] = []
    busy = asyncio.Event()
    a = orderly_consumer(broker, "delay", "Delay", unlock_delay=30)

    @a.listener
    async def handle_a(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        busy.set()
        await asyncio.sleep(0.2)

    b = orderly_consumer(broker, "delay", "Delay")

    @b.listener
    async def handle_b(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        if ctx.queue == q7:
            b_on_q7.append(time.monotonic())

    async with a:
        await asyncio.wait_for(busy.wait(), 10)
        async with b:  # q7 moves to b; a drops it mid-handler with messages cached
            await wait_for(lambda: q7 not in a.statistics().queues, timeout=10, what="a drops q7")
            # b's rebalance rounds try to lock q7 meanwhile: two of them, and a moment more for
            # a delivery that would follow a granted lock
            rounds = b.statistics().rebalances + 2
            await wait_for(lambda: b.statistics().rebalances >= rounds, timeout=10, what="2 rounds")
            await asyncio.sleep(0.2)
            assert not b_on_q7  # the unlock waits for unlock_delay (30 s)
            await a.close()  # ... or for a's shutdown, which releases it at once
            closed = time.monotonic()
            await wait_for(lambda: bool(b_on_q7), timeout=5, what="b on q7")
    assert b_on_q7[0] - closed < 2.0


async def test_an_expired_lock_pauses_the_queue_until_renewed_then_it_is_reseated(
    broker: EmbeddedBroker,
    producer: Producer,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No renewal gets through for longer than ``lock_expiry``: the queue is neither pulled
    nor consumed; once a renewal is granted again the queue restarts from the broker's
    offset, so nothing is skipped."""
    from aiorocket._consumer.lock_renewer import BrokerLocks

    mq = rmq.MessageQueue("Expire", "broker-a", 0)
    starts: list[tuple[int, float]] = []
    consumer = orderly_consumer(
        broker, "expire", "Expire", lock_renew_interval=0.2, lock_expiry=0.8
    )

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        starts.extend((int(m.body), time.monotonic()) for m in msgs)
        await asyncio.sleep(0.005)

    async def send(start: int, count: int) -> None:
        for i in range(start, start + count):
            await producer.send(Message("Expire", b"%d" % i), queue=mq)
            await asyncio.sleep(0.01)

    real = BrokerLocks._lock_on
    outage = False

    async def flaky(self: BrokerLocks, broker_name: str, queues: list[rmq.MessageQueue]) -> Any:
        return None if outage else await real(self, broker_name, queues)

    monkeypatch.setattr(BrokerLocks, "_lock_on", flaky)
    caplog.set_level(logging.INFO, logger="aiorocket.consumer")
    async with consumer:
        await send(0, 50)
        await wait_for(lambda: len(starts) >= 50, timeout=10.0, what="the first 50")
        outage = True
        cut = time.monotonic()
        sender = asyncio.create_task(send(50, 100))
        # Within 1.5 s of the outage the lock (0.8 s expiry) is no longer trusted.
        await wait_for(
            lambda: not consumer.statistics().queues[mq].locked, timeout=1.5, what="lock expiry"
        )
        paused_at = len(starts)
        await asyncio.sleep(0.5)
        assert len(starts) == paused_at  # nothing consumed on an untrusted lock
        outage = False
        await sender
        await wait_for(
            lambda: {n for n, _ in starts} == set(range(150)), timeout=10.0, what="all 150"
        )
        assert consumer.statistics().queues[mq].locked
    assert f"{mq} locked again after its lock had expired" in caplog.text
    assert "first pull after locking starts at" in caplog.text  # re-seated (lockedFirst)
    # The last grant before the outage came at most one renew interval before it.
    assert all(t <= cut + 0.8 + 0.05 for n, t in starts[:paused_at])
    seq = [n for n, _ in starts]
    firsts = list(dict.fromkeys(seq))
    assert firsts == list(range(150))
    top = -1
    for prev, n in itertools.pairwise([-1, *seq]):
        assert n <= top + 1
        assert n == prev + 1 or n <= prev
        top = max(top, n)


async def test_running_info_and_consume_directly_report_orderly(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    from aiorocket._protocol.bodies import ConsumeMessageDirectlyResult, ConsumerRunningInfo
    from aiorocket._protocol.codes import RequestCode
    from aiorocket._protocol.command import RemotingCommand
    from tests.consumer.test_push_consumer_broker_requests import _consumer_channel

    queue = rmq.MessageQueue("OrdAdmin", "broker-a", 0)
    await producer.send(Message("OrdAdmin", b"first"), queue=queue)
    got: list[bytes] = []
    consumer = orderly_consumer(broker, "ord-admin", "OrdAdmin")
    answers = {
        b"ok": None,
        b"commit": rmq.OrderlyStatus.COMMIT,
        b"rollback": rmq.OrderlyStatus.ROLLBACK,
        b"later": rmq.OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT,
    }

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext
    ) -> rmq.OrderlyStatus | None:
        got.extend(m.body for m in msgs)
        if msgs[0].body == b"boom":
            raise RuntimeError("boom")
        return answers.get(msgs[0].body)

    async with consumer:
        await wait_for(lambda: got == [b"first"], timeout=10.0, what="the first message")
        conn = _consumer_channel(broker, "ord-admin")
        resp = await conn.request(
            RemotingCommand.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO,
                {"consumerGroup": "ord-admin", "clientId": consumer.client_id},
            )
        )
        info = ConsumerRunningInfo.from_json(resp.body)
        assert info.properties["PROP_CONSUMEORDERLY"] == "true"
        assert info.mq_table[queue].locked
        assert info.mq_table[queue].last_lock_timestamp > 0
        expected = {
            b"ok": "CR_SUCCESS",
            b"commit": "CR_COMMIT",
            b"rollback": "CR_ROLLBACK",
            b"later": "CR_LATER",
            b"boom": "CR_THROW_EXCEPTION",
        }
        for body, result in expected.items():
            resp = await consume_directly(conn, "ord-admin", "OrdAdmin", body)
            answer = ConsumeMessageDirectlyResult.from_json(resp.body)
            assert (answer.consume_result, answer.order) == (result, True), body


async def test_a_busy_queue_yields_its_slot_after_the_continuous_consume_time(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    """MAX_TIME_CONSUME_CONTINUOUSLY: with one concurrency slot, two busy queues take turns
    instead of the first one keeping the slot until its cache is empty."""
    for q in (0, 1):
        mq = rmq.MessageQueue("Slice", "broker-a", q)
        await producer.send_batch([Message("Slice", b"%d" % i) for i in range(30)], queue=mq)
    order: list[int] = []
    consumer = orderly_consumer(
        broker, "slice", "Slice", concurrency=1, max_continuous_consume_time=0.1
    )

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        order.append(ctx.queue.queue_id)
        await asyncio.sleep(0.01)

    async with consumer:
        await wait_for(lambda: len(order) == 60, timeout=10.0, what="60 deliveries")
    switches = sum(a != b for a, b in itertools.pairwise(order))
    assert switches >= 4, order  # a slice holds about 10 calls of 10 ms
    # Each slice is a run of one queue (concurrency 1: no interleaving inside a slice).
    runs = [len(list(g)) for _, g in itertools.groupby(order)]
    assert max(runs) < 30
