"""Send (10/310/320) and pull (11) on the embedded broker, over loopback TCP."""

from __future__ import annotations

import zlib

from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import RequestCode, ResponseCode, SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import decode_messages
from aiorocket._protocol.msgid import make_offset_msg_id, parse_offset_msg_id
from aiorocket._protocol.tags import java_hash
from aiorocket.embedded.pull import pull_code
from aiorocket.embedded.store_results import GetStatus
from tests._harness.protocol import pull_header
from tests.embedded.test_broker_kit import RawClient, running_broker

UNIQ = "7F0000011F90000000000000000000{:02X}"


async def test_send_then_pull_keeps_body_tags_keys_properties_and_uniq_key() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp = await c.send(
            "Orders",
            b"\x00payload\xff",
            tags="TagA",
            keys="k1 k2",
            props={"color": "blue", "WAIT": "true"},
            uniq_key=UNIQ.format(1),
            queue_id=2,
            flag=7,
        )
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        ext = resp.ext_fields
        assert ext["queueId"] == "2"
        assert ext["queueOffset"] == "0"
        assert ext["MSG_REGION"] == "DefaultRegion"
        assert ext["TRACE_ON"] == "true"
        assert all(isinstance(v, str) for v in ext.values())
        host, port, clo = parse_offset_msg_id(ext["msgId"])
        assert f"{host}:{port}" == broker.address

        pulled, records = await c.pull("G", "Orders", 2, 0)
        assert pulled.code == ResponseCode.SUCCESS
        assert pulled.remark == "FOUND"
        assert pulled.ext_fields["nextBeginOffset"] == "1"
        assert pulled.ext_fields["minOffset"] == "0"
        assert pulled.ext_fields["maxOffset"] == "1"
        assert pulled.ext_fields["suggestWhichBrokerId"] == "0"
        (rec,) = records
        assert rec.body == b"\x00payload\xff"
        assert rec.topic == "Orders"
        assert rec.queue_id == 2
        assert rec.queue_offset == 0
        assert rec.commit_log_offset == clo
        assert rec.flag == 7
        assert rec.body_crc == zlib.crc32(rec.body) & 0x7FFFFFFF
        assert rec.born_host == "127.0.0.1"
        assert f"{rec.store_host}:{rec.store_port}" == broker.address
        props = rec.properties
        assert props[mp.TAGS] == "TagA"
        assert props[mp.KEYS] == "k1 k2"
        assert props["color"] == "blue"
        assert props[mp.UNIQ_KEY] == UNIQ.format(1)
        assert props[mp.CLUSTER] == "DefaultCluster"
        assert mp.WAIT not in props  # 4.9.8 drops WAIT from single messages


async def test_code_10_uses_long_header_names() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp = await c.send("Go", b"x", tags="t", code=RequestCode.SEND_MESSAGE)
        assert resp.code == 0, resp.remark
        records = await c.pull_all("G", "Go", 0)
        assert [r.properties[mp.TAGS] for r in records] == ["t"]


async def test_binary_header_dialect_is_answered_in_kind() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        conn = await c.pool.get(broker.address)
        cmd = RemotingCommand.request(RequestCode.GET_MAX_OFFSET, {"topic": "T", "queueId": "0"})
        cmd.serialize_type = SerializeType.ROCKETMQ
        resp = await conn.request(cmd)
        assert resp.serialize_type == SerializeType.ROCKETMQ
        assert resp.code == 0
        assert resp.ext_fields["offset"] == "0"


async def test_batch_decided_by_header_flag_for_310_and_320() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        for code in (RequestCode.SEND_BATCH_MESSAGE, RequestCode.SEND_MESSAGE_V2):
            items = [
                (f"m{i}".encode(), {mp.UNIQ_KEY: UNIQ.format(i), mp.TAGS: f"T{i % 2}"})
                for i in range(5)
            ]
            resp = await c.send_batch("Batch", items, queue_id=1, code=code)
            assert resp.code == 0, resp.remark
            ids = resp.ext_fields["msgId"].split(",")
            assert len(ids) == 5
            assert len(set(ids)) == 5
        records = await c.pull_all("G", "Batch", 1)
        assert [parse_offset_msg_id(i)[2] for i in ids] == [
            r.commit_log_offset for r in records[5:]
        ]
        assert {f"{h}:{p}" for h, p, _ in map(parse_offset_msg_id, ids)} == {broker.address}
        assert [r.queue_offset for r in records] == list(range(10))
        assert [r.body for r in records] == [f"m{i}".encode() for i in range(5)] * 2
        for i, r in enumerate(records[:5]):
            assert r.properties[mp.UNIQ_KEY] == UNIQ.format(i)
            assert r.properties[mp.TAGS] == f"T{i % 2}"
            # batch-level properties are appended, CLUSTER included
            assert r.properties[mp.CLUSTER] == "DefaultCluster"
            assert r.properties[mp.WAIT] == "true"
        resp = await c.send_batch("Batch", [(b"a", {})], queue_id=1)
        assert resp.ext_fields["queueOffset"] == "10"


