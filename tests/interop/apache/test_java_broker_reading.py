"""Reading from the real Apache RocketMQ 4.9.8 broker: where a new group starts, queue ranges
far beyond one pull, the Spark source, and broadcasting with local offsets.

Where a brand-new group starts (``consume_from``) is decided jointly by the client and the
broker, and 4.9.8 has a rule that surprises (a young broker answers offset 0 for a group that
never committed, so "last" and a timestamp start at 0): the docstring of the
``consume_from="last"`` test has the details. The Java client (``FromWhere``, a small program
compiled from the source below) runs next to aiorocket there, to show both start at the same
place.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from aiorocket import Producer, PushConsumer, QueueReader
from aiorocket._client.instance import ClientInstance
from aiorocket._protocol.command import RemotingCommand
from aiorocket.models import ConcurrentContext, Message, MessageQueue, ReceivedMessage, SendResult
from aiorocket.settings import ClientSettings
from tests._harness.wait import wait_for
from tests.consumer.conftest import FAST
from tests.interop.apache._groups import visible
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import Install, compile_java
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

#: Generous waits: Java clients boot in 2-5 s on an idle 2-core machine, much more under load.
JAVA_TIMEOUT = 90.0
WAIT = 60.0
#: queues of a topic our producer auto-creates (``default_topic_queue_nums``)
QUEUES = 4

#: FromWhere: a Java 4.9.8 push consumer of a new group with a chosen ConsumeFromWhere. It
#: prints {"ev":"ready"} once every queue of the topic got its start offset
#: (computePullFromWhere ran: the queue is in the rebalance's processQueueTable), then one line
#: per message, until it is killed.
FROM_WHERE_SOURCE = r"""
import java.util.*;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.*;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.*;

