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

import aiorocket as rmq
from tests.interop.apache._groups import eventually
from tests.interop.apache.install import JavaCluster, dledger_group
from tests.interop.harness import unique_name

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
    consumer = rmq.PushConsumer(group=group, namesrv=ns, consume_from="first", **FAST)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.update(m.body.decode() for m in msgs)

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
            await eventually(lambda: len(acked) >= 300, 60, "300 acknowledged sends")
            await asyncio.to_thread(java_cluster.kill_broker, leader)
            killed_at = time.time()
            await eventually(
                lambda: (
                    any(t > killed_at + 1.0 for _, t in acked)
                    and sum(t > killed_at for _, t in acked) >= 300
                ),
                90,
                "sends acknowledged by the new leader",
            )
        finally:
            stop.set()
            await sender
            watcher.cancel()
        new_leader = java_cluster.master_of("broker-a")
        await eventually(
            lambda: {b for b, _ in acked} <= got, DRAIN_TIMEOUT, "every acknowledged message"
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
