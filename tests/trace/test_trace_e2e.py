"""Message trace end to end on the embedded broker: a traced producer and push consumer, then
``Admin.trace`` (what ``mqadmin queryMsgTraceById`` does) and ``aiorocket admin trace``."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

import aiorocket as rmq
from aiorocket.embedded.broker import EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.wait import wait_for
from tests.consumer.conftest import FAST

pytestmark = pytest.mark.broker(default_queues=2, delay_levels=FAST_DELAYS)


async def test_pub_and_sub_rows(broker: EmbeddedBroker) -> None:
    async with rmq.Producer(namesrv=broker.address, group="trace-pg", trace=True) as producer:
        assert producer.tracer is not None
        sent = await producer.send(rmq.Message("Traced", b"hello", tags="T1", keys=["k1", "k2"]))
        plain = await producer.send(rmq.Message("Traced", b"plain"))
    # closing the producer flushed its trace
    assert producer.tracer.pending == 0
    assert producer.tracer.sent >= 1

    consumer = rmq.PushConsumer(group="trace-cg", namesrv=broker.address, trace=True, **FAST)
    consumer.subscribe("Traced")
    calls: dict[str, int] = {}

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        m = msgs[0]
        calls[m.msg_id] = calls.get(m.msg_id, 0) + 1
        if m.msg_id == sent.msg_id and m.reconsume_times == 0:
            await asyncio.sleep(0.02)
            raise ValueError("fails once")

    async with consumer:
        await wait_for(
            lambda: calls.get(sent.msg_id) == 2 and calls.get(plain.msg_id) == 1,
            timeout=15.0,
            what="the failure, the retry and the plain message",
        )
    async with rmq.Admin(namesrv=broker.address) as admin:
        entries = await admin.trace(sent.msg_id)
        others = await admin.trace(plain.msg_id)
    kinds = [e.type for e in entries]
    assert kinds.count("Pub") == 1
    assert kinds.count("SubBefore") == 2
    assert kinds.count("SubAfter") == 2
    pub = next(e for e in entries if e.type == "Pub")
    assert (pub.group, pub.topic, pub.tags, pub.keys) == ("trace-pg", "Traced", "T1", "k1 k2")
    assert pub.success
    assert pub.status == "success"
    assert pub.offset_msg_id == sent.offset_msg_id
    assert pub.store_host == broker.address
    afters = [e for e in entries if e.type == "SubAfter"]
    assert [e.success for e in afters] == [False, True]
    assert all(e.group == "trace-cg" and e.topic == "Traced" for e in afters)
    assert all(e.keys == "k1 k2" for e in afters)
    assert afters[0].cost_ms >= 15
    befores = [e for e in entries if e.type == "SubBefore"]
    assert [e.retry_times for e in befores] == [0, 1]
    assert {e.request_id for e in befores} == {e.request_id for e in afters}
    # A message without keys or tags is traced with Java's "null".
    pub2 = next(e for e in others if e.type == "Pub")
    assert (pub2.tags, pub2.keys) == ("null", "null")
    assert [e.success for e in others if e.type == "SubAfter"] == [True]

    code, out = await _admin_trace(sent.msg_id, broker.address, "--json")
    assert code == 0
    rows = json.loads(out)
    assert [r["type"] for r in rows].count("SubAfter") == 2
    code, out = await _admin_trace(sent.msg_id, broker.address)
    text = out.decode()
    assert text.splitlines()[0].split()[:3] == ["TYPE", "TIME", "GROUP"]
    assert "trace-cg" in text
    assert "trace-pg" in text
    assert "failed" in text


async def test_untraced_clients_write_nothing(broker: EmbeddedBroker) -> None:
    async with rmq.Producer(namesrv=broker.address, group="plain-pg") as producer:
        assert producer.tracer is None
        sent = await producer.send(rmq.Message("Untraced", b"x", keys=["k"]))
    async with rmq.Admin(namesrv=broker.address) as admin:
        assert await admin.trace(sent.msg_id) == []


async def test_pull_consumer_traces_what_it_hands_out(broker: EmbeddedBroker) -> None:
    async with rmq.Producer(namesrv=broker.address, group="pull-pg") as producer:
        sent = [await producer.send(rmq.Message("PullTraced", b"%d" % i)) for i in range(3)]
    consumer = rmq.PullConsumer(
        group="pull-cg",
        namesrv=broker.address,
        trace=True,
        rebalance_interval=1.0,
        consume_from="first",
    )
    consumer.subscribe("PullTraced")
    got: list[rmq.ReceivedMessage] = []
    async with consumer:
        while len(got) < 3:
            got.extend(await consumer.poll(timeout=5))
    async with rmq.Admin(namesrv=broker.address) as admin:
        entries = await admin.trace(sent[1].msg_id)
    # Java's lite pull: SubBefore and SubAfter at once, success (no Pub: not traced)
    assert [e.type for e in entries] == ["SubBefore", "SubAfter"]
    assert all(e.group == "pull-cg" for e in entries)
    assert entries[1].success


async def test_transaction_pub_and_end_transaction(broker: EmbeddedBroker) -> None:
    async def execute_local(msg: rmq.Message, arg: object) -> rmq.TransactionState:
        return rmq.TransactionState.COMMIT

    async def check(msg: rmq.ReceivedMessage) -> rmq.TransactionState:
        return rmq.TransactionState.COMMIT

    async with rmq.TransactionProducer(
        namesrv=broker.address,
        group="tx-pg",
        execute_local=execute_local,
        check=check,
        trace=True,
    ) as producer:
        result = await producer.send_in_transaction(rmq.Message("TxTraced", b"x", keys=["o1"]))
    async with rmq.Admin(namesrv=broker.address) as admin:
        entries = await admin.trace(result.msg_id)
    pub, end = entries
    assert (pub.type, pub.group, pub.keys) == ("Pub", "tx-pg", "o1")
    assert (end.type, end.topic, end.transaction_state) == (
        "EndTransaction",
        "TxTraced",
        "COMMIT_MESSAGE",
    )
    assert end.store_host == broker.address


async def _admin_trace(msg_id: str, namesrv: str, *extra: str) -> tuple[int | None, bytes]:
    """``python -m aiorocket admin trace MSG_ID -n NAMESRV *extra``: exit code and stdout."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "aiorocket", "admin", "trace", msg_id, "-n", namesrv, *extra),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    return proc.returncode, out


