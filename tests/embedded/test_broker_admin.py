"""The embedded broker's admin requests (``aiorocket.embedded.admin``), driven by our own
:class:`~aiorocket.Admin` and by raw requests, over loopback TCP: the bodies ``mqadmin``
decodes, with numbers checked against what was produced and consumed. The real ``mqadmin``
against the same requests is ``tests/interop/apache/test_mqadmin_embedded.py``.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket import MessageQueue
from aiorocket._protocol import fastjson
from aiorocket._protocol.admin_bodies import (
    ConsumerConnection,
    ConsumeStats,
    GroupList,
    KVTable,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigBody,
    TopicConfigSerializeWrapper,
    TopicStatsTable,
)
from aiorocket._protocol.bodies import ConsumerRunningInfo
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ConsumerNotOnlineError, QueryNotFoundError, TopicNotExistError
from tests._harness.wait import wait_for

FAST: dict[str, Any] = {
    "rebalance_interval": 0.5,
    "offset_persist_interval": 0.2,
    "pull_suspend_timeout": 1.0,
    "shutdown_grace": 2.0,
}


@pytest.fixture
async def admin(broker: EmbeddedBroker) -> AsyncIterator[rmq.Admin]:
    async with rmq.Admin(namesrv=broker.address) as a:
        yield a


async def call(
    admin: rmq.Admin, addr: str, code: int, ext: dict[str, str] | None = None, body: bytes = b""
) -> RemotingCommand:
    return await admin._require().invoke(addr, RemotingCommand.request(code, ext or {}, body))


async def produce(addr: str, topic: str, n: int, prefix: str = "m") -> list[rmq.SendResult]:
    async with rmq.Producer(namesrv=addr, group="admP") as p:
        return [
            await p.send(rmq.Message(topic, f"{prefix}{i}", keys=[f"{prefix}{i}", "all"]))
            for i in range(n)
        ]


async def consume_all(addr: str, topic: str, group: str, n: int) -> None:
    """Consume ``n`` messages with a push consumer, then close it (offsets flushed)."""
    got: list[bytes] = []
    c = rmq.PushConsumer(group=group, namesrv=addr, consume_from="first", **FAST)
    c.subscribe(topic)

    @c.listener
    async def on(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    async with c:

        async def done() -> bool:
            return len(got) >= n

        await wait_for(done, timeout=20.0, what=f"{n} messages", interval=0.05)


async def consumed_topic(
    broker: EmbeddedBroker, admin: rmq.Admin, topic: str, queues: int, group: str, n: int
) -> None:
    """Create ``topic`` with ``queues`` queues, send it ``n`` messages and consume them all
    with ``group`` (offsets flushed)."""
    await admin.create_topic(topic, queues=queues)
    await produce(broker.address, topic, n)
    await consume_all(broker.address, topic, group, n)


async def test_lag_per_queue_is_produced_minus_consumed(
    broker: EmbeddedBroker, admin: rmq.Admin
) -> None:
    await consumed_topic(broker, admin, "lagT", 4, "lagG", 20)
    await produce(broker.address, "lagT", 13, prefix="late")
    lag = await admin.lag("lagG")
    rows = {q.queue: q for q in lag.queues if q.queue.topic == "lagT"}
    assert sorted(mq.queue_id for mq in rows) == [0, 1, 2, 3]
    assert lag.by_topic()["lagT"] == 13
    assert lag.total == 13  # the retry queue holds nothing
    store = broker.store
    for mq, q in rows.items():
        assert q.broker_offset == store.max_offset("lagT", mq.queue_id)
        assert q.lag == q.broker_offset - q.committed_offset
        # the last consumed message's store time
        assert q.last_timestamp == store.store_timestamp(
            "lagT", mq.queue_id, q.committed_offset - 1
        )
    assert sum(q.committed_offset for q in rows.values()) == 20
    # GET_CONSUME_STATS body, as mqadmin reads it
    resp = await call(
        admin, broker.address, RequestCode.GET_CONSUME_STATS, {"consumerGroup": "lagG"}
    )
    stats = ConsumeStats.from_json(resp.body)
    assert stats.total_diff() == 13
    assert b'{"brokerName":"broker-a","queueId":0,"topic":"lagT"}:' in resp.body  # object keys
    # A group no broker knows has no %RETRY% route (mqadmin consumerProgress fails the same
    # way); one whose retry topic exists but with no offset on any broker is not online.
    with pytest.raises(TopicNotExistError, match="%RETRY%nobody"):
        await admin.lag("nobody")
    await admin.create_topic("%RETRY%idle", queues=1)
    with pytest.raises(ConsumerNotOnlineError):
        await admin.lag("idle")


async def test_topic_stats_and_topic_admin(broker: EmbeddedBroker, admin: rmq.Admin) -> None:
    await admin.create_topic("statT", queues=3)
    assert (await admin.route("statT")).queues == {"broker-a": (3, 3, 6)}
    sent = await produce(broker.address, "statT", 7)
    resp = await call(admin, broker.address, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "statT"})
    table = TopicStatsTable.from_json(resp.body).offset_table
    assert sum(t.max_offset for t in table.values()) == 7
    newest = max(r.queue_offset for r in sent)
    assert all(t.min_offset == 0 and t.last_update_timestamp > 0 for t in table.values())
    assert max(t.max_offset for t in table.values()) == newest + 1
    resp = await call(admin, broker.address, RequestCode.GET_TOPIC_STATS_INFO, {"topic": "nope"})
    assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    resp = await call(admin, broker.address, RequestCode.GET_ALL_TOPIC_CONFIG)
    configs = TopicConfigSerializeWrapper.from_json(resp.body).topic_config_table
    assert configs["statT"].read_queue_nums == 3
    # one topic's config, as a 5.x broker answers GET_TOPIC_CONFIG (mqadmin topicStatus)
    resp = await call(admin, broker.address, RequestCode.GET_TOPIC_CONFIG, {"topic": "statT"})
    assert resp.code == ResponseCode.SUCCESS
    assert TopicConfigBody.from_dict(json.loads(resp.body)) == configs["statT"]
    resp = await call(admin, broker.address, RequestCode.GET_TOPIC_CONFIG, {"topic": "nope"})
    assert (resp.code, resp.remark) == (
        ResponseCode.TOPIC_NOT_EXIST,
        "No topic in this broker. topic: nope",
    )
    # delete: the config and the queues go, on disk too
    qdir = broker.data_dir / "consumequeue" / "statT"
    assert qdir.exists()
    await admin.delete_topic("statT")
    assert "statT" not in broker.topics
    assert "statT" not in broker.store.queues()
    assert not qdir.exists()
    resp = await call(
        admin, broker.address, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "TBW102"}
    )
    assert resp.code == ResponseCode.SYSTEM_ERROR


async def test_connections_running_info_and_online_reset(
    broker: EmbeddedBroker, admin: rmq.Admin
) -> None:
    await admin.create_topic("liveT", queues=2)
    await produce(broker.address, "liveT", 10)
    seen: list[bytes] = []
    c = rmq.PushConsumer(group="liveG", namesrv=broker.address, consume_from="first", **FAST)
    c.subscribe("liveT", "*")

    @c.listener
    async def on(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        seen.extend(m.body for m in msgs)

    async with c:

        async def ten() -> bool:
            return len(seen) >= 10

        await wait_for(ten, timeout=20.0, what="the first delivery", interval=0.05)
        resp = await call(
            admin,
            broker.address,
            RequestCode.GET_CONSUMER_CONNECTION_LIST,
            {"consumerGroup": "liveG"},
        )
        conn = ConsumerConnection.from_json(resp.body)
        (member,) = conn.connection_set
        assert member.language == "PYTHON"
        assert member.version == 409
        assert set(conn.subscription_table) == {"liveT", "%RETRY%liveG"}
        assert conn.consume_from_where == "CONSUME_FROM_FIRST_OFFSET"
        # GET_CONSUMER_RUNNING_INFO goes to the client and its answer comes back
        resp = await call(
            admin,
            broker.address,
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "liveG", "clientId": member.client_id, "jstackEnable": "false"},
        )
        assert resp.code == ResponseCode.SUCCESS
        info = ConsumerRunningInfo.from_json(resp.body)
        assert {mq.topic for mq in info.mq_table} >= {"liveT"}
        resp = await call(
            admin,
            broker.address,
            RequestCode.GET_CONSUMER_RUNNING_INFO,
            {"consumerGroup": "liveG", "clientId": "nobody", "jstackEnable": "false"},
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert "not online" in (resp.remark or "")
        # consumed by whom
        resp = await call(
            admin, broker.address, RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": "liveT"}
        )
        assert "liveG" in GroupList.from_json(resp.body).group_list

        async def committed_ten() -> bool:
            try:
                lag = await admin.lag("liveG")
            except ConsumerNotOnlineError:  # nothing committed yet
                return False
            return lag.by_topic().get("liveT") == 0 and len(lag.queues) >= 2

        await wait_for(committed_ten, timeout=20.0, what="offsets committed", interval=0.05)
        # reset to the start: the broker tells the live member, which consumes again
        offsets = await admin.reset_offset("liveG", "liveT", "earliest")
        assert offsets == {MessageQueue("liveT", "broker-a", q): 0 for q in range(2)}

        async def twenty() -> bool:
            return len(seen) >= 20

        await wait_for(twenty, timeout=20.0, what="redelivery after the reset", interval=0.05)
        assert sorted(seen[10:]) == sorted(seen[:10])


async def test_offline_reset_rewrites_the_committed_offsets(
    broker: EmbeddedBroker, admin: rmq.Admin
) -> None:
    await consumed_topic(broker, admin, "offT", 2, "offG", 8)
    assert (await admin.lag("offG")).by_topic()["offT"] == 0
    resp = await call(
        admin,
        broker.address,
        RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
        {"topic": "offT", "group": "offG", "timestamp": "0", "isForce": "true"},
    )
    assert resp.code == ResponseCode.CONSUMER_NOT_ONLINE
    offsets = await admin.reset_offset("offG", "offT", "earliest")
    assert set(offsets.values()) == {0}
    assert (await admin.lag("offG")).by_topic()["offT"] == 8
    offsets = await admin.reset_offset("offG", "offT", "latest")
    assert sum(offsets.values()) == 8
    assert (await admin.lag("offG")).by_topic()["offT"] == 0


async def test_messages_by_key_and_by_id(broker: EmbeddedBroker, admin: rmq.Admin) -> None:
    sent = await produce(broker.address, "keyT", 30)
    hits = await admin.messages_by_key("keyT", "m7")
    assert [m.body for m in hits] == [b"m7"]
    everything = await admin.messages_by_key("keyT", "all", max_num=100)
    assert sorted(m.body for m in everything) == sorted(f"m{i}".encode() for i in range(30))
    limited = await admin.messages_by_key("keyT", "all", max_num=5)
    assert len(limited) == 5
    assert await admin.messages_by_key("keyT", "absent") == []
    by_offset_id = await admin.message(sent[3].offset_msg_id)
    assert by_offset_id.body == b"m3"
    by_client_id = await admin.message(sent[4].msg_id, topic="keyT")
    assert by_client_id.body == b"m4"
    assert by_client_id.msg_id == sent[4].msg_id
    with pytest.raises(QueryNotFoundError):
        await admin.message("not-an-id")
    # QUERY_MESSAGE outside the time range: not found (22)
    resp = await call(
        admin,
        broker.address,
        RequestCode.QUERY_MESSAGE,
        {"topic": "keyT", "key": "m1", "maxNum": "32", "beginTimestamp": "0", "endTimestamp": "1"},
    )
    assert resp.code == ResponseCode.QUERY_NOT_FOUND


async def test_runtime_info_config_and_consume_queue(
    broker: EmbeddedBroker, admin: rmq.Admin
) -> None:
    await produce(broker.address, "rtT", 5)
    resp = await call(admin, broker.address, RequestCode.GET_BROKER_RUNTIME_INFO)
    table = KVTable.from_json(resp.body).table
    assert table["msgPutTotalTodayNow"] == "5"
    assert table["brokerVersionDesc"] == "V4_9_8"
    assert int(table["earliestMessageTimeStamp"]) > 0
    assert len(table["putTps"].split(" ")) == 3
    assert table["runtime"].startswith("[ 0 days")
    assert "brokerActive" not in table
    assert "getTransferedTps" in table  # 4.9.8's spelling
    # asked by a 5.x client (V5_3_3), the keys a 5.x broker adds, as 5.x's clusterList reads
    request = dataclasses.replace(
        RemotingCommand.request(RequestCode.GET_BROKER_RUNTIME_INFO), version=479
    )
    resp = await admin._require().invoke(broker.address, request)
    v5 = KVTable.from_json(resp.body).table
    assert v5["brokerActive"] == "true"
    assert v5["getTransferredTps"] == table["getTransferedTps"]
    assert "getTransferedTps" not in v5
    assert {"timerReadBehind", "ackThreadPoolQueueSize", "litePullThreadPoolQueueSize"} <= set(v5)
    assert set(table) - {"getTransferedTps"} <= set(v5)
    resp = await call(admin, broker.address, RequestCode.GET_BROKER_CONFIG)
    config = dict(line.split("=", 1) for line in resp.body.decode().splitlines())
    assert config["brokerName"] == "broker-a"
    assert config["listenPort"] == str(broker.port)
    assert json.loads(resp.ext_fields["version"])["timestamp"] > 0
    qid = next(q for q in broker.store.queues()["rtT"])
    resp = await call(
        admin,
        broker.address,
        RequestCode.QUERY_CONSUME_QUEUE,
        {"topic": "rtT", "queueId": str(qid), "index": "0", "count": "10"},
    )
    body = fastjson.loads(resp.body)
    n = broker.store.max_offset("rtT", qid)
    assert body["maxQueueIndex"] == n
    assert len(body["queueData"]) == n
    assert all(e["physicSize"] > 0 for e in body["queueData"])


async def test_subscription_groups_and_kv_config(
    broker: EmbeddedBroker, admin: rmq.Admin, tmp_path: Path
) -> None:
    cfg = SubscriptionGroupConfig("subG", retry_max_times=5, retry_queue_nums=2)
    resp = await call(
        admin, broker.address, RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=cfg.to_json()
    )
    assert resp.code == ResponseCode.SUCCESS
    resp = await call(admin, broker.address, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    groups = SubscriptionGroupWrapper.from_json(resp.body)
    assert groups.subscription_group_table["subG"] == cfg
    assert groups.data_version.counter >= 1
    persisted = json.loads((broker.data_dir / "config" / "subscriptionGroup.json").read_text())
    assert persisted["subscriptionGroupTable"]["subG"]["retryMaxTimes"] == 5
    resp = await call(
        admin, broker.address, RequestCode.DELETE_SUBSCRIPTIONGROUP, {"groupName": "subG"}
    )
    resp = await call(admin, broker.address, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert "subG" not in SubscriptionGroupWrapper.from_json(resp.body).subscription_group_table
    # the name server's KV config
    ns = {"namespace": "ORDER_TOPIC_CONFIG", "key": "ordT"}
    resp = await call(admin, broker.address, RequestCode.GET_KV_CONFIG, ns)
    assert resp.code == ResponseCode.QUERY_NOT_FOUND
    await call(admin, broker.address, RequestCode.PUT_KV_CONFIG, {**ns, "value": "broker-a:4"})
    resp = await call(admin, broker.address, RequestCode.GET_KV_CONFIG, ns)
    assert resp.ext_fields["value"] == "broker-a:4"
    resp = await call(
        admin,
        broker.address,
        RequestCode.GET_KVLIST_BY_NAMESPACE,
        {"namespace": "ORDER_TOPIC_CONFIG"},
    )
    assert KVTable.from_json(resp.body).table == {"ordT": "broker-a:4"}
    await call(admin, broker.address, RequestCode.DELETE_KV_CONFIG, ns)
    resp = await call(admin, broker.address, RequestCode.GET_KV_CONFIG, ns)
    assert resp.code == ResponseCode.QUERY_NOT_FOUND


async def test_admin_settings_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with EmbeddedBroker(data_dir=data) as b, rmq.Admin(namesrv=b.address) as a:
        await call(
            a,
            b.address,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
            body=SubscriptionGroupConfig("keepG", retry_max_times=3).to_json(),
        )
        await call(
            a,
            b.address,
            RequestCode.PUT_KV_CONFIG,
            {"namespace": "ns", "key": "k", "value": "v"},
        )
    async with EmbeddedBroker(data_dir=data) as b, rmq.Admin(namesrv=b.address) as a:
        resp = await call(a, b.address, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        table = SubscriptionGroupWrapper.from_json(resp.body).subscription_group_table
        assert table["keepG"].retry_max_times == 3
        resp = await call(a, b.address, RequestCode.GET_KV_CONFIG, {"namespace": "ns", "key": "k"})
        assert resp.ext_fields["value"] == "v"
