"""RocketMQ 5.5 lite topics against an Apache RocketMQ install (docs/protocol.md §12.8).

On 5.5+: issue 38's acceptance against the Java broker (1,000 lite topics x 10 messages, a lite
consumer subscribed to 100 of them at run time gets exactly those 1,000, and no message of the
50 it unsubscribes afterwards); an unacked batch comes back after its invisible time; an
exclusive group's broker takes a lite topic away with NOTIFY_UNSUBSCRIBE_LITE; a 5.5 proxy's
remoting port refuses lite consumption, and aiorocket says so; and the 5.5 Java client's own
lite calls (``java55/JLite.java``, ``MQClientAPIExt``) subscribe, pop and ack against the
embedded broker. Before 5.5 the broker refuses lite consumption, and aiorocket says which
release it needs.

The brokers run with ``enableLmq`` and ``enableMultiDispatch`` (off by default: without them a
lite message reaches its parent topic only).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import aiorocket as rmq
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.lite import PopLiteMessageRequestHeader
from aiorocket._remoting.pool import ConnectionPool
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import UnsupportedFeatureError
from tests._harness.lite import (
    by_lite_topic,
    check_lite_refused,
    create_lite_parent,
    lite_acceptance,
    lite_consumer,
    receive_until,
    send_lite,
)
from tests._harness.wait import wait_for
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.conftest import DEFAULT_BROKER_CONF
from tests.interop.apache.install import JAVA_SOURCES, Install, compile_java
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

#: what a 5.5 broker needs to serve lite topics (``MessageStoreConfig``)
LITE_CONF = {"enableLmq": "true", "enableMultiDispatch": "true"}
JAVA_BROKER_CONF = LITE_CONF
#: ``JLite`` needs 5.5's lite classes, which ``java5/`` (compiled against every 5.x) cannot use
JAVA55_SOURCES = (Path(__file__).with_name("java55") / "JLite.java", JAVA_SOURCES / "JsonOut.java")
#: how long a JVM may take to start and get ready on a busy 2-core machine
BOOT = 90.0


@pytest.fixture(scope="module")
def lite_install(rocketmq: Install) -> Install:
    """The install, when it serves lite topics (else the test skips, naming its version)."""
    if rocketmq.version_tuple < (5, 5):
        pytest.skip(f"lite topics are RocketMQ 5.5+; this install is {rocketmq.version}")
    return rocketmq


@pytest.mark.timeout(1500)
async def test_acceptance_against_the_java_broker(
    lite_install: Install, java_cluster: JavaCluster
) -> None:
    await lite_acceptance(
        java_cluster.namesrv, unique_name("lite"), unique_name("lite_g"), timeout=600
    )


async def test_an_unacked_batch_comes_back_after_its_invisible_time(
    lite_install: Install, java_cluster: JavaCluster
) -> None:
    ns = java_cluster.namesrv
    topic, group = unique_name("liteback"), unique_name("liteback_g")
    await create_lite_parent(ns, topic, group)
    async with rmq.Producer(namesrv=ns, group=unique_name("p")) as p:
        await send_lite(p, topic, ["c1"], 1, "x")
    async with lite_consumer(ns, group, topic) as c:
        await c.subscribe_lite("c1")
        [first] = await receive_until_one(c, invisible_duration=3.0)
        popped = time.monotonic()
        [again] = await receive_until_one(c)
        # QueueLevelConsumerOrderInfoLockManager dispatches the lite topic once it is free
        print(f"came back {time.monotonic() - popped:.1f} s after a 3 s invisible time")
        assert (again.body, again.reconsume_times) == (first.body, first.reconsume_times + 1)
        await c.ack(again)


async def receive_until_one(
    c: rmq.LiteConsumer, invisible_duration: float | None = None
) -> list[rmq.PoppedMessage]:
    """The next message (nothing acked), within 60 s."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        got = await c.receive(1, invisible_duration=invisible_duration)
        if got:
            return got
    raise AssertionError("no message within 60 s")


async def test_an_exclusive_group_notifies_the_member_it_takes_a_lite_topic_from(
    lite_install: Install, java_cluster: JavaCluster
) -> None:
    ns = java_cluster.namesrv
    topic, group = unique_name("liteex"), unique_name("liteex_g")
    async with rmq.Admin(namesrv=ns) as admin:
        await admin.create_topic(topic, queues=2, message_type="LITE")
        await admin.create_group(group, lite_bind_topic=topic, lite_exclusive=True)
    taken: list[str] = []
    first = lite_consumer(ns, group, topic, on_unsubscribed=taken.append)
    async with first, lite_consumer(ns, group, topic) as second:
        await first.subscribe_lite("c1", "c2")
        await second.subscribe_lite("c1")
        await wait_for(lambda: taken == ["c1"], timeout=30, what="NOTIFY_UNSUBSCRIBE_LITE")
        assert first.lite_topics == {"c2"}
        async with rmq.Producer(namesrv=ns, group=unique_name("p")) as p:
            sent = await send_lite(p, topic, ["c1", "c2"], 2, "x")
        assert by_lite_topic(await receive_until(second, 2, timeout=60)) == {"c1": sent["c1"]}
        assert by_lite_topic(await receive_until(first, 2, timeout=60)) == {"c2": sent["c2"]}