async def test_batch_to_retry_topic_or_malformed_is_refused() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp = await c.send_batch("%RETRY%G", [(b"a", {})])
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
        header = {"a": "PG", "b": "B", "c": "TBW102", "d": "4", "e": "0", "f": "0"}
        header |= {"g": "1", "h": "0", "m": "true"}
        resp = await c.request(RequestCode.SEND_BATCH_MESSAGE, header, b"\x00\x00\x00\x05junk")
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL


async def test_tag_hash_comes_from_the_tags_property() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.send("Tags", b"a", tags="TagA")
        await c.send("Tags", b"b")
        entry = broker.store.get("Tags", 0, 0, max_msgs=2)
        assert entry.tags_codes == [java_hash("TagA"), 0]


async def test_queue_choice_and_bounds() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        seen = set()
        for _ in range(40):
            resp = await c.send("Rand", b"x", queue_id=-1)
            assert resp.code == 0
            seen.add(int(resp.ext_fields["queueId"]))
        assert seen <= {0, 1, 2, 3}
        assert len(seen) > 1
        resp = await c.send("Rand", b"x", queue_id=4)
        assert resp.code == ResponseCode.SYSTEM_ERROR


async def test_size_and_name_and_permission_checks() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp = await c.send("Big", b"x" * (4 * 1024 * 1024 + 1))
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL
        resp = await c.send("Big", b"x" * (4 * 1024 * 1024))
        assert resp.code == ResponseCode.SUCCESS
        for topic in ("SCHEDULE_TOPIC_XXXX", "RMQ_SYS_TRANS_HALF_TOPIC", "OFFSET_MOVED_EVENT"):
            resp = await c.send(topic, b"x")
            assert resp.code == ResponseCode.NO_PERMISSION, topic
        # a transactional send is parked as a half message, not stored in its topic
        resp = await c.send("Txn", b"x", props={mp.TRAN_MSG: "true"})
        assert resp.code == ResponseCode.SUCCESS
        assert broker.store.max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 1
        assert all(broker.store.max_offset("Txn", q) == 0 for q in range(8))
        resp = await c.send("Props", b"x", props={"p": "v" * 40000})
        assert resp.code == ResponseCode.MESSAGE_ILLEGAL


async def test_compressed_body_is_stored_as_sent() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        raw = zlib.compress(b"z" * 10000, 5)
        assert (await c.send("Zip", raw, sys_flag=0x1)).code == 0
        resp, _ = await c.pull("G", "Zip", 0, 0)
        (stored,) = decode_messages(resp.body, decompress=False)
        assert stored.body == raw
        assert stored.sys_flag & 0x1
        (inflated,) = decode_messages(resp.body)
        assert inflated.body == b"z" * 10000


async def test_auto_create_on_send_and_without_it() -> None:
    async with running_broker(default_queues=2) as broker, RawClient(broker.address) as c:
        assert (await c.send("Fresh", b"x", queue_id=3)).code == 0
        cfg = broker.topics.get("Fresh")
        assert cfg is not None
        assert cfg.write_queue_nums == 4  # min(header d = 4, TBW102 write queues)
        assert cfg.perm == 6
    async with (
        running_broker(auto_create_topics=False) as broker,
        RawClient(broker.address) as c,
    ):
        resp = await c.send("Fresh", b"x")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert resp.ext_fields["MSG_REGION"] == "DefaultRegion"
        # a client-side retry to a %RETRY% topic still creates it (1 queue)
        assert (await c.send("%RETRY%G", b"x", queue_id=0)).code == 0


async def test_tag_filter_no_matched_and_untagged() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        for tag in ("A", None, "B", "A", None):
            await c.send("Filt", tag.encode() if tag else b"-", tags=tag)
        resp, recs = await c.pull("G", "Filt", 0, 0, subscription="A")
        assert resp.code == 0
        assert [r.body for r in recs] == [b"A", b"A"]
        assert resp.ext_fields["nextBeginOffset"] == "5"
        resp, recs = await c.pull("G", "Filt", 0, 0, subscription="B || C")
        assert [r.body for r in recs] == [b"B"]
        resp, recs = await c.pull("G", "Filt", 0, 0, subscription="Z")
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert resp.remark == "NO_MATCHED_MESSAGE"
        assert resp.ext_fields["nextBeginOffset"] == "5"
        assert resp.body == b""
        resp, recs = await c.pull("G", "Filt", 0, 0, subscription="*")
        assert len(recs) == 5  # untagged ones included for "*"
        resp, _ = await c.pull("G", "Filt", 0, 0, subscription="A")
        assert resp.code == 0