public class FromWhere {
    public static void main(String[] a) throws Exception {
        // FromWhere NAMESRV TOPIC GROUP QUEUES first|last
        String ns = a[0], topic = a[1], group = a[2];
        int queues = Integer.parseInt(a[3]);
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setConsumeFromWhere(a[4].equals("first")
            ? ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
            : ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
        c.subscribe(topic, "*");
        c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                synchronized (System.out) {
                    System.out.println("{\"ev\":\"msg\",\"queue\":" + m.getQueueId()
                        + ",\"offset\":" + m.getQueueOffset() + ",\"idx\":\""
                        + m.getUserProperty("idx") + "\",\"msg_id\":\"" + m.getMsgId() + "\"}");
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        while (true) {
            long held = c.getDefaultMQPushConsumerImpl().getRebalanceImpl()
                .getProcessQueueTable().keySet().stream()
                .filter(mq -> mq.getTopic().equals(topic)).count();
            if (held >= queues) break;
            Thread.sleep(20);
        }
        synchronized (System.out) { System.out.println("{\"ev\":\"ready\"}"); }
        Thread.sleep(Long.MAX_VALUE);
    }
}
"""


@pytest.fixture(scope="module")
def from_where_classes(java_classes: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`FROM_WHERE_SOURCE` compiled (``java_classes`` checks the kit is usable)."""
    src = tmp_path_factory.mktemp("from-where-src") / "FromWhere.java"
    src.write_text(FROM_WHERE_SOURCE, encoding="utf-8")
    return compile_java(tmp_path_factory.mktemp("from-where-classes"), [src])


# -- helpers -------------------------------------------------------------------------------------


def make_message(topic: str, i: int) -> Message:
    """Message ``i``: distinct body, tag, key and an ``idx`` property."""
    return Message(
        topic,
        f"m-{i}-{'z' * (i % 11)}",
        tags=f"t{i % 3}",
        keys=[f"k{i}"],
        properties={"idx": str(i), "half": str(i // 2)},
    )


async def send_all(namesrv: str, topic: str, indices: Sequence[int]) -> list[SendResult]:
    """Send message ``i`` for each index, one after the other (round-robin over the queues);
    returns once every one is visible to readers (see :func:`visible`)."""
    async with Producer(namesrv=namesrv, group=unique_name("pg")) as producer:
        results = [await producer.send(make_message(topic, i)) for i in indices]
    await all_visible(namesrv, results)
    return results


async def all_visible(namesrv: str, results: Sequence[SendResult]) -> None:
    """Wait until every result's offset is visible to readers."""
    ends: dict[MessageQueue, int] = {}
    for r in results:
        ends[r.queue] = max(ends.get(r.queue, 0), r.queue_offset + 1)
    async with QueueReader(namesrv=namesrv) as reader:
        for mq, end in ends.items():
            await visible(reader, mq, end, WAIT)


def idx_of(msgs: Sequence[ReceivedMessage]) -> list[int]:
    """The ``idx`` properties of ``msgs``, sorted."""
    return sorted(int(m.properties["idx"]) for m in msgs)


@contextlib.asynccontextmanager
async def consuming(
    namesrv: str, topic: str, group: str, **settings: Any
) -> AsyncIterator[tuple[PushConsumer, list[ReceivedMessage]]]:
    """A started :class:`PushConsumer` of ``topic``; yields it and the list its handler fills.
    ``start()`` returned after the first rebalance, so every queue has its start offset."""
    got: list[ReceivedMessage] = []
    consumer = PushConsumer(group=group, namesrv=namesrv, **{**FAST, **settings})
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        got.extend(msgs)

    async with consumer:
        yield consumer, got


def held_queues(consumer: PushConsumer, topic: str) -> int:
    """How many queues of ``topic`` the consumer holds."""
    return sum(1 for mq in consumer.statistics().queues if mq.topic == topic)


async def java_from_where(
    classes: Path, namesrv: str, topic: str, where: str, tmp: Path
) -> JavaClient:
    """A started ``FromWhere`` consumer of a new group, past its ``ready`` line."""
    client = await JavaClient.start(
        classes,
        "FromWhere",
        namesrv,
        topic,
        unique_name("java_group"),
        str(QUEUES),
        where,
        tmp=tmp,
    )
    try:
        await client.wait_event("ready", JAVA_TIMEOUT)
    except BaseException:
        await client.kill()
        raise
    return client


def java_idx(client: JavaClient) -> list[int]:
    """The ``idx`` of every message the Java consumer printed, sorted."""
    return sorted(int(e["idx"]) for e in client.of("msg"))


#: Java ``RequestCode.UPDATE_BROKER_CONFIG`` (what ``mqadmin updateBrokerConfig`` sends): the
#: body's ``k=v`` lines update the live broker's configuration, MessageStoreConfig included.
UPDATE_BROKER_CONFIG = 25
#: MessageStoreConfig.accessMessageInMemoryMaxRatio's default
DEFAULT_IN_MEMORY_RATIO = 40


async def set_in_memory_ratio(cluster: JavaCluster, percent: int) -> None:
    """Set ``accessMessageInMemoryMaxRatio`` of the running broker."""
    client = ClientInstance(ClientSettings(namesrv=(cluster.namesrv,)))
    body = f"accessMessageInMemoryMaxRatio={percent}\n".encode()
    async with asyncio.TaskGroup() as tg:
        client.start(tg.create_task)
        try:
            resp = await client.invoke(
                cluster.broker_addr("broker-a"),
                RemotingCommand.request(UPDATE_BROKER_CONFIG, {}, body),
            )
        finally:
            await client.close()
    assert resp.code == 0, resp.remark


@contextlib.asynccontextmanager
async def head_counts_as_old(cluster: JavaCluster) -> AsyncIterator[None]:
    """With ``accessMessageInMemoryMaxRatio=0`` every stored message counts as "on disk"
    (``checkInDiskByCommitOffset``: more than 0 bytes of commit log after it), as the head of
    a queue on a long-running broker does; restored afterwards."""
    await set_in_memory_ratio(cluster, 0)
    try:
        yield
    finally:
        await set_in_memory_ratio(cluster, DEFAULT_IN_MEMORY_RATIO)


# -- where a new group starts ---------------------------------------------------------------------


async def test_consume_from_first_reads_what_was_sent_before_the_group(
    java_cluster: JavaCluster,
) -> None:
    """``consume_from="first"``: no offset stored for the new group, so every queue starts at 0
    and the messages sent before the group existed all arrive, once."""
    ns = java_cluster.namesrv
    topic = unique_name("FromFirst")
    await send_all(ns, topic, range(12))
    async with consuming(ns, topic, unique_name("cg"), consume_from="first") as (_, got):
        await wait_for(lambda: len(got) >= 12, timeout=WAIT, what="the earlier messages")
        await send_all(ns, topic, range(12, 16))
        await wait_for(lambda: len(got) >= 16, timeout=WAIT, what="the later messages")
        await asyncio.sleep(0.5)  # a duplicate would show up by now
    assert idx_of(got) == list(range(16))


async def both_from_last(
    classes: Path, ns: str, topic: str, tmp_path: Path, n: int
) -> tuple[list[int], list[int]]:
    """A Java consumer and ours, each of a new group consuming from "last", once they hold
    every queue: messages 8 to 11 sent, what each consumed (``idx``) once both have ``n``."""
    java = await java_from_where(classes, ns, topic, "last", tmp_path)
    try:
        async with consuming(ns, topic, unique_name("cg"), consume_from="last") as (c, got):
            await wait_for(
                lambda: held_queues(c, topic) == QUEUES, timeout=WAIT, what="every queue"
            )
            await send_all(ns, topic, range(8, 12))
            await wait_for(lambda: len(got) >= n, timeout=WAIT, what=f"{n} messages")
            await java.wait_until(lambda j: len(j.of("msg")) >= n, WAIT, f"{n} messages")
            await asyncio.sleep(0.5)  # a duplicate, or an earlier message, would show up by now
    finally:
        await java.kill()
    return idx_of(got), java_idx(java)


async def test_consume_from_last_follows_the_java_broker_rule_for_a_new_group(
    java_cluster: JavaCluster, from_where_classes: Path, tmp_path: Path, rocketmq: Install
) -> None:
    """``consume_from="last"`` on a brand-new group is *not* simply "the end of each queue".

    What 4.9.8 does (read from its code):

    * the client (``RebalancePushImpl.computePullFromWhereWithException``, CONSUME_FROM_LAST_
      OFFSET) first asks the broker for the group's stored offset (QUERY_CONSUMER_OFFSET,
      ``RemoteBrokerOffsetStore.readOffset(READ_FROM_STORE)``); any offset >= 0 is used as is;
      only "none" (-1: the broker answered an error code, QUERY_NOT_FOUND here) makes it start
      at the queue's max offset (a retry topic at 0); aiorocket's ``query_consumer_offset``
      maps any error code to "none" the same way;
    * the broker (``ConsumerManageProcessor.queryConsumerOffset``) answers a group that never
      committed with offset **0** when the queue's min offset is <= 0 and the message at offset
      0 is not "on disk" (``checkInDiskByConsumeOffset``: more than
      ``accessMessageInMemoryMaxRatio`` (40 %) of the machine's RAM of commit log written
      after it); otherwise QUERY_NOT_FOUND (22).

    So on a young broker a new "last" group reads every message from offset 0 — the ones sent
    before it existed too — and only once the queue's head is old (or gone) does it start at
    the end. Both branches are shown, the second by setting the ratio to 0 on the running
    broker (every stored message then counts as on disk); each time aiorocket and the Java
    client (a new group each) start at the same place.

    5.x asks ``checkInMemByConsumeOffset`` instead: whether the head's pages are in the page
    cache (``MappedFile.isLoaded``), which the ratio does not touch. On a 5.x broker the second
    branch therefore still answers 0 and both clients read every message from offset 0.
    """
    ns = java_cluster.namesrv

    # -- a young broker: offset 0 for the new group, so the earlier messages are consumed
    topic = unique_name("FromLastYoung")
    await send_all(ns, topic, range(8))
    async with QueueReader(namesrv=ns) as reader:
        mqs = await reader.queues(topic)
        assert len(mqs) == QUEUES
        for mq in mqs:
            assert await reader.committed_offset(unique_name("never"), mq) == 0
    got, java_got = await both_from_last(from_where_classes, ns, topic, tmp_path, 12)
    assert got == java_got == list(range(12))

    # -- the head counts as old: QUERY_NOT_FOUND, so both start at the end of each queue
    # (5.x: the head is in the page cache, so still 0 and both start there)
    topic = unique_name("FromLastOld")
    await send_all(ns, topic, range(8))
    expected = list(range(12)) if rocketmq.v5 else list(range(8, 12))
    async with head_counts_as_old(java_cluster):
        async with QueueReader(namesrv=ns) as reader:
            for mq in await reader.queues(topic):
                stored = await reader.committed_offset(unique_name("never"), mq)
                assert stored == (0 if rocketmq.v5 else None)
        got, java_got = await both_from_last(from_where_classes, ns, topic, tmp_path, len(expected))
    assert got == java_got == expected


async def test_consume_from_timestamp_for_a_new_group(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    """``consume_from=<datetime>`` (CONSUME_FROM_TIMESTAMP) on a brand-new group.

    ``computePullFromWhereWithException`` asks the broker for a stored offset first here too,
    so the young-broker rule above applies: the broker answers 0 and the new group reads from
    offset 0, the messages stored before the time included. Only with QUERY_NOT_FOUND does the
    client search the time (SEARCH_OFFSET_BY_TIMESTAMP, as ``searchOffset``); 4.9.8's
    ``ConsumeQueue.getOffsetInQueueByTime`` then answers the message stored *closest* to the
    time, before or after it. The test leaves a 2 s gap between old and new messages and picks
    a time 0.3 s before the first new one, so the closest is the first one stored after it: the
    group gets exactly the messages stored since the time, and
    :meth:`QueueReader.offset_for_timestamp` (which refines the broker's answer to "the first
    stored at or after") agrees. A 5.x broker answers 0 in the second case too (its head is in
    the page cache: see the test above), so there the group reads every message again.
    """
    ns = java_cluster.namesrv
    topic = unique_name("FromTime")
    old = await send_all(ns, topic, range(8))
    await asyncio.sleep(2.0)  # wall-clock gap between the two store times (see docstring)
    new = await send_all(ns, topic, range(8, 16))
    async with QueueReader(namesrv=ns) as reader:
        stored = {}
        for r in old + new:
            (m,) = (await reader.read(r.queue, r.queue_offset, 1)).messages
            stored[int(m.properties["idx"])] = m
        since = min(stored[i].store_timestamp for i in range(8, 16)) - 300
        assert max(stored[i].store_timestamp for i in range(8)) < since - 1000
        first_new = {r.queue: min(x.queue_offset for x in new if x.queue == r.queue) for r in new}
        for mq, offset in first_new.items():
            assert await reader.offset_for_timestamp(mq, since) == offset
    start = datetime.fromtimestamp(since / 1000)

    # a young broker: offset 0 for the new group, the time is never looked at
    async with consuming(ns, topic, unique_name("cg"), consume_from=start) as (_, got):
        await wait_for(lambda: len(got) >= 16, timeout=WAIT, what="every message")
        await asyncio.sleep(0.5)  # a duplicate would show up by now
    assert idx_of(got) == list(range(16))

    # the head counts as old: QUERY_NOT_FOUND, so the time is searched (5.x: 0 again)
    expected = list(range(16)) if rocketmq.v5 else list(range(8, 16))
    async with (
        head_counts_as_old(java_cluster),
        consuming(ns, topic, unique_name("cg"), consume_from=start) as (_, got),
    ):
        await wait_for(
            lambda: len(got) >= len(expected), timeout=WAIT, what="the expected messages"
        )
        await asyncio.sleep(0.5)  # an older message would show up by now
    assert idx_of(got) == expected
    if not rocketmq.v5:
        assert all(m.store_timestamp >= since for m in got)


# -- ranges longer than a pull -------------------------------------------------------------------


async def test_queue_reader_reads_ranges_far_beyond_one_pull(java_cluster: JavaCluster) -> None:
    """1,000 messages on one queue: the Java broker serves at most 32 per PULL_MESSAGE
    (``maxTransferCountOnMessageInMemory``), so a range is many pulls; [0, 1000) and a middle
    range come back exact: every offset once, in order, each message the one sent there."""
    ns = java_cluster.namesrv
    topic = unique_name("LongRange")
    total = 1000
    mq = MessageQueue(topic, "broker-a", 0)
    ids: list[str] = []
    async with Producer(namesrv=ns, group=unique_name("pg")) as producer:
        for lo in range(0, total, 100):
            msgs = [make_message(topic, i) for i in range(lo, lo + 100)]
            (result,) = await producer.send_batch(msgs, queue=mq)
            assert result.queue_offset == lo
            ids.extend(result.msg_id.split(","))
    async with QueueReader(namesrv=ns) as reader:
        await visible(reader, mq, total, WAIT)
        assert await reader.max_offset(mq) == total
        one = await reader.read(mq, 0, 1024)
        assert len(one.messages) == 32  # the broker's cap, whatever is asked for
        for start, end in ((0, total), (317, 777), (990, total)):
            got = [m async for m in reader.read_range(mq, start, end)]
            assert [m.queue_offset for m in got] == list(range(start, end))
            assert [int(m.properties["idx"]) for m in got] == list(range(start, end))
            assert [m.msg_id for m in got] == ids[start:end]
            for m in got:
                i = m.queue_offset
                assert m.body == make_message(topic, i).body
                assert m.tags == f"t{i % 3}"
                assert m.keys == [f"k{i}"]


@pytest.mark.slow
def test_spark_batch_reads_every_row_from_the_java_broker(
    java_cluster: JavaCluster, spark: Any
) -> None:
    """The ``rocketmq`` Spark source over the Java broker: 4 queues of 90 messages each (about
    three pulls per queue), read as one batch and again in partitions of 25 offsets: exactly
    one row per message with its queue, offset, id, body, tags, keys and properties."""
    ns = java_cluster.namesrv
    topic = unique_name("SparkBatch")
    per_queue = 90

    async def produce() -> dict[tuple[int, int], tuple[str, Message]]:
        out = {}
        results = []
        async with Producer(namesrv=ns, group=unique_name("pg")) as producer:
            for q in range(QUEUES):
                msgs = [make_message(topic, q * per_queue + i) for i in range(per_queue)]
                mq = MessageQueue(topic, "broker-a", q)
                (result,) = await producer.send_batch(msgs, queue=mq)
                for i, (msg_id, m) in enumerate(zip(result.msg_id.split(","), msgs, strict=True)):
                    out[(q, result.queue_offset + i)] = (msg_id, m)
                results.append(result)
        async with QueueReader(namesrv=ns) as reader:
            for r in results:
                await visible(reader, r.queue, r.queue_offset + per_queue, WAIT)
        return out

    sent = asyncio.run(produce())
    assert len(sent) == QUEUES * per_queue
    for options in ({}, {"maxOffsetsPerPartition": "25"}):
        reader = spark.read.format("rocketmq").option("namesrv", ns).option("topic", topic)
        for k, v in options.items():
            reader = reader.option(k, v)
        rows = reader.load().collect()
        assert len(rows) == len(sent), options
        seen = Counter((r.queue_id, r.queue_offset) for r in rows)
        assert set(seen) == set(sent), options
        assert max(seen.values()) == 1, options
        for r in rows:
            msg_id, m = sent[(r.queue_id, r.queue_offset)]
            assert r.topic == topic
            assert r.broker == "broker-a"
            assert r.msg_id == msg_id
            assert bytes(r.body) == m.body
            assert r.tags == m.tags
            assert list(r.keys) == list(m.keys)
            assert {k: r.properties[k] for k in m.properties} == dict(m.properties)


# -- broadcasting --------------------------------------------------------------------------------


async def test_broadcasting_every_member_gets_everything_and_resumes_locally(
    java_cluster: JavaCluster, tmp_path: Path
) -> None:
    """``message_model="broadcasting"``: offsets live in a local file (``offset_store_dir``),
    not on the broker, and each member of the group gets every message. A member stopped and
    started again (same ``instance_name``, so the same file) continues from its own offsets:
    nothing it consumed comes again, nothing sent while it was away is lost."""
    ns = java_cluster.namesrv
    topic = unique_name("Bcast")
    group = unique_name("bcast")
    store = tmp_path / "offsets"
    got: dict[str, list[ReceivedMessage]] = defaultdict(list)

    def member(name: str) -> PushConsumer:
        consumer = PushConsumer(
            group=group,
            namesrv=ns,
            message_model="broadcasting",
            consume_from="first",
            instance_name=name,
            offset_store_dir=store,
            **FAST,
        )
        consumer.subscribe(topic)

        @consumer.listener
        async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
            got[name].extend(msgs)

        return consumer

    await send_all(ns, topic, range(20))
    async with contextlib.AsyncExitStack() as stack:
        b1 = await stack.enter_async_context(member("b1"))
        async with member("b2"):
            await wait_for(
                lambda: len(got["b1"]) >= 20 and len(got["b2"]) >= 20,
                timeout=WAIT,
                what="both members",
            )
            await asyncio.sleep(0.5)  # a duplicate would show up by now
        # b2 is stopped (its offsets flushed to its file); b1 keeps consuming
        assert idx_of(got["b1"]) == idx_of(got["b2"]) == list(range(20))
        files = sorted(store.rglob("offsets.json"))
        assert len(files) == 2, files
        await send_all(ns, topic, range(20, 30))
        await wait_for(lambda: len(got["b1"]) >= 30, timeout=WAIT, what="b1's new messages")
        first_run = len(got["b2"])
        async with member("b2"):
            await wait_for(lambda: len(got["b2"]) >= 30, timeout=WAIT, what="b2's missed messages")
            await asyncio.sleep(1.0)  # a redelivery of what it consumed would show up by now
        assert idx_of(got["b2"][first_run:]) == list(range(20, 30))
        assert idx_of(got["b1"]) == list(range(30))
        assert held_queues(b1, topic) == QUEUES
    # Broadcasting commits nothing to the broker (Java's LocalFileOffsetStore): it still
    # answers a group that never committed (0 on this young broker, see above), not the 30
    # messages' progress.
    async with QueueReader(namesrv=ns) as reader:
        for mq in await reader.queues(topic):
            assert await reader.committed_offset(group, mq) == 0
