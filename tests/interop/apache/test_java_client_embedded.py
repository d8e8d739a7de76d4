"""The real Apache RocketMQ 4.9.8 Java client against aiorocket's embedded broker.

The embedded broker serves name-server and broker requests on one port, so the Java client
takes its address as name server. ``java/JClient.java`` drives ``DefaultMQProducer`` (sync,
oneway, orderly with a ``MessageQueueSelector``, batch, delay level), ``DefaultMQPushConsumer``
(concurrent, orderly, ``RECONSUME_LATER``) and ``DefaultLitePullConsumer`` (subscribe and
assign modes) and prints one JSON line per event; the broker runs in the test's event loop, so
its state (stored messages, committed offsets, queue locks) is read back with aiorocket or the
broker object itself. The Java broker is the reference: whatever the Java client cannot do
against the embedded broker is a bug of the embedded broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker, parse_delay_levels
from tests.interop.apache.install import Install
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

#: Queues of the topics the broker creates on demand (a Java broker's defaultTopicQueueNums).
QUEUES = 8
#: Delay levels: level 2 (what the delay test sends with) is 1 s so the wait can be measured;
#: every other level is 200 ms, so retries (level 3 + reconsumeTimes) come back quickly.
DELAY_LEVELS = parse_delay_levels("200ms 1s " + " ".join(["200ms"] * 16))
#: The broker's queue-lock lease (``rocketmq.broker.rebalance.lockMaxLiveTime``, 60 s): a
#: killed orderly member's queues are free for the survivor after this. The Java members renew
#: every second and consider a lock lost after 3 s (JClient sets both), the Python ones too.
LOCK_LEASE = 4.0

#: aiorocket consumer settings matching the Java members' (rebalance every second).
PY_CONSUMER: dict[str, Any] = {
    "consume_from": "first",
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 5.0,
    "lock_renew_interval": 1.0,
    "lock_expiry": 3.0,
    "unlock_delay": 0.2,
}

#: how long a JVM may take to start and get ready on a busy 2-core machine
BOOT = 60.0


# Fast delay levels and a short lock lease.
#
# The broker's housekeeping (expired channels and locks) runs once a minute only, so whatever a
# test sees happen to a killed member comes from the closed connection and the lease rules
# applied on LOCK_BATCH_MQ, as on a Java broker, not from a scan.
#
# Topics appear with ``QUEUES`` queues at a Java client's first route lookup (the embedded name
# server's opt-in shortcut): these tests start Java consumers before any producer and compare
# queue ids with ``QUEUES``, where a Java name server would make them wait for their 30 s route
# poll and the Java producer would create 4 queues.
pytestmark = pytest.mark.broker(
    create_topics_on_lookup=True,
    default_queues=QUEUES,
    delay_levels=DELAY_LEVELS,
    lock_lease=LOCK_LEASE,
    channel_scan_interval=60.0,
)


@contextlib.asynccontextmanager
async def java(classes: Path, tmp: Path, name: str, *args: str) -> AsyncIterator[JavaClient]:
    """Run ``JClient *args``; stopped (SIGTERM, a clean leave) when the block ends."""
    client = await JavaClient.start(classes, "JClient", *args, name=name, tmp=tmp / name)
    try:
        yield client
    finally:
        await client.stop()


async def wait_until(
    cond: Callable[[], bool], timeout: float, what: str, *clients: JavaClient
) -> float:
    """Poll ``cond`` every 50 ms; the seconds it took. Fails with the Java output tails."""
    start = time.monotonic()
    while not cond():
        for c in clients:
            if c.proc.returncode is not None:
                raise AssertionError(f"{c.name} exited while waiting for {what}\n{c.diagnostics()}")
        if time.monotonic() - start > timeout:
            tails = "\n".join(c.diagnostics() for c in clients)
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{tails}")
        await asyncio.sleep(0.05)
    return time.monotonic() - start


# -- messages --------------------------------------------------------------------------------


def java_body(i: int) -> str:
    """The body of message ``i`` of ``JClient produce`` (see ``JClient.build``)."""
    # every tenth is over the Java producer's compressMsgBodyOverHowmuch (4 KiB): compressed
    return f"java-{i}-Grüße-✓-" + "x" * (i % 40) + ("z" * 5000 if i % 10 == 7 else "")


def uni(i: int) -> str:
    """The non-ASCII user property ``uni`` of message ``i``, on both sides."""
    return f"žluťoučký kůň ✓ {i}"


def check_java_message(m: rmq.ReceivedMessage, i: int, keys: int = 8) -> None:
    """A message ``JClient produce`` sent, as aiorocket reads it back: every field intact."""
    assert m.body.decode() == java_body(i), m
    assert m.tags == f"t{i % 3}"
    assert list(m.keys) == [f"k{i}", f"kb{i}"]
    assert m.properties["idx"] == str(i)
    assert m.properties["okey"] == str(i % keys)
    assert m.properties["uni"] == uni(i)


def py_body(i: int) -> str:
    """The body of :func:`py_message` ``i``."""
    # every fiftieth is over aiorocket's compression threshold (4 KiB): the Java consumer
    # inflates it
    return f"py-{i}-ü✓-" + "y" * (i % 30) + ("w" * 5000 if i % 50 == 7 else "")


def py_message(topic: str, i: int, keys: int = 8) -> rmq.Message:
    """Message ``i`` sent by aiorocket to the Java consumers."""
    return rmq.Message(
        topic,
        py_body(i),
        tags=f"t{i % 3}",
        keys=[f"k{i}", f"kb{i}"],
        properties={"idx": str(i), "okey": str(i % keys), "uni": uni(i)},
    )


def check_java_delivery(e: dict[str, Any], keys: int = 8) -> None:
    """A ``msg`` event of a Java consumer shows an intact :func:`py_message`."""
    i = int(e["idx"])
    assert e["body"] == py_body(i), e
    assert e["tags"] == f"t{i % 3}", e
    assert e["keys"] == f"k{i} kb{i}", e
    assert e["okey"] == str(i % keys), e
    assert e["uni"] == uni(i), e


async def produce(
    broker: EmbeddedBroker, topic: str, indexes: Iterable[int], *, orderly: bool = False
) -> dict[int, rmq.SendResult]:
    """Send :func:`py_message` for each index (by order key when ``orderly``)."""
    results = {}
    async with rmq.Producer(namesrv=broker.address, group=unique_name("py_producer")) as p:
        for i in indexes:
            msg = py_message(topic, i)
            key = msg.properties["okey"] if orderly else None
            results[i] = await p.send(msg, sharding_key=key)
    return results


async def read_all(broker: EmbeddedBroker, topic: str) -> list[rmq.ReceivedMessage]:
    """Every message stored in ``topic``, read back with aiorocket's queue reader."""
    out: list[rmq.ReceivedMessage] = []
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        for mq in await reader.queues(topic):
            out.extend([m async for m in reader.read_range(mq, 0, await reader.max_offset(mq))])
    return out


