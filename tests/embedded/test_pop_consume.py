"""POP consumption on the embedded broker (docs/protocol.md §12.3): POP_MESSAGE answers, ACK,
BATCH_ACK, CHANGE_MESSAGE_INVISIBLETIME, and the revive of what was not acked in time into
the group's POP retry topic."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.pop import PopMessageResponseHeader
from aiorocket.embedded import EmbeddedBroker
from tests._harness.wait import wait_for
from tests.embedded import pop_kit as pk
from tests.embedded.test_broker_kit import RawClient, running_broker

RETRY = "%RETRY%G_T"


@asynccontextmanager
async def popping(**config: Any) -> AsyncIterator[tuple[EmbeddedBroker, RawClient]]:
    """A broker reviving every 20 ms at most, a client, and topic T (2 queues)."""
    options: dict[str, Any] = {"pop_revive_interval": 0.02, "default_queues": 2}
    options.update(config)
    async with running_broker(**options) as broker, RawClient(broker.address) as c:
        await c.create_topic("T", queues=2)
        yield broker, c


async def _offset(c: RawClient, group: str, topic: str, queue_id: int) -> str | None:
    resp = await c.query_offset(group, topic, queue_id)
    return resp.ext_fields.get("offset") if resp.code == 0 else None


async def _revived(broker: EmbeddedBroker, n: int, topic: str = RETRY) -> None:
    await wait_for(lambda: broker.store.max_offset(topic, 0) >= n, timeout=3.0, what=f"{n} revived")


async def test_pop_answers_records_offsets_and_moves_the_offset() -> None:
    async with popping() as (_, c):
        for i in range(3):
            await c.send("T", b"m%d" % i, queue_id=0, tags="A")
        resp, msgs = await pk.pop(c, "G", "T", queue_id=0, invisible_ms=30_000)
        assert (resp.code, resp.remark) == (0, "FOUND")
        h = PopMessageResponseHeader.from_ext(resp.ext_fields)
        assert (h.invisible_time, h.revive_qid, h.rest_num) == (30_000, 0, 0)
        # ExtraInfoUtil.buildStartOffsetInfo / buildMsgOffsetInfo: "<retry mark> <queue> <...>"
        assert (h.start_offset_info, h.msg_offset_info) == ("0 0 0", "0 0 0,1,2")
        assert h.order_count_info is None
        assert [m.record.body for m in msgs] == [b"m0", b"m1", b"m2"]
        assert [m.handle.text for m in msgs] == [
            f"0 {h.pop_time} 30000 0 0 broker-a 0 {i}" for i in range(3)
        ]
        assert await _offset(c, "G", "T", 0) == "3"  # moved at pop
        resp, msgs = await pk.pop(c, "G", "T", queue_id=0)
        assert (resp.code, resp.remark, msgs) == (
            ResponseCode.POLLING_TIMEOUT,
            "NO_MESSAGE_IN_QUEUE",
            [],
        )


async def test_pop_of_any_queue_counts_the_rest_and_caps_the_batch() -> None:
    async with popping() as (_, c):
        for i in range(6):
            await c.send("T", b"m%d" % i, queue_id=i % 2)
        resp, first = await pk.pop(c, "G", "T", max_msgs=4)
        assert len(first) == 4  # 3 from the queue it started at (random), 1 from the other
        assert PopMessageResponseHeader.from_ext(resp.ext_fields).rest_num == 2
        starts = resp.ext_fields["startOffsetInfo"].split(";")
        assert sorted(starts) == ["0 0 0", "0 1 0"]
        _, rest = await pk.pop(c, "G", "T")
        assert len(rest) == 2
        assert sorted(m.record.body for m in first + rest) == [b"m%d" % i for i in range(6)]
        resp, _ = await pk.pop(c, "G", "T", max_msgs=33)
        assert resp.code == ResponseCode.INVALID_PARAMETER
        resp, _ = await pk.pop(c, "G", "T", queue_id=2)
        assert resp.code == ResponseCode.INVALID_PARAMETER
        resp, _ = await pk.pop(c, "G", "Nope")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST


async def test_ack_codes_follow_apache() -> None:
    async with popping() as (_, c):
        await c.send("T", b"x", queue_id=0)
        _, (m,) = await pk.pop(c, "G", "T", queue_id=0)
        assert (await pk.ack(c, "G", m, topic="Nope")).code == ResponseCode.TOPIC_NOT_EXIST
        assert (await pk.ack(c, "G", m, queue_id=5)).code == ResponseCode.MESSAGE_ILLEGAL
        assert (await pk.ack(c, "G", m, offset=7)).code == ResponseCode.NO_MESSAGE
        bad = await pk.ack(c, "G", m, extra_info="not a handle")
        assert bad.code == ResponseCode.SYSTEM_ERROR
        assert (await pk.ack(c, "G", m)).code == ResponseCode.SUCCESS
        assert (await pk.ack(c, "G", m)).code == ResponseCode.SUCCESS  # again: nothing to do
        empty = await c.request(RequestCode.BATCH_ACK_MESSAGE, body=b'{"acks":[]}')
        assert empty.code == ResponseCode.NO_MESSAGE


async def test_unacked_messages_are_revived_into_the_retry_topic() -> None:
    async with popping() as (broker, c):
        await c.send("T", b"acked", queue_id=0, tags="A")
        await c.send("T", b"lost", queue_id=0, tags="B", props={"k": "v"}, uniq_key="U1")
        _, msgs = await pk.pop(c, "G", "T", invisible_ms=300)
        first_pop = msgs[0].handle.pop_time
        assert (await pk.ack(c, "G", msgs[0])).code == 0
        await _revived(broker, 1)
        await asyncio.sleep(0.1)
        assert broker.store.max_offset(RETRY, 0) == 1  # the acked one never
        assert broker.topics.get(RETRY) is not None
        resp, (m,) = await pk.pop(c, "G", "T", invisible_ms=300)
        rec = m.record
        # re-encoded as Apache answers by default: the topic asked for, the handle in POP_CK
        assert (rec.topic, rec.body, rec.reconsume_times) == ("T", b"lost", 1)
        assert m.handle.retry == "1"
        assert m.ack_topic == RETRY
        assert rec.properties["POP_CK"] == m.handle.text
        assert rec.properties[mp.TAGS] == "B"
        assert rec.properties["k"] == "v"
        assert rec.properties[mp.UNIQ_KEY] == "U1"
        assert rec.properties["1ST_POP_TIME"] == str(first_pop)
        assert resp.ext_fields["startOffsetInfo"] == "1 0 0"
        assert await _offset(c, "G", RETRY, 0) == "1"
        # revived again unless acked, with the count up and the first pop time kept
        await _revived(broker, 2)
        _, (again,) = await pk.pop(c, "G", "T", invisible_ms=300)
        assert (again.record.body, again.record.reconsume_times) == (b"lost", 2)
        assert again.record.properties["1ST_POP_TIME"] == str(first_pop)
        assert (await pk.ack(c, "G", again)).code == 0
        await asyncio.sleep(0.45)
        assert broker.store.max_offset(RETRY, 0) == 2


async def test_an_ack_after_the_revive_resurrects_nothing() -> None:
    async with popping() as (broker, c):
        await c.send("T", b"slow", queue_id=0)
        _, (late,) = await pk.pop(c, "G", "T", invisible_ms=150)
        await _revived(broker, 1)
        assert (await pk.ack(c, "G", late)).code == 0
        _, (copy,) = await pk.pop(c, "G", "T", invisible_ms=150)
        assert copy.record.body == b"slow"
        assert (await pk.ack(c, "G", copy)).code == 0
        assert (await pk.ack(c, "G", late)).code == 0
        await asyncio.sleep(0.4)
        resp, _ = await pk.pop(c, "G", "T")
        assert resp.code == ResponseCode.POLLING_TIMEOUT
        assert broker.store.max_offset(RETRY, 0) == 1


async def test_batch_ack_acks_per_checkpoint() -> None:
    async with popping() as (broker, c):
        for i in range(4):
            await c.send("T", b"m%d" % i, queue_id=i % 2)
        _, msgs = await pk.pop(c, "G", "T", invisible_ms=250)
        keep = next(m for m in msgs if m.record.body == b"m3")
        resp = await pk.batch_ack(c, "G", "T", [m for m in msgs if m is not keep])
        assert resp.code == 0
        await _revived(broker, 1)
        await asyncio.sleep(0.1)
        assert broker.store.max_offset(RETRY, 0) == 1
        _, (m,) = await pk.pop(c, "G", "T")
        assert m.record.body == b"m3"
        # the copy is acked by batch too, on the retry mark
        assert (await pk.batch_ack(c, "G", "T", [m])).code == 0
        await asyncio.sleep(0.3)
        assert broker.store.max_offset(RETRY, 0) == 1


async def test_change_invisible_time_spends_the_old_handle() -> None:
    async with popping() as (broker, c):
        await c.send("T", b"long", queue_id=0)
        _, (m,) = await pk.pop(c, "G", "T", invisible_ms=150)
        resp, renewed = await pk.change_invisible(c, "G", m, 700)
        assert resp.code == 0
        assert renewed is not None
        assert (renewed.invisible_time, renewed.revive_qid, renewed.ck_offset) == (700, 0, 0)
        assert renewed.pop_time >= m.handle.pop_time
        # the old handle is spent: its ack does not stop the revive at the new time
        assert (await pk.ack(c, "G", m)).code == 0
        await asyncio.sleep(0.4)
        assert broker.store.max_offset(RETRY, 0) == 0  # not at the old visible-at time
        await _revived(broker, 1)
        _, (copy,) = await pk.pop(c, "G", "T")
        assert copy.record.body == b"long"
        # a spent handle makes no new checkpoint: nothing comes back from it
        resp, _ = await pk.change_invisible(c, "G", m, 100)
        assert resp.code == 0
        assert (await pk.ack(c, "G", copy)).code == 0
        await asyncio.sleep(0.3)
        assert broker.store.max_offset(RETRY, 0) == 1


async def test_an_ack_with_the_renewed_handle_ends_it() -> None:
    async with popping() as (broker, c):
        await c.send("T", b"done", queue_id=0)
        _, (m,) = await pk.pop(c, "G", "T", invisible_ms=150)
        _, renewed = await pk.change_invisible(c, "G", m, 300)
        assert renewed is not None
        m.handle = renewed
        assert (await pk.ack(c, "G", m)).code == 0
        await asyncio.sleep(0.5)
        assert broker.store.max_offset(RETRY, 0) == 0
        # unlike an ack, a change of the offset at the queue's end is NO_MESSAGE
        bad = await c.request(
            RequestCode.CHANGE_MESSAGE_INVISIBLETIME,
            {
                "consumerGroup": "G",
                "topic": "T",
                "queueId": "0",
                "extraInfo": m.handle.text,
                "offset": "1",
                "invisibleTime": "300",
            },
        )
        assert bad.code == ResponseCode.NO_MESSAGE  # offset = max: no message there


async def test_init_mode_min_and_max() -> None:
    async with popping(new_group_offset_zero=False) as (_, c):
        for i in range(3):
            await c.send("T", b"m%d" % i, queue_id=0)
        _, msgs = await pk.pop(c, "FromMin", "T", queue_id=0, init_mode=0)
        assert [m.record.body for m in msgs] == [b"m0", b"m1", b"m2"]
        # MAX pops the last message (getInitOffset: "pop last one, then commit offset")
        _, msgs = await pk.pop(c, "FromMax", "T", queue_id=0, init_mode=1)
        assert [m.record.body for m in msgs] == [b"m2"]
        await c.send("T", b"m3", queue_id=0)
        _, msgs = await pk.pop(c, "FromMax", "T", queue_id=0, init_mode=1)
        assert [m.record.body for m in msgs] == [b"m3"]


async def test_init_mode_max_on_a_young_queue_starts_at_zero() -> None:
    # initPopOffsetByCheckMsgInMem: the queue's head is still there (new_group_offset_zero)
    async with popping() as (_, c):
        for i in range(2):
            await c.send("T", b"m%d" % i, queue_id=0)
        _, msgs = await pk.pop(c, "G", "T", queue_id=0, init_mode=1)
        assert [m.record.body for m in msgs] == [b"m0", b"m1"]


async def test_tag_and_sql_filters_skip_what_does_not_match() -> None:
    async with popping(enable_property_filter=True) as (broker, c):
        await c.send("T", b"a", queue_id=0, tags="A", props={"n": "1"})
        await c.send("T", b"b", queue_id=0, tags="B", props={"n": "2"})
        await c.send("T", b"plain", queue_id=0, props={"n": "3"})
        await c.send("T", b"a2", queue_id=0, tags="A", props={"n": "4"})
        _, msgs = await pk.pop(c, "Tags", "T", queue_id=0, exp_type="TAG", exp="A")
        assert [m.record.body for m in msgs] == [b"a", b"a2"]
        assert await _offset(c, "Tags", "T", 0) == "4"
        _, msgs = await pk.pop(c, "Sql", "T", queue_id=0, exp_type="SQL92", exp="n >= 2 AND n < 4")
        assert [m.record.body for m in msgs] == [b"b", b"plain"]
        bad, _ = await pk.pop(c, "Sql", "T", queue_id=0, exp_type="SQL92", exp="n >>")
        assert bad.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED
        # the retry topic is read through the same filter
        for group in ("Tags2", "Tags3"):
            _, (m,) = await pk.pop(c, group, "T", queue_id=0, exp="B", invisible_ms=100)
            await _revived(broker, 1, f"%RETRY%{group}_T")
        _, (m,) = await pk.pop(c, "Tags2", "T", queue_id=0, exp="B")
        assert (m.record.body, m.record.reconsume_times) == (b"b", 1)
        resp, _ = await pk.pop(c, "Tags3", "T", queue_id=0, exp="A")
        assert resp.code == ResponseCode.POLLING_TIMEOUT
        assert await _offset(c, "Tags3", "%RETRY%Tags3_T", 0) == "1"  # skipped for good


async def test_retry_probability_decides_which_is_read_first() -> None:
    for probability, first in ((100, b"retried"), (0, b"fresh")):
        async with popping(pop_from_retry_probability=probability) as (broker, c):
            await c.send("T", b"retried", queue_id=0)
            await pk.pop(c, "G", "T", queue_id=0, invisible_ms=100)
            await _revived(broker, 1)
            await c.send("T", b"fresh", queue_id=0)
            _, msgs = await pk.pop(c, "G", "T", queue_id=0, max_msgs=1)
            assert [m.record.body for m in msgs] == [first]
            _, msgs = await pk.pop(c, "G", "T", queue_id=0, max_msgs=1)
            assert len(msgs) == 1
            assert msgs[0].record.body != first


async def test_a_retried_message_goes_to_the_dlq_by_send_back() -> None:
    # 5.x: the client sends a message over its attempts to %DLQ% (delay level -1), then acks
    async with popping() as (broker, c):
        await c.send("T", b"poison", queue_id=0)
        await pk.pop(c, "G", "T", invisible_ms=100)
        await _revived(broker, 1)
        _, (m,) = await pk.pop(c, "G", "T")
        ext = {
            "offset": str(m.record.commit_log_offset),
            "group": "G",
            "delayLevel": "-1",
            "originMsgId": m.record.properties.get(mp.UNIQ_KEY, ""),
            "originTopic": "T",
            "maxReconsumeTimes": "16",
        }
        resp = await c.request(RequestCode.CONSUMER_SEND_MSG_BACK, ext)
        assert resp.code == 0, resp.remark
        assert (await pk.ack(c, "G", m)).code == 0
        (dead,) = await c.pull_all("watch", "%DLQ%G", 0)
        assert (dead.body, dead.reconsume_times) == (b"poison", 2)


async def test_the_actual_retry_topic_as_stored() -> None:
    async with popping(pop_response_return_actual_retry_topic=True) as (broker, c):
        await c.send("T", b"r", queue_id=0)
        await pk.pop(c, "G", "T", invisible_ms=100)
        await _revived(broker, 1)
        resp, (m,) = await pk.pop(c, "G", "T")
        # as stored: the retry topic, no POP_CK; the handle comes from the offset infos
        assert (m.record.topic, mp.POP_CK in m.record.properties) == (RETRY, False)
        assert resp.ext_fields["msgOffsetInfo"] == "1 0 0"
        assert (await pk.ack(c, "G", m)).code == 0
        # the v2 retry topic (`enableRetryTopicV2`) breaks the name rule: never made here
        assert (await pk.ack(c, "G", m, topic="%RETRY%G+T")).code == ResponseCode.TOPIC_NOT_EXIST
