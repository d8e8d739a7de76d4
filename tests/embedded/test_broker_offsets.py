"""Consumer offsets (query, update, persistence) and the offset lookups (docs/protocol.md §6.5)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket.embedded.offsets import ConsumerOffsets
from tests.embedded.test_broker_kit import RawClient, running_broker


async def _lookup(c: RawClient, code: int, topic: str, queue_id: int, **extra: str) -> str:
    resp = await c.request(code, {"topic": topic, "queueId": str(queue_id), **extra})
    assert resp.code == 0, resp.remark
    key = "timestamp" if code == RequestCode.GET_EARLIEST_MSG_STORETIME else "offset"
    return resp.ext_fields[key]


async def test_new_group_reads_from_zero_on_a_young_queue_or_gets_22() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.send("Q", b"x")
        resp = await c.query_offset("NewGroup", "Q", 0)
        assert (resp.code, resp.ext_fields["offset"]) == (0, "0")
        resp = await c.query_offset("NewGroup", "NeverSeen", 3)
        assert (resp.code, resp.ext_fields["offset"]) == (0, "0")
    async with (
        running_broker(new_group_offset_zero=False) as broker,
        RawClient(broker.address) as c,
    ):
        resp = await c.query_offset("NewGroup", "Q", 0)
        assert resp.code == ResponseCode.QUERY_NOT_FOUND


async def test_update_query_and_persist_across_restart(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker, RawClient(broker.address) as c:
        assert (await c.update_offset("G", "T", 1, 42)).code == 0
        assert (await c.update_offset("G", "T", 2, 7)).code == 0
        assert (await c.update_offset("G", "T", 2, 5)).code == 0  # stored as given, even lower
        assert (await c.query_offset("G", "T", 1)).ext_fields["offset"] == "42"
        assert (await c.query_offset("G", "T", 2)).ext_fields["offset"] == "5"
        bad = await c.update_offset("bad group", "T", 1, 1)
        assert bad.code == ResponseCode.SYSTEM_ERROR
    stored = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())
    assert stored == {"offsetTable": {"T@G": {"1": 42, "2": 5}}}
    async with running_broker(tmp_path) as broker, RawClient(broker.address) as c:
        assert (await c.query_offset("G", "T", 1)).ext_fields["offset"] == "42"
        assert (await c.query_offset("G", "T", 2)).ext_fields["offset"] == "5"


async def test_sync_flush_offsets_are_on_disk_when_acknowledged(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path, flush="sync", offsets_flush_interval=60) as broker,
        RawClient(broker.address) as c,
    ):
        assert (await c.update_offset("G", "T", 0, 9)).code == 0
        table = ConsumerOffsets(tmp_path / "config" / "consumerOffset.json")
        table.load()
        assert table.query("G", "T", 0) == 9


async def test_min_max_search_earliest() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        assert await _lookup(c, RequestCode.GET_MAX_OFFSET, "None", 0) == "0"
        assert await _lookup(c, RequestCode.GET_MIN_OFFSET, "None", 0) == "0"
        assert await _lookup(c, RequestCode.GET_EARLIEST_MSG_STORETIME, "None", 0) == "-1"
        before = int(time.time() * 1000)
        stamps = []
        for i in range(5):
            await c.send("S", b"%d" % i)
            stamps.append(int(time.time() * 1000))
            await asyncio.sleep(0.003)
        assert await _lookup(c, RequestCode.GET_MAX_OFFSET, "S", 0) == "5"
        assert await _lookup(c, RequestCode.GET_MIN_OFFSET, "S", 0) == "0"
        earliest = int(await _lookup(c, RequestCode.GET_EARLIEST_MSG_STORETIME, "S", 0))
        assert before <= earliest <= stamps[0]
        search = RequestCode.SEARCH_OFFSET_BY_TIMESTAMP
        assert await _lookup(c, search, "S", 0, timestamp=str(before - 10_000)) == "0"
        assert await _lookup(c, search, "S", 0, timestamp=str(stamps[-1] + 10_000)) == "4"
        assert await _lookup(c, search, "None", 0, timestamp=str(before)) == "0"
        records = await c.pull_all("G", "S", 0)
        exact = records[2].store_timestamp
        found = int(await _lookup(c, search, "S", 0, timestamp=str(exact)))
        assert records[found].store_timestamp == exact


async def test_restart_keeps_topics_messages_and_offsets(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker, RawClient(broker.address) as c:
        await c.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": "Made",
                "defaultTopic": "TBW102",
                "readQueueNums": "6",
                "writeQueueNums": "6",
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
                "order": "false",
            },
        )
        for i in range(6):
            assert (await c.send("Made", b"m%d" % i, queue_id=i, tags="t")).code == 0
        await c.heartbeat("cid", consumer_group="G", topics={"Made": "*"})
        await c.update_offset("G", "Made", 3, 1)
    async with running_broker(tmp_path) as broker, RawClient(broker.address) as c:
        _, route = await c.route("Made")
        assert route is not None
        assert route.queue_datas[0].write_queue_nums == 6
        assert broker.topics.get("%RETRY%G") is not None
        for i in range(6):
            recs = await c.pull_all("G", "Made", i)
            assert [r.body for r in recs] == [b"m%d" % i]
        assert (await c.query_offset("G", "Made", 3)).ext_fields["offset"] == "1"


async def test_retention_moves_the_min_offset() -> None:
    async with running_broker(segment_size=4096) as broker, RawClient(broker.address) as c:
        for i in range(60):
            assert (await c.send("Old", b"%03d" % i + b"." * 200)).code == 0
        assert broker.store.clean_expired(int(time.time() * 1000) + 100 * 3_600_000) > 0
        low = int(await _lookup(c, RequestCode.GET_MIN_OFFSET, "Old", 0))
        assert 0 < low < 60
        resp, _ = await c.pull("G", "Old", 0, 0)
        assert (resp.code, resp.remark) == (ResponseCode.PULL_OFFSET_MOVED, "OFFSET_TOO_SMALL")
        assert resp.ext_fields["nextBeginOffset"] == str(low)
        assert resp.ext_fields["minOffset"] == str(low)
        resp, recs = await c.pull("G", "Old", 0, low)
        assert resp.code == 0
        assert recs[0].body.startswith(b"%03d" % low)
        # an old queue no longer starts at 0: a new group is told "not found" (§6.5)
        assert (await c.query_offset("Fresh", "Old", 0)).code == ResponseCode.QUERY_NOT_FOUND
        earliest = int(await _lookup(c, RequestCode.GET_EARLIEST_MSG_STORETIME, "Old", 0))
        assert earliest == recs[0].store_timestamp
