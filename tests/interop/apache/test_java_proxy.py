"""aiorocket through a RocketMQ 5 proxy in cluster mode, reached on its remoting port as a name
server, as RocketMQ 5 runs on Kubernetes and in managed offerings (docs/how-to/proxy.md).

The proxy answers routes itself, naming itself for every broker, and routes every later
request by the broker name it carries. Checked here, on Apache 5.3.3 and 5.5.x proxies in front
of two brokers:

* sends (single, batch, oneway, sharding key, delay, timer), 20,000 of them consumed by a push
  group in pull mode with nothing lost; an orderly group over 8 keys without an inversion;
  broadcasting; a pull consumer's seek and commit; retries into ``%DLQ%``; message trace; an
  ``App``; a transaction whose producer was killed, committed by the broker's check;
* what the proxy does not serve fails at once, saying why: ``Admin`` requests
  (``NotANameServerError``) and POP consumption (its remoting port never answers ACK_MESSAGE:
  docs/protocol.md §12.5).

Topics are typed (``message_type``): the proxy checks each message's kind against its topic's.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import defaultdict
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.errors import NotANameServerError, TopicMessageTypeError
from tests._harness.wait import wait_for
from tests.interop.apache._groups import visible, wait_route
from tests.interop.apache.cluster import JavaCluster
from tests.interop.harness import unique_name
from tests.producer.tx_proc import crash_in_transaction

JAVA_BROKERS = ("broker-a", "broker-b")
JAVA_PROXY = True
#: transactions checked soon; the trace topic created by the brokers (a proxy creates none)
JAVA_BROKER_CONF = {
    "transactionTimeOut": "2000",
    "transactionCheckInterval": "1000",
    "transactionOpBatchInterval": "500",
    "traceTopicEnable": "true",
}
#: the proxy renews its brokers' heartbeats of transactional producer groups every second
#: (20 s by default), so a check reaches a new producer soon; it answers sends with its own
#: ``traceOn`` and ``regionId`` (off and empty by default), which decide, as in Java's
#: ``SendMessageTraceHookImpl``, whether a producer writes its Pub trace record
JAVA_PROXY_CONF: dict[str, object] = {
    "transactionHeartbeatPeriodSecond": 1,
    "traceOn": True,
    "regionId": "DefaultRegion",
}
#: consumers through the proxy: routes and rebalances every second
FAST: dict[str, Any] = {
    "route_refresh_interval": 1.0,
    "heartbeat_interval": 1.0,
    "rebalance_interval": 1.0,
}
WAIT = 120.0


async def typed_topic(cluster: JavaCluster, prefix: str, kind: str | None = None) -> str:
    """A new topic with 4 queues on each broker, of ``kind``, routed by the name server."""
    topic = unique_name(prefix)
    async with rmq.Admin(namesrv=cluster.namesrv) as admin:
        await admin.create_topic(topic, queues=4, message_type=kind)
    await wait_route(cluster.namesrv, topic, 8)
    return topic


def push(cluster: JavaCluster, topic: str, **settings: Any) -> rmq.PushConsumer:
    consumer = rmq.PushConsumer(
        group=unique_name("pxg"),
        namesrv=cluster.proxy,
        consume_from="first",
        **{**FAST, **settings},
    )
    consumer.subscribe(topic)
    return consumer


def test_routes_through_the_proxy_name_every_broker_at_the_proxy(
    java_cluster: JavaCluster,
) -> None:
    route = java_cluster.proxy_routes("TBW102")
    assert {b.broker_name for b in route.broker_datas} == {"broker-a", "broker-b"}
    for broker in route.broker_datas:
        assert broker.broker_addrs == {0: java_cluster.proxy}, broker


async def test_a_message_sent_through_the_proxy_is_stored_on_the_named_broker(
    java_cluster: JavaCluster,
) -> None:
    topic = await typed_topic(java_cluster, "ProxyT")
    async with rmq.Producer(namesrv=java_cluster.proxy, group=unique_name("PG")) as producer:
        results = [await producer.send(rmq.Message(topic, f"m{i}".encode())) for i in range(8)]
    assert {r.status for r in results} == {rmq.SendStatus.SEND_OK}
    assert {r.queue.broker_name for r in results} == set(JAVA_BROKERS)
    # read straight from each broker: the message is where the send result says
    async with rmq.QueueReader(namesrv=java_cluster.namesrv) as reader:
        for result in results:
            await visible(reader, result.queue, result.queue_offset + 1, 30)
            batch = await reader.read(result.queue, result.queue_offset, max_messages=1)
            assert [m.msg_id for m in batch.messages[:1]] == [result.msg_id]


async def test_20000_messages_through_the_proxy_lose_nothing(java_cluster: JavaCluster) -> None:
    topic = await typed_topic(java_cluster, "ProxyDrain")
    n = 20_000
    got: set[bytes] = set()
    consumer = push(java_cluster, topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.update(m.body for m in msgs)

    bodies = {f"d{i}".encode() for i in range(n)}
    # 64 in flight: each send is two hops (proxy, broker) on two cores shared with three JVMs
    async with rmq.Producer(
        namesrv=java_cluster.proxy, group=unique_name("PG"), send_timeout=15.0
    ) as producer:
        ordered = sorted(bodies)
        for start in range(0, n, 64):
            chunk = ordered[start : start + 64]
            await asyncio.gather(*(producer.send(rmq.Message(topic, b)) for b in chunk))
    async with consumer:
        await wait_for(lambda: len(got) >= n, timeout=300, what=f"{n} messages", interval=0.2)
    assert got == bodies  # lost 0


async def test_an_orderly_group_over_8_keys_keeps_order_through_the_proxy(
    java_cluster: JavaCluster,
) -> None:
    topic = await typed_topic(java_cluster, "ProxyFifo", "FIFO")
    per_key = 250
    seen: dict[str, list[int]] = defaultdict(list)
    consumer = push(java_cluster, topic, orderly=True)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        for m in msgs:
            key, _, seq = m.body.decode().partition(":")
            seen[key].append(int(seq))

    async with rmq.Producer(namesrv=java_cluster.proxy, group=unique_name("PG")) as producer:
        for seq in range(per_key):
            await asyncio.gather(
                *(
                    producer.send(rmq.Message(topic, f"k{k}:{seq}".encode()), sharding_key=f"k{k}")
                    for k in range(8)
                )
            )
        # a FIFO message to a NORMAL topic: the proxy refuses it, and the error says the fix
        normal = await typed_topic(java_cluster, "ProxyNormal")
        with pytest.raises(TopicMessageTypeError, match="message_type=FIFO or MIXED"):
            await producer.send(rmq.Message(normal, b"x"), sharding_key="k")
    async with consumer:
        await wait_for(
            lambda: sum(map(len, seen.values())) >= 8 * per_key,
            timeout=WAIT,
            what="every keyed message",
            interval=0.1,
        )
    inversions = sum(a > b for s in seen.values() for a, b in itertools.pairwise(s))
    assert inversions == 0
    assert {k: sorted(set(s)) for k, s in seen.items()} == {
        f"k{k}": list(range(per_key)) for k in range(8)
    }


async def test_a_transaction_whose_producer_died_is_committed_by_the_check(
    java_cluster: JavaCluster,
) -> None:
    """The proxy keeps no record of a remoting producer's half (only the gRPC path does), so
    every transaction through it is settled by the broker's check, which the proxy relays to a
    live producer of the group that has sent a transaction through it (docs/protocol.md §12.5)."""
    topic = await typed_topic(java_cluster, "ProxyTx", "TRANSACTION")
    group = unique_name("pxtx")
    checked: list[bytes] = []

    async def commit(msg: rmq.Message, arg: object) -> rmq.TransactionState:
        return rmq.TransactionState.COMMIT

    async def check(msg: rmq.ReceivedMessage) -> rmq.TransactionState:
        checked.append(msg.body)
        return rmq.TransactionState.COMMIT

    got: list[bytes] = []
    consumer = push(java_cluster, topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    await crash_in_transaction(java_cluster.proxy, topic, group, timeout=60)
    async with (
        rmq.TransactionProducer(
            namesrv=java_cluster.proxy, group=group, execute_local=commit, check=check
        ) as producer,
        consumer,
    ):
        await producer.send_in_transaction(rmq.Message(topic, b"after"))
        await wait_for(
            lambda: {b"crash", b"after"} <= set(got),
            timeout=WAIT,
            what="the orphaned and the new transaction",
            interval=0.1,
        )
    assert b"crash" in checked


async def test_a_failing_message_goes_through_retries_to_the_dlq(
    java_cluster: JavaCluster,
) -> None:
    topic = await typed_topic(java_cluster, "ProxyDlq")
    consumer = push(java_cluster, topic, max_reconsume_times=2)
    attempts: list[int] = []

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        attempts.extend(m.reconsume_times for m in msgs)
        raise RuntimeError("poison")

    async with rmq.Producer(namesrv=java_cluster.proxy, group=unique_name("PG")) as producer:
        await producer.send(rmq.Message(topic, b"poison"))
    dlq = f"%DLQ%{consumer.settings.group}"
    async with consumer, rmq.QueueReader(namesrv=java_cluster.namesrv) as reader:

        async def dead_lettered() -> bool:
            try:
                queues = await reader.queues(dlq)
            except rmq.RocketError:
                return False
            return sum([await reader.max_offset(q) for q in queues]) == 1

        await wait_for(dead_lettered, timeout=WAIT, what="the dead letter", interval=0.5)
    assert attempts[:3] == [0, 1, 2]


async def test_every_client_and_send_works_through_the_proxy(java_cluster: JavaCluster) -> None:
    proxy = java_cluster.proxy
    topic = await typed_topic(java_cluster, "ProxyAll")
    delayed = await typed_topic(java_cluster, "ProxyDelay", "DELAY")
    # sends: batch, oneway, delay level, timer
    async with rmq.Producer(namesrv=proxy, group=unique_name("PG"), trace=True) as producer:
        traced = await producer.send(rmq.Message(topic, b"single"))
        await producer.send_batch([rmq.Message(topic, b"b1"), rmq.Message(topic, b"b2")])
        await producer.send_oneway(rmq.Message(topic, b"oneway"))
        await producer.send(rmq.Message(delayed, b"level", delay_level=1))
        await producer.send(rmq.Message(delayed, b"timer"), deliver_after=1.0)
    expected = {b"single", b"b1", b"b2", b"oneway"}

    # broadcasting, and a traced group
    seen: set[bytes] = set()
    broadcast = push(java_cluster, topic, message_model="broadcasting")

    @broadcast.listener
    async def on_broadcast(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        seen.update(m.body for m in msgs)

    traced_seen: set[bytes] = set()
    traced_group = push(java_cluster, topic, trace=True)

    @traced_group.listener
    async def on_traced(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        traced_seen.update(m.body for m in msgs)

    late: set[bytes] = set()
    delay_consumer = push(java_cluster, delayed)

    @delay_consumer.listener
    async def on_delayed(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        late.update(m.body for m in msgs)

    async with broadcast, delay_consumer, traced_group:
        await wait_for(lambda: expected <= seen, timeout=WAIT, what="the broadcast")
        await wait_for(lambda: expected <= traced_seen, timeout=WAIT, what="the traced group")
        await wait_for(lambda: late == {b"level", b"timer"}, timeout=WAIT, what="the delayed")

    # a pull consumer: poll, commit, seek back, poll again
    puller = rmq.PullConsumer(group=unique_name("pxpull"), namesrv=proxy, consume_from="first")
    puller.subscribe(topic)
    async with puller:
        pulled: list[rmq.ReceivedMessage] = []
        while {m.body for m in pulled} != expected:
            pulled += await puller.poll(timeout=2)
        await puller.commit()
        first = pulled[0]
        assert await puller.committed(first.queue) == puller.position(first.queue)
        await puller.seek(first.queue, first.queue_offset)
        again = await puller.poll(timeout=2)
        assert first.msg_id in {m.msg_id for m in again}

    # the trace: the producer's Pub and the traced group's SubBefore/SubAfter
    types: set[str] = set()
    async with rmq.Admin(namesrv=java_cluster.namesrv) as admin:

        async def traced_fully() -> bool:
            types.update(e.type for e in await admin.trace(traced.msg_id))
            return {"Pub", "SubBefore", "SubAfter"} <= types

        with contextlib.suppress(AssertionError):
            await wait_for(traced_fully, timeout=WAIT, what="the trace", interval=1.0)
    assert {"Pub", "SubBefore", "SubAfter"} <= types, types

    # an App
    app = rmq.App(namesrv=proxy, consume_from="first", **FAST)
    arrived = asyncio.Event()

    @app.subscriber(topic, group=unique_name("pxapp"))
    async def on_app(body: bytes) -> None:
        if body == b"app":
            arrived.set()

    async with app:
        await app.publish(topic, b"app")
        await asyncio.wait_for(arrived.wait(), WAIT)


async def test_what_the_proxy_does_not_serve_fails_at_once_saying_why(
    java_cluster: JavaCluster,
) -> None:
    topic = await typed_topic(java_cluster, "ProxyNo")
    async with rmq.Admin(namesrv=java_cluster.proxy) as admin:
        with pytest.raises(NotANameServerError, match="RocketMQ proxy, not a name server"):
            await admin.create_topic("Nope")
    simple = rmq.SimpleConsumer(group=unique_name("pxs"), namesrv=java_cluster.proxy)
    simple.subscribe(topic)
    async with simple:
        with pytest.raises(NotANameServerError, match="cannot serve POP consumption"):
            await simple.receive()
