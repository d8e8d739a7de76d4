"""aiorocket on a master/slave broker group of Apache RocketMQ: ``broker-a`` with a
``SYNC_MASTER`` and one ``SLAVE`` (every acknowledged message is on both).

* A consumer group that starts while the master is down reads everything from the slave: the
  start offsets, the pulls and the offset commits go to the slave when the route has no
  master (``ClientInstance.find_broker``), as Java's ``findBrokerAddressInSubscribe`` does
  after a route refresh.
* The master killed mid-stream and restarted: sends fail while there is no master (they need
  one) and succeed again once it is back; the group receives every acknowledged message.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from tests._harness.consume import collect_bodies
from tests._harness.wait import wait_for
from tests.interop.apache._groups import create_topic
from tests.interop.apache.cluster import JavaCluster, master_slave, request
from tests.interop.harness import unique_name

# CI runs these against 4.x only (.ci/run); `make interop` against every version.
pytestmark = pytest.mark.ha

JAVA_BROKERS = master_slave("broker-a")
#: a 5.x slave serves pulls only with ``slaveReadEnable`` (``PullMessageProcessor.rejectRequest``
#: answers SYSTEM_BUSY "[REJECTREQUEST]..." otherwise, to every client); 4.9.x serves them either
#: way and reads the setting only to suggest the slave for messages no longer in memory
JAVA_BROKER_CONF = {"slaveReadEnable": "true"}

QUEUES = 4
#: seconds to wait for deliveries (two cores shared with two Java brokers)
DRAIN_TIMEOUT = 90.0
#: consumer timings that keep the tests short
FAST: dict[str, Any] = {
    "route_refresh_interval": 1.0,
    "heartbeat_interval": 1.0,
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 2.0,
}


async def replicating(ns: str) -> None:
    """Wait until the master acknowledges sends as replicated: the slave connects to the
    master's HA port some seconds after it learned it, and until then a SYNC_MASTER answers
    SLAVE_NOT_AVAILABLE."""
    async with rmq.Producer(namesrv=ns, group=unique_name("probe")) as producer:

        async def replicated() -> bool:
            try:
                result = await producer.send(rmq.Message("HaProbe", b"probe"))
            except rmq.RocketError:
                return False  # a restarted master waits for its slave past the send timeout
            return result.status is rmq.SendStatus.SEND_OK

        await wait_for(replicated, timeout=60, what="the slave to replicate", interval=0.1)


async def slave_knows(cluster: JavaCluster, topic: str) -> None:
    """Wait until the slave has the topic's configuration: it copies the master's
    (``SlaveSynchronize.syncAll``: every 10 s on 4.9.x, every 60 s on 5.x) and refuses pulls of
    a topic it does not know yet."""

    async def known() -> bool:
        cmd = RemotingCommand.request(RequestCode.GET_TOPIC_STATS_INFO, {"topic": topic})
        resp = await asyncio.to_thread(request, cluster.broker_addr("broker-a-s"), cmd)
        return resp.code == ResponseCode.SUCCESS

    await wait_for(
        known, timeout=150, what="the slave to copy the topic's configuration", interval=0.1
    )


async def master_gone(cluster: JavaCluster) -> None:
    """Wait until the name server has no master for broker-a (it drops a dead broker when its
    channel closes)."""
    await wait_for(
        lambda: cluster.master_of("broker-a") is None,
        timeout=30,
        what="the name server to drop the master",
        interval=0.1,
    )


async def test_a_cold_group_reads_everything_from_the_slave(java_cluster: JavaCluster) -> None:
    ns = java_cluster.namesrv
    topic, group = unique_name("HaCold"), unique_name("hacold")
    await create_topic([java_cluster.broker_addr("broker-a")], topic, QUEUES)
    await replicating(ns)
    total = 2000
    async with rmq.Producer(namesrv=ns, group=unique_name("hap")) as producer:
        for first in range(0, total, 100):
            batch = [rmq.Message(topic, f"m{i}") for i in range(first, first + 100)]
            for result in await producer.send_batch(batch):
                assert result.status is rmq.SendStatus.SEND_OK, result
    # SYNC_MASTER: each batch was acknowledged once the slave had it
    await slave_knows(java_cluster, topic)
    await asyncio.to_thread(java_cluster.kill_broker, "broker-a")
    try:
        await master_gone(java_cluster)
        await read_all_from_the_slave(ns, topic, group, total)
    finally:
        await asyncio.to_thread(java_cluster.restart_broker, "broker-a")


async def read_all_from_the_slave(ns: str, topic: str, group: str, total: int) -> None:
    """A new group gets every message, and its offsets are committed, with no master."""

    got: list[str] = []
    consumer = collect_bodies(
        rmq.PushConsumer(group=group, namesrv=ns, consume_from="first", **FAST),
        topic,
        lambda bodies: got.extend(b.decode() for b in bodies),
    )

    async with consumer:
        await wait_for(
            lambda: len(set(got)) >= total,
            timeout=DRAIN_TIMEOUT,
            what="every message",
            interval=0.1,
        )
        # the offsets went to the slave: a reader asks it too
        async with rmq.QueueReader(namesrv=ns) as reader:
            mqs = await reader.queues(topic)
            for mq in mqs:
                await wait_for(
                    lambda mq=mq: _committed_end(reader, group, mq),  # type: ignore[misc]
                    timeout=30,
                    what=f"{mq}'s offset committed on the slave",
                    interval=0.1,
                )
    assert set(got) == {f"m{i}" for i in range(total)}


async def _committed_end(reader: rmq.QueueReader, group: str, mq: rmq.MessageQueue) -> bool:
    return await reader.committed_offset(group, mq) == await reader.max_offset(mq)


async def test_the_master_killed_mid_stream_and_restarted_loses_nothing(
    java_cluster: JavaCluster,
) -> None:
    ns = java_cluster.namesrv
    topic, group = unique_name("HaMid"), unique_name("hamid")
    await create_topic([java_cluster.broker_addr("broker-a")], topic, QUEUES)
    await replicating(ns)
    got: set[str] = set()
    consumer = collect_bodies(
        rmq.PushConsumer(group=group, namesrv=ns, consume_from="first", **FAST),
        topic,
        lambda bodies: got.update(b.decode() for b in bodies),
    )

    acked: list[str] = []
    failed_at: list[float] = []
    stop = asyncio.Event()

    async def produce(producer: rmq.Producer) -> None:
        i = 0
        while not stop.is_set():
            body = f"m{i}"
            i += 1
            try:
                await producer.send(rmq.Message(topic, body))
            except rmq.RocketError:
                failed_at.append(time.time())
                await asyncio.sleep(0.05)
            else:
                acked.append(body)
            await asyncio.sleep(0.005)

    async with (
        consumer,
        rmq.Producer(namesrv=ns, group=unique_name("hap"), route_refresh_interval=1.0) as producer,
    ):
        sender = asyncio.create_task(produce(producer))
        try:
            await wait_for(
                lambda: len(acked) >= 300, timeout=60, what="300 acknowledged sends", interval=0.1
            )
            await asyncio.to_thread(java_cluster.kill_broker, "broker-a")
            killed_at = time.time()
            await master_gone(java_cluster)
            await asyncio.sleep(2.0)  # sends fail meanwhile: they need the master
            before_restart = len(acked)
            await asyncio.to_thread(java_cluster.restart_broker, "broker-a")
            await wait_for(
                lambda: len(acked) >= before_restart + 300,
                timeout=60,
                what="sends after the restart",
                interval=0.1,
            )
        finally:
            stop.set()
            await sender
        await wait_for(
            lambda: set(acked) <= got,
            timeout=DRAIN_TIMEOUT,
            what="every acknowledged message",
            interval=0.1,
        )
    assert failed_at, "no send failed while the master was down"
    assert min(failed_at) >= killed_at - 1.0
    assert set(acked) <= got
