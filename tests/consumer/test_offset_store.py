"""Offset stores: increase-only memory, the local file (atomic), the broker (real TCP)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.offset_store import LocalFileOffsetStore, RemoteOffsetStore
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import MessageQueue
from aiorocket.settings import ClientSettings

from .conftest import create_topic

A0 = MessageQueue("T", "broker-a", 0)
A1 = MessageQueue("T", "broker-a", 1)


async def test_memory_is_increase_only_unless_forced(tmp_path: Path) -> None:
    store = LocalFileOffsetStore(tmp_path / "o.json")
    assert store.read(A0) == -1
    store.update(A0, 10)
    store.update(A0, 5)
    assert store.read(A0) == 10
    store.update(A0, 5, increase_only=False)
    assert store.read(A0) == 5
    store.remove(A0)
    assert store.read(A0) == -1


async def test_local_file_round_trip_and_layout(tmp_path: Path) -> None:
    path = tmp_path / "client" / "group" / "offsets.json"
    store = LocalFileOffsetStore(path, cluster="127.0.0.1:9876")
    await store.load()
    assert await store.read_stored(A0) is None
    store.update(A0, 42)
    store.update(A1, 7)
    await store.persist_all([A0, A1])
    store.close()
    doc = json.loads(path.read_text())
    assert doc["clusters"]["127.0.0.1:9876"]["offsets"][0] == {
        "topic": "T",
        "brokerName": "broker-a",
        "queueId": 0,
        "offset": 42,
    }
    assert not list(path.parent.glob(".offsets-*"))  # no temporary file left behind

    again = LocalFileOffsetStore(path, cluster="127.0.0.1:9876")
    await again.load()
    assert await again.read_stored(A0) == 42
    assert again.read(A0) == 42  # read_stored also seeds memory
    assert await again.read_stored(A1) == 7


async def test_local_file_keeps_offsets_of_queues_not_held(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    store = LocalFileOffsetStore(path)
    store.update(A0, 1)
    store.update(A1, 2)
    await store.persist_all([A0, A1])
    store.update(A0, 3)
    await store.persist_all([A0])
    again = LocalFileOffsetStore(path)
    await again.load()
    assert (await again.read_stored(A0), await again.read_stored(A1)) == (3, 2)


async def test_local_file_unreadable_is_treated_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "offsets.json"
    path.write_text("{not json")
    store = LocalFileOffsetStore(path)
    await store.load()
    assert await store.read_stored(A0) is None
    json.loads("{}")  # the store never raised


@pytest.mark.broker
async def test_remote_store_against_the_embedded_broker(broker: EmbeddedBroker) -> None:
    client = ClientInstance(ClientSettings(namesrv=(broker.address,)))
    client.start(lambda coro: None)
    try:
        await create_topic(broker, "RemoteT")
        await client.fetch_route("RemoteT")
        mq = MessageQueue("RemoteT", "broker-a", 0)
        store = RemoteOffsetStore(client, "remote-group")
        # A young broker answers 0 for a new group (docs/protocol.md §6.5).
        assert await store.read_stored(mq) in (None, 0)
        store.update(mq, 17)
        await store.persist(mq, sync=True)
        fresh = RemoteOffsetStore(client, "remote-group")
        assert await fresh.read_stored(mq) == 17
        assert fresh.read(mq) == 17
        store.update(mq, 20)
        await store.persist_all([], sync=True)  # "remove unused mq": nothing sent
        assert store.read(mq) == -1
        assert await fresh.read_stored(mq) == 17
    finally:
        await client.close()
