"""RocketMQ 5.x POP consumption against an Apache RocketMQ install (docs/protocol.md §12.3).

On a 5.x broker: four aiorocket simple consumers drain a two-queue topic; an unacked message
comes back with one more delivery, then goes to ``%DLQ%<group>``; extended messages stay
invisible; a push consumer in POP mode retries through the invisible time and keeps a slow
handler's message invisible; aiorocket's simple and push consumers share a POP group with
Apache's own 5.x push consumer (``java5/JPop.java``); ``mqadmin setConsumeMode`` flips an
aiorocket push consumer between pull and POP; FIFO message groups stay in order over ordered
POP; and the 5.x Java POP consumer reads from the embedded broker. On a 4.x broker POP is a
clear error.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import RequestCodeNotSupportedError
from tests._harness.pop import drain_together
from tests._harness.wait import wait_for
from tests.interop.apache._groups import create_topic
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import JAVA5_SOURCES, Install, compile_java
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

#: how long a JVM may take to start and get ready on a busy 2-core machine
BOOT = 90.0
#: Apache's revive service scans every second and waits for the checkpoint's ack to arrive
#: first: a message comes back some seconds after its invisible time
REVIVE_SLACK = 20.0


def _require_5x(rocketmq: Install) -> None:
    if rocketmq.version_tuple < (5,):
        pytest.skip(f"POP is RocketMQ 5.x; this install is {rocketmq.version}")


async def _topic(cluster: JavaCluster, prefix: str, queues: int = 2) -> str:
    topic = unique_name(prefix)
    await create_topic([cluster.broker_addr("broker-a")], topic, queues)
    return topic


async def _topic_and_group(cluster: JavaCluster, rocketmq: Install, prefix: str) -> tuple[str, str]:
    """A 5.x install (else the test skips): a new 2-queue topic and a new group name."""
    _require_5x(rocketmq)
    return await _topic(cluster, prefix), unique_name(f"{prefix}_g")


async def _send(namesrv: str, topic: str, bodies: list[str], **kw: Any) -> None:
    async with rmq.Producer(namesrv=namesrv, group=unique_name("pop_producer")) as p:
        for chunk in range(0, len(bodies), 200):
            await asyncio.gather(
                *(p.send(rmq.Message(topic, b, **kw)) for b in bodies[chunk : chunk + 200])
            )


async def _paced(namesrv: str, topic: str, n: int, seconds: int) -> None:
    """Send ``s0`` ... ``s<n-1>`` in ``seconds`` even steps, one a second."""
    step = n // seconds
    for k in range(seconds):
        await _send(namesrv, topic, [f"s{i}" for i in range(k * step, (k + 1) * step)])
        await asyncio.sleep(1.0)


def _simple(namesrv: str, group: str, topic: str, **kw: Any) -> rmq.SimpleConsumer:
    c = rmq.SimpleConsumer(
        group=group, namesrv=namesrv, consume_from="first", **{"await_duration": 3.0, **kw}
    )
    c.subscribe(topic)
    return c


async def test_a_4x_broker_refuses_pop_clearly(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    if rocketmq.version_tuple >= (5,):
        pytest.skip(f"a 4.x broker refuses POP; this install is {rocketmq.version}")
    topic = await _topic(java_cluster, "pop4x")
    async with _simple(java_cluster.namesrv, unique_name("pop4x_g"), topic) as c:
        with pytest.raises(RequestCodeNotSupportedError, match="POP"):
            await c.receive()


async def test_four_simple_consumers_drain_a_two_queue_topic(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    _require_5x(rocketmq)
    n = 20_000
    topic = await _topic(java_cluster, "popdrain")
    bodies = [f"d{i}" for i in range(n)]
    await _send(java_cluster.namesrv, topic, bodies)
    group = unique_name("popdrain_g")
    consumers = [
        _simple(java_cluster.namesrv, group, topic, invisible_duration=60) for _ in range(4)
    ]
    async with consumers[0], consumers[1], consumers[2], consumers[3]:
        received, counts = await drain_together(consumers, n, timeout=300)
    seen = set(received)
    assert seen == {b.encode() for b in bodies}  # lost 0
    assert all(counts[i] >= n // 10 for i in range(4)), counts


async def test_unacked_comes_back_then_goes_to_the_dlq(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    topic, group = await _topic_and_group(java_cluster, rocketmq, "popretry")
    await _send(java_cluster.namesrv, topic, ["again"])
    deliveries: list[rmq.PoppedMessage] = []
    async with _simple(
        java_cluster.namesrv, group, topic, invisible_duration=2, max_reconsume_times=1
    ) as c:
        deadline = time.monotonic() + 2 * (2 + REVIVE_SLACK) + 10
        while time.monotonic() < deadline:
            deliveries.extend(await c.receive(1))  # never acked
            if len(deliveries) >= 2:
                break
        assert [m.reconsume_times for m in deliveries] == [0, 1]
        # The third delivery is past max_reconsume_times: dead-lettered and acked instead.
        third = time.monotonic() + 2 + REVIVE_SLACK
        while time.monotonic() < third:
            assert await c.receive(1) == []
    async with rmq.QueueReader(namesrv=java_cluster.namesrv) as reader:
        [dlq] = await reader.queues(f"%DLQ%{group}")
        read = await reader.read(dlq, 0, 10)
    assert [m.body for m in read.messages] == [b"again"]


async def test_extended_message_stays_invisible(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    _require_5x(rocketmq)
    topic = await _topic(java_cluster, "popextend")
    await _send(java_cluster.namesrv, topic, ["slow"])
    async with _simple(java_cluster.namesrv, unique_name("popextend_g"), topic) as c:
        [msg] = await c.receive(1, invisible_duration=3)
        for _ in range(2):
            await asyncio.sleep(2)
            await c.change_invisible_duration(msg, 3)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:  # until just before the extended time ends
            assert await c.receive(1, invisible_duration=3) == []
        await c.ack(msg)
        t1 = time.monotonic()
        while time.monotonic() - t1 < 3 + REVIVE_SLACK / 2:
            assert await c.receive(1) == []  # acked with the newest handle: gone


async def test_push_pop_retries_and_keeps_a_slow_handler_invisible(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    _require_5x(rocketmq)
    topic = await _topic(java_cluster, "pushpop")
    await _send(java_cluster.namesrv, topic, [f"p{i}" for i in range(50)])
    got: Counter[bytes] = Counter()
    attempts: list[int] = []
    consumer = rmq.PushConsumer(
        group=unique_name("pushpop_g"),
        namesrv=java_cluster.namesrv,
        consume_mode="pop",
        consume_from="first",
        invisible_duration=4,
        pop_retry_delays=(1.0,),
        pull_suspend_timeout=2,
        pull_timeout=5,
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        for m in msgs:
            got[m.body] += 1
            if m.body == b"p7" and m.reconsume_times < 2:
                attempts.append(m.reconsume_times)
                raise RuntimeError("not yet")
            if m.body == b"p9":
                await asyncio.sleep(12)  # 3x the invisible time

    async with consumer:
        await wait_for(lambda: len(got) == 50, timeout=60, what="every message")
        await wait_for(lambda: got[b"p7"] == 3, timeout=60, what="two retries of p7")
        await asyncio.sleep(4 + REVIVE_SLACK / 2)
    assert attempts == [0, 1]
    assert got[b"p9"] == 1  # extended while its handler ran: never delivered twice
    assert {b for b, k in got.items() if k > 1} == {b"p7"}


async def _jpop(
    classes: Path, tmp: Path, namesrv: str, topic: str, group: str, n: int
) -> JavaClient:
    return await JavaClient.start(
        classes, "JPop", namesrv, topic, group, str(n), "120", name="jpop", tmp=tmp / "jpop"
    )


@pytest.fixture(scope="module")
def java5_classes(rocketmq: Install, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``java5/*.java``, compiled against a 5.x install."""
    _require_5x(rocketmq)
    return compile_java(tmp_path_factory.mktemp("java5-classes"), JAVA5_SOURCES)