async def test_simple_consumer_traces_what_it_acks(broker: EmbeddedBroker) -> None:
    async with rmq.Producer(namesrv=broker.address, group="trace-spg", trace=True) as producer:
        acked = await producer.send(rmq.Message("TracedPop", b"acked", keys=["ka"]))
        dropped = await producer.send(rmq.Message("TracedPop", b"left"))
    consumer = rmq.SimpleConsumer(
        group="trace-scg", namesrv=broker.address, consume_from="first", trace=True
    )
    consumer.subscribe("TracedPop")
    async with consumer:
        got: dict[str, rmq.PoppedMessage] = {}
        while len(got) < 2:
            for m in await consumer.receive(invisible_duration=30, max_messages=4):
                got[m.msg_id] = m
        await asyncio.sleep(0.02)
        await consumer.ack(got[acked.msg_id])
    async with rmq.Admin(namesrv=broker.address) as admin:
        entries = await admin.trace(acked.msg_id)
        unacked = await admin.trace(dropped.msg_id)
    # the ack is the end of the consumption: SubBefore at the receipt, a successful SubAfter
    assert [e.type for e in entries] == ["Pub", "SubBefore", "SubAfter"]
    after = entries[2]
    assert (after.group, after.topic, after.keys, after.success) == (
        "trace-scg",
        "TracedPop",
        "ka",
        True,
    )
    assert after.cost_ms >= 15
    assert entries[1].request_id == after.request_id
    # not acked: it comes back, and is traced when that delivery is acked
    assert [e.type for e in unacked] == ["Pub"]
