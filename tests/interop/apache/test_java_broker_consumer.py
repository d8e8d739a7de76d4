"""aiorocket push consumers in a group on the real Apache RocketMQ 4.9.8 broker (one broker).

* Concurrent consumption by two member processes (``tests/consumer/consumer_proc.py``) of an
  8-queue topic while a producer sends: every queue has exactly one owner, then one member
  leaves cleanly (SIGTERM: nothing lost, nothing delivered twice) or is SIGKILLed (nothing
  lost; the duplicates are the dead member's uncommitted work).
* Orderly consumption by two member processes (``tests/consumer/orderly_proc.py``) of keyed
  messages: per-key order holds in each member and across the hand-over, with the broker's
  queue locks deciding who consumes a queue.
* Retries: a message the handler refuses comes back through ``%RETRY%<group>`` with
  ``reconsume_times`` one higher each time, and past ``max_reconsume_times`` the broker moves
  it to ``%DLQ%<group>`` with the properties the Java broker sets.

The broker's queue-lock lease (``RebalanceLockManager.REBALANCE_LOCK_MAX_LIVE_TIME``, 60 s) is
not a ``broker.conf`` key but the JVM system property
``rocketmq.broker.rebalance.lockMaxLiveTime``; the module sets it to :data:`LEASE`
(``JAVA_BROKER_PROPERTIES``: the kit passes it in ``JDK_JAVA_OPTIONS``, since ``rmq broker``
takes no JVM options) so the SIGKILL hand-over of the orderly test waits seconds, not a minute.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from tests._harness.child import Child, produce_at_rate, wait_delivered
from tests._harness.orderly import Records, check_key_order, check_no_overlap, handler_calls
from tests._harness.wait import wait_for
from tests.consumer.conftest import FAST
from tests.interop.apache._groups import (
    CONSUMER_PROC,
    ORDERLY_PROC,
    create_topic,
    spawn,
    stop,
    stop_all,
    wait_route,
)
from tests.interop.apache.cluster import JavaCluster
from tests.interop.harness import unique_name

#: the broker's queue-lock lease in seconds (Java default 60)
LEASE = 5.0
JAVA_BROKER_PROPERTIES = {"rocketmq.broker.rebalance.lockMaxLiveTime": str(int(LEASE * 1000))}

QUEUES = 8
#: the members' offset persistence interval (``--persist-interval``)
PERSIST = 1.0
#: seconds to wait for a backlog to be consumed (generous: two cores shared with other brokers)
DRAIN_TIMEOUT = 90.0

LEAVES = [pytest.param(signal.SIGTERM, id="clean-leave"), pytest.param(signal.SIGKILL, id="kill")]


async def new_topic(cluster: JavaCluster) -> str:
    topic = unique_name("JGroup")
    await create_topic([cluster.broker_addr("broker-a")], topic, QUEUES)
    await wait_route(cluster.namesrv, topic, QUEUES)
    return topic


def owners(records: Records, names: list[str], field: str) -> dict[str, list[int]]:
    """The queues each named member held in its latest snapshot."""
    latest = records.latest("a", names)
    return {c: sorted(int(q) for q in r[field]) for c, r in latest.items()}


async def wait_one_owner_each(
    records: Records, names: list[str], field: str, timeout: float = 60.0
) -> None:
    """Wait until the named members' latest snapshots hold every queue exactly once."""

    def settled() -> bool:
        records.refresh()
        held = owners(records, names, field)
        count = Counter(q for qs in held.values() for q in qs)
        return (
            len(held) == len(names)
            and sorted(count) == list(range(QUEUES))
            and set(count.values()) == {1}
        )

    try:
        await wait_for(
            settled, timeout=timeout, what=f"each queue held once by {names}", interval=0.1
        )
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {owners(records, names, field)}") from None


def delivered_now(records: Records, key: str) -> set[str]:
    """Every id delivered so far: of ``d`` rows (one a message) for ``key`` ``"id"``, else of
    ``s`` rows (one a handler call, their ``ids``)."""
    rows = records.refresh()
    if key == "id":
        return {r["id"] for r in rows if r["k"] == "d"}
    return records.delivered()


async def leave_when_busy(b: Child, leave: signal.Signals, busy: Callable[[], bool]) -> float:
    """Stop member ``b`` with ``leave`` once ``busy()``; when it left (was killed or stopped)."""
    await wait_for(busy, timeout=60, what="b consuming", interval=0.1)
    await stop(b, leave)
    left_at = b.killed_at or b.stopped_at
    assert left_at is not None
    return left_at


# -- concurrent consumption ------------------------------------------------------------------