async def test_java_pop_consumer_shares_a_group_with_aiorocket(
    java_cluster: JavaCluster, rocketmq: Install, java5_classes: Path, tmp_path: Path
) -> None:
    topic, group = await _topic_and_group(java_cluster, rocketmq, "popshare")
    async with rmq.Admin(namesrv=java_cluster.namesrv) as admin:
        await admin.set_consume_mode(group, topic, "pop")
    n = 3000
    java = await _jpop(java5_classes, tmp_path, java_cluster.namesrv, topic, group, n)
    simple_got: list[bytes] = []
    push_got: list[bytes] = []
    push = rmq.PushConsumer(
        group=group, namesrv=java_cluster.namesrv, consume_mode="pop", consume_from="first"
    )
    push.subscribe(topic)

    @push.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        push_got.extend(m.body for m in msgs)
        await asyncio.sleep(0.002)

    try:
        await java.wait_until(lambda j: bool(j.of("ready")), BOOT, "the Java consumer")
        async with push, _simple(java_cluster.namesrv, group, topic) as simple:
            # Paced over ~30 s: the Java consumer asks for its assignment only every 20 s
            # (its rebalance interval), so a burst would be gone before it pops anything.
            sender = asyncio.ensure_future(_paced(java_cluster.namesrv, topic, n, 30))

            def total() -> int:
                return len(simple_got) + len(push_got) + len(java.of("msg"))

            deadline = time.monotonic() + 150
            while total() < n and time.monotonic() < deadline:
                msgs = await simple.receive(8)
                if msgs:
                    await simple.ack_all(msgs)
                    simple_got.extend(m.body for m in msgs)
                await asyncio.sleep(0.01)
            await sender
    finally:
        await java.stop()
    java_got = [e["body"].encode() for e in java.of("msg")]
    union = set(simple_got) | set(push_got) | set(java_got)
    assert java_got, java.diagnostics()
    assert union == {f"s{i}".encode() for i in range(n)}, java.diagnostics()
    # all three took a share
    assert simple_got
    assert push_got
    assert java_got
    assert all(" " in e["pop_ck"] for e in java.of("msg"))  # popped, with receipt handles


