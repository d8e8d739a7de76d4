"""aiorocket on a DLedger (Raft) broker group of Apache RocketMQ: three members of
``broker-a`` elect the master among themselves; when it dies the others elect a new one and it
registers with the name server as ``broker-a``'s master (broker id 0).

The leader is SIGKILLed while a producer sends 100 messages a second. Every send acknowledged
before, during and after the election is delivered to a consumer group (lost 0), and sends
succeed again soon after the name server names the new master: a failed send refreshes the
route at once (``route_retry_interval``), where a client waiting for its 30 s route poll (Java's)
keeps failing until then. The election itself takes DLedger's time (its heartbeats every 2 s,
a leader presumed dead after three are missed); the test prints both.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import aiorocket as rmq
from tests._harness.consume import collect_bodies
from tests._harness.wait import wait_for
from tests.interop.apache.cluster import JavaCluster, dledger_group
from tests.interop.harness import unique_name

# CI runs these against 4.x only (.ci/run); `make interop` against every version.
pytestmark = pytest.mark.ha

JAVA_BROKERS = dledger_group("broker-a")

#: sends per second
RATE = 100.0
#: seconds from the name server naming the new master to the first send it acknowledges
SEEN_BOUND = 1.5
#: seconds to wait for deliveries (two cores shared with three Java brokers)
DRAIN_TIMEOUT = 120.0
FAST: dict[str, Any] = {
    "route_refresh_interval": 30.0,  # Java's: the failover must not wait for a poll
    "heartbeat_interval": 1.0,
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 2.0,
}


async def test_leader_killed_while_producing_loses_nothing(java_cluster: JavaCluster) -> None:
    ns = java_cluster.namesrv
    topic, group = unique_name("HaRaft"), unique_name("haraft")
    got: set[str] = set()
    consumer = collect_bodies(
        rmq.PushConsumer(group=group, namesrv=ns, consume_from="first", **FAST),
        topic,
        lambda bodies: got.update(b.decode() for b in bodies),
    )

    acked: list[tuple[str, float]] = []
    failed: list[float] = []
    stop = asyncio.Event()

    async def produce(producer: rmq.Producer) -> None:
        start, i = time.monotonic(), 0
        while not stop.is_set():
            body = f"m{i}"
            i += 1
            try:
                await producer.send(rmq.Message(topic, body))
            except rmq.RocketError:
                failed.append(time.time())
            else:
                acked.append((body, time.time()))
            ahead = start + i / RATE - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)

    leader = java_cluster.master_of("broker-a")
    assert leader is not None
    async with (
        rmq.Producer(namesrv=ns, group=unique_name("hap"), route_refresh_interval=30.0) as producer,
        consumer,
    ):
        sender = asyncio.create_task(produce(producer))
        named: list[float] = []

        async def watch_name_server() -> None:
            # when the name server first names a master other than the dead leader
            while not named:
                master = await asyncio.to_thread(java_cluster.master_of, "broker-a")
                if master is not None and master != leader:
                    named.append(time.time())
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(watch_name_server())
        try:
            await wait_for(
                lambda: len(acked) >= 300, timeout=60, what="300 acknowledged sends", interval=0.1
            )
            await asyncio.to_thread(java_cluster.kill_broker, leader)
            killed_at = time.time()
            await wait_for(
                lambda: (
                    any(t > killed_at + 1.0 for _, t in acked)
                    and sum(t > killed_at for _, t in acked) >= 300
                ),
                timeout=90,
                what="sends acknowledged by the new leader",
                interval=0.1,
            )
        finally:
            stop.set()
            await sender
            watcher.cancel()
            # the group needs all three members again for the next election (a majority of
            # two survives one more death)
            await asyncio.to_thread(java_cluster.restart_broker, leader)
        new_leader = java_cluster.master_of("broker-a")
        await wait_for(
            lambda: {b for b, _ in acked} <= got,
            timeout=DRAIN_TIMEOUT,
            what="every acknowledged message",
            interval=0.1,
        )
    after = [t for t in failed if t >= killed_at - 1.0]
    first_ok = min(t for _, t in acked if t > killed_at)
    outage = max([*after, killed_at]) - killed_at
    assert named, "the name server never named a new master"
    seen = first_ok - named[0]
    print(
        f"\nleader {leader} killed; the name server named {new_leader} at "
        f"+{named[0] - killed_at:.2f} s; {len(failed)} sends failed, the last at "
        f"+{outage:.2f} s; the first acknowledged after the kill at +{first_ok - killed_at:.2f} s "
        f"({seen:.2f} s after the name server knew); {len(acked)} acknowledged, all delivered"
    )
    assert new_leader is not None
    assert new_leader != leader
    assert {b for b, _ in acked} <= got
    assert seen <= SEEN_BOUND, f"sends succeeded {seen:.2f} s after the name server knew"


async def test_an_orderly_group_keeps_key_order_across_a_leader_change(
    java_cluster: JavaCluster,
) -> None:
    """Orderly consumption with sharding keys while the leader dies: the queue locks were the
    dead leader's (in its memory), so consumption of the group's queues waits until they are
    locked on the new master; each key's messages arrive in send order (no message arrives for
    the first time after a later one of its key), none lost.

    A DLedger group replicates messages, not consumer offsets: the new leader knows the group's
    offsets only as far as its last copy from the old leader. After locking a queue the
    consumer reads its offset from the broker again (Java's ``ConsumeMessageOrderlyService``
    does, ``READ_FROM_STORE``, so a queue another member consumed meanwhile is not replayed),
    so what was consumed since that copy comes again, in order: duplicates, no inversions.
    """
    ns = java_cluster.namesrv
    topic, group = unique_name("HaOrder"), unique_name("haorder")
    keys = 8
    seen: dict[int, list[int]] = {k: [] for k in range(keys)}
    #: a message delivered for the first time after a later one of its key
    inversions: list[tuple[int, int, int]] = []
    consumer = rmq.PushConsumer(
        group=group,
        namesrv=ns,
        consume_from="first",
        orderly=True,
        lock_renew_interval=1.0,
        lock_expiry=3.0,
        **FAST,
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        for m in msgs:
            k, n = (int(x) for x in m.body.decode().split(":"))
            if n not in seen[k] and seen[k] and n < max(seen[k]):
                inversions.append((k, max(seen[k]), n))
            seen[k].append(n)

    acked: dict[int, list[int]] = {k: [] for k in range(keys)}
    stop = asyncio.Event()

    async def produce(producer: rmq.Producer) -> None:
        n = 0
        while not stop.is_set():
            for k in range(keys):
                try:
                    await producer.send(rmq.Message(topic, f"{k}:{n}"), sharding_key=str(k))
                except rmq.RocketError:
                    continue  # a later number of this key may still follow: order is by number
                acked[k].append(n)
            n += 1
            await asyncio.sleep(1 / (RATE / keys))

    leader = java_cluster.master_of("broker-a")
    assert leader is not None
    async with (
        rmq.Producer(namesrv=ns, group=unique_name("hap")) as producer,
        consumer,
    ):
        sender = asyncio.create_task(produce(producer))
        try:
            await wait_for(
                lambda: sum(map(len, seen.values())) >= 200,
                timeout=60,
                what="200 deliveries",
                interval=0.1,
            )
            await asyncio.to_thread(java_cluster.kill_broker, leader)
            killed_at = time.time()
            await wait_for(
                lambda: java_cluster.master_of("broker-a") not in (None, leader),
                timeout=60,
                what="a new leader",
                interval=0.1,
            )
            after = sum(map(len, acked.values()))
            await wait_for(
                lambda: sum(map(len, acked.values())) >= after + 200,
                timeout=60,
                what="sends to the new leader",
                interval=0.1,
            )
        finally:
            stop.set()
            await sender
            await asyncio.to_thread(java_cluster.restart_broker, leader)
        await wait_for(
            lambda: all(set(acked[k]) <= set(seen[k]) for k in range(keys)),
            timeout=DRAIN_TIMEOUT,
            what="every acknowledged message",
            interval=0.1,
        )
    total = sum(map(len, acked.values()))
    print(
        f"\nleader {leader} killed at {killed_at:.0f}; {sum(map(len, seen.values()))} "
        f"deliveries of {total} acknowledged messages; inversions {inversions}"
    )
    assert inversions == []
    for k in range(keys):
        assert set(acked[k]) <= set(seen[k]), k