def consumed(*clients: JavaClient) -> set[int]:
    """The idx of every message the Java consumers received."""
    return {int(e["idx"]) for c in clients for e in c.of("msg")}


def java_queues(c: JavaClient) -> set[int] | None:
    """The queues a Java push member holds now (its latest ``queues`` event)."""
    events = c.of("queues")
    return set(events[-1]["queues"]) if events else None


def java_locked(c: JavaClient) -> set[int]:
    """The held queues whose broker lock the Java orderly member believes it has."""
    events = c.of("queues")
    return set(events[-1]["locked"]) if events else set()


def partitioned(owned: Sequence[set[int] | None], sizes: Sequence[int]) -> bool:
    """Whether the members' queue sets are disjoint, cover every queue, and have ``sizes``
    (in any order): AllocateMessageQueueAveragely's split once every member agrees."""
    if any(s is None for s in owned):
        return False
    sets = [s for s in owned if s is not None]
    union = set().union(*sets)
    return (
        union == set(range(QUEUES))
        and sum(map(len, sets)) == QUEUES
        and sorted(map(len, sets)) == sorted(sizes)
    )


#: one orderly delivery: (epoch ms when consumed, member, order key, idx)
Delivery = tuple[int, str, int, int]


def check_key_order(deliveries: list[Delivery], total: int) -> None:
    """Orderly checks over the deliveries of every member of a group, merged by the time each
    was consumed (one clock: all members run on this machine).

    A key's messages (``idx ≡ key mod 8``, sent in idx order) are first delivered in send
    order with none missing; a re-delivery only replays a suffix (after a queue changed hands,
    the new owner restarts from the committed offset), never skips ahead.
    """
    by_key: dict[int, list[int]] = defaultdict(list)
    for _, _, key, idx in sorted(deliveries, key=lambda d: d[0]):
        by_key[key].append(idx)
    assert sorted(by_key) == list(range(8))
    for key, seq in by_key.items():
        firsts = list(dict.fromkeys(seq))
        assert firsts == list(range(key, total, 8)), f"key {key}: first deliveries {firsts}"
        top = seq[0]
        for prev, n in itertools.pairwise(seq):
            assert n <= top + 8, f"key {key}: skipped from {top} to {n}"
            assert n == prev + 8 or n <= prev, f"key {key}: {prev} then {n}"
            top = max(top, n)