@pytest.mark.parametrize("leave", LEAVES)
async def test_two_members_share_the_queues_and_survive_one_leaving(
    java_cluster: JavaCluster, tmp_path: Path, leave: signal.Signals
) -> None:
    """Two processes of one group on an 8-queue topic, 4000 messages at 1000/s.

    After the group settles each queue is held by exactly one member. Mid-stream ``b`` leaves;
    the broker tells ``a`` (NOTIFY_CONSUMER_IDS_CHANGED on UNREGISTER_CLIENT or on the
    channel's close) and ``a`` takes all eight queues. A clean leave commits ``b``'s offsets
    before unregistering (as the Java client's shutdown persists them first), so ``a`` goes on
    exactly where ``b`` stopped: every offset of every queue is delivered exactly once. After
    SIGKILL ``a`` starts from ``b``'s last commit: nothing is lost, and the duplicates are
    messages ``b`` delivered during its last persistence interval.
    """
    ns = java_cluster.namesrv
    topic = await new_topic(java_cluster)
    group = unique_name("jflow")
    out = tmp_path / "out"
    out.mkdir()
    records = Records(out)
    opts = ("--sleep", "0.002", "--persist-interval", str(PERSIST))
    members: list[Child] = []
    production: asyncio.Task[None] | None = None
    try:
        members += await asyncio.gather(
            *(spawn(CONSUMER_PROC, n, ns, group, topic, out, *opts) for n in ("a", "b"))
        )
        b = members[1]
        await wait_one_owner_each(records, ["a", "b"], "queues")
        b_queues = set(owners(records, ["b"], "queues")["b"])
        assert 0 < len(b_queues) < QUEUES

        ids = [f"m{i}" for i in range(4000)]
        production = asyncio.create_task(
            produce_at_rate(ns, topic, unique_name("jprod"), ids, rate=1000)
        )

        def b_busy() -> bool:
            rows = records.refresh()
            return sum(1 for r in rows if r["k"] == "d" and r["c"] == "b") >= 300

        left_at = await leave_when_busy(b, leave, b_busy)
        await wait_one_owner_each(records, ["a"], "queues")
        await production
        await wait_delivered(
            lambda: delivered_now(records, "id"), ids, timeout=DRAIN_TIMEOUT, interval=0.1
        )
    finally:
        if production is not None:
            production.cancel()
        await stop_all(members)

    rows = [r for r in records.refresh() if r["k"] == "d"]
    counts = Counter(r["id"] for r in rows)
    assert set(counts) == set(ids)  # nothing lost
    by_member = Counter(r["c"] for r in rows)
    assert by_member["a"] > 0, by_member
    assert by_member["b"] > 0, by_member
    # The hand-over carried traffic: a consumed b's queues after b left.
    taken = {r["q"] for r in rows if r["c"] == "a" and r["t"] > left_at}
    assert b_queues <= taken, (b_queues, taken)
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in rows:
        per_queue[r["q"]].append(r["o"])
    assert sorted(per_queue) == list(range(QUEUES))
    dups = [i for i, n in counts.items() if n > 1]
    print(f"\n{leave.name}: {len(rows)} deliveries, {by_member}, {len(dups)} duplicated ids")
    if leave == signal.SIGTERM:
        assert dups == []
        for q, offsets in per_queue.items():
            # every offset once, from 0: a went on exactly at b's committed offset
            assert sorted(offsets) == list(range(len(offsets))), q
        return
    for q, offsets in per_queue.items():
        assert set(offsets) == set(range(max(offsets) + 1)), q
    # Duplicates: b delivered them first, during its last persistence interval (+1 s slack
    # for the commit in flight); a delivered them again from b's last committed offset.
    first: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["t"]):
        first.setdefault(r["id"], r)
    window = [r for r in rows if r["c"] == "b" and left_at - PERSIST - 1.0 <= r["t"] <= left_at]
    for i in dups:
        assert first[i]["c"] == "b", (i, first[i])
        assert first[i]["t"] >= left_at - PERSIST - 1.0, (i, left_at - first[i]["t"])
    assert len(dups) <= len(window)
    assert max(counts.values()) <= 2


# -- orderly consumption ---------------------------------------------------------------------

KEYS = [f"key{i:02d}" for i in range(20)]
PER_KEY = 100


async def produce_keyed(namesrv: str, topic: str, seconds: float) -> None:
    """``PER_KEY`` numbered messages per key, in rounds of 10 per key sent with the key as
    ``sharding_key`` (all of a key's messages go to one queue), spread over ``seconds``."""
    step = 10
    rounds = PER_KEY // step
    async with rmq.Producer(namesrv=namesrv, group=unique_name("jprod")) as p:
        start = time.monotonic()
        for r in range(rounds):
            for k in KEYS:
                batch = [rmq.Message(topic, f"{k}:{n}") for n in range(r * step, (r + 1) * step)]
                await p.send_batch(batch, sharding_key=k)
            ahead = start + (r + 1) * seconds / rounds - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)


