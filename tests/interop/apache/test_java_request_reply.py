"""Request/reply across implementations: 1,000 requests with 64 in flight, every reply
matched to its request, in both directions (Java ``DefaultMQProducer.request`` → aiorocket
responder, aiorocket ``Producer.request`` → Java responder using
``MessageUtil.createReplyMessage``), on the Apache broker of ``ROCKETMQ_HOME`` and on
aiorocket's embedded broker.

The Apache broker needs nothing set: ``storeReplyMessageEnable`` is true by default (the
reply is stored in ``<cluster>_REPLY_TOPIC`` too) and ``TopicConfigManager`` creates that
topic at start, one queue, whatever ``autoCreateTopicEnable`` says (docs/protocol.md §13).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import Install
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

#: how long a JVM may take to start and finish on a busy 2-core machine
BOOT = 120.0
REQUESTS, IN_FLIGHT = 1000, 64
#: each request's own timeout
TIMEOUT = 30.0

CONSUMER: dict[str, Any] = {
    "consume_from": "first",
    "rebalance_interval": 1.0,
    "shutdown_grace": 2.0,
    "concurrency": IN_FLIGHT,
}


@pytest.fixture(params=["apache", "embedded"])
def namesrv(request: pytest.FixtureRequest) -> str:
    """The name server of the Apache cluster or of an embedded broker."""
    if request.param == "apache":
        cluster: JavaCluster = request.getfixturevalue("java_cluster")
        return cluster.namesrv
    broker: EmbeddedBroker = request.getfixturevalue("broker")
    return broker.address


async def create_topic(namesrv: str, topic: str) -> None:
    async with rmq.Admin(namesrv=namesrv) as admin:
        await admin.create_topic(topic, queues=4)


class Responder:
    """An aiorocket push consumer answering each request body B with ``re:`` + B."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.replies = rmq.Producer(namesrv=namesrv, group=unique_name("rr_replies"))
        self.consumer = rmq.PushConsumer(group=unique_name("rr_resp"), namesrv=namesrv, **CONSUMER)
        self.consumer.subscribe(topic)
        self.consumer.listener(self._on)
        self.answered = 0

    async def _on(self, msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        for msg in msgs:
            # the broker answers a reply once the requester took it: with 64 in flight a JVM
            # warming up can take longer than send_timeout's 3 s, and a reply sent again after
            # a timeout would reach the requester twice
            await self.replies.reply(msg, b"re:" + msg.body, timeout=TIMEOUT)
            self.answered += 1

    async def __aenter__(self) -> Responder:
        await self.replies.start()
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.close()
        await self.replies.close()


@pytest.fixture
async def java_responder(
    namesrv: str, java_classes: Path, tmp_path: Path
) -> AsyncIterator[tuple[str, JavaClient]]:
    topic = unique_name("rr_java")
    await create_topic(namesrv, topic)
    java = await JavaClient.start(
        java_classes, "JResponder", namesrv, topic, unique_name("rr_jresp"), tmp=tmp_path / "java"
    )
    try:
        await java.wait_event("ready", BOOT)
        yield topic, java
    finally:
        await java.stop()


async def test_aiorocket_requests_answered_by_a_java_responder(
    namesrv: str, java_responder: tuple[str, JavaClient]
) -> None:
    topic, java = java_responder
    slots = asyncio.Semaphore(IN_FLIGHT)
    peak = in_flight = 0

    async with rmq.Producer(namesrv=namesrv, group=unique_name("rr_req")) as producer:

        async def ask(i: int) -> bytes:
            nonlocal peak, in_flight
            async with slots:
                in_flight += 1
                peak = max(peak, in_flight)
                try:
                    reply = await producer.request(rmq.Message(topic, f"req-{i}"), timeout=TIMEOUT)
                finally:
                    in_flight -= 1
                return reply.body

        started = time.perf_counter()
        replies = await asyncio.gather(*(ask(i) for i in range(REQUESTS)))
        print(f"{REQUESTS} aiorocket requests answered in {time.perf_counter() - started:.2f} s")
    assert replies == [f"re:req-{i}".encode() for i in range(REQUESTS)], java.diagnostics()
    assert peak == IN_FLIGHT
    assert producer.unmatched_replies == 0
    assert java.of("error") == []


async def test_java_requests_answered_by_an_aiorocket_responder(
    namesrv: str, java_classes: Path, tmp_path: Path, rocketmq: Install
) -> None:
    if (5, 3, 1) <= rocketmq.version_tuple < (5, 4):
        # Java's blocking request() returns as soon as the request is stored (docs/protocol.md
        # §13, quirks): most requests fail at once whatever the responder does.
        pytest.skip(
            "the Java 5.3.1-5.3.3 client's request() does not wait for the reply; "
            f"this install is {rocketmq.version}"
        )
    topic = unique_name("rr_py")
    await create_topic(namesrv, topic)
    async with Responder(namesrv, topic) as responder:
        java = await JavaClient.start(
            java_classes,
            "JRequester",
            namesrv,
            topic,
            unique_name("rr_jreq"),
            str(REQUESTS),
            str(IN_FLIGHT),
            str(int(TIMEOUT * 1000)),
            tmp=tmp_path / "java",
        )
        try:
            done = await java.wait_event("done", BOOT + 60)
        finally:
            await java.stop()
    print(f"{REQUESTS} Java requests: {done}")
    assert done["matched"] == REQUESTS, (done, java.diagnostics())
    assert (done["mismatched"], done["failed"]) == (0, 0), done
    assert done["maxInFlight"] == IN_FLIGHT
    assert responder.answered == REQUESTS
