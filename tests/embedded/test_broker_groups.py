"""Heartbeats, consumer lists, NOTIFY_CONSUMER_IDS_CHANGED, expiry, unregister, and the
orderly queue locks (docs/protocol.md §6.7, §6.8)."""

from __future__ import annotations

import asyncio

import pytest

from aiorocket._protocol.bodies import (
    ConsumerListBody,
    LockBatchRequestBody,
    LockBatchResponseBody,
    UnlockBatchRequestBody,
)
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket.models import MessageQueue
from tests.embedded.test_broker_kit import RawClient, running_broker


async def _consumer_ids(c: RawClient, group: str) -> list[str] | None:
    resp = await c.request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group})
    if resp.code != 0:
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == f"no consumer for this group, {group}"
        return None
    return sorted(ConsumerListBody.from_json(resp.body).consumer_id_list)


async def _notified(c: RawClient, group: str, timeout: float = 2.0) -> RemotingCommand:
    cmd = await asyncio.wait_for(c.inbound.get(), timeout)
    assert cmd.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
    assert cmd.flag == 2  # oneway request
    assert cmd.ext_fields["consumerGroup"] == group
    return cmd


async def _quiet(c: RawClient, wait: float = 0.15) -> None:
    await asyncio.sleep(wait)
    assert c.inbound.empty(), c.inbound.get_nowait()


async def test_heartbeat_registers_and_creates_the_retry_topic() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        assert await _consumer_ids(c, "GA") is None
        resp = await c.heartbeat("10.0.0.1@1", consumer_group="GA", topics={"T": "*"})
        assert resp.code == 0
        assert await _consumer_ids(c, "GA") == ["10.0.0.1@1"]
        cfg = broker.topics.get("%RETRY%GA")
        assert cfg is not None
        assert (cfg.read_queue_nums, cfg.perm) == (1, 6)
        resp, route = await c.route("%RETRY%GA")
        assert route is not None
        assert route.queue_datas[0].read_queue_nums == 1
        # producer data is accepted too, and a body without consumers
        assert (await c.heartbeat("10.0.0.1@1", producer_group="PG")).code == 0


async def test_heartbeat_tolerates_cpp_style_bodies_and_refuses_bad_ones() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        body = (
            b'{"clientID":"cpp@1","consumerDataSet":[{"consumeFromWhere":0,"consumeType":1,'
            b'"groupName":"CG","messageModel":1,"subscriptionDataSet":[{"codeSet":[0],'
            b'"subString":"A||B","subVersion":"123","tagsSet":["A","B"],"topic":"T"}]}]}\n'
        )
        assert (await c.request(RequestCode.HEART_BEAT, body=body)).code == 0
        assert await _consumer_ids(c, "CG") == ["cpp@1"]
        bad = await c.request(RequestCode.HEART_BEAT, body=b"{not json")
        assert bad.code == ResponseCode.SYSTEM_ERROR
        evil = b'{"clientID":"x","consumerDataSet":[{"groupName":"../../etc"}]}'
        assert (await c.request(RequestCode.HEART_BEAT, body=evil)).code == 1
        assert "%RETRY%../../etc" not in broker.topics.names()


async def test_notify_on_join_leave_and_disconnect() -> None:
    async with (
        running_broker() as broker,
        RawClient(broker.address) as a,
        RawClient(broker.address) as b,
    ):
        await a.heartbeat("A", consumer_group="G", topics={"T": "*"})
        await _notified(a, "G")  # the new channel itself is told too
        await b.heartbeat("B", consumer_group="G", topics={"T": "*"})
        await _notified(a, "G")
        await _notified(b, "G")
        assert await _consumer_ids(a, "G") == ["A", "B"]

        # a plain refresh changes nothing and notifies nobody
        await b.heartbeat("B", consumer_group="G", topics={"T": "*"})
        await _quiet(a)

        # a new subscribed topic is a change
        await b.heartbeat("B", consumer_group="G", topics={"T": "*", "U": "x"})
        await _notified(a, "G")
        await _notified(b, "G")

        # UNREGISTER_CLIENT
        resp = await b.request(
            RequestCode.UNREGISTER_CLIENT,
            {"clientID": "B", "consumerGroup": "G", "producerGroup": ""},
        )
        assert resp.code == 0
        await _notified(a, "G")
        assert await _consumer_ids(a, "G") == ["A"]

        # a disconnect
        c = RawClient(broker.address)
        await c.__aenter__()
        await c.heartbeat("C", consumer_group="G", topics={"T": "*"})
        await _notified(a, "G")
        await c.close()
        await _notified(a, "G")
        assert await _consumer_ids(a, "G") == ["A"]


