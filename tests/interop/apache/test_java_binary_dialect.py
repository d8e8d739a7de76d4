"""The binary (ROCKETMQ) header dialect (docs/protocol.md §1.5) both ways between aiorocket and
Apache RocketMQ.

* aiorocket's clients with ``serialize_type="rocketmq"`` against the Java broker: producer,
  queue reader, push consumer (concurrent with a retry, and orderly), pull consumer and admin
  client, the scenarios the embedded broker runs too (``tests/interop/binary_scenarios.py``).
  A 4.9.x broker answers a request in its dialect (``NettyRemotingAbstract`` copies the
  request's serialize type into the response), except a held pull answered once a message
  arrives (``PullMessageProcessor.executeRequestWhenWakeup`` writes it in the broker's own
  dialect, JSON): the checks allow JSON for those only. A 5.x broker copies it nowhere and
  answers everything in JSON; the checks say so.
* The Java client started with ``-Drocketmq.serialize.type=ROCKETMQ`` (what makes
  ``RemotingCommand.serializeTypeConfigInThisServer`` binary) against the embedded broker:
  every request it sends is binary and every answer goes back binary.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import pytest

from aiorocket._protocol.codes import SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._remoting import server as server_module
from aiorocket._remoting.server import ServerConnection
from aiorocket.embedded import EmbeddedBroker
from tests.interop import binary_scenarios as sc
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import Install
from tests.interop.apache.java_client import JavaClient
from tests.interop.apache.test_java_client_embedded import (
    BOOT,
    COUNT,
    QUEUES,
    check_java_delivery,
    check_java_message,
    consumed,
    produce,
    read_all,
    wait_until,
)
from tests.interop.harness import unique_name

pytestmark = pytest.mark.broker(default_queues=QUEUES)

# -- aiorocket's binary clients, Java broker ------------------------------------------------------


@pytest.fixture(scope="module")
def answers(rocketmq: Install) -> sc.Answers:
    """What the Java broker under test answers binary requests with."""
    return sc.Answers.JSON if rocketmq.v5 else sc.Answers.HELD_PULLS_JSON


async def test_producer_and_queue_reader(java_cluster: JavaCluster, answers: sc.Answers) -> None:
    await sc.producer_reader_scenario(java_cluster.namesrv, unique_name("BinSend"), answers)


async def test_push_consumer_concurrent_with_a_retry(
    java_cluster: JavaCluster, answers: sc.Answers
) -> None:
    await sc.push_scenario(java_cluster.namesrv, unique_name("BinPush"), answers)


async def test_push_consumer_orderly(java_cluster: JavaCluster, answers: sc.Answers) -> None:
    await sc.orderly_scenario(java_cluster.namesrv, unique_name("BinOrderly"), answers)


async def test_pull_consumer_and_admin(java_cluster: JavaCluster, answers: sc.Answers) -> None:
    group = await sc.pull_consumer_scenario(java_cluster.namesrv, unique_name("BinPull"), answers)
    await sc.admin_scenario(java_cluster.namesrv, unique_name("BinAdmin"), group, answers)


# -- the Java client in the binary dialect, embedded broker ----------------------------------------

#: what makes a Java 4.9.8 client send binary headers
BINARY_JVM = ("-Drocketmq.serialize.type=ROCKETMQ",)


class Recording(ServerConnection):
    """A broker-side connection that also counts the dialects of the responses it writes."""

    made: ClassVar[list[Recording]] = []

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.sent = dict.fromkeys(SerializeType, 0)
        Recording.made.append(self)

    def send_response(
        self,
        cmd: RemotingCommand,
        body_parts: list[bytes | bytearray | memoryview] | None = None,
    ) -> None:
        self.sent[cmd.serialize_type] += 1
        super().send_response(cmd, body_parts)


@pytest.fixture
def recording(monkeypatch: pytest.MonkeyPatch) -> list[Recording]:
    """Every connection the embedded broker accepts from now on."""
    Recording.made = []
    monkeypatch.setattr(server_module, "ServerConnection", Recording)
    return Recording.made


@pytest.fixture
def broker(recording: list[Recording], broker: EmbeddedBroker) -> EmbeddedBroker:
    """The suite's ``broker`` (``QUEUES`` queues), started once ``recording`` records the
    connections it accepts."""
    return broker


def split_by_dialect(conns: list[Recording]) -> tuple[list[Recording], list[Recording]]:
    """The connections that sent binary requests and those that sent JSON ones; none sent
    both, and each was answered in its own dialect only."""
    binary, json = [], []
    for c in conns:
        got = c.requests_received
        if got[SerializeType.ROCKETMQ]:
            assert not got[SerializeType.JSON], got
            assert not c.sent[SerializeType.JSON], c.sent
            binary.append(c)
        elif got[SerializeType.JSON]:
            assert not c.sent[SerializeType.ROCKETMQ], c.sent
            json.append(c)
    return binary, json


async def test_java_client_binary_produce_and_consume(
    broker: EmbeddedBroker, recording: list[Recording], java_classes: Path, tmp_path: Path
) -> None:
    """A binary Java producer's messages are stored intact; a binary Java push consumer gets
    every message aiorocket (JSON) sent; the broker saw the Java client's requests binary only
    and answered them binary, and aiorocket's in JSON."""
    topic = unique_name("j_bin")
    producer = await JavaClient.run(
        java_classes,
        "JClient",
        "produce",
        broker.address,
        topic,
        "sync",
        str(COUNT),
        name="bin-producer",
        tmp=tmp_path / "producer",
        jvm_options=BINARY_JVM,
        timeout=BOOT,
    )
    stored = await read_all(broker, topic)
    assert sorted(int(m.properties["idx"]) for m in stored) == list(range(COUNT))
    for m in stored:
        check_java_message(m, int(m.properties["idx"]))
    sent = producer.of("sent")
    assert [e["i"] for e in sent] == list(range(COUNT))
    assert all(e["status"] == "SEND_OK" for e in sent)

    py_topic = unique_name("py_bin")
    await produce(broker, py_topic, range(COUNT))
    consumer = await JavaClient.start(
        java_classes,
        "JClient",
        "push",
        broker.address,
        py_topic,
        unique_name("j_bin_g"),
        "concurrent",
        name="bin-consumer",
        tmp=tmp_path / "consumer",
        jvm_options=BINARY_JVM,
    )
    try:
        await wait_until(lambda: consumed(consumer) == set(range(COUNT)), BOOT, "all", consumer)
        for e in consumer.of("msg"):
            check_java_delivery(e)
        binary, json = split_by_dialect(recording)
        assert binary, "no binary request reached the broker"
        # the Java clients' connections (name server and broker requests share the port)
        assert sum(c.sent[SerializeType.ROCKETMQ] for c in binary) > COUNT
        assert json, "aiorocket's clients speak JSON by default"
    finally:
        await consumer.stop()


async def test_a_json_java_client_stays_json(
    broker: EmbeddedBroker, recording: list[Recording], java_classes: Path, tmp_path: Path
) -> None:
    """The control: without the property the Java client's requests are JSON."""
    await JavaClient.run(
        java_classes,
        "JClient",
        "produce",
        broker.address,
        unique_name("j_json"),
        "sync",
        "3",
        name="json-producer",
        tmp=tmp_path / "producer",
        timeout=BOOT,
    )
    binary, json = split_by_dialect(recording)
    assert not binary
    assert json