@pytest.mark.parametrize("leave", LEAVES)
async def test_orderly_members_keep_per_key_order_across_a_hand_over(
    java_cluster: JavaCluster, tmp_path: Path, leave: signal.Signals
) -> None:
    """Two orderly members, 20 keys x 100 numbered messages; ``b`` leaves mid-stream.

    Each member consumes a queue only under the broker's lock (LOCK_BATCH_MQ), so per key the
    numbers come in order in each member's log and across the hand-over, and calls of the two
    members on one queue never overlap in time.

    Clean leave: ``b`` finishes its running call, commits, then unlocks (UNLOCK_BATCH_MQ) and
    unregisters, as Java's ``ConsumeMessageOrderlyService.shutdown`` unlocks all; ``a`` locks
    the freed queues at once and re-delivers nothing.

    SIGKILL: what 4.9.8 really does is keep the dead client's locks. The closed channel only
    leaves the consumer group (``ClientHousekeepingService`` ->
    ``ConsumerManager.doChannelCloseEvent``, which notifies ``a`` to rebalance); nothing calls
    ``RebalanceLockManager`` there, so ``a`` is refused every lock on ``b``'s queues until the
    lease runs out, ``lockMaxLiveTime`` after ``b``'s last lock renewal (60 s by default;
    :data:`LEASE` here). The test checks ``a`` starts none of ``b``'s queues before that, and
    that it does take them over soon after; ``b``'s uncommitted calls are replayed in order.
    """
    ns = java_cluster.namesrv
    topic = await new_topic(java_cluster)
    group = unique_name("jord")
    out = tmp_path / "out"
    out.mkdir()
    records = Records(out)
    opts = ("--sleep", "0.002")
    members: list[Child] = []
    production: asyncio.Task[None] | None = None
    wanted = {f"{k}:{n}" for k in KEYS for n in range(PER_KEY)}
    try:
        members += await asyncio.gather(
            *(spawn(ORDERLY_PROC, n, ns, group, topic, out, *opts) for n in ("a", "b"))
        )
        b = members[1]
        await wait_one_owner_each(records, ["a", "b"], "locks")
        production = asyncio.create_task(produce_keyed(ns, topic, seconds=5.0))

        def b_busy() -> bool:
            rows = records.refresh()
            return sum(len(r["ids"]) for r in rows if r["k"] == "s" and r["c"] == "b") >= 200

        left_at = await leave_when_busy(b, leave, b_busy)
        await wait_one_owner_each(records, ["a"], "locks", timeout=LEASE + 60)
        await production
        await wait_delivered(
            lambda: delivered_now(records, "ids"), wanted, timeout=DRAIN_TIMEOUT, interval=0.1
        )
    finally:
        if production is not None:
            production.cancel()
        await stop_all(members)

    rows = records.refresh()
    calls = handler_calls(rows, {"b": b.killed_at} if b.killed_at else {})
    check_no_overlap(calls)
    replays = check_key_order(calls, len(KEYS), PER_KEY)
    # The queues b held when it left (its last snapshot before, taken every 100 ms), and the
    # latest lock grant it recorded for each (in snapshots and at call starts).
    before = [r for r in rows if r["c"] == "b" and r["t"] <= left_at and not r.get("closed")]
    last = max((r for r in before if r["k"] == "a"), key=lambda r: r["t"])
    b_held = {int(q) for q in last["locks"]}
    assert b_held, "b held no queue when it left"
    b_locks: dict[int, float] = dict.fromkeys(b_held, 0.0)
    for r in before:
        for q, lk in r["locks"].items() if r["k"] == "a" else [(r["q"], r.get("lk", 0.0))]:
            if int(q) in b_locks:
                b_locks[int(q)] = max(b_locks[int(q)], lk)
    takeover = {
        q: min(c["s"] for c in calls if c["c"] == "a" and c["q"] == q and c["s"] > left_at)
        for q in b_held
    }
    print(
        f"\n{leave.name}: {replays} replays; a took b's queues "
        f"{sorted((q, round(t - left_at, 2)) for q, t in takeover.items())} s after the leave"
    )
    if leave == signal.SIGTERM:
        assert replays == 0
        return
    for q, t in takeover.items():
        # The broker refused a's lock until b's lease ran out. The broker stamps b's last
        # renewal when it handles it, after the request time ``lk`` records; 0.5 s slack for
        # the consumer's conversion of its monotonic lock times to epoch seconds.
        assert t >= b_locks[q] + LEASE - 0.5, (q, t - b_locks[q])
        # ... and then gave it at a's next rebalance (0.5 s), generously bounded.
        assert t <= b_locks[q] + LEASE + 30.0, (q, t - b_locks[q])


