"""Orderly consumption ordered by key against the embedded broker over loopback TCP:
the keys of one queue run concurrently, each in order and one call at a time; a failing key
holds back only itself; keyless messages keep queue order among themselves; the committed
offset is the smallest unfinished one; rebalance and shutdown wait for the running calls."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket._protocol.properties import SHARDING_KEY
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.errors import ConfigurationError
from aiorocket.models import Message
from tests._harness.wait import wait_for
from tests.consumer.test_orderly import orderly_consumer


class Tracker:
    """Records handler calls: per-key sequences, calls running per key and overall."""

    def __init__(self) -> None:
        self.seqs: dict[str, list[int]] = defaultdict(list)
        self.running: dict[str | None, int] = defaultdict(int)
        self.max_per_key = 0
        self.now = 0
        self.max_now = 0
        self.first = 0.0
        self.last = 0.0
        self.delivered = 0

    def start(self, key: str | None) -> None:
        if not self.first:
            self.first = time.monotonic()
        self.running[key] += 1
        self.max_per_key = max(self.max_per_key, self.running[key])
        self.now += 1
        self.max_now = max(self.max_now, self.now)

    def end(self, key: str | None, msgs: list[rmq.ReceivedMessage]) -> None:
        self.running[key] -= 1
        self.now -= 1
        for m in msgs:
            k, n = m.body.decode().split(":")
            self.seqs[k].append(int(n))
        self.delivered += len(msgs)
        self.last = time.monotonic()


def keyed_consumer(
    broker: EmbeddedBroker, group: str, topic: str, **extra: Any
) -> rmq.PushConsumer:
    """An orderly consumer of ``topic`` ordered by sharding key (``extra`` over the defaults)."""
    return orderly_consumer(broker, group, topic, **{"order_by": "sharding_key", **extra})


async def test_keys_of_one_queue_run_concurrently_each_in_order(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    """20 keys x 100 numbered messages in one queue, a handler waiting 10 ms: every key in
    order, never two calls of a key at once, and the drain takes a fraction of the 20 s the
    queue takes one message at a time."""
    q0 = rmq.MessageQueue("Keys", "broker-a", 0)
    keys = [f"k{i:02d}" for i in range(20)]
    per_key = 100
    for n in range(per_key):
        batch = [Message("Keys", f"{k}:{n}".encode()) for k in keys]
        for k, m in zip(keys, batch, strict=True):
            await producer.send(m, queue=q0, sharding_key=k)
    total = len(keys) * per_key
    t = Tracker()
    consumer = keyed_consumer(broker, "keys", "Keys")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        assert ctx.queue == q0
        assert {m.properties[SHARDING_KEY] for m in msgs} == {ctx.key}
        t.start(ctx.key)
        await asyncio.sleep(0.01)
        t.end(ctx.key, msgs)

    async with consumer:
        await wait_for(lambda: t.delivered >= total, timeout=60, what="every message")
        await wait_for(
            lambda: consumer.statistics().queues[q0].committed_offset == total,
            timeout=10.0,
            what="the final commit",
        )
    assert t.delivered == total
    assert all(t.seqs[k] == list(range(per_key)) for k in keys), t.seqs
    assert t.max_per_key == 1
    assert t.max_now >= 10  # keys really ran side by side
    serial = total * 0.01  # the queue handled one message at a time: 20 s at best
    drain = t.last - t.first
    assert drain < 0.5 * serial, f"drained in {drain:.2f} s; one at a time needs {serial} s"


async def test_a_failing_message_delays_only_its_key(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    """k0's message 5 fails (an exception, then SUSPEND) until every other key finished: the
    other keys are not held back, k0 delivers nothing after 5 before 5 succeeds, and the
    committed offset waits at k0:5, the smallest unfinished message."""
    q0 = rmq.MessageQueue("KeyFail", "broker-a", 0)
    keys = [f"k{i}" for i in range(5)]
    offsets: dict[str, int] = {}
    for n in range(20):
        for k in keys:
            r = await producer.send(
                Message("KeyFail", f"{k}:{n}".encode()), queue=q0, sharding_key=k
            )
            offsets[f"{k}:{n}"] = r.queue_offset
    others_done = asyncio.Event()
    t = Tracker()
    k0: list[tuple[int, int]] = []
    committed_while_stuck: list[int] = []
    consumer = keyed_consumer(broker, "key-fail", "KeyFail", suspend_delay=0.05)

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext
    ) -> rmq.OrderlyStatus | None:
        (m,) = msgs
        k, n = m.body.decode().split(":")
        if k == "k0":
            k0.append((int(n), m.reconsume_times))
            if n == "5" and not others_done.is_set():
                if m.reconsume_times == 0:
                    raise RuntimeError("not yet")
                return rmq.OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        t.start(ctx.key)
        await asyncio.sleep(0.005)
        t.end(ctx.key, msgs)
        if all(len(t.seqs[o]) == 20 for o in keys[1:]) and not others_done.is_set():
            await asyncio.sleep(0.2)  # the commit of this call, and more retries of k0:5
            committed_while_stuck.append(consumer.statistics().queues[q0].committed_offset)
            others_done.set()
        return None

    async with consumer:
        await asyncio.wait_for(others_done.wait(), 30)
        await wait_for(lambda: len(t.seqs["k0"]) == 20, timeout=10.0, what="k0 to finish")
        await wait_for(
            lambda: consumer.statistics().queues[q0].committed_offset == 100,
            timeout=10.0,
            what="final commit",
        )
    assert all(t.seqs[k] == list(range(20)) for k in keys)
    retries = [r for n, r in k0 if n == 5]
    assert len(retries) >= 3
    assert retries == list(range(len(retries)))
    # nothing of k0 after 5 was delivered before 5 succeeded
    assert [n for n, _ in k0] == [0, 1, 2, 3, 4] + [5] * len(retries) + list(range(6, 20))
    assert committed_while_stuck == [offsets["k0:5"]]


async def test_keyless_messages_keep_queue_order_among_themselves(
    broker: EmbeddedBroker, producer: Producer, caplog: pytest.LogCaptureFixture
) -> None:
    """A callable key: keyed messages run per key, those without a key (``None``, or a key
    function that failed: logged) one at a time in queue order."""
    q0 = rmq.MessageQueue("Keyless", "broker-a", 0)
    bodies = [f"{k}:{n}" for n in range(30) for k in ("a", "b", "c", "-", "bad")]
    for body in bodies:
        await producer.send(Message("Keyless", body.encode()), queue=q0)

    def key_of(msg: rmq.ReceivedMessage) -> str | None:
        k = msg.body.decode().split(":")[0]
        if k == "bad":
            raise ValueError("no key here")
        return None if k == "-" else k

    t = Tracker()
    keyless: list[str] = []
    consumer = keyed_consumer(broker, "keyless", "Keyless", order_by=key_of)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        t.start(ctx.key)
        if ctx.key is None:
            keyless.extend(m.body.decode() for m in msgs)
        await asyncio.sleep(0.005)
        t.end(ctx.key, msgs)

    caplog.set_level(logging.ERROR, logger="aiorocket.consumer")
    async with consumer:
        await wait_for(lambda: t.delivered == len(bodies), timeout=10.0, what="every message")
    assert t.max_per_key == 1  # the keyless ones (None) included
    assert t.max_now > 1
    assert all(t.seqs[k] == list(range(30)) for k in ("a", "b", "c", "-", "bad"))
    assert keyless == [b for b in bodies if b.split(":")[0] in ("-", "bad")]
    assert "order_by key function failed" in caplog.text


async def test_batches_hold_one_key_and_auto_commit_false_is_refused(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    """``consume_batch_size`` messages of one key per call; ``ctx.auto_commit = False`` raises
    ``ConfigurationError`` (COMMIT and ROLLBACK would settle other keys' messages too)."""
    q0 = rmq.MessageQueue("KeyBatch", "broker-a", 0)
    for n in range(12):
        for k in ("x", "y"):
            await producer.send(Message("KeyBatch", f"{k}:{n}".encode()), queue=q0, sharding_key=k)
    calls: list[tuple[str | None, list[str]]] = []
    refused: list[str] = []
    consumer = keyed_consumer(broker, "key-batch", "KeyBatch", consume_batch_size=4)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> rmq.OrderlyStatus:
        calls.append((ctx.key, [m.body.decode() for m in msgs]))
        try:
            ctx.auto_commit = False
        except ConfigurationError as exc:
            refused.append(str(exc))
        assert ctx.auto_commit
        return rmq.OrderlyStatus.COMMIT  # counts as SUCCESS with auto-commit

    async with consumer:
        await wait_for(
            lambda: sum(len(b) for _, b in calls) == 24, timeout=10.0, what="every message"
        )
        await wait_for(
            lambda: consumer.statistics().queues[q0].committed_offset == 24,
            timeout=10.0,
            what="the commit",
        )
    for key, batch in calls:
        assert {b.split(":")[0] for b in batch} == {key}
        assert 1 <= len(batch) <= 4
    for k in ("x", "y"):
        seq = [int(b.split(":")[1]) for key, batch in calls if key == k for b in batch]
        assert seq == list(range(12))
    assert len(refused) == len(calls)
    assert "order_by" in refused[0]


async def test_shutdown_waits_for_running_keys_and_commits_the_smallest_unfinished(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    """A close while calls of several keys run: every running call finishes (none is
    cancelled), nothing new starts, and a new member continues from the smallest unfinished
    offset, so each key replays at most an in-order suffix and nothing is lost."""
    q0 = rmq.MessageQueue("KeyStop", "broker-a", 0)
    keys = [f"k{i}" for i in range(6)]
    for n in range(10):
        for k in keys:
            await producer.send(Message("KeyStop", f"{k}:{n}".encode()), queue=q0, sharding_key=k)
    started: list[str] = []
    ended: list[str] = []
    slow_running = asyncio.Event()
    first = keyed_consumer(broker, "key-stop", "KeyStop")

    @first.listener
    async def slow(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        body = msgs[0].body.decode()
        started.append(body)
        if body.endswith(":3"):
            slow_running.set()
            await asyncio.sleep(0.5)
        else:
            await asyncio.sleep(0.01)
        ended.append(body)

    async with first:
        await asyncio.wait_for(slow_running.wait(), 10)
    assert sorted(started) == sorted(ended)  # drained, not cancelled
    assert len(ended) < 60
    again: list[str] = []
    second = keyed_consumer(broker, "key-stop", "KeyStop")

    @second.listener
    async def rest(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        again.extend(m.body.decode() for m in msgs)

    async with second:
        await wait_for(
            lambda: set(ended) | set(again) == {f"{k}:{n}" for k in keys for n in range(10)},
            timeout=10.0,
            what="the rest",
        )
    for k in keys:
        done = [int(b.split(":")[1]) for b in ended if b.startswith(k + ":")]
        replay = [int(b.split(":")[1]) for b in again if b.startswith(k + ":")]
        assert done == list(range(len(done)))
        assert replay, k  # nobody finished a key before the close
        assert replay == list(range(replay[0], 10))
        assert replay[0] <= len(done)  # an in-order suffix: nothing skipped


async def test_members_joining_and_leaving_hand_keys_over_in_order(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    """Member b joins while a runs slow calls of several keys, then leaves while its own slow
    calls run. The queue lock (Java's consume lock) covers every call of a queue: a
    member starts on a moved queue only after the other's last call there ended, and every
    key stays in order across both hand-overs (a replay is an in-order suffix)."""
    keys = [f"k{i:02d}" for i in range(16)]
    per_key = 30
    for n in range(per_key):
        for k in keys:
            await producer.send(Message("KeyHand", f"{k}:{n}".encode()), sharding_key=k)
    calls: list[tuple[str, int, str, float, float]] = []
    slow: dict[str, set[int]] = {"a": set(), "b": set()}  # queues with a slow call started
    slow_at = {"a": 5, "b": 20}  # which message of every key is slow in each member
    slow_for = {"a": 2.0, "b": 1.0}

    def member(name: str) -> rmq.PushConsumer:
        c = keyed_consumer(broker, "key-handover", "KeyHand")

        @c.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
            t0 = time.monotonic()
            if any(m.body.endswith(b":%d" % slow_at[name]) for m in msgs):
                slow[name].add(ctx.queue.queue_id)
                await asyncio.sleep(slow_for[name])
            else:
                await asyncio.sleep(0.005)
            end = time.monotonic()
            calls.extend((name, ctx.queue.queue_id, m.body.decode(), t0, end) for m in msgs)

        return c

    a, b = member("a"), member("b")
    wanted = {f"{k}:{n}" for k in keys for n in range(per_key)}
    async with a:
        await wait_for(lambda: len(slow["a"]) == 8, timeout=10.0, what="slow calls on every queue")
        async with b:  # b takes half of the queues, where a's slow calls still run
            await wait_for(lambda: bool(slow["b"]), timeout=20, what="b's slow calls")
        left = time.monotonic()  # b left while its slow calls ran: a takes its queues back
        await wait_for(lambda: {c[2] for c in calls} >= wanted, timeout=30, what="everything")
    assert any(c[0] == "b" for c in calls)
    assert any(c[0] == "a" and c[3] > left for c in calls)
    by_queue: dict[int, list[tuple[str, int, str, float, float]]] = defaultdict(list)
    for c in calls:
        by_queue[c[1]].append(c)
    moved = 0
    for q, cs in by_queue.items():
        cs.sort(key=lambda c: c[3])
        latest: dict[str, float] = {}  # per member, the latest end of its calls so far
        for name, _, body, start, _end in cs:
            others = [e for n, e in latest.items() if n != name]
            assert not others or max(others) <= start, f"queue {q}: {name} {body} overlaps"
            latest[name] = max(latest.get(name, 0.0), _end)
        moved += len({c[0] for c in cs}) > 1
    assert moved >= 2  # queues really changed hands
    seqs: dict[str, list[int]] = defaultdict(list)
    for c in sorted(calls, key=lambda c: c[3]):
        key, num = c[2].split(":")
        seqs[key].append(int(num))
    for k, seq in seqs.items():
        top = prev = -1
        for i in seq:
            assert i <= top + 1, f"key {k} skipped to {i} after {top}"
            assert i == prev + 1 or i <= prev, f"key {k}: {prev} then {i}"  # or a replay
            top, prev = max(top, i), i
        assert list(dict.fromkeys(seq)) == list(range(per_key)), k


def test_order_by_settings() -> None:
    from aiorocket.settings import ConsumerSettings, build_settings

    base = {"namesrv": "h:1", "group": "g"}
    assert build_settings(ConsumerSettings, base).order_by == "queue"
    s = build_settings(ConsumerSettings, {**base, "orderly": True, "order_by": "sharding_key"})
    assert s.order_by == "sharding_key"
    with pytest.raises(ConfigurationError, match="order_by needs orderly=True"):
        build_settings(ConsumerSettings, {**base, "order_by": "sharding_key"})
    with pytest.raises(ConfigurationError, match="order_by"):
        build_settings(ConsumerSettings, {**base, "orderly": True, "order_by": "tenant"})
    with pytest.raises(ConfigurationError, match="order_by needs orderly=True"):
        rmq.PushConsumer(group="g", namesrv="h:1", order_by=lambda m: None)
    ctx = rmq.OrderlyContext(rmq.MessageQueue("T", "b", 0))
    ctx.auto_commit = False  # ordering by queue: allowed
    assert ctx.key is None
    assert not ctx.auto_commit
    keyed = rmq.OrderlyContext._for_key(rmq.MessageQueue("T", "b", 0), "k", 1000)
    with pytest.raises(ConfigurationError, match="auto_commit=False"):
        keyed.auto_commit = False
    keyed.auto_commit = True
    assert keyed.key == "k"
    assert "key='k'" in repr(keyed)
