"""RocketMQ 5.4/5.5 message features against Apache RocketMQ 5.5: priority messages and the
recall of timer messages (docs/protocol.md §12.6, §12.7), from aiorocket and from the Java 5.5
client (``java55/JFive.java``), on the Apache broker and on the embedded one.

The priority rule, as the 5.5 broker applies it and Java's POP consumer observes it: a priority
message goes to queue ``min(priority, queues - 1)`` of its topic, and a POP of a ``PRIORITY``
topic reads its queues from the highest down, so one consumer receives everything sent
before it started by priority, highest first. On a 4.x broker a recall is a clear error.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import IllegalOperationError, UnsupportedFeatureError
from tests._harness.wait import wait_for
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import JAVA5_SOURCES, JAVA55_SOURCES, Install, compile_java
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

#: recalls are off by default on Apache brokers
JAVA_BROKER_CONF = {"recallMessageEnable": "true"}
#: how long a JVM may take to start and finish on a busy 2-core machine
BOOT = 120.0
N = 1000


def _require_55(rocketmq: Install) -> None:
    if rocketmq.version_tuple < (5, 5):
        pytest.skip(f"priorities and recall need RocketMQ 5.5; this install is {rocketmq.version}")


@pytest.fixture(scope="module")
def java55_classes(rocketmq: Install, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``java55/*.java`` and ``java5/JPop.java``, compiled against a 5.5 install."""
    _require_55(rocketmq)
    sources = sorted({*JAVA5_SOURCES, *JAVA55_SOURCES})
    return compile_java(tmp_path_factory.mktemp("java55-classes"), sources)


async def _priority_topic(namesrv: str) -> str:
    topic = unique_name("Prio")
    async with rmq.Admin(namesrv=namesrv) as admin:
        await admin.create_topic(topic, queues=10, message_type="PRIORITY")
    return topic


async def _receive_priorities(namesrv: str, topic: str, n: int) -> list[int]:
    """What one SimpleConsumer of a new group receives, as priorities, in order."""
    got: list[int] = []
    consumer = rmq.SimpleConsumer(
        group=unique_name("prio_g"), namesrv=namesrv, consume_from="first", await_duration=3.0
    )
    consumer.subscribe(topic)
    async with consumer:
        for _ in range(2 * n):
            if len(got) >= n:
                break
            msgs = await consumer.receive(max_messages=32)
            got.extend(m.priority for m in msgs if m.priority is not None)
            if msgs:
                await consumer.ack_all(msgs)
    return got


async def _java_priorities(classes: Path, tmp: Path, namesrv: str, topic: str, n: int) -> list[int]:
    """What the Java 5.5 push consumer in POP mode, one thread, receives, in order."""
    group = unique_name("jprio_g")
    async with rmq.Admin(namesrv=namesrv) as admin:
        await admin.set_consume_mode(group, topic, "pop")
    java = await JavaClient.run(
        classes,
        "JPop",
        namesrv,
        topic,
        group,
        str(n),
        "180",
        "1",
        name="jpop",
        tmp=tmp / "jp",
        timeout=BOOT + 180,
    )
    return [int(e["priority"]) for e in java.of("msg")]


async def test_priorities_arrive_as_the_java_client_observes_them(
    java_cluster: JavaCluster, rocketmq: Install, java55_classes: Path, tmp_path: Path
) -> None:
    _require_55(rocketmq)
    topic = await _priority_topic(java_cluster.namesrv)
    priorities = [i % 10 for i in range(N)]
    random.Random(11).shuffle(priorities)
    async with rmq.Producer(namesrv=java_cluster.namesrv) as producer:
        for i, p in enumerate(priorities):
            result = await producer.send(rmq.Message(topic, f"{i}".encode(), priority=p))
            assert result.queue.queue_id == p  # the broker chose the queue
    ours = await _receive_priorities(java_cluster.namesrv, topic, N)
    javas = await _java_priorities(java55_classes, tmp_path, java_cluster.namesrv, topic, N)
    expected = sorted(priorities, reverse=True)
    assert javas == expected
    assert ours == expected


async def test_a_recalled_timer_message_never_arrives(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    _require_55(rocketmq)
    topic = unique_name("Recall")
    async with rmq.Admin(namesrv=java_cluster.namesrv) as admin:
        await admin.create_topic(topic, queues=4, message_type="DELAY")
    got: list[bytes] = []
    consumer = rmq.PushConsumer(
        group=unique_name("recall_g"), namesrv=java_cluster.namesrv, consume_from="first"
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    async with rmq.Producer(namesrv=java_cluster.namesrv) as producer, consumer:
        # both due in 10 s, in the same slot of the broker's 1 s timer wheel
        kept = await producer.send(rmq.Message(topic, b"kept"), deliver_after=10)
        doomed = await producer.send(rmq.Message(topic, b"recalled"), deliver_after=10)
        assert await producer.recall(doomed, topic=topic) == doomed.msg_id
        await wait_for(lambda: b"kept" in got, timeout=60, what="the message not recalled")
        assert got == [b"kept"]
        with pytest.raises(IllegalOperationError, match="has been delivered"):
            await producer.recall(kept)


async def test_a_4x_broker_cannot_recall(java_cluster: JavaCluster, rocketmq: Install) -> None:
    if rocketmq.v5:
        pytest.skip(f"a 4.x broker cannot recall; this install is {rocketmq.version}")
    async with rmq.Producer(namesrv=java_cluster.namesrv) as producer:
        sent = await producer.send(rmq.Message(unique_name("Old"), b"x"))
        with pytest.raises(UnsupportedFeatureError, match="cannot recall messages"):
            await producer.recall(sent)


@pytest.mark.broker(recall_message_enable=True)  # recalls allowed
async def test_the_java_client_priorities_and_recall_on_the_embedded_broker(
    broker: EmbeddedBroker, rocketmq: Install, java55_classes: Path, tmp_path: Path
) -> None:
    _require_55(rocketmq)
    ns = broker.address
    topic = await _priority_topic(ns)
    java = await JavaClient.start(
        java55_classes, "JFive", "priority", ns, topic, str(N), "7", name="jprio", tmp=tmp_path
    )
    await java.wait_exit(BOOT)
    sent = java.of("sent")
    assert len(sent) == N
    assert all(e["queue"] == e["priority"] for e in sent)
    ours = await _receive_priorities(ns, topic, N)
    assert ours == sorted((e["priority"] for e in sent), reverse=True)

    recall_topic = unique_name("JRecall")
    async with rmq.Admin(namesrv=ns) as admin:
        await admin.create_topic(recall_topic, queues=4, message_type="DELAY")
    java = await JavaClient.start(
        java55_classes, "JFive", "recall", ns, recall_topic, "3000", name="jrecall", tmp=tmp_path
    )
    await java.wait_exit(BOOT)
    (recalled,) = java.of("recalled")
    (late,) = java.of("late")
    assert "timestamp invalid" in late["error"]
    await wait_for(lambda: broker.timers.cancelled == 1, timeout=30, what="the cancel")
    stored: list[rmq.ReceivedMessage] = []
    async with rmq.QueueReader(namesrv=ns) as reader:

        async def kept_stored() -> bool:
            stored.clear()
            for mq in await reader.queues(recall_topic):
                stored.extend((await reader.read(mq, 0, 32)).messages)
            return bool(stored)

        await wait_for(kept_stored, timeout=30, what="the message not recalled")
    assert [m.body for m in stored] == [b"kept"]
    assert recalled["msg_id"] not in {m.msg_id for m in stored}
