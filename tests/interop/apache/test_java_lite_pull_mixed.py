"""A Java ``DefaultLitePullConsumer`` (Apache RocketMQ 4.9.8) and an aiorocket ``PullConsumer``
in one consumer group share a topic's queues, on the real Java broker and on the embedded one.

``java/JLitePull.java`` subscribes the topic, polls, and prints each message and the queues
its rebalance assigned it (read from the client's ``assignedMessageQueue``). Both members
allocate with Java's ``AllocateMessageQueueAveragely`` over the broker's consumer list, so once
the group settles they own complementary halves of the 8 queues: every message is read once,
by the owner of its queue. When the Python member leaves cleanly (committing what it read),
the Java member takes its queues over from the offsets it committed: nothing is read twice.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from tests.interop.apache._groups import create_topic, wait_route
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

QUEUES = 8
#: how long a JVM may take to start and join on a busy 2-core machine
BOOT = 90.0


def java_owned(java: JavaClient) -> set[int]:
    owned = java.of("owned")
    return set(owned[-1]["queues"]) if owned else set()


async def eventually(cond: Callable[[], bool], timeout: float, what: str, java: JavaClient) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if java.proc.returncode is not None:
            raise AssertionError(
                f"the Java member exited while waiting for {what}\n" + java.diagnostics()
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n" + java.diagnostics())
        await asyncio.sleep(0.1)


async def produce(namesrv: str, topic: str, bodies: list[str]) -> None:
    async with rmq.Producer(namesrv=namesrv, group=unique_name("jlite_prod")) as p:
        for i in range(0, len(bodies), 20):
            # Batches of 20 go to the topic's queues in turn.
            await p.send_batch([rmq.Message(topic, b.encode()) for b in bodies[i : i + 20]])


async def mixed_group(
    namesrv: str,
    classes: Path,
    tmp: Path,
    topic: str,
    prepare: Callable[[], Awaitable[list[str]]],
) -> None:
    """The scenario of the module docs; ``prepare`` makes the topic exist and returns the
    bodies it sent doing so."""
    group = unique_name("jlite")
    sent_before = await prepare()
    java = await JavaClient.start(
        classes, "JLitePull", namesrv, topic, group, "300", name="jlite", tmp=tmp
    )
    try:
        await java.wait_event("ready", BOOT)
        py = rmq.PullConsumer(
            group=group,
            namesrv=namesrv,
            consume_from="first",
            rebalance_interval=1.0,
            auto_commit_interval=1.0,
        )
        py.subscribe(topic)
        py_got: list[rmq.ReceivedMessage] = []
        async with py:

            def py_owned() -> set[int]:
                return {mq.queue_id for mq in py.assignment() if mq.topic == topic}

            def settled() -> bool:
                mine, theirs = py_owned(), java_owned(java)
                return (
                    len(mine) == QUEUES // 2
                    and mine | theirs == set(range(QUEUES))
                    and not (mine & theirs)
                )

            await eventually(settled, BOOT, "the two members to split the queues", java)
            mine, theirs = py_owned(), java_owned(java)
            await produce(namesrv, topic, [f"a{i}" for i in range(2000)])
            first = sent_before + [f"a{i}" for i in range(2000)]

            def read_all() -> bool:
                return len(py_got) + len(java.of("msg")) >= len(first)

            deadline = time.monotonic() + BOOT
            while not read_all() and time.monotonic() < deadline:
                py_got.extend(await py.poll(max_messages=64, timeout=0.2))
            await eventually(read_all, 10, "every message read", java)
            assert await py.poll(timeout=0.5) == []
            # No rebalance meanwhile.
            assert java_owned(java) == theirs
            assert py_owned() == mine
        java_first = java.of("msg")
        bodies = Counter([m.body.decode() for m in py_got] + [e["body"] for e in java_first])
        assert set(bodies) == set(first)  # lost 0
        assert max(bodies.values()) == 1  # each message read once
        assert {m.queue_id for m in py_got} == mine
        assert {e["queue"] for e in java_first} == theirs
        # The Python member left cleanly: the Java member reads its queues from what it
        # committed, so the next messages of those queues, and nothing before them, come.
        await eventually(
            lambda: java_owned(java) == set(range(QUEUES)), BOOT, "Java owning every queue", java
        )
        second = [f"b{i}" for i in range(400)]
        await produce(namesrv, topic, second)
        await eventually(
            lambda: len(java.of("msg")) >= len(java_first) + len(second), BOOT, "400 more", java
        )
        await asyncio.sleep(1.0)
        later = [e["body"] for e in java.of("msg")[len(java_first) :]]
        assert sorted(later) == sorted(second)
    finally:
        await java.stop()


async def test_a_java_lite_pull_consumer_and_a_pull_consumer_share_the_queues_on_the_java_broker(
    java_cluster: JavaCluster, java_classes: Path, tmp_path: Path
) -> None:
    topic = unique_name("JLite")

    async def prepare() -> list[str]:
        await create_topic([java_cluster.broker_addr("broker-a")], topic, QUEUES)
        await wait_route(java_cluster.namesrv, topic, QUEUES)
        return []

    await mixed_group(java_cluster.namesrv, java_classes, tmp_path, topic, prepare)


async def test_a_java_lite_pull_consumer_and_a_pull_consumer_share_the_queues_on_the_embedded_broker(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path
) -> None:
    topic = unique_name("JLiteEmb")

    async def prepare() -> list[str]:
        # as on the Java broker: the topic is created with its queues, then written to
        async with rmq.Admin(namesrv=broker.address) as admin:
            await admin.create_topic(topic, queues=QUEUES)
        async with rmq.Producer(namesrv=broker.address, group=unique_name("jlite_p")) as p:
            await p.send(rmq.Message(topic, b"warm-up"))
        return ["warm-up"]

    await mixed_group(broker.address, java_classes, tmp_path, topic, prepare)
