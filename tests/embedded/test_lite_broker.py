"""The embedded broker's lite topics on the wire (docs/protocol.md §12.8): the refusals of
LITE_SUBSCRIPTION_CTL, POP_LITE_MESSAGE and lite acks, topic and group attributes, the expiry
of idle lite topics, and what survives a restart."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import aiorocket as rmq
from aiorocket._protocol import fastjson
from aiorocket._protocol.admin_bodies import SubscriptionGroupConfig
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import CreateTopicRequestHeader
from aiorocket._protocol.lite import (
    LiteSubscriptionCtlRequestBody,
    LiteSubscriptionDTO,
    PopLiteMessageRequestHeader,
)
from aiorocket._protocol.pop import AckMessageRequestHeader
from aiorocket._remoting.pool import ConnectionPool
from aiorocket.embedded.broker import EmbeddedBroker
from tests._harness.lite import create_lite_parent, lite_consumer, receive_until, send_lite
from tests._harness.wait import wait_for

TOPIC = "agents"
GROUP = "agents-g"
LMQ = "%LMQ%$agents$c1"


@pytest.fixture
async def pool() -> AsyncIterator[ConnectionPool]:
    p = ConnectionPool()
    try:
        yield p
    finally:
        await p.close()


async def call(
    pool: ConnectionPool, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b""
) -> RemotingCommand:
    conn = await pool.get(addr)
    return await conn.request(RemotingCommand.request(code, ext or {}, body), timeout=10.0)


def ctl(action: str, *lite: str, group: str = GROUP) -> bytes:
    dto = LiteSubscriptionDTO(
        action=action, client_id="cid", group=group, topic=TOPIC, lite_topic_set=lite
    )
    return LiteSubscriptionCtlRequestBody((dto,)).to_json()


def pop(topic: str = TOPIC, group: str = GROUP, max_msg_num: int = 8) -> dict[str, str]:
    return PopLiteMessageRequestHeader(
        client_id="cid",
        consumer_group=group,
        topic=topic,
        max_msg_num=max_msg_num,
        invisible_time=10_000,
        poll_time=0,
        born_time=0,
    ).to_ext()


async def test_subscription_control_refusals(broker: EmbeddedBroker, pool: ConnectionPool) -> None:
    addr = broker.address
    await create_lite_parent(addr, TOPIC, GROUP)
    resp = await call(pool, addr, RequestCode.LITE_SUBSCRIPTION_CTL)
    assert (resp.code, resp.remark) == (ResponseCode.ILLEGAL_OPERATION, "Request body is null.")
    empty = LiteSubscriptionCtlRequestBody(()).to_json()
    resp = await call(pool, addr, RequestCode.LITE_SUBSCRIPTION_CTL, body=empty)
    assert resp.code == ResponseCode.ILLEGAL_OPERATION
    disabled = SubscriptionGroupConfig("off-g", consume_enable=False).to_json()
    await call(pool, addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=disabled)
    resp = await call(
        pool, addr, RequestCode.LITE_SUBSCRIPTION_CTL, body=ctl("PARTIAL_ADD", "c1", group="off-g")
    )
    assert resp.code == ResponseCode.ILLEGAL_OPERATION
    assert "not allowed to consume" in (resp.remark or "")


@pytest.mark.broker(max_lite_subscriptions=2)
async def test_the_subscription_quota(broker: EmbeddedBroker, pool: ConnectionPool) -> None:
    addr = broker.address
    await create_lite_parent(addr, TOPIC, GROUP)
    resp = await call(
        pool, addr, RequestCode.LITE_SUBSCRIPTION_CTL, body=ctl("PARTIAL_ADD", "a", "b")
    )
    assert resp.code == ResponseCode.SUCCESS
    resp = await call(pool, addr, RequestCode.LITE_SUBSCRIPTION_CTL, body=ctl("PARTIAL_ADD", "c"))
    assert resp.code == ResponseCode.LITE_SUBSCRIPTION_QUOTA_EXCEEDED
    assert len(broker.lite.registry) == 2


async def test_pop_lite_refusals(broker: EmbeddedBroker, pool: ConnectionPool) -> None:
    addr = broker.address
    await create_lite_parent(addr, TOPIC, GROUP)
    async with rmq.Admin(namesrv=addr) as admin:
        await admin.create_topic("plain", queues=2)
    cases = [
        (pop(max_msg_num=33), ResponseCode.INVALID_PARAMETER, "greater than 32"),
        (pop(topic="nope"), ResponseCode.TOPIC_NOT_EXIST, "not exist"),
        (pop(topic="plain"), ResponseCode.INVALID_PARAMETER, "message type not match"),
        (pop(group="other-g"), ResponseCode.INVALID_PARAMETER, "bind topic not match"),
    ]
    for ext, code, remark in cases:
        resp = await call(pool, addr, RequestCode.POP_LITE_MESSAGE, ext)
        assert (resp.code, remark in (resp.remark or "")) == (code, True), (ext, resp)
    resp = await call(pool, addr, RequestCode.POP_LITE_MESSAGE, pop())
    assert resp.code == ResponseCode.POLLING_TIMEOUT  # nothing subscribed, no hold
    assert {"popTime", "invisibleTime", "reviveQid"} <= set(resp.ext_fields)


async def test_lite_ack_refusals(broker: EmbeddedBroker, pool: ConnectionPool) -> None:
    addr = broker.address
    await create_lite_parent(addr, TOPIC, GROUP, queues=2)

    def ack(queue_id: int, offset: int, group: str = GROUP) -> dict[str, str]:
        return AckMessageRequestHeader(
            consumer_group=group,
            topic=TOPIC,
            queue_id=queue_id,
            extra_info=f"0 1 10000 999 0 {broker.config.broker_name} 0 {offset}",
            offset=offset,
            lite_topic="c1",
        ).to_ext()

    async with rmq.Producer(namesrv=addr, group="p") as p:
        await send_lite(p, TOPIC, ["c1"], 1, "x")
    for ext, code in [
        (ack(0, 5), ResponseCode.NO_MESSAGE),  # past the lite topic's end
        (ack(1, 0), ResponseCode.INVALID_PARAMETER),  # a lite ack names queue 0
        (ack(0, 0, group="other-g"), ResponseCode.INVALID_PARAMETER),  # not bound
        (ack(0, 0), ResponseCode.SUCCESS),  # no batch popped: nothing to do
    ]:
        resp = await call(pool, addr, RequestCode.ACK_MESSAGE, ext)
        assert resp.code == code, (ext, resp)


async def test_topic_and_group_attributes(broker: EmbeddedBroker, pool: ConnectionPool) -> None:
    addr = broker.address
    async with rmq.Admin(namesrv=addr) as admin:
        await admin.create_topic(TOPIC, queues=2, message_type="LITE", lite_topic_expiration=30)
        await admin.create_group(GROUP, lite_bind_topic=TOPIC, lite_exclusive=True)
        with pytest.raises(rmq.errors.ConfigurationError):
            await admin.create_topic("x", message_type="LITE-ish")
    resp = await call(pool, addr, RequestCode.GET_TOPIC_CONFIG, {"topic": TOPIC})
    attributes = fastjson.loads(resp.body)["attributes"]
    assert attributes == {"message.type": "LITE", "lite.topic.expiration": "30"}
    group = broker.lite.bind_topic(GROUP), broker.lite.group_attribute(GROUP, "lite.sub.model")
    assert group == (TOPIC, "Exclusive")
    # creating with a removal, or an unknown attribute, is refused as Apache refuses it
    bad = SubscriptionGroupConfig("new-g", attributes={"-lite.bind.topic": ""}).to_json()
    resp = await call(pool, addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=bad)
    assert resp.code == ResponseCode.SYSTEM_ERROR
    header = CreateTopicRequestHeader(
        topic="y", read_queue_nums=1, write_queue_nums=1, perm=6, attributes="+nope=1"
    )
    resp = await call(pool, addr, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext())
    assert (resp.code, resp.remark) == (ResponseCode.SYSTEM_ERROR, "unsupported key: nope")
    # an update keeps what it does not change
    keep = SubscriptionGroupConfig(GROUP).to_json()
    await call(pool, addr, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=keep)
    assert broker.lite.bind_topic(GROUP) == TOPIC


@pytest.mark.broker(min_lite_ttl=0, lite_expiry_check_interval=0.1, lite_expiration_minute=0.2)
async def test_idle_lite_topics_expire(broker: EmbeddedBroker) -> None:
    addr = broker.address
    async with rmq.Admin(namesrv=addr) as admin:
        await admin.create_topic(TOPIC, queues=2, message_type="LITE", lite_topic_expiration=1)
        await admin.create_group(GROUP, lite_bind_topic=TOPIC)
    async with lite_consumer(addr, GROUP, TOPIC) as c, rmq.Producer(namesrv=addr, group="p") as p:
        await c.subscribe_lite("c1")
        await send_lite(p, TOPIC, ["c1"], 2, "x")
        assert len(await receive_until(c, 2, timeout=10)) == 2
        # one "minute" is 0.2 s: gone soon after, its offsets and subscriptions with it
        await wait_for(lambda: LMQ not in broker.store.queues(), timeout=10, what="expiry")
        client = broker.lite.registry.client(c.client_id)
        assert client is not None
        assert client.lmqs == set()
        assert broker.lite.registry.subscribers(LMQ) == []
        await c.subscribe_lite("c2")  # the consumer's own set is unchanged until it syncs
        assert c.lite_topics == {"c1", "c2"}


async def test_lite_topics_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "broker"
    async with EmbeddedBroker(data_dir=data) as broker:
        addr = broker.address
        await create_lite_parent(addr, TOPIC, GROUP)
        async with rmq.Producer(namesrv=addr, group="p") as p:
            sent = await send_lite(p, TOPIC, ["c1"], 10, "x")
        async with lite_consumer(addr, GROUP, TOPIC) as c:
            await c.subscribe_lite("c1")
            first = await c.receive(4)
            await c.ack_all(first)
            assert [m.body for m in first] == sent["c1"][:4]
            await c.receive(2)  # popped, never acked
    async with EmbeddedBroker(data_dir=data) as broker:
        assert broker.store.max_offset(LMQ, 0) == 10
        async with lite_consumer(broker.address, GROUP, TOPIC) as c:
            await c.subscribe_lite("c1")
            rest = await receive_until(c, 6, timeout=10)
            assert [m.body for m in rest] == sent["c1"][4:]
