"""Send-back, delay levels, retry and DLQ topics (docs/protocol.md §6.6), with a shortened table."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.msgid import make_offset_msg_id
from tests.embedded.test_broker_kit import FAST_LEVELS, RawClient, running_broker


async def _send_back(
    c: RawClient,
    rec: MessageRecord,
    group: str,
    *,
    delay_level: int = 0,
    max_reconsume: int | None = None,
    version: int | None = None,
) -> int:
    ext = {
        "offset": str(rec.commit_log_offset),
        "group": group,
        "delayLevel": str(delay_level),
        "originMsgId": rec.properties.get(mp.UNIQ_KEY, ""),
        "originTopic": rec.topic,
    }
    if max_reconsume is not None:
        ext["maxReconsumeTimes"] = str(max_reconsume)
    resp = await c.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext, version=version)
    return resp.code


async def _wait_message(
    c: RawClient, topic: str, queue_id: int, offset: int, timeout: float = 3.0
) -> tuple[MessageRecord, float]:
    """Hold a pull until the message at ``offset`` arrives; return it and the arrival time."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"nothing arrived in {topic}"
        resp, recs = await c.pull(
            "watch", topic, queue_id, offset, suspend_ms=int(left * 1000) + 1, timeout=left + 2
        )
        if resp.code == 0:
            return recs[0], time.monotonic()
        assert resp.code == ResponseCode.PULL_NOT_FOUND, resp


async def _stored(c: RawClient, topic: str, body: bytes, **send: Any) -> MessageRecord:
    """Send ``body`` to ``topic`` (queue 0 unless ``send`` says otherwise) and pull it back
    from queue 0 as group G."""
    await c.send(topic, body, **send)
    _, (rec,) = await c.pull("G", topic, 0, 0)
    return rec


async def _dead_letter(c: RawClient) -> MessageRecord:
    """The first message of group G's dead-letter queue (1 s at most)."""
    dead, _ = await _wait_message(c, "%DLQ%G", 0, 0, timeout=1.0)
    return dead


async def test_delay_message_arrives_on_time() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.create_topic("Later")
        t0 = time.monotonic()
        resp = await c.send("Later", b"soon", tags="d", props={mp.DELAY: "3"}, queue_id=1)
        assert resp.code == 0
        assert resp.ext_fields["queueId"] == "1"
        # parked, not yet visible
        r, _ = await c.pull("G", "Later", 1, 0)
        assert r.code == ResponseCode.PULL_NOT_FOUND
        rec, arrived = await _wait_message(c, "Later", 1, 0)
        assert FAST_LEVELS[2] - 0.02 <= arrived - t0 <= FAST_LEVELS[2] + 0.25
        assert rec.body == b"soon"
        assert rec.topic == "Later"
        assert rec.queue_id == 1
        # as on a 4.9.8 broker: the parked copy's properties, DELAY and the sender's WAIT kept
        assert rec.properties[mp.DELAY] == "3"
        assert rec.properties[mp.WAIT] == "true"
        assert rec.properties[mp.REAL_TOPIC] == "Later"
        assert rec.properties[mp.REAL_QID] == "1"
        assert rec.properties[mp.TAGS] == "d"


async def test_delay_level_above_the_table_is_clamped() -> None:
    async with running_broker(delay_levels=(0.05, 0.1)) as broker, RawClient(broker.address) as c:
        await c.create_topic("Clamp")
        t0 = time.monotonic()
        await c.send("Clamp", b"x", props={mp.DELAY: "99"})
        _, arrived = await _wait_message(c, "Clamp", 0, 0)
        assert 0.08 <= arrived - t0 <= 0.4


async def test_send_back_walks_the_levels_then_lands_in_the_dlq() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        orig = await _stored(c, "Work", b"poison", tags="p", uniq_key="UNIQ-1", queue_id=0)
        first_id = make_offset_msg_id(orig.store_host, orig.store_port, orig.commit_log_offset)

        current = orig
        for attempt in (1, 2):
            t0 = time.monotonic()
            code = await _send_back(c, current, "G", max_reconsume=2, version=409)
            assert code == 0
            # level 3 + reconsumeTimes, as the broker decides for delayLevel 0
            expected = FAST_LEVELS[2 + current.reconsume_times]
            retry, arrived = await _wait_message(c, "%RETRY%G", 0, attempt - 1)
            assert expected - 0.02 <= arrived - t0 <= expected + 0.3
            assert retry.reconsume_times == attempt
            assert retry.body == b"poison"
            assert retry.properties[mp.RETRY_TOPIC] == "Work"
            assert retry.properties[mp.ORIGIN_MESSAGE_ID] == first_id
            assert retry.properties[mp.UNIQ_KEY] == "UNIQ-1"
            assert retry.properties[mp.TAGS] == "p"
            # consumerSendMsgBack parks the copy with WAIT false; both survive the delay
            assert retry.properties[mp.DELAY] == str(3 + current.reconsume_times)
            assert retry.properties[mp.WAIT] == "false"
            current = retry

        # reconsumeTimes 2 >= max 2: the dead-letter queue, at once
        assert await _send_back(c, current, "G", max_reconsume=2, version=409) == 0
        dead = await _dead_letter(c)
        assert dead.reconsume_times == 3
        assert dead.properties[mp.ORIGIN_MESSAGE_ID] == first_id
        assert dead.properties[mp.RETRY_TOPIC] == "Work"
        cfg = broker.topics.get("%DLQ%G")
        assert cfg is not None
        assert (cfg.read_queue_nums, cfg.perm) == (1, 6)


