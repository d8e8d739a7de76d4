"""The harness's RocketMQ 5 proxy: a cluster-mode ``ProxyStartup`` in front of the brokers,
reached on its remoting port as a name server.

What a remoting client sees through it: routes whose every broker address is the proxy's own,
and sends and reads routed to the broker the request names.
"""

from __future__ import annotations

from aiorocket import Message, Producer, QueueReader, SendStatus
from tests.interop.apache._groups import create_topic, visible, wait_route
from tests.interop.apache.cluster import JavaCluster
from tests.interop.harness import unique_name

JAVA_BROKERS = ("broker-a", "broker-b")
JAVA_PROXY = True


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
    topic = unique_name("ProxyT")
    await create_topic([java_cluster.broker_addr(b) for b in JAVA_BROKERS], topic, 2)
    await wait_route(java_cluster.namesrv, topic, 4)
    async with Producer(namesrv=java_cluster.proxy, group=unique_name("PG")) as producer:
        results = [await producer.send(Message(topic, f"m{i}".encode())) for i in range(8)]
    assert {r.status for r in results} == {SendStatus.SEND_OK}
    assert {r.queue.broker_name for r in results} == set(JAVA_BROKERS)
    # read straight from each broker: the message is where the send result says
    async with QueueReader(namesrv=java_cluster.namesrv) as reader:
        for result in results:
            await visible(reader, result.queue, result.queue_offset + 1, 30)
            batch = await reader.read(result.queue, result.queue_offset, max_messages=1)
            assert [m.msg_id for m in batch.messages[:1]] == [result.msg_id]
