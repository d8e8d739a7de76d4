"""TLS against the real Apache RocketMQ 4.9.8: the Java broker with TLS enforced, and the Java
client with ``-Dtls.enable=true`` against the embedded broker.

A Java name server and broker read their TLS settings from system properties
(``TlsSystemConfig``): ``tls.server.mode=enforcing``, ``tls.test.mode.enable=false`` (else
they use a self-signed certificate of their own), ``tls.server.certPath`` and
``tls.server.keyPath`` (the key as PKCS#8 PEM). The broker registers with the name server as
a TLS client (``tls.enable=true``), which, like every Java client without
``tls.client.authServer=true``, trusts any certificate. Certificates are made at test time.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiorocket import (
    Admin,
    Message,
    Producer,
    ReceivedMessage,
)
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from aiorocket.errors import ConnectionClosedError, RocketError
from tests._harness.consume import consume_until
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.conftest import DEFAULT_BROKER_CONF
from tests.interop.apache.install import Install
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name
from tests.tls.pki import Pki, make_pki

#: how long a JVM may take to start and get ready on a busy 2-core machine
BOOT = 60.0
#: consumer settings that keep the round trips short
FAST: dict[str, Any] = {"rebalance_interval": 1.0, "shutdown_grace": 5.0}


def java_tls_options(pki: Pki, root: Path) -> list[str]:
    """System properties that make a Java name server and broker serve TLS only."""
    return [
        "-Dtls.server.mode=enforcing",
        "-Dtls.test.mode.enable=false",
        f"-Dtls.server.certPath={pki.server_cert}",
        f"-Dtls.server.keyPath={pki.server_key}",
        "-Dtls.server.need.client.auth=none",
        "-Dtls.enable=true",
        # not the default /etc/rocketmq/tls.properties: nothing outside the test may apply
        f"-Dtls.config.file={root / 'no-tls.properties'}",
    ]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Test certificates for this module."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_cluster(
    rocketmq: Install, tmp_path_factory: pytest.TempPathFactory, pki: Pki
) -> Iterator[JavaCluster]:
    """A Java name server and broker with TLS enforced on every port."""
    root = tmp_path_factory.mktemp("java-tls-cluster")
    cluster = JavaCluster(
        root,
        broker_conf=DEFAULT_BROKER_CONF,
        jvm_options=java_tls_options(pki, root),
        install=rocketmq,
    )
    with cluster:
        yield cluster


async def consume(
    namesrv: str, topic: str, group: str, expect: int, **client: Any
) -> list[ReceivedMessage]:
    """What a push consumer gets from ``topic`` until it has ``expect`` messages."""
    return await consume_until(namesrv, topic, group, expect, timeout=30, **FAST, **client)


async def test_python_clients_with_tls_against_java_broker(
    tls_cluster: JavaCluster, pki: Pki
) -> None:
    """Our producer and push consumer, with ``tls=True`` and the test CA, round-trip messages
    through a Java name server and broker that enforce TLS (certificates and IP verified)."""
    topic = unique_name("TlsJ")
    tls: dict[str, Any] = {"tls": True, "tls_ca": pki.ca}
    bodies = [f"py-{i}".encode() for i in range(20)]
    async with Producer(namesrv=tls_cluster.namesrv, **tls) as producer:
        # the Java broker creates a topic on its first send (autoCreateTopicEnable)
        for body in bodies:
            await producer.send(Message(topic, body))
    got = await consume(tls_cluster.namesrv, topic, unique_name("g"), 20, **tls)
    assert sorted(m.body for m in got) == sorted(bodies)


async def test_plain_python_client_refused_by_java_broker(tls_cluster: JavaCluster) -> None:
    """The Java name server closes our plain connection at once (HandshakeHandler, enforcing
    mode); the client fails fast and names TLS as the likely cause."""
    start = time.monotonic()
    with pytest.raises(RocketError) as info:
        async with Producer(namesrv=tls_cluster.namesrv, send_timeout=3, retries=0) as p:
            await p.send(Message(unique_name("TlsJ"), b"x"))
    assert time.monotonic() - start < 3.5
    chain = [info.value, info.value.__cause__, info.value.__context__]
    assert any(isinstance(e, ConnectionClosedError) and "TLS enforcing" in str(e) for e in chain), (
        repr(chain)
    )


@pytest.fixture
async def tls_broker(pki: Pki, tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    """The embedded broker with TLS enforced."""
    config = BrokerConfig(default_queues=4, tls_cert=pki.server_cert, tls_key=pki.server_key)
    async with EmbeddedBroker(data_dir=tmp_path / "broker", config=config) as b:
        yield b


async def test_java_client_with_tls_against_embedded_broker(
    tls_broker: EmbeddedBroker, pki: Pki, java_classes: Path, tmp_path: Path
) -> None:
    """Java's DefaultMQProducer and DefaultMQPushConsumer with ``-Dtls.enable=true`` work
    against the embedded broker enforcing TLS: what the Java producer sends our TLS consumer
    reads intact, and what we send the Java push consumer receives."""
    tls_jvm = ["-Dtls.enable=true"]
    topic = unique_name("TlsE")
    producer = await JavaClient.run(
        java_classes,
        "JClient",
        "produce",
        tls_broker.address,
        topic,
        "sync",
        "10",
        name="jproducer-tls",
        tmp=tmp_path / "jp",
        jvm_options=tls_jvm,
        timeout=BOOT,
    )
    assert len(producer.of("sent")) == 10
    got = await consume(tls_broker.address, topic, unique_name("g"), 10, tls=True, tls_ca=pki.ca)
    assert sorted(int(m.properties["idx"]) for m in got) == list(range(10))

    # the topic exists before the Java consumer subscribes, as an operator would create it: a
    # consumer of a missing topic looks it up again only at its next route poll (30 s)
    topic2 = unique_name("TlsE")
    async with Admin(namesrv=tls_broker.address, tls=True, tls_ca=pki.ca) as admin:
        await admin.create_topic(topic2, queues=4)
    consumer = await JavaClient.start(
        java_classes,
        "JClient",
        "push",
        tls_broker.address,
        topic2,
        unique_name("jg"),
        "concurrent",
        name="jconsumer-tls",
        tmp=tmp_path / "jc",
        jvm_options=tls_jvm,
    )
    try:
        await consumer.wait_event("ready", BOOT)
        async with Producer(namesrv=tls_broker.address, tls=True, tls_ca=pki.ca) as p:
            for i in range(10):
                await p.send(Message(topic2, f"py-{i}".encode()))
        await consumer.wait_until(lambda c: len(c.of("msg")) >= 10, 30, "10 messages")
        assert sorted(e["body"] for e in consumer.of("msg")) == sorted(f"py-{i}" for i in range(10))
    finally:
        await consumer.stop()
