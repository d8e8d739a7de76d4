"""The store's multi-dispatch into lite topics' light message queues (docs/protocol.md §12.8):
what a put indexes where, what it writes into the record, what is never dispatched, and how
recovery rebuilds a lost LMQ index from the records."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocket._protocol import properties as mp
from aiorocket._protocol.lite import lite_queue_name
from aiorocket._protocol.message import decode_messages
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.store_results import GetStatus
from tests.embedded.crash_writer import make_record
from tests.embedded.test_store import read_path  # noqa: F401  (both read paths)

LMQ = lite_queue_name("T", "c1")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[MessageStore]:
    async with MessageStore(tmp_path / "store") as s:
        yield s


def put_lite(store: MessageStore, n: int, *, topic: str = "T", dispatch: str = LMQ) -> None:
    for i in range(n):
        props = {mp.UNIQ_KEY: f"m{i}", mp.INNER_MULTI_DISPATCH: dispatch}
        store.put(make_record(topic, i % 2, f"b{i}".encode(), props), tags_code=0)


def lmq_uids(store: MessageStore, lmq: str = LMQ) -> list[str]:
    got = store.get(lmq, 0, 0, max_msgs=32)
    assert got.status is GetStatus.FOUND, got.status
    return [r.properties.get(mp.UNIQ_KEY, "") for r in decode_messages(b"".join(got.messages))]


async def test_a_put_is_indexed_in_its_lite_queue_too(store: MessageStore) -> None:
    put_lite(store, 2)
    record = make_record("T", 1, b"x", {mp.INNER_MULTI_DISPATCH: LMQ})
    result = store.put(record, tags_code=0)
    assert result.dispatched == ((LMQ, 2),)
    assert record.properties[mp.INNER_MULTI_QUEUE_OFFSET] == "2"  # LmqDispatch
    assert store.max_offset(LMQ, 0) == 3
    assert lmq_uids(store)[:2] == ["m0", "m1"]
    got = store.get(LMQ, 0, 2, max_msgs=1)
    [stored] = decode_messages(got.messages[0])
    # the record is the parent's: its own queue and offset, the LMQ offset in the property
    assert (stored.topic, stored.queue_id, stored.queue_offset) == ("T", 1, 1)
    assert stored.properties[mp.INNER_MULTI_QUEUE_OFFSET] == "2"


@pytest.mark.parametrize(
    ("topic", "dispatch"),
    [
        ("%RETRY%g", LMQ),
        ("%DLQ%g", LMQ),
        ("rmq_sys_wheel_timer", LMQ),
        ("SCHEDULE_TOPIC_XXXX", LMQ),
        ("T", "%LMQ%plain"),  # an LMQ that is not a lite topic's
        ("T", f"{LMQ},%LMQ%$T$a/b"),  # one name the store cannot hold: none of them
    ],
)
async def test_what_is_never_dispatched(store: MessageStore, topic: str, dispatch: str) -> None:
    put_lite(store, 1, topic=topic, dispatch=dispatch)
    assert [t for t in store.queues() if t.startswith("%LMQ%")] == []


async def test_recovery_rebuilds_a_lost_lite_queue(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    async with MessageStore(store_dir) as store:
        put_lite(store, 5)
    shutil.rmtree(store_dir / "consumequeue" / LMQ)
    (store_dir / "checkpoint").unlink()
    async with MessageStore(store_dir) as store:
        assert store.max_offset(LMQ, 0) == 5
        assert lmq_uids(store) == [f"m{i}" for i in range(5)]
        put_lite(store, 1)
        assert store.max_offset(LMQ, 0) == 6


async def test_deleting_a_lite_queue_leaves_its_parent(store: MessageStore) -> None:
    put_lite(store, 3)
    assert store.delete_topic(LMQ) == 1
    assert store.max_offset(LMQ, 0) == 0
    assert store.max_offset("T", 0) + store.max_offset("T", 1) == 3
    put_lite(store, 1)
    assert store.max_offset(LMQ, 0) == 1  # a new lite queue starts again at 0
