"""Broadcasting consumers' local offsets files: one per live consumer (locked), stable across
restarts, and keyed by cluster so a file left by a consumer of another cluster with the same
broker names never makes a new consumer skip messages."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from aiorocket import (
    Message,
    Producer,
    PushConsumer,
)
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ConfigurationError
from tests._harness.consume import collect_bodies
from tests._harness.wait import wait_for

TOPIC = "Bcast"


def member(
    broker: EmbeddedBroker, store: Path, got: list[bytes], instance_name: str | None = None
) -> PushConsumer:
    named: dict[str, Any] = {"instance_name": instance_name} if instance_name else {}
    consumer = PushConsumer(
        group="bcast",
        namesrv=broker.address,
        message_model="broadcasting",
        consume_from="first",
        offset_store_dir=store,
        offset_persist_interval=0.2,
        rebalance_interval=0.5,
        **named,
    )
    return collect_bodies(consumer, TOPIC, got.extend)


async def send(producer: Producer, first: int, last: int) -> None:
    for i in range(first, last):
        await producer.send(Message(TOPIC, b"%d" % i))


def bodies(first: int, last: int) -> list[bytes]:
    return sorted(b"%d" % i for i in range(first, last))


async def test_two_default_consumers_on_one_host_keep_their_own_progress(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    store = tmp_path / "offsets"
    got: dict[str, list[bytes]] = defaultdict(list)
    async with (
        Producer(namesrv=broker.address, group="bp") as producer,
    ):
        await send(producer, 0, 20)
        a, b = member(broker, store, got["a"]), member(broker, store, got["b"])
        await a.start()  # the first one takes DEFAULT, the second DEFAULT-2
        try:
            await b.start()
            await wait_for(lambda: len(got["a"]) == len(got["b"]) == 20, timeout=10, what="both")
            await a.close()
            # a stopped at 20; b goes on to 30
            await send(producer, 20, 30)
            await wait_for(lambda: len(got["b"]) == 30, timeout=10, what="b's next ten")
        finally:
            await a.close()
            await b.close()
        files = sorted(p.parent.parent.name for p in store.rglob("offsets.json"))
        assert [f.split("@")[1] for f in files] == ["DEFAULT", "DEFAULT-2"]
        got.clear()
        again = member(broker, store, got["a"])
        async with again:  # takes DEFAULT again: a's file, and a's progress
            await wait_for(lambda: len(got["a"]) == 10, timeout=10, what="what a missed")
    assert sorted(got["a"]) == bodies(20, 30)


async def test_a_second_live_consumer_with_the_same_instance_name_is_refused(
    broker: EmbeddedBroker,
    tmp_path: Path,
) -> None:
    store = tmp_path / "offsets"
    got: list[bytes] = []
    async with member(broker, store, got, "edge-1"):
        second = member(broker, store, got, "edge-1")
        with pytest.raises(ConfigurationError, match="instance_name 'edge-1'"):
            await second.start()
    async with member(broker, store, got, "edge-1"):  # free again once the first closed
        pass


async def consume_on_a_new_cluster(
    data_dir: Path, store: Path, got: list[bytes], first: int, last: int
) -> str:
    """Start a broker on ``data_dir`` (a cluster of its own, named as every other), send it
    messages ``first`` to ``last - 1`` and consume them with the broadcasting member "edge";
    the cluster's address."""
    # one queue, so the cluster's offsets are one row: the producer creates the topic with
    # one queue on its first send (``defaultTopicQueueNums``)
    async with (
        EmbeddedBroker(data_dir=data_dir) as broker,
        Producer(namesrv=broker.address, group="bp", default_topic_queue_nums=1) as producer,
    ):
        await send(producer, first, last)
        async with member(broker, store, got, "edge"):
            await wait_for(
                lambda: len(got) == last - first, timeout=10, what="the cluster's messages"
            )
        return broker.address


async def test_offsets_of_another_cluster_with_the_same_broker_names_are_not_used(
    tmp_path: Path,
) -> None:
    store = tmp_path / "offsets"
    got: list[bytes] = []
    first_cluster = await consume_on_a_new_cluster(tmp_path / "one", store, got, 0, 7)
    got.clear()
    # a fresh cluster: same cluster and broker names, its own messages from offset 0
    second_cluster = await consume_on_a_new_cluster(tmp_path / "two", store, got, 100, 115)
    assert sorted(got) == bodies(100, 115)
    [path] = list(store.rglob("offsets.json"))
    clusters = json.loads(path.read_text())["clusters"]
    rows = {k: v["offsets"] for k, v in clusters.items()}
    row = {"topic": TOPIC, "brokerName": "broker-a", "queueId": 0}
    assert rows == {first_cluster: [{**row, "offset": 7}], second_cluster: [{**row, "offset": 15}]}


async def test_the_file_follows_a_cluster_whose_name_servers_change(tmp_path: Path) -> None:
    from aiorocket._consumer.offset_store import LocalFileOffsetStore
    from aiorocket.models import MessageQueue

    path = tmp_path / "offsets.json"
    mq = MessageQueue("T", "broker-a", 0)

    async def stored(cluster: str) -> int | None:
        store = LocalFileOffsetStore(path, cluster=cluster)
        await store.load()
        try:
            return await store.read_stored(mq)
        finally:
            store.close()

    store = LocalFileOffsetStore(path, cluster="10.0.0.1:9876;10.0.0.2:9876")
    await store.load()
    store.update(mq, 42)
    await store.persist_all([mq])
    store.close()
    assert await stored("10.0.0.2:9876;10.0.0.3:9876") == 42  # a name server in common
    assert await stored("10.9.9.9:9876") is None  # another cluster
    # the older layout (no cluster) is not trusted
    path.write_text('{"offsetTable":{{"brokerName":"broker-a","queueId":0,"topic":"T"}:42}}')
    assert await stored("10.0.0.1:9876;10.0.0.2:9876") is None