# -- retries and the dead-letter queue -------------------------------------------------------


async def test_refused_messages_come_back_through_the_retry_topic_then_go_to_the_dlq(
    java_cluster: JavaCluster,
) -> None:
    """A handler returning RECONSUME_LATER, with ``max_reconsume_times=2``.

    ``bad`` is always refused: CONSUMER_SEND_MSG_BACK makes the broker store it again in
    ``%RETRY%<group>`` at delay level 3 + reconsume times (every level is 1 s here), with
    ``reconsume_times`` + 1; at the third refusal (reconsume times 2 >= 2) the broker writes it
    to ``%DLQ%<group>`` instead (``SendMessageProcessor.asyncConsumerSendMsgBack``), keeping
    body and properties and adding ``RETRY_TOPIC`` (the original topic) and
    ``ORIGIN_MESSAGE_ID`` (the broker's id of the first copy). ``flaky`` is refused once and
    succeeds on its retry; ``good`` succeeds at once. Neither reaches the DLQ.
    """
    ns = java_cluster.namesrv
    topic = await new_topic(java_cluster)
    group = unique_name("jretry")
    got: list[tuple[rmq.ReceivedMessage, rmq.MessageQueue]] = []
    consumer = rmq.PushConsumer(
        group=group,
        namesrv=ns,
        max_reconsume_times=2,
        consume_from="first",
        **FAST,
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
    ) -> rmq.ConsumeStatus:
        got.extend((m, ctx.queue) for m in msgs)
        body = msgs[0].body
        if body == b"bad" or (body == b"flaky" and msgs[0].reconsume_times == 0):
            return rmq.ConsumeStatus.RECONSUME_LATER
        return rmq.ConsumeStatus.CONSUME_SUCCESS

    def deliveries(body: bytes) -> list[tuple[rmq.ReceivedMessage, rmq.MessageQueue]]:
        return [(m, q) for m, q in got if m.body == body]

    dlq_topic = f"%DLQ%{group}"
    dlq: list[rmq.ReceivedMessage] = []
    async with (
        rmq.Producer(namesrv=ns, group=unique_name("jprod")) as producer,
        rmq.QueueReader(namesrv=ns) as reader,
        consumer,
    ):
        sent = {
            body: await producer.send(
                rmq.Message(
                    topic, body, tags="T", keys=[f"key-{body.decode()}"], properties={"p": "v"}
                )
            )
            for body in (b"good", b"flaky", b"bad")
        }

        async def dead_lettered() -> bool:
            try:
                queues = await reader.queues(dlq_topic)
            except rmq.RocketError:
                return False  # the broker creates the DLQ topic with the first dead letter
            dlq.clear()
            for mq in queues:
                dlq.extend((await reader.read(mq, 0)).messages)
            return bool(dlq)

        await wait_for(
            lambda: len(deliveries(b"bad")) >= 3 and len(deliveries(b"flaky")) >= 2,
            timeout=60,
            what="retries",
            interval=0.1,
        )
        await wait_for(dead_lettered, timeout=60, what=f"a message in {dlq_topic}", interval=0.1)

    retry_topic = f"%RETRY%{group}"
    for body, times in ((b"good", [0]), (b"flaky", [0, 1]), (b"bad", [0, 1, 2])):
        ds = deliveries(body)
        assert [m.reconsume_times for m, _ in ds] == times, body
        for m, q in ds:
            # the first delivery comes from the topic, the retries from the retry topic; the
            # message keeps its topic (RETRY_TOPIC) and the producer's id (UNIQ_KEY)
            assert q.topic == (topic if m.reconsume_times == 0 else retry_topic), (body, q)
            assert m.topic == topic
            assert m.msg_id == sent[body].msg_id
            assert m.tags == "T"
            assert m.keys == [f"key-{body.decode()}"]
            assert m.properties["p"] == "v"
            if m.reconsume_times:
                assert m.properties["RETRY_TOPIC"] == topic
                assert m.properties["ORIGIN_MESSAGE_ID"] == sent[body].offset_msg_id

    assert len(dlq) == 1, [(m.body, m.reconsume_times) for m in dlq]
    (dead,) = dlq
    assert dead.body == b"bad"
    assert dead.topic == dlq_topic
    assert dead.reconsume_times == 3
    assert dead.msg_id == sent[b"bad"].msg_id
    assert dead.tags == "T"
    assert dead.keys == ["key-bad"]
    assert dead.properties["p"] == "v"
    assert dead.properties["RETRY_TOPIC"] == topic
    assert dead.properties["ORIGIN_MESSAGE_ID"] == sent[b"bad"].offset_msg_id
    assert len(deliveries(b"bad")) == 3  # nothing after the dead letter
