"""Message trace across aiorocket and the Apache Java client, read back by ``mqadmin``.

The Java broker runs with ``traceTopicEnable=true`` (it creates ``RMQ_SYS_TRACE_TOPIC``).

* aiorocket sends with ``trace=True``, the Java push consumer (``enableMsgTrace``) consumes
  (its first delivery of one message fails): ``mqadmin queryMsgTraceById`` shows our Pub row
  and the Java group's Sub rows, and ``Admin.trace`` reads the same records.
* The Java producer sends with trace, aiorocket consumes with ``trace=True`` (one failure,
  then the retry): ``mqadmin`` shows the Java Pub row and our Sub rows, failed then success.
  The Java client's own Pub records re-encode byte for byte with our encoder.
* On the embedded broker, a Java consumer's trace is written too (the broker stores
  ``MSG_REGION``/``TRACE_ON`` as Java's does) and ``mqadmin`` reads it there.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket._trace import TraceType, decode_trace, encode_trace
from aiorocket.embedded import EmbeddedBroker, parse_delay_levels
from tests._harness.wait import wait_for
from tests.consumer.conftest import FAST
from tests.interop.apache._groups import create_topic, wait_route
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import run_admin
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

# the embedded broker of the last test: retries after 200 ms
pytestmark = pytest.mark.broker(delay_levels=parse_delay_levels(" ".join(["200ms"] * 18)))

JAVA_BROKER_CONF = {"traceTopicEnable": "true"}

#: the consumer tests' quick settings, from the first offset
PY_CONSUMER: dict[str, Any] = {"consume_from": "first", **FAST}
BOOT = 90.0


async def _topic(cluster: JavaCluster, prefix: str) -> str:
    topic = unique_name(prefix)
    await create_topic([cluster.broker_addr("broker-a")], topic, 2)
    await wait_route(cluster.namesrv, topic, 2)
    return topic


async def _mqadmin_trace(cluster: JavaCluster, msg_id: str) -> list[list[str]]:
    """The rows of ``mqadmin queryMsgTraceById -i msg_id`` (each split on whitespace)."""
    out = await asyncio.to_thread(cluster.admin, "queryMsgTraceById", "-i", msg_id)
    return [line.split() for line in out.splitlines() if line.startswith(("Pub ", "Sub "))]


async def _agrees_with_mqadmin(cluster: JavaCluster, msg_id: str) -> int:
    """``aiorocket admin trace ID --json`` and ``mqadmin queryMsgTraceById -i ID`` show the
    same rows (mqadmin prints Pub and SubAfter records: type, group, client host, time to the
    second, cost, status; Sub rows grouped per consumer group); returns how many."""
    theirs = sorted(await _mqadmin_trace(cluster, msg_id))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "aiorocket", "admin", "trace", msg_id, "-n", cluster.namesrv, "--json"),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    shown = {"Pub": "Pub", "SubAfter": "Sub"}
    ours = sorted(
        [
            shown[e["type"]],
            e["group"],
            e["client_host"],
            # DateFormatUtils.format(ts, "yyyy-MM-dd HH:mm:ss"): the JVM's local time zone
            *time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["timestamp"] / 1000)).split(),
            f"{e['cost_ms']}ms",
            e["status"],
        ]
        for e in json.loads(out)
        if e["type"] in shown
    )
    assert ours == theirs
    return len(ours)


async def _wait_trace(
    cluster: JavaCluster, msg_id: str, want: int, timeout: float = 60.0
) -> list[list[str]]:
    rows: list[list[str]] = []

    async def enough() -> bool:
        nonlocal rows
        rows = await _mqadmin_trace(cluster, msg_id)
        return len(rows) >= want

    try:
        await wait_for(enough, timeout=timeout, what=f"{want} trace rows of {msg_id}", interval=2.0)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; mqadmin showed {rows}") from None
    return rows


async def test_aiorocket_pub_java_sub(
    java_cluster: JavaCluster, java_classes: Path, tmp_path: Path
) -> None:
    topic = await _topic(java_cluster, "TracePy")
    group = unique_name("PyTracePub")
    async with rmq.Producer(namesrv=java_cluster.namesrv, group=group, trace=True) as producer:
        ok = await producer.send(rmq.Message(topic, b"fine", tags="a", keys=["ka"]))
        bad = await producer.send(rmq.Message(topic, b"will fail", tags="b", keys=["kb"]))
    jgroup = unique_name("JTraceSub")
    await _jtrace(java_classes, tmp_path, "consume", java_cluster.namesrv, topic, jgroup, "2")
    # mqadmin: our Pub row, then the Java group's Sub rows (failed, then success)
    rows = await _wait_trace(java_cluster, bad.msg_id, 3)
    pubs = [r for r in rows if r[0] == "Pub"]
    subs = [r for r in rows if r[0] == "Sub"]
    assert len(pubs) == 1, rows
    assert pubs[0][1] == group
    assert pubs[0][-1] == "success"
    assert [r[1] for r in subs] == [jgroup, jgroup]
    assert sorted(r[-1] for r in subs) == ["failed", "success"]
    rows = await _wait_trace(java_cluster, ok.msg_id, 2)
    assert [r[0] for r in rows] == ["Pub", "Sub"]
    # `aiorocket admin trace` shows what mqadmin shows, row by row
    assert await _agrees_with_mqadmin(java_cluster, bad.msg_id) == 3
    assert await _agrees_with_mqadmin(java_cluster, ok.msg_id) == 2
    # our reader agrees
    async with rmq.Admin(namesrv=java_cluster.namesrv) as admin:
        entries = await admin.trace(bad.msg_id)
    pub = next(e for e in entries if e.type == "Pub")
    assert (pub.group, pub.topic, pub.tags, pub.keys) == (group, topic, "b", "kb")
    assert pub.offset_msg_id == bad.offset_msg_id
    afters = [e for e in entries if e.type == "SubAfter"]
    assert [e.success for e in afters] == [False, True]
    assert all(e.group == jgroup and e.keys == "kb" for e in afters)


async def test_java_pub_aiorocket_sub(
    java_cluster: JavaCluster, java_classes: Path, tmp_path: Path
) -> None:
    topic = await _topic(java_cluster, "TraceJ")
    client = await _jtrace(java_classes, tmp_path, "produce", java_cluster.namesrv, topic, "2")
    sent = [e["msg_id"] for e in client.of("sent")]
    assert len(sent) == 2
    group = unique_name("PyTraceSub")
    consumer = rmq.PushConsumer(
        group=group, namesrv=java_cluster.namesrv, trace=True, **PY_CONSUMER
    )
    consumer.subscribe(topic)
    calls: dict[str, int] = {}

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        m = msgs[0]
        calls[m.msg_id] = calls.get(m.msg_id, 0) + 1
        if m.msg_id == sent[0] and m.reconsume_times == 0:
            raise ValueError("fails once")

    async with consumer:
        await wait_for(
            lambda: calls.get(sent[0]) == 2 and calls.get(sent[1]) == 1,
            timeout=60.0,
            what="both messages, one retried",
        )
    rows = await _wait_trace(java_cluster, sent[0], 3)
    assert [r[0] for r in rows].count("Pub") == 1
    assert next(r for r in rows if r[0] == "Pub")[1] == "JTraceProducer"
    subs = [r for r in rows if r[0] == "Sub"]
    assert [r[1] for r in subs] == [group, group]
    assert sorted(r[-1] for r in subs) == ["failed", "success"]
    for msg_id, rows_shown in ((sent[0], 3), (sent[1], 2)):
        await _wait_trace(java_cluster, msg_id, rows_shown)
        assert await _agrees_with_mqadmin(java_cluster, msg_id) == rows_shown
    # The Java client's own records: our encoder writes the same bytes.
    async with rmq.Admin(namesrv=java_cluster.namesrv) as admin:
        raw = await admin.messages_by_key("RMQ_SYS_TRACE_TOPIC", sent[1])
        entries = await admin.trace(sent[1])
    assert [e.type for e in entries].count("SubAfter") == 1
    java_pubs = 0
    for m in raw:
        text = m.body.decode()
        for record in text.split("\x02"):
            if not record.startswith("Pub\x01"):
                continue
            (ctx,) = decode_trace(record + "\x02")
            assert ctx.trace_type is TraceType.Pub
            assert encode_trace(ctx).data == record + "\x02"
            java_pubs += 1
    assert java_pubs >= 1


async def test_java_sub_on_the_embedded_broker(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path
) -> None:
    """The embedded broker stores MSG_REGION/TRACE_ON as a Java broker does, so a Java
    consumer's trace is written; mqadmin reads it from the embedded broker."""
    topic = unique_name("TraceEmb")
    group = unique_name("PyTracePubE")
    async with rmq.Producer(namesrv=broker.address, group=group, trace=True) as producer:
        sent = await producer.send(rmq.Message(topic, b"will fail", keys=["ke"]))
    jgroup = unique_name("JTraceSubE")
    await _jtrace(java_classes, tmp_path, "consume", broker.address, topic, jgroup, "1")
    async with rmq.Admin(namesrv=broker.address) as admin:
        entries = await admin.trace(sent.msg_id)
    afters = [e for e in entries if e.type == "SubAfter"]
    assert [e.success for e in afters] == [False, True]
    assert all(e.group == jgroup and e.keys == "ke" for e in afters)
    out = await asyncio.to_thread(
        run_admin, broker.address, "queryMsgTraceById", "-i", sent.msg_id, tmp=tmp_path / "adm"
    )
    rows = [line.split() for line in out.splitlines() if line.startswith(("Pub ", "Sub "))]
    assert [r[0] for r in rows] == ["Pub", "Sub", "Sub"]
    assert rows[0][1] == group
    assert {r[1] for r in rows[1:]} == {jgroup}


async def _jtrace(classes: Path, tmp: Path, *args: str) -> JavaClient:
    """Run ``JTrace *args`` until it prints ``done`` (stopped either way); its events."""
    client = await JavaClient.start(classes, "JTrace", *args, tmp=tmp / "java")
    try:
        await client.wait_event("done", BOOT)
    finally:
        await client.stop()
    return client