def java_deliveries(name: str, c: JavaClient) -> list[Delivery]:
    """A Java member's deliveries as :data:`Delivery` tuples."""
    return [(e["ts"], name, int(e["okey"]), int(e["idx"])) for e in c.of("msg")]


# -- producer --------------------------------------------------------------------------------

COUNT = 40


@pytest.mark.parametrize("mode", ["sync", "oneway", "orderly", "batch", "delay"])
async def test_java_producer_messages_are_stored_intact(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path, mode: str, rocketmq: Install
) -> None:
    """``DefaultMQProducer`` sends in each mode; aiorocket reads every message back intact
    (body, tags, keys, user properties incl. non-ASCII) exactly where the Java
    ``SendResult`` said: its queue, offset, message id and offset message id.

    Except the message ids of a 5.x client's batch, on any broker: the 5.x client gives the
    batch itself a UNIQ_KEY too (``DefaultMQProducer.batch``), a broker appends the batch's
    properties to each member's own (5.x ``MessageExtEncoder``, 4.9.x ``CommitLog``), and a
    reader takes the last value of a repeated key (``MessageDecoder.string2messageProperties``),
    so every member reads back with the batch's id, which the ``SendResult`` does not list.
    The Apache 5.3 broker stores exactly that (seen with this client's batches there)."""
    topic = unique_name(f"j_{mode}")
    async with java(
        java_classes, tmp_path, "producer", "produce", broker.address, topic, mode, str(COUNT)
    ) as producer:
        await producer.wait_exit(BOOT)
    stored = await read_all(broker, topic)
    if mode == "delay":
        # delayed messages reach the topic after their level's delay
        deadline = time.monotonic() + 20
        while len(stored) < COUNT and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            stored = await read_all(broker, topic)
    by_idx = {int(m.properties["idx"]): m for m in stored}
    assert len(stored) == COUNT, "lost or duplicated"
    assert sorted(by_idx) == list(range(COUNT))
    for i, m in by_idx.items():
        check_java_message(m, i)
        assert m.topic == topic
        # stored as the Java producer sent it: large single bodies compressed (sysFlag bit 0,
        # which the reader inflates), batch members never
        assert bool(m.sys_flag & 1) == (i % 10 == 7 and mode != "batch"), (i, m.sys_flag)

    if mode == "batch":
        # One SendResult per batch: the batch is stored contiguously in one queue from the
        # reported offset; msgId lists the client's ids (UNIQ_KEY), offsetMsgId the broker's.
        batches = producer.of("sent_batch")
        assert sum(b["count"] for b in batches) == COUNT
        for b in batches:
            assert b["status"] == "SEND_OK"
            ids, offset_ids = b["msg_id"].split(","), b["offset_msg_id"].split(",")
            assert len(ids) == len(offset_ids) == b["count"]
            members = [by_idx[b["first"] + j] for j in range(b["count"])]
            for j, m in enumerate(members):
                assert (m.queue_id, m.queue_offset) == (b["queue"], b["offset"] + j)
                assert m.offset_msg_id == offset_ids[j]
                if not rocketmq.v5:
                    assert m.msg_id == ids[j]
            if rocketmq.v5:
                (batch_id,) = {m.msg_id for m in members}
                assert batch_id not in ids
        return

    sent = producer.of("sent")
    assert [e["i"] for e in sent] == list(range(COUNT))
    if mode == "oneway":
        return  # no SendResult to compare
    for e in sent:
        m = by_idx[e["i"]]
        assert e["status"] == "SEND_OK"
        assert m.msg_id == e["msg_id"]
        assert m.queue_id == e["queue"]
        if mode == "delay":
            # The Java broker answers a delayed send with the offset in SCHEDULE_TOPIC_XXXX
            # (where it parks the message), not the real queue's; the message reaches the
            # real queue only after its level's delay (1 s).
            assert m.store_timestamp - m.born_timestamp >= 950, m
            # as on a 4.9.8 broker, the delivered copy keeps DELAY (and the sender's WAIT)
            assert m.properties.get("DELAY") == "2", m
            assert m.properties.get("WAIT") == "true", m
        else:
            assert m.queue_offset == e["offset"]
            assert m.offset_msg_id == e["offset_msg_id"]
    if mode == "orderly":
        # The selector picks mqs[okey % size] from the route's queue list (sorted by id).
        assert all(by_idx[e["i"]].queue_id == e["i"] % 8 % QUEUES for e in sent)
        per_queue: dict[int, list[int]] = defaultdict(list)
        for e in sent:
            per_queue[e["queue"]].append(e["offset"])
        assert all(offs == sorted(set(offs)) for offs in per_queue.values())


