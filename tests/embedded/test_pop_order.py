"""Ordered (FIFO) POP (docs/protocol.md §12.3, Java ``ConsumerOrderInfoManager``): one batch
in flight per queue and group, acks move the offset, and an expired batch is popped again from
the queue with its delivery counts, never through a retry topic."""

from __future__ import annotations

import asyncio
import time

from aiorocket._protocol.codes import ResponseCode
from aiorocket._protocol.pop import POP_ORDER_REVIVE_QUEUE, PopMessageResponseHeader
from tests.embedded import pop_kit as pk
from tests.embedded.test_broker_kit import RawClient, running_broker


async def _offset(c: RawClient, topic: str = "T") -> str:
    return (await c.query_offset("G", topic, 0)).ext_fields["offset"]


async def test_a_queue_is_blocked_while_its_batch_is_in_flight() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        for i in range(3):
            await c.send("T", b"m%d" % i, queue_id=0)
        resp, msgs = await pk.pop(c, "G", "T", queue_id=0, max_msgs=2, order=True)
        h = PopMessageResponseHeader.from_ext(resp.ext_fields)
        assert [m.record.body for m in msgs] == [b"m0", b"m1"]
        assert h.revive_qid == POP_ORDER_REVIVE_QUEUE
        assert (h.start_offset_info, h.msg_offset_info, h.order_count_info) == (
            "0 0 0",
            "0 0 0,1",
            "0 0 0",  # buildQueueIdOrderCountInfo: nothing handed out before
        )
        assert await _offset(c) == "0"  # an ordered POP does not move the offset
        resp, _ = await pk.pop(c, "G", "T", queue_id=0, order=True)
        assert resp.code == ResponseCode.POLLING_TIMEOUT  # m2 waits behind the batch
        assert (await pk.ack(c, "G", msgs[0])).code == 0
        assert await _offset(c) == "1"
        resp, _ = await pk.pop(c, "G", "T", queue_id=0, order=True)
        assert resp.code == ResponseCode.POLLING_TIMEOUT  # m1 is still in flight
        assert (await pk.batch_ack(c, "G", "T", [msgs[1]])).code == 0
        assert await _offset(c) == "2"
        _, (m,) = await pk.pop(c, "G", "T", queue_id=0, order=True)
        assert m.record.body == b"m2"
        # another group is not blocked
        _, msgs = await pk.pop(c, "Other", "T", queue_id=0, order=True)
        assert len(msgs) == 3


async def test_an_expired_batch_is_popped_again_with_its_count() -> None:
    async with running_broker(pop_revive_interval=0.02) as broker, RawClient(broker.address) as c:
        for i in range(2):
            await c.send("T", b"m%d" % i, queue_id=0)
        _, msgs = await pk.pop(c, "G", "T", queue_id=0, order=True, invisible_ms=200)
        assert (await pk.ack(c, "G", msgs[0])).code == 0
        await c.send("T", b"m2", queue_id=0)
        await asyncio.sleep(0.3)
        resp, again = await pk.pop(c, "G", "T", queue_id=0, order=True, invisible_ms=200)
        assert [m.record.body for m in again] == [b"m1", b"m2"]
        # buildQueueOffsetOrderCountInfo per message handed out before, then the queue's least
        assert resp.ext_fields["orderCountInfo"] == "0 qo0%1 1;0 0 0"
        await asyncio.sleep(0.3)
        resp, third = await pk.pop(c, "G", "T", queue_id=0, order=True)
        assert [m.record.body for m in third] == [b"m1", b"m2"]
        assert resp.ext_fields["orderCountInfo"] == "0 qo0%1 2;0 qo0%2 1;0 0 1"
        assert broker.topics.get("%RETRY%G_T") is None  # never through a retry topic
        # an ack of the expired batch is too late: it was popped at another time
        assert (await pk.ack(c, "G", again[0])).code == 0
        assert await _offset(c) == "1"
        assert (await pk.batch_ack(c, "G", "T", third)).code == 0
        assert await _offset(c) == "3"


async def test_the_same_attempt_is_not_blocked_by_itself() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.send("T", b"m0", queue_id=0)
        _, _first = await pk.pop(c, "G", "T", queue_id=0, order=True, attempt_id="a1")
        resp, again = await pk.pop(c, "G", "T", queue_id=0, order=True, attempt_id="a1")
        assert [m.record.body for m in again] == [b"m0"]
        assert resp.ext_fields["orderCountInfo"] == "0 0 0"  # a repeat is not a delivery
        resp, _ = await pk.pop(c, "G", "T", queue_id=0, order=True, attempt_id="a2")
        assert resp.code == ResponseCode.POLLING_TIMEOUT


async def test_an_ack_outside_the_batch_is_illegal() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        for i in range(3):
            await c.send("T", b"m%d" % i, queue_id=0)
        _, (m,) = await pk.pop(c, "G", "T", queue_id=0, order=True, max_msgs=1)
        resp = await pk.ack(c, "G", m, offset=2)
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
        assert await _offset(c) == "0"


async def test_change_invisible_time_extends_an_ordered_message() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.send("T", b"m0", queue_id=0)
        _, (m,) = await pk.pop(c, "G", "T", queue_id=0, order=True, invisible_ms=200)
        resp, renewed = await pk.change_invisible(c, "G", m, 1000)
        assert resp.code == 0
        assert renewed is not None
        # the pop time stays; the invisible time counts from it
        assert renewed.pop_time == m.handle.pop_time
        assert renewed.revive_qid == POP_ORDER_REVIVE_QUEUE
        assert 1000 <= renewed.invisible_time < 1500
        await asyncio.sleep(0.3)
        resp, _ = await pk.pop(c, "G", "T", queue_id=0, order=True)
        assert resp.code == ResponseCode.POLLING_TIMEOUT
        m.handle = renewed
        assert (await pk.ack(c, "G", m)).code == 0
        assert await _offset(c) == "1"
        # acked already: Java's primitive header fields, all 0
        resp, late = await pk.change_invisible(c, "G", m, 1000)
        assert resp.code == 0
        assert late is not None
        assert (late.pop_time, late.invisible_time, late.revive_qid) == (0, 0, 0)


async def test_a_held_ordered_pop_goes_on_when_the_batch_is_acked() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        for i in range(2):
            await c.send("T", b"m%d" % i, queue_id=0)
        _, (m,) = await pk.pop(c, "G", "T", queue_id=0, order=True, max_msgs=1)
        task = asyncio.create_task(pk.pop(c, "G", "T", order=True, poll_ms=5000, timeout=10))
        await asyncio.sleep(0.15)
        assert not task.done()
        t0 = time.perf_counter()
        assert (await pk.ack(c, "G", m)).code == 0
        _, (nxt,) = await asyncio.wait_for(task, 1.0)
        assert nxt.record.body == b"m1"
        assert time.perf_counter() - t0 < 0.3


async def test_a_held_ordered_pop_goes_on_when_the_batch_expires() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.send("T", b"m0", queue_id=0)
        await pk.pop(c, "G", "T", queue_id=0, order=True, invisible_ms=300)
        t0 = time.perf_counter()
        _, (again,) = await pk.pop(c, "G", "T", queue_id=0, order=True, poll_ms=3000)
        assert 0.2 < time.perf_counter() - t0 < 0.8
        assert again.record.body == b"m0"