def flip(group: str, topic: str, mode: str) -> list[str]:
    """``mqadmin setConsumeMode`` arguments for the test cluster."""
    return ["-c", "DefaultCluster", "-t", topic, "-g", group, "-m", mode]


async def test_mqadmin_set_consume_mode_flips_a_push_consumer(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    topic, group = await _topic_and_group(java_cluster, rocketmq, "popflip")
    got: list[bytes] = []
    consumer = rmq.PushConsumer(
        group=group,
        namesrv=java_cluster.namesrv,
        consume_mode="server",
        consume_from="first",
        rebalance_interval=1.0,
        pull_suspend_timeout=2,
        pull_timeout=5,
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    def pulled() -> int:
        return sum(1 for mq in consumer.held() if mq.topic == topic)

    async with consumer:
        await _send(java_cluster.namesrv, topic, [f"a{i}" for i in range(20)])
        await wait_for(lambda: len(got) >= 20, timeout=30, what="pulled messages")
        assert pulled() == 2
        await asyncio.to_thread(java_cluster.admin, "setConsumeMode", *flip(group, topic, "POP"))
        await wait_for(lambda: pulled() == 0, timeout=30, what="the switch to POP")
        await _send(java_cluster.namesrv, topic, [f"b{i}" for i in range(20)])
        await wait_for(lambda: len(set(got)) >= 40, timeout=30, what="popped messages")
        await asyncio.to_thread(java_cluster.admin, "setConsumeMode", *flip(group, topic, "PULL"))
        await wait_for(lambda: pulled() == 2, timeout=30, what="the switch back to pull")
        await _send(java_cluster.namesrv, topic, [f"c{i}" for i in range(20)])
        await wait_for(lambda: len(set(got)) >= 60, timeout=30, what="pulled messages again")
    assert len(set(got)) == 60


async def test_fifo_message_groups_over_ordered_pop(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    _require_5x(rocketmq)
    topic = await _topic(java_cluster, "popfifo", queues=4)
    group = unique_name("popfifo_g")
    groups, per_group = 20, 100
    async with rmq.Producer(namesrv=java_cluster.namesrv, group=unique_name("fifo_p")) as p:
        for i in range(per_group):
            await asyncio.gather(
                *(
                    p.send(rmq.Message(topic, f"{g}:{i}", message_group=f"order-{g}"))
                    for g in range(groups)
                )
            )
    handled: dict[int, list[int]] = defaultdict(list)
    failures = 0
    members = []
    for _ in range(4):
        c = rmq.PushConsumer(
            group=group,
            namesrv=java_cluster.namesrv,
            consume_mode="pop",
            orderly=True,
            consume_from="first",
            pull_suspend_timeout=2,
            pull_timeout=5,
        )
        c.subscribe(topic)

        async def handle(
            msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext
        ) -> rmq.OrderlyStatus | None:
            nonlocal failures
            for m in msgs:
                g, i = (int(x) for x in m.body.decode().split(":"))
                if (g, i) == (0, 50) and failures < 2:
                    failures += 1  # held back, then retried in place
                    return rmq.OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                handled[g].append(i)
            return None

        c.register_listener(handle)
        members.append(c)
    async with members[0], members[1], members[2], members[3]:
        await wait_for(
            lambda: sum(map(len, handled.values())) >= groups * per_group,
            timeout=120,
            what="every message",
        )
    inversions = sum(1 for seq in handled.values() for a, b in itertools.pairwise(seq) if b < a)
    assert inversions == 0
    assert all(handled[g] == list(range(per_group)) for g in range(groups))
    assert failures == 2


async def test_java_pop_consumer_reads_the_embedded_broker(
    broker: EmbeddedBroker, rocketmq: Install, java5_classes: Path, tmp_path: Path
) -> None:
    _require_5x(rocketmq)
    topic, group = unique_name("embpop"), unique_name("embpop_g")
    n = 300
    await _send(broker.address, topic, [f"e{i}" for i in range(n)])
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.set_consume_mode(group, topic, "pop")
    java = await _jpop(java5_classes, tmp_path, broker.address, topic, group, n)
    try:
        await java.wait_exit(BOOT + 60)
    finally:
        await java.stop()
    bodies = Counter(e["body"] for e in java.of("msg"))
    assert set(bodies) == {f"e{i}" for i in range(n)}, java.diagnostics()
    # Acked by the Java client: nothing is left for the group.
    async with _simple(broker.address, group, topic, await_duration=1.0) as c:
        assert await c.receive(32) == []