# -- push consumer ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["concurrent", "orderly"])
async def test_java_push_members_survivor_takes_over_a_killed_member(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path, mode: str
) -> None:
    """Two Java ``DefaultMQPushConsumer`` members split the 8 queues; one is SIGKILLed. The
    embedded broker sees its channel close and notifies the survivor, which takes every queue
    (orderly: only once the dead member's lock leases ran out) and consumes what follows:
    nothing is lost, and for orderly each key's messages are consumed in send order."""
    topic, group = unique_name(f"j_push_{mode}"), unique_name(f"j_push_{mode}_g")
    await produce(broker, topic, [0], orderly=True)  # the topic exists before the members
    orderly = mode == "orderly"
    args = ("push", broker.address, topic, group, mode, "sleepMs=2")
    async with (
        java(java_classes, tmp_path, "member-a", *args) as a,
        java(java_classes, tmp_path, "member-b", *args) as b,
    ):
        await wait_until(
            lambda: partitioned([java_queues(a), java_queues(b)], [4, 4]), BOOT, "4 + 4", a, b
        )
        if orderly:
            await wait_until(
                lambda: len(java_locked(a)) == len(java_locked(b)) == 4, 20, "locks", a, b
            )
        await produce(broker, topic, range(1, 200), orderly=True)
        await wait_until(lambda: consumed(a, b) == set(range(200)), 30, "the first 200", a, b)
        a_queues = java_queues(a)
        assert a_queues is not None
        await a.kill()
        locks = broker._locks  # the broker's lock table, for inspection
        assert locks is not None
        if orderly:
            # A Java broker keeps a dead member's queue locks until the lease from its last
            # renewal runs out (RebalanceLockManager: locks survive the connection). Just
            # before the first of them runs out, they are still a's and b has none of them
            # (each queue's lease counts from its own last renewal, so the earliest decides).
            a_id = a.of("ready")[0]["client_id"]
            a_mqs = [rmq.MessageQueue(topic, broker.config.broker_name, q) for q in a_queues]
            first_expiry = min(locks._table[group][mq].last_update for mq in a_mqs) + LOCK_LEASE
            await asyncio.sleep(max(0.0, first_expiry - 0.3 - time.monotonic()))
            now = time.monotonic()
            assert [locks.holder(group, mq, now=now) for mq in a_mqs] == [a_id] * len(a_mqs)
            assert not java_locked(b) & a_queues
        # The broker learns of the death from the closed connection (not from the 120 s
        # channel expiry; its scan is off here) and notifies b, which rebalances at once; an
        # orderly b gets a's queues once their leases ran out, at its next rebalance.
        await wait_until(lambda: java_queues(b) == set(range(QUEUES)), 20, "takeover", b)
        if orderly:
            await wait_until(lambda: java_locked(b) == set(range(QUEUES)), 20, "b's locks", b)
        await produce(broker, topic, range(200, 400), orderly=True)
        await wait_until(lambda: consumed(b) >= set(range(200, 400)), 30, "the last 200 in b", b)
        from_a_queues = {int(e["idx"]) for e in b.of("msg") if e["queue"] in a_queues}
        assert from_a_queues & set(range(200, 400)), "b consumed nothing of a's former queues"
        for e in a.of("msg") + b.of("msg"):
            check_java_delivery(e)
        if orderly:
            check_key_order(java_deliveries("a", a) + java_deliveries("b", b), 400)
            queue_of: dict[str, set[int]] = defaultdict(set)
            for e in a.of("msg") + b.of("msg"):
                queue_of[e["okey"]].add(e["queue"])
            assert all(len(qs) == 1 for qs in queue_of.values()), queue_of
            # the broker's lock table agrees: b holds every queue
            b_id = b.of("ready")[0]["client_id"]
            now = time.monotonic()
            for q in range(QUEUES):
                mq = rmq.MessageQueue(topic, broker.config.broker_name, q)
                assert locks.holder(group, mq, now=now) == b_id