async def test_pull_status_table() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.create_topic("Empty")  # no message yet
        resp, _ = await c.pull("G", "Empty", 0, 0)
        assert (resp.code, resp.ext_fields["nextBeginOffset"]) == (19, "0")
        resp, _ = await c.pull("G", "Empty", 0, 5)
        assert (resp.code, resp.ext_fields["nextBeginOffset"]) == (21, "0")
        for i in range(3):
            await c.send("Full", b"%d" % i)
        resp, _ = await c.pull("G", "Full", 0, 3)
        assert (resp.code, resp.remark, resp.ext_fields["nextBeginOffset"]) == (
            19,
            "OFFSET_OVERFLOW_ONE",
            "3",
        )
        resp, _ = await c.pull("G", "Full", 0, 9)
        assert (resp.code, resp.remark, resp.ext_fields["nextBeginOffset"]) == (
            21,
            "OFFSET_OVERFLOW_BADLY",
            "3",
        )
        resp, recs = await c.pull("G", "Full", 0, 1)
        assert resp.code == 0
        assert [r.body for r in recs] == [b"1", b"2"]
        resp, _ = await c.pull("G", "NoSuchTopic", 0, 0)
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        resp, _ = await c.pull("G", "Full", 9, 0)
        assert resp.code == ResponseCode.SYSTEM_ERROR
    # statuses the store produces only after retention, mapped per docs/protocol.md §3.3
    assert pull_code(GetStatus.OFFSET_TOO_SMALL, 0, 0) == 21
    assert pull_code(GetStatus.MESSAGE_WAS_REMOVING, 0, 0) == 20
    assert pull_code(GetStatus.OFFSET_FOUND_NULL, 0, 0) == 19
    assert pull_code(GetStatus.NO_MATCHED_LOGIC_QUEUE, 4, 0) == 21
    assert pull_code(GetStatus.FOUND, 0, 0) == 20  # never 0 with an empty body


async def test_max_messages_per_pull_is_a_setting() -> None:
    for limit, expect in ((32, 32), (64, 64)):
        async with (
            running_broker(max_pull_messages=limit) as broker,
            RawClient(broker.address) as c,
        ):
            await c.send_batch("Many", [(b"m", {})] * 100)
            resp, recs = await c.pull("G", "Many", 0, 0, max_msgs=100)
            assert len(recs) == expect
            assert resp.ext_fields["nextBeginOffset"] == str(expect)


async def test_pull_without_subscription_uses_the_heartbeat() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.send("HB", b"a", tags="A")
        await c.send("HB", b"b", tags="B")
        resp, _ = await c.pull("G", "HB", 0, 0, subscription=None)
        assert resp.code == ResponseCode.SUBSCRIPTION_NOT_EXIST
        assert (await c.heartbeat("cid", consumer_group="G", topics={"HB": "B"})).code == 0
        resp, recs = await c.pull("G", "HB", 0, 0, subscription=None)
        assert [r.body for r in recs] == [b"b"]
        header = pull_header(
            consumer_group="G",
            topic="HB",
            sub_version=2**62,
        )
        resp = await c.request(RequestCode.PULL_MESSAGE, header.to_ext())
        assert resp.code == ResponseCode.SUBSCRIPTION_NOT_LATEST


async def test_sql92_and_bad_names_refused_on_pull() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        await c.send("Sql", b"a")
        header = pull_header(
            consumer_group="G",
            topic="Sql",
            sys_flag=4,
            subscription="a > 1",
            expression_type="SQL92",
        )
        resp = await c.request(RequestCode.PULL_MESSAGE, header.to_ext())
        assert resp.code == ResponseCode.SYSTEM_ERROR
        resp, _ = await c.pull("bad/group", "Sql", 0, 0)
        assert resp.code == ResponseCode.SYSTEM_ERROR


async def test_offset_msg_id_matches_view_by_id() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp = await c.send("View", b"look at me", tags="v")
        _, _, clo = parse_offset_msg_id(resp.ext_fields["msgId"])
        host, port = broker.address.split(":")
        assert resp.ext_fields["msgId"] == make_offset_msg_id(host, int(port), clo)
        view = await c.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(clo)})
        assert view.code == 0
        (rec,) = decode_messages(view.body)
        assert rec.body == b"look at me"
        missing = await c.request(RequestCode.VIEW_MESSAGE_BY_ID, {"offset": str(clo + 1)})
        assert missing.code == ResponseCode.SYSTEM_ERROR