async def test_max_reconsume_header_needs_version_121() -> None:
    async with running_broker(max_reconsume_times=1) as broker, RawClient(broker.address) as c:
        orig = await _stored(c, "Old", b"x")
        object.__setattr__(orig, "reconsume_times", 0)
        # version 100 < 121: the header's 5 is ignored, the group's max (1) applies
        assert await _send_back(c, orig, "G", max_reconsume=5, version=100) == 0
        retry, _ = await _wait_message(c, "%RETRY%G", 0, 0)
        assert await _send_back(c, retry, "G", max_reconsume=5, version=100) == 0
        dead = await _dead_letter(c)
        assert dead.reconsume_times == 2


async def test_delay_level_minus_one_goes_straight_to_the_dlq() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        orig = await _stored(c, "Bad", b"x")
        assert await _send_back(c, orig, "G", delay_level=-1) == 0
        dead = await _dead_letter(c)
        assert dead.reconsume_times == 1


async def test_explicit_delay_level_and_lookup_failure() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        orig = await _stored(c, "Lvl", b"x")
        t0 = time.monotonic()
        assert await _send_back(c, orig, "G", delay_level=1) == 0
        _, arrived = await _wait_message(c, "%RETRY%G", 0, 0)
        assert arrived - t0 <= FAST_LEVELS[0] + 0.25
        object.__setattr__(orig, "commit_log_offset", orig.commit_log_offset + 3)
        resp = await c.request(
            RequestCode.CONSUMER_SEND_MSG_BACK,
            {"offset": str(orig.commit_log_offset), "group": "G", "delayLevel": "0"},
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark is not None
        assert resp.remark.startswith("look message by offset failed")


async def test_client_side_retry_past_the_limit_goes_to_the_dlq() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp = await c.send(
            "%RETRY%G", b"x", reconsume_times=16, max_reconsume_times=16, props={mp.DELAY: "3"}
        )
        assert resp.code == 0
        dead = await _dead_letter(c)
        assert dead.reconsume_times == 16
        # below the limit it is a normal (delayed) retry
        resp = await c.send("%RETRY%G", b"y", reconsume_times=3, props={mp.DELAY: "1"})
        assert resp.code == 0
        retry, _ = await _wait_message(c, "%RETRY%G", 0, 0)
        assert retry.body == b"y"


async def test_restart_keeps_pending_retry_schedules(tmp_path: Path) -> None:
    levels = (0.05, 0.1, 0.6)
    async with (
        running_broker(tmp_path, delay_levels=levels) as broker,
        RawClient(broker.address) as c,
    ):
        orig = await _stored(c, "Keep", b"k")
        t0 = time.monotonic()
        assert await _send_back(c, orig, "G") == 0  # level 3: 0.6 s
        await c.send("Keep2", b"d", props={mp.DELAY: "3"})
    async with (
        running_broker(tmp_path, delay_levels=levels) as broker,
        RawClient(broker.address) as c,
    ):
        r, _ = await c.pull("watch", "%RETRY%G", 0, 0)
        assert r.code == ResponseCode.PULL_NOT_FOUND  # still pending
        retry, arrived = await _wait_message(c, "%RETRY%G", 0, 0)
        assert 0.55 <= arrived - t0 <= 1.5
        assert retry.reconsume_times == 1
        delayed, _ = await _wait_message(c, "Keep2", 0, 0)
        assert delayed.body == b"d"
    # delivered ones are not delivered again after another restart
    async with (
        running_broker(tmp_path, delay_levels=levels) as broker,
        RawClient(broker.address) as c,
    ):
        await asyncio.sleep(0.2)
        assert len(await c.pull_all("x", "%RETRY%G", 0)) == 1
        assert len(await c.pull_all("x", "Keep2", 0)) == 1


async def test_a_shorter_delay_table_after_restart_still_delivers(tmp_path: Path) -> None:
    long_table = (0.05, 0.1, 0.3)
    async with running_broker(tmp_path, delay_levels=long_table) as b, RawClient(b.address) as c:
        await c.send("Shrink", b"s", props={mp.DELAY: "3"})
    async with running_broker(tmp_path, delay_levels=(0.05,)) as b, RawClient(b.address) as c:
        rec, _ = await _wait_message(c, "Shrink", 0, 0)
        assert rec.body == b"s"