async def test_java_reconsume_later_goes_through_retry_to_dlq(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path
) -> None:
    """A Java listener returning ``RECONSUME_LATER``: the client sends each message back
    (CONSUMER_SEND_MSG_BACK with its ``maxReconsumeTimes``), it returns through
    ``%RETRY%group`` with reconsumeTimes + 1 each time, and after ``setMaxReconsumeTimes(2)``
    it lands in ``%DLQ%group``, where aiorocket reads it back intact."""
    topic, group = unique_name("j_retry"), unique_name("j_retry_g")
    sent = await produce(broker, topic, range(3))
    async with java(
        java_classes,
        tmp_path,
        "later",
        "push",
        broker.address,
        topic,
        group,
        "later",
        "maxReconsume=2",
    ) as c:
        dlq = f"%DLQ%{group}"

        async def dead() -> list[rmq.ReceivedMessage]:
            if dlq not in broker.topics.names():
                return []
            return await read_all(broker, dlq)

        deadline = time.monotonic() + 30
        while len(dead_letters := await dead()) < 3:
            assert time.monotonic() < deadline, "not in the DLQ\n" + c.diagnostics()
            await asyncio.sleep(0.2)
        deliveries = c.of("msg")
    times: dict[int, list[int]] = defaultdict(list)
    for e in deliveries:
        check_java_delivery(e)
        # the client restores the original topic; a retried copy names it in RETRY_TOPIC
        assert e["topic"] == topic
        assert (e["retry_topic"] == topic) == (e["reconsume"] > 0), e
        times[int(e["idx"])].append(e["reconsume"])
    # delivered once and retried twice (reconsumeTimes 0, 1, 2), then dead
    assert {i: sorted(t) for i, t in times.items()} == {i: [0, 1, 2] for i in range(3)}
    assert len(dead_letters) == 3
    for m in dead_letters:
        i = int(m.properties["idx"])
        assert m.reconsume_times == 3
        assert m.body.decode() == py_body(i)
        assert m.properties["uni"] == uni(i)
        assert m.msg_id == sent[i].msg_id  # UNIQ_KEY survives every send-back
        assert m.properties["RETRY_TOPIC"] == topic


# -- lite pull consumer ----------------------------------------------------------------------


async def committed_offsets(
    broker: EmbeddedBroker, group: str, topic: str
) -> dict[int, int | None]:
    """The group's committed offset of every queue, as the broker answers aiorocket."""
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        return {
            mq.queue_id: await reader.committed_offset(group, mq)
            for mq in await reader.queues(topic)
        }


async def max_offsets(broker: EmbeddedBroker, topic: str) -> dict[int, int]:
    """Every queue's max offset (one past its last message)."""
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        return {mq.queue_id: await reader.max_offset(mq) for mq in await reader.queues(topic)}


async def test_java_lite_pull_subscribe_reads_all_and_commits(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path
) -> None:
    """``DefaultLitePullConsumer`` in subscribe mode gets every queue by rebalance, polls every
    message intact, and its ``commitSync()`` reaches the broker: the group's committed offset
    of each queue is the queue's end (the client's persist task sends it, UPDATE_CONSUMER_OFFSET)."""
    topic, group = unique_name("j_lite_sub"), unique_name("j_lite_sub_g")
    await produce(broker, topic, range(COUNT))
    ends = await max_offsets(broker, topic)
    assert all(end > 0 for end in ends.values())  # every queue has messages to commit past
    async with java(
        java_classes, tmp_path, "lite-sub", "lite-sub", broker.address, topic, group, str(COUNT)
    ) as c:
        await c.wait_event("committed", BOOT)
        assert c.of("committed")[0]["queues"] == list(range(QUEUES))
        deadline = time.monotonic() + 15
        while (got := await committed_offsets(broker, group, topic)) != ends:
            assert time.monotonic() < deadline, f"committed {got}, expected {ends}"
            await asyncio.sleep(0.2)
    msgs = c.of("msg")
    assert sorted(int(e["idx"]) for e in msgs) == list(range(COUNT))
    for e in msgs:
        check_java_delivery(e)


