"""Held POP_MESSAGE and NOTIFICATION requests (docs/protocol.md §12.3): woken by an arrival
within a few ms, answered POLLING_TIMEOUT (NOTIFICATION: hasMsg false) at the end of their
poll time, refused with POLLING_FULL past the limit."""

from __future__ import annotations

import asyncio
import time

from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.pop import NotificationResponseHeader
from tests._harness.protocol import pop_header
from tests.embedded import pop_kit as pk
from tests.embedded.test_broker_kit import RawClient, running_broker


def _has_msg(resp: RemotingCommand) -> tuple[int, bool, bool]:
    h = NotificationResponseHeader.from_ext(resp.ext_fields)
    return resp.code, h.has_msg, h.polling_full


async def test_a_held_pop_is_woken_by_a_send() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.create_topic("T")
        task = asyncio.create_task(pk.pop(c, "G", "T", poll_ms=5000, timeout=10))
        await asyncio.sleep(0.15)
        assert not task.done()
        t0 = time.perf_counter()
        await c.send("T", b"wake", queue_id=3)
        resp, msgs = await task
        assert time.perf_counter() - t0 < 0.3
        assert resp.code == 0
        assert [m.record.body for m in msgs] == [b"wake"]


async def test_a_held_pop_times_out_with_polling_timeout() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.create_topic("T")
        t0 = time.perf_counter()
        resp, _ = await pk.pop(c, "G", "T", poll_ms=300)
        assert 0.25 < time.perf_counter() - t0 < 1.0
        assert (resp.code, resp.remark) == (ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE")
        # isTimeoutTooMuch: born longer ago than its poll time + 500 ms, answered at once
        old = int(time.time() * 1000) - 2000
        resp, _ = await pk.pop(c, "G", "T", poll_ms=1000, born_time=old)
        assert resp.code == ResponseCode.POLLING_TIMEOUT
        assert resp.remark is not None
        assert "timeout too much" in resp.remark
        # bornTime 0 is "now" (the processor fills it in)
        ext = pop_header(
            consumer_group="G", topic="T", max_msg_nums=1, invisible_time=1000
        ).to_ext()
        ext["bornTime"] = "0"
        resp = await c.request(RequestCode.POP_MESSAGE, ext)
        assert (resp.code, resp.remark) == (ResponseCode.POLLING_TIMEOUT, "NO_MESSAGE_IN_QUEUE")


async def test_a_tag_pop_is_not_woken_by_other_tags() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.create_topic("T")
        task = asyncio.create_task(pk.pop(c, "G", "T", exp="A", poll_ms=5000, timeout=10))
        await asyncio.sleep(0.1)
        await c.send("T", b"other", tags="B")
        await asyncio.sleep(0.15)
        assert not task.done()
        await c.send("T", b"mine", tags="A")
        _resp, msgs = await asyncio.wait_for(task, 1.0)
        assert [m.record.body for m in msgs] == [b"mine"]


async def test_a_revive_wakes_a_held_pop() -> None:
    async with running_broker(pop_revive_interval=0.02) as broker, RawClient(broker.address) as c:
        await c.send("T", b"again", queue_id=0)
        t0 = time.perf_counter()
        await pk.pop(c, "G", "T", invisible_ms=300)
        _resp, msgs = await pk.pop(c, "G", "T", poll_ms=3000, timeout=5)
        assert 0.2 < time.perf_counter() - t0 < 0.8
        assert [(m.record.body, m.record.reconsume_times) for m in msgs] == [(b"again", 1)]


async def test_polling_full() -> None:
    async with running_broker(pop_max_polling=1) as broker, RawClient(broker.address) as c:
        await c.create_topic("T")
        held = asyncio.create_task(pk.pop(c, "G", "T", poll_ms=3000, timeout=5))
        await asyncio.sleep(0.1)
        t0 = time.perf_counter()
        resp, _ = await pk.pop(c, "G", "T", poll_ms=3000)
        assert resp.code == ResponseCode.POLLING_FULL
        assert time.perf_counter() - t0 < 0.2
        note = asyncio.create_task(pk.notification(c, "G2", "T", poll_ms=3000))
        await asyncio.sleep(0.1)
        assert not note.done()  # NOTIFICATION requests are held apart
        await c.send("T", b"x")
        resp, msgs = await asyncio.wait_for(held, 1.0)
        assert resp.code == 0
        assert len(msgs) == 1
        assert _has_msg(await asyncio.wait_for(note, 1.0)) == (0, True, False)


async def test_notification_is_held_until_a_message_is_there() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.create_topic("T")
        t0 = time.perf_counter()
        resp = await pk.notification(c, "G", "T", poll_ms=250)
        assert 0.2 < time.perf_counter() - t0 < 1.0
        assert _has_msg(resp) == (0, False, False)
        task = asyncio.create_task(pk.notification(c, "G", "T", queue_id=1, poll_ms=5000))
        await asyncio.sleep(0.1)
        await c.send("T", b"elsewhere", queue_id=2)
        await asyncio.sleep(0.1)
        assert not task.done()
        await c.send("T", b"here", queue_id=1)
        assert _has_msg(await asyncio.wait_for(task, 1.0)) == (0, True, False)
        # at once while the group has something to pop, until it popped it
        assert _has_msg(await pk.notification(c, "G", "T", poll_ms=5000)) == (0, True, False)
        await pk.pop(c, "G", "T")
        assert _has_msg(await pk.notification(c, "G", "T")) == (0, False, False)
        resp = await pk.notification(c, "G", "Nope")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST


async def test_notification_full() -> None:
    async with running_broker(pop_max_polling=1) as broker, RawClient(broker.address) as c:
        await c.create_topic("T")
        held = asyncio.create_task(pk.notification(c, "G", "T", poll_ms=3000))
        await asyncio.sleep(0.1)
        assert _has_msg(await pk.notification(c, "G", "T", poll_ms=3000)) == (0, False, True)
        await c.send("T", b"x")
        assert _has_msg(await held) == (0, True, False)