async def test_channels_expire_without_heartbeat() -> None:
    async with (
        running_broker(channel_expiry=0.3, channel_scan_interval=0.05) as broker,
        RawClient(broker.address) as watcher,
        RawClient(broker.address) as silent,
    ):
        await silent.heartbeat("S", consumer_group="G", topics={"T": "*"})
        for _ in range(6):  # the watcher keeps itself alive while the other goes silent
            await watcher.heartbeat("W", consumer_group="G", topics={"T": "*"})
            await asyncio.sleep(0.1)
        assert await _consumer_ids(watcher, "G") == ["W"]
        seen = []
        while not watcher.inbound.empty():
            seen.append(watcher.inbound.get_nowait().code)
        assert seen == [RequestCode.NOTIFY_CONSUMER_IDS_CHANGED] * 2  # its join, S expiring
        assert silent.conn is not None
        await asyncio.wait_for(silent.conn.wait_closed(), 1.0)


async def _lock(c: RawClient, client_id: str, mqs: list[MessageQueue]) -> list[MessageQueue]:
    body = LockBatchRequestBody("OG", client_id, tuple(mqs)).to_json()
    resp = await c.request(RequestCode.LOCK_BATCH_MQ, body=body)
    assert resp.code == 0
    return sorted(LockBatchResponseBody.from_json(resp.body).lock_ok_mq_set)


async def _unlock(c: RawClient, client_id: str, mqs: list[MessageQueue]) -> None:
    body = UnlockBatchRequestBody("OG", client_id, tuple(mqs)).to_json()
    assert (await c.request(RequestCode.UNLOCK_BATCH_MQ, body=body)).code == 0


async def test_queue_locks_lease_and_release() -> None:
    mqs = [MessageQueue("T", "broker-a", i) for i in range(3)]
    async with running_broker(lock_lease=0.3) as broker:
        a = RawClient(broker.address)
        await a.__aenter__()
        async with RawClient(broker.address) as b:
            assert await _lock(a, "A", mqs[:2]) == mqs[:2]
            assert await _lock(b, "B", mqs) == mqs[2:]
            assert await _lock(a, "A", mqs[:2]) == mqs[:2]  # renewal
            await _unlock(a, "A", mqs[:1])
            assert await _lock(b, "B", mqs) == [mqs[0], mqs[2]]
            await _unlock(b, "A", mqs)  # someone else's name releases nothing of B's
            assert await _lock(a, "A", mqs) == [mqs[1]]
            # a disconnect does not release; the lease does
            await a.close()
            assert await _lock(b, "B", mqs) == [mqs[0], mqs[2]]
            await asyncio.sleep(0.35)
            assert await _lock(b, "B", mqs) == mqs


async def test_bad_lock_body_is_an_error() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp = await c.request(RequestCode.LOCK_BATCH_MQ, body=b"[]")
        assert resp.code == ResponseCode.SYSTEM_ERROR


@pytest.mark.parametrize("enabled", [True, False])
async def test_notify_switch(enabled: bool) -> None:
    async with (
        running_broker(notify_consumer_ids_changed=enabled) as broker,
        RawClient(broker.address) as a,
    ):
        await a.heartbeat("A", consumer_group="G", topics={"T": "*"})
        if enabled:
            await _notified(a, "G")
        else:
            await _quiet(a)