async def test_java_lite_pull_assign_seek_commit(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path
) -> None:
    """``DefaultLitePullConsumer`` in assign mode: ``assign`` one queue, ``seek`` to offset 10
    reads exactly 10..29 in order; ``commitSync(offsets, true)`` stores 30 on the broker (seen
    by aiorocket while the Java client still runs); ``seek`` back to 4 re-reads 4..29; and
    ``committed()`` reads 30 back from the broker."""
    topic, group = unique_name("j_lite_assign"), unique_name("j_lite_assign_g")
    async with rmq.Producer(namesrv=broker.address, group=unique_name("py_producer")) as p:
        mq = rmq.MessageQueue(topic, broker.config.broker_name, 3)
        for i in range(30):
            await p.send(py_message(topic, i), queue=mq)
    # The group starts at the seek target: assign() starts a pull at once, and the Java client
    # can hand that pull's batch out after a seek() made while it was in flight (PullTaskImpl
    # checks the seek offset under the queue's lock, which the seek's new task may take first;
    # seen with the 5.5.0 client). Phase 2's seek comes with no pull in flight.
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        await reader.commit(group, mq, 10)
    args = ("lite-assign", broker.address, topic, group, "3", "10", "4", "30")
    async with java(java_classes, tmp_path, "lite-assign", *args) as c:
        ready = await c.wait_event("ready", BOOT)
        assert ready["queues"] == list(range(QUEUES))  # fetchMessageQueues: the route's queues
        await c.wait_event("committed", 30)
        deadline = time.monotonic() + 10
        while (await committed_offsets(broker, group, topic))[3] != 30:
            assert time.monotonic() < deadline, "the committed offset never reached the broker"
            await asyncio.sleep(0.1)
        done = await c.wait_event("done", 30)
    assert done["committed"] == 30
    phases: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e in c.of("msg"):
        check_java_delivery(e)
        assert e["queue"] == 3
        phases[e["phase"]].append((e["offset"], int(e["idx"])))
    assert phases[1] == [(o, o) for o in range(10, 30)]
    assert phases[2] == [(o, o) for o in range(4, 30)]
    others = await committed_offsets(broker, group, topic)
    assert all(others[q] in (0, None) for q in range(QUEUES) if q != 3), others


# -- mixed groups ----------------------------------------------------------------------------