@pytest.fixture
def proxy_cluster(lite_install: Install, tmp_path: Path) -> Iterator[JavaCluster]:
    """A name server, a broker and a 5.5 proxy in cluster mode, for one test."""
    conf = {**DEFAULT_BROKER_CONF, **LITE_CONF}
    with JavaCluster(tmp_path / "proxied", broker_conf=conf, install=lite_install, proxy=True) as c:
        yield c


async def test_the_proxy_remoting_port_does_not_serve_lite_topics(
    proxy_cluster: JavaCluster,
) -> None:
    topic, group = unique_name("liteproxy"), unique_name("liteproxy_g")
    await create_lite_parent(proxy_cluster.namesrv, topic, group)
    pool = ConnectionPool()
    try:
        conn = await pool.get(proxy_cluster.proxy)
        for code, ext in [
            (RequestCode.LITE_SUBSCRIPTION_CTL, {}),
            (RequestCode.POP_LITE_MESSAGE, _pop_header(topic, group)),
        ]:
            resp = await conn.request(RemotingCommand.request(code, ext), timeout=30)
            assert resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED, (code, resp)
    finally:
        await pool.close()
    # the proxy routes to itself: the consumer is refused at start, naming the proxy
    c = lite_consumer(proxy_cluster.proxy, group, topic)
    with pytest.raises(UnsupportedFeatureError, match=r"proxy.*needs the brokers' name server"):
        await c.start()
    await c.close()
    # through the name server the same group consumes
    async with lite_consumer(proxy_cluster.namesrv, group, topic) as c:
        await c.subscribe_lite("c1")
        async with rmq.Producer(namesrv=proxy_cluster.proxy, group=unique_name("p")) as p:
            sent = await send_lite(p, topic, ["c1"], 1, "x")
        assert by_lite_topic(await receive_until(c, 1, timeout=60)) == sent


def _pop_header(topic: str, group: str) -> dict[str, str]:
    return PopLiteMessageRequestHeader(
        client_id="probe",
        consumer_group=group,
        topic=topic,
        max_msg_num=1,
        invisible_time=10_000,
        poll_time=0,
        born_time=0,
    ).to_ext()


async def test_an_older_broker_refuses_lite_topics_clearly(
    rocketmq: Install, java_cluster: JavaCluster
) -> None:
    if rocketmq.version_tuple >= (5, 5):
        pytest.skip(f"a broker before 5.5 refuses lite topics; this install is {rocketmq.version}")
    topic, group = unique_name("liteold"), unique_name("liteold_g")
    await check_lite_refused(java_cluster.namesrv, topic, group)


@pytest.fixture(scope="module")
def java55_classes(lite_install: Install, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``java55/JLite.java``, compiled against the 5.5 install."""
    return compile_java(tmp_path_factory.mktemp("java55-classes"), JAVA55_SOURCES)


async def test_the_java_client_consumes_lite_topics_of_the_embedded_broker(
    broker: EmbeddedBroker, java55_classes: Path, tmp_path: Path
) -> None:
    topic, group = "agents", "agents-g"
    await create_lite_parent(broker.address, topic, group)
    async with rmq.Producer(namesrv=broker.address, group="p") as p:
        sent = await send_lite(p, topic, ["c1", "c2", "c3"], 5, "x")
    java = await JavaClient.start(
        java55_classes,
        "JLite",
        broker.address,
        topic,
        group,
        "c1,c3",
        "10",
        "120",
        name="jlite",
        tmp=tmp_path / "jlite",
    )
    try:
        await java.wait_until(lambda j: len(j.of("msg")) >= 10, BOOT + 60, "10 lite messages")
        await java.wait_exit(60)
    finally:
        await java.kill()
    msgs = java.of("msg")
    got: dict[str, list[bytes]] = {}
    for m in msgs:
        got.setdefault(m["lite"], []).append(m["body"].encode())
    assert got == {"c1": sent["c1"], "c3": sent["c3"]}, java.diagnostics()
    assert {m["ack"] for m in msgs} == {"OK"}
    assert [m["offset"] for m in msgs if m["lite"] == "c1"] == list(range(5))
    # its acks moved the group's offsets; its COMPLETE_REMOVE left no subscription behind
    assert broker.lite.registry.clients() == []
    async with lite_consumer(broker.address, group, topic, await_duration=0.5) as c:
        await c.subscribe_lite("c1", "c2", "c3")
        rest = await receive_until(c, 5, timeout=30)
        rest += await receive_until(c, 1, timeout=1.5)
    assert by_lite_topic(rest) == {"c2": sent["c2"]}
