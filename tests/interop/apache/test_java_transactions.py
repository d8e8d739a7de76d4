"""Transactional messages across implementations.

aiorocket's ``TransactionProducer`` against the Apache RocketMQ Java broker (started with
a 1 s ``transactionCheckInterval`` and ``transactionTimeOut``): commit, rollback, unknown →
check-back → commit, and a producer process killed inside its local transaction whose half
message another producer of the group commits; an aiorocket consumer reads the results. Then
the Java ``TransactionMQProducer`` (``java/JTxProducer.java``) against aiorocket's embedded
broker: commit, rollback, unknown → check-back → commit.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name
from tests.producer.tx_proc import crash_in_transaction

pytestmark = pytest.mark.broker(transaction_check_interval=0.5, transaction_timeout=1.0)

#: the Java broker looks for pending halves every second and checks those 2 s old; a checked
#: half is put back with a new store time, so a second check needs the answer to be 2 s late.
#: 5.x writes the op records that end halves in batches, every ``transactionOpBatchInterval``
#: (3 s by default): longer than the timeout, a half ended a moment ago would still look
#: pending and be checked; 4.9.x writes them at once and has no such setting (it ignores it).
JAVA_BROKER_CONF = {
    "transactionCheckInterval": "1000",
    "transactionTimeOut": "2000",
    "transactionOpBatchInterval": "200",
}

#: how long a JVM may take to start and send on a busy 2-core machine
BOOT = 90.0
S = rmq.TransactionState

CONSUMER: dict[str, Any] = {
    "consume_from": "first",
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 2.0,
}


class Received:
    """An aiorocket consumer's deliveries, by body."""

    def __init__(self, namesrv: str, topic: str) -> None:
        self.bodies: list[str] = []
        self.props: dict[str, dict[str, str]] = {}
        self.consumer = rmq.PushConsumer(
            group=unique_name("tx_reader"), namesrv=namesrv, **CONSUMER
        )
        self.consumer.subscribe(topic)
        self.consumer.listener(self._on)

    async def _on(self, msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        for m in msgs:
            self.bodies.append(m.body.decode())
            self.props[m.body.decode()] = dict(m.properties)

    async def wait_for(self, bodies: set[str], timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout):
            while not bodies <= set(self.bodies):
                await asyncio.sleep(0.05)


def answering(state: S, seen: list[str]) -> Any:
    async def check(msg: rmq.ReceivedMessage) -> S:
        seen.append(msg.body.decode())
        return state

    return check


def by_prefix(msg: rmq.Message, arg: object) -> Any:
    async def run() -> S:
        body = msg.body.decode()
        if body.startswith("commit"):
            return S.COMMIT
        if body.startswith("rollback"):
            return S.ROLLBACK
        return S.UNKNOWN

    return run()


def committing(
    namesrv: str, group: str, checked: list[str], **settings: Any
) -> rmq.TransactionProducer:
    """A transaction producer of ``group`` deciding by :func:`by_prefix`, answering COMMIT to
    every check-back (whose bodies go to ``checked``); ``settings`` besides."""
    return rmq.TransactionProducer(
        namesrv=namesrv,
        group=group,
        execute_local=by_prefix,
        check=answering(S.COMMIT, checked),
        **settings,
    )


async def test_transaction_producer_against_the_java_broker(java_cluster: JavaCluster) -> None:
    topic = unique_name("tx_java")
    group = unique_name("tx_pg")
    checked: list[str] = []
    reader = Received(java_cluster.namesrv, topic)
    async with committing(java_cluster.namesrv, group, checked, send_timeout=10.0) as producer:
        states = {}
        for body in ("commit-1", "rollback-1", "unknown-1"):
            result = await producer.send_in_transaction(rmq.Message(topic, body))
            assert result.status is rmq.SendStatus.SEND_OK
            states[body] = result.state
        assert states == {"commit-1": S.COMMIT, "rollback-1": S.ROLLBACK, "unknown-1": S.UNKNOWN}
        async with reader.consumer:
            await reader.wait_for({"commit-1", "unknown-1"})
            await asyncio.sleep(2.5)  # two more check intervals: nothing else arrives
    # The Java broker checks a half again if its answer is late (a loaded machine) and writes
    # the message once per COMMIT it gets: at least once, never more than it was checked.
    assert set(checked) == {"unknown-1"}
    assert reader.bodies.count("commit-1") == 1
    assert 1 <= reader.bodies.count("unknown-1") <= len(checked)
    assert "rollback-1" not in reader.bodies
    assert reader.props["commit-1"]["TRAN_MSG"] == "true"  # the Java broker keeps it
    assert reader.props["commit-1"]["PGROUP"] == group


async def test_java_broker_checks_another_producer_after_a_crash(
    java_cluster: JavaCluster,
) -> None:
    topic = unique_name("tx_crash")
    group = unique_name("tx_crash_pg")
    checked: list[str] = []
    reader = Received(java_cluster.namesrv, topic)
    async with committing(java_cluster.namesrv, group, checked):
        await crash_in_transaction(java_cluster.namesrv, topic, group, timeout=30)
        async with reader.consumer:
            await reader.wait_for({"crash"})
            await asyncio.sleep(2.5)
    assert set(checked) == {"crash"}
    assert set(reader.bodies) == {"crash"}
    assert len(reader.bodies) <= len(checked)


async def test_java_transaction_producer_against_the_embedded_broker(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path
) -> None:
    topic = unique_name("jtx")
    java = await JavaClient.run(
        java_classes,
        "JTxProducer",
        broker.address,
        topic,
        unique_name("jtx_pg"),
        "60",
        "commit-1",
        "rollback-1",
        "unknown-1",
        tmp=tmp_path / "java",
        timeout=BOOT,
    )
    sent = {e["body"]: e for e in java.of("sent")}
    assert {b: e["state"] for b, e in sent.items()} == {
        "commit-1": "COMMIT_MESSAGE",
        "rollback-1": "ROLLBACK_MESSAGE",
        "unknown-1": "UNKNOW",
    }, java.diagnostics()
    assert {e["status"] for e in sent.values()} == {"SEND_OK"}
    checks = java.of("check")
    assert [c["body"] for c in checks] == ["unknown-1"], java.diagnostics()
    assert checks[0]["topic"] == topic  # the real topic, as a Java broker sends it
    assert checks[0]["txId"] == sent["unknown-1"]["msgId"]  # its UNIQ_KEY
    reader = Received(broker.address, topic)
    async with reader.consumer:
        await reader.wait_for({"commit-1", "unknown-1"})
        # resolved: further passes neither check nor deliver again
        assert broker.transactions.check() == 0
    assert sorted(reader.bodies) == ["commit-1", "unknown-1"]