def py_member(
    broker: EmbeddedBroker,
    topic: str,
    group: str,
    name: str,
    got: list[tuple[str, int, int]],
    timed: list[Delivery],
    *,
    orderly: bool,
) -> rmq.PushConsumer:
    """An aiorocket member of the mixed group recording ``(name, idx, queue)`` per delivery
    in ``got``, and the timed :data:`Delivery` in ``timed``."""
    consumer = rmq.PushConsumer(group=group, namesrv=broker.address, orderly=orderly, **PY_CONSUMER)
    consumer.subscribe(topic)

    async def handle(msgs: list[rmq.ReceivedMessage], ctx: object) -> None:
        for m in msgs:
            assert m.body.decode() == py_body(int(m.properties["idx"]))
            idx = int(m.properties["idx"])
            got.append((name, idx, m.queue_id))
            timed.append((time.time_ns() // 1_000_000, name, idx % 8, idx))

    consumer.register_listener(handle)
    return consumer


def py_queues(consumer: rmq.PushConsumer, topic: str) -> set[int]:
    """The queues of ``topic`` an aiorocket member holds (retry queues left out)."""
    return {mq.queue_id for mq in consumer.held() if mq.topic == topic}


def py_locked(consumer: rmq.PushConsumer, topic: str) -> set[int]:
    """The held queues of ``topic`` whose lock the aiorocket member holds."""
    return {
        mq.queue_id
        for mq, q in consumer.statistics().queues.items()
        if mq.topic == topic and q.locked
    }


@pytest.mark.parametrize("mode", ["concurrent", "orderly"])
async def test_mixed_java_and_aiorocket_members_share_one_group(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path, mode: str
) -> None:
    """Two Java ``DefaultMQPushConsumer`` members and two aiorocket ``PushConsumer`` members
    of ONE group on an 8-queue topic compute the same allocation from the broker's member
    list: 2 queues each, every queue owned exactly once (orderly: locked on the broker by its
    owner). When one Java member leaves cleanly (SIGTERM) the three others split 3/3/2.
    Nothing is lost; each message is consumed by the owner of its queue; orderly members keep
    each key's order."""
    orderly = mode == "orderly"
    topic, group = unique_name(f"mixed_{mode}"), unique_name(f"mixed_{mode}_g")
    await produce(broker, topic, [0], orderly=True)  # the topic exists before the members
    got: list[tuple[str, int, int]] = []
    timed: list[Delivery] = []
    p1 = py_member(broker, topic, group, "p1", got, timed, orderly=orderly)
    p2 = py_member(broker, topic, group, "p2", got, timed, orderly=orderly)
    args = ("push", broker.address, topic, group, mode)
    async with (
        java(java_classes, tmp_path, "j1", *args) as j1,
        java(java_classes, tmp_path, "j2", *args) as j2,
        p1,
        p2,
    ):
        members: dict[str, Callable[[], set[int] | None]] = {
            "j1": lambda: java_queues(j1),
            "j2": lambda: java_queues(j2),
            "p1": lambda: py_queues(p1, topic),
            "p2": lambda: py_queues(p2, topic),
        }
        locked: dict[str, Callable[[], set[int]]] = {
            "j1": lambda: java_locked(j1),
            "j2": lambda: java_locked(j2),
            "p1": lambda: py_locked(p1, topic),
            "p2": lambda: py_locked(p2, topic),
        }

        async def settle(names: list[str], sizes: list[int]) -> dict[str, set[int]]:
            def ready() -> bool:
                owned = [members[n]() for n in names]
                if not partitioned(owned, sizes):
                    return False
                # orderly: a member consumes a queue only once it holds the broker's lock
                return not orderly or all(locked[n]() == members[n]() for n in names)

            live = [c for n, c in (("j1", j1), ("j2", j2)) if n in names]
            await wait_until(ready, BOOT, f"{names} to split {sizes}", *live)
            owned = {n: members[n]() or set() for n in names}
            if orderly:
                await check_broker_locks(owned)
            return owned

        async def check_broker_locks(owned: dict[str, set[int]]) -> None:
            ids = {
                "j1": j1.of("ready")[0]["client_id"],
                "j2": j2.of("ready")[0]["client_id"],
                "p1": p1.client_id,
                "p2": p2.client_id,
            }
            locks = broker._locks  # the broker's lock table, for inspection
            assert locks is not None
            now = time.monotonic()
            for name, queues in owned.items():
                for q in queues:
                    mq = rmq.MessageQueue(topic, broker.config.broker_name, q)
                    assert locks.holder(group, mq, now=now) == ids[name], (name, q)

        def delivered() -> list[tuple[str, int, int]]:
            java_got = [
                (name, int(e["idx"]), e["queue"])
                for name, c in (("j1", j1), ("j2", j2))
                for e in c.of("msg")
            ]
            return java_got + got

        async def run_phase(names: list[str], sizes: list[int], indexes: range) -> None:
            owned = await settle(names, sizes)
            before = len(delivered())
            await produce(broker, topic, indexes, orderly=True)
            await wait_until(
                lambda: {i for _, i, _ in delivered()} >= set(indexes),
                30,
                f"messages {indexes}",
                j1,
            )
            assert {n: members[n]() for n in names} == owned, "ownership moved while consuming"
            for name, idx, queue in delivered()[before:]:
                if idx in indexes:
                    assert queue in owned[name], f"{name} consumed {idx} of queue {queue}"

        await run_phase(["j1", "j2", "p1", "p2"], [2, 2, 2, 2], range(1, 101))
        # a clean leave: the JVM's shutdown hook unregisters (and, orderly, unlocks)
        await j2.stop()
        await run_phase(["j1", "p1", "p2"], [3, 3, 2], range(101, 201))

    for e in j1.of("msg") + j2.of("msg"):
        check_java_delivery(e)
    if orderly:
        check_key_order(java_deliveries("j1", j1) + java_deliveries("j2", j2) + timed, 201)
