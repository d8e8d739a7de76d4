"""SparkForwarder: consumer batches become Spark DataFrames and are acknowledged
only after ``fn`` ran; a process killed mid-run and restarted loses nothing and repeats only
the batch it was processing."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from aiorocket import MessageQueue, PushConsumer, QueueReader
from tests._harness.wait import wait_for_blocking
from tests.spark._support import ROOT, BrokerThread, aproduce, produce, spark_missing

pytestmark = pytest.mark.slow

if spark_missing() is None:
    from aiorocket.integrations.spark import SparkForwarder

SCRIPT = Path(__file__).with_name("forwarder_proc.py")
FAST: dict[str, Any] = {
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.2,
    "shutdown_grace": 10.0,
}


async def _group_caught_up(addr: str, topic: str, group: str) -> bool:
    async with QueueReader(namesrv=addr) as reader:
        mqs = await reader.queues(topic)
        maxes = await reader.max_offsets(mqs)
        committed = {mq: await reader.committed_offset(group, mq) for mq in mqs}
        return committed == maxes


async def test_batches_are_bounded_and_acknowledged_after_fn(
    spark: Any, broker_thread: BrokerThread
) -> None:
    addr, topic, group = broker_thread.address, "FwdBatches", "fwd-batches"
    ids = set(await aproduce(addr, topic, 1_500))
    batches: list[tuple[int, list[str]]] = []
    held: list[int] = []
    lock = threading.Lock()

    def fn(df: Any, batch_id: int) -> None:
        rows = [r.msg_id for r in df.select("msg_id").collect()]
        time.sleep(0.2)  # Spark is busy: the next batch fills, then handlers wait
        stats = forwarder.statistics()
        with lock:
            batches.append((batch_id, rows))
            held.append(stats.pending_rows)

    forwarder = SparkForwarder(spark, fn, max_rows=200, max_interval=0.3)
    consumer = PushConsumer(
        group=group, namesrv=addr, consume_batch_size=16, concurrency=64, **FAST
    )
    consumer.subscribe(topic)
    consumer.register_listener(forwarder.listener)
    async with asyncio.timeout(120), forwarder, consumer:
        deadline = time.monotonic() + 60
        while sum(len(r) for _, r in batches) < len(ids):
            assert time.monotonic() < deadline, "not every message reached Spark"
            await asyncio.sleep(0.05)
    got = [i for _, rows in batches for i in rows]
    assert sorted(got) == sorted(ids)  # all of them, once
    assert [b for b, _ in batches] == list(range(len(batches)))
    assert all(len(rows) < 200 + 16 for _, rows in batches)
    # Backpressure: while fn runs, at most one more batch gathers (plus one handler call).
    assert max(held) < 200 + 16
    stats = forwarder.statistics()
    assert (stats.batches, stats.rows, stats.failed_batches) == (len(batches), len(ids), 0)
    # Everything was acknowledged after fn and the consumer persisted it on close.
    assert await _group_caught_up(addr, topic, group)


async def test_failed_batch_is_redelivered(spark: Any, broker_thread: BrokerThread) -> None:
    addr, topic, group = broker_thread.address, "FwdFail", "fwd-fail"
    ids = set(await aproduce(addr, topic, 300))
    ok: list[tuple[str, int]] = []
    failed: list[str] = []

    def fn(df: Any, batch_id: int) -> None:
        rows = [(r.msg_id, r.reconsume_times) for r in df.collect()]
        if batch_id == 0:
            failed.extend(i for i, _ in rows)
            raise RuntimeError("the sink is down")
        ok.extend(rows)

    forwarder = SparkForwarder(spark, fn, max_rows=100, max_interval=0.2)
    consumer = PushConsumer(group=group, namesrv=addr, consume_batch_size=10, **FAST)
    consumer.subscribe(topic)
    consumer.register_listener(forwarder.listener)
    async with asyncio.timeout(120), forwarder, consumer:
        deadline = time.monotonic() + 60
        while {i for i, _ in ok} != ids:
            assert time.monotonic() < deadline, "failed messages were not redelivered"
            await asyncio.sleep(0.05)
    assert failed
    retried = {i: r for i, r in ok if i in failed}
    assert set(retried) == set(failed)
    assert set(retried.values()) == {1}  # the second delivery, through %RETRY%<group>
    assert forwarder.statistics().failed_batches == 1


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    # A line cut by SIGKILL mid-write is incomplete; it cannot be a whole record.
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


def _spawn(addr: str, topic: str, group: str, out: Path, fn_sleep: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "--namesrv",
            addr,
            "--group",
            group,
            "--topic",
            topic,
            "--out",
            str(out),
            "--max-rows",
            "400",
            "--fn-sleep",
            str(fn_sleep),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline() if ready else ""
    if line.strip() != "READY":
        proc.kill()
        proc.wait(30)
        raise AssertionError(f"the forwarder process did not start: {line!r}")
    return proc


def test_killed_forwarder_loses_nothing_and_repeats_only_the_unacknowledged_batch(
    broker_thread: BrokerThread, tmp_path: Path
) -> None:
    reason = spark_missing()
    if reason is not None:
        pytest.skip(reason)
    addr, topic, group = broker_thread.address, "FwdKill", "fwd-kill"
    ids = set(produce(addr, topic, 4_000))
    first, second = tmp_path / "run1.jsonl", tmp_path / "run2.jsonl"

    # Run 1: each batch takes a second in fn; kill it inside the fourth batch.
    proc = _spawn(addr, topic, group, first, fn_sleep=1.0)
    try:
        wait_for_blocking(
            lambda: any(r["k"] == "start" and r["b"] >= 3 for r in _records(first)),
            timeout=90,
            what="the fourth batch of run 1",
        )
        time.sleep(0.4)  # inside fn; the previous batch's offsets are persisted by now
    finally:
        proc.send_signal(signal.SIGKILL)  # the crash under test (and clean-up on failure)
        proc.wait(30)
    run1 = _records(first)
    done = {r["b"] for r in run1 if r["k"] == "done"}
    in_flight = [r for r in run1 if r["k"] == "start" and r["b"] not in done]
    assert len(in_flight) == 1, "exactly one batch was being processed at the kill"
    unacknowledged = set(in_flight[0]["ids"])
    seen1 = [i for r in run1 if r["k"] == "start" for i in r["ids"]]

    # Run 2: the same group picks up from the broker's offsets.
    proc = _spawn(addr, topic, group, second, fn_sleep=0.0)
    try:
        wait_for_blocking(
            lambda: (
                set(seen1) | {i for r in _records(second) if r["k"] == "start" for i in r["ids"]}
                >= ids
            ),
            timeout=90,
            what="every message in Spark",
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    seen2 = [i for r in _records(second) if r["k"] == "start" for i in r["ids"]]

    assert set(seen1) | set(seen2) == ids  # no loss
    assert len(seen1) == len(set(seen1))
    assert len(seen2) == len(set(seen2))
    duplicates = set(seen1) & set(seen2)
    assert duplicates  # the batch in progress was not acknowledged: it comes again
    assert duplicates <= unacknowledged  # ... and nothing else does
    assert asyncio.run(_group_caught_up(addr, topic, group))


def test_forwarded_rows_have_the_source_columns(spark: Any) -> None:
    """The forwarder's DataFrame has the source's columns, one row per message."""
    from aiorocket import ReceivedMessage
    from aiorocket.integrations.spark import SCHEMA, arrow_table

    msgs = [
        ReceivedMessage.create(
            topic="T",
            body=b"x",
            tags="t",
            keys=["a", "b"],
            msg_id=f"id{i}",
            broker_name="broker-b",
            queue_id=3,
            queue_offset=i,
            born_timestamp=1_000,
            store_timestamp=2_000,
        )
        for i in range(3)
    ]
    df = spark.createDataFrame(arrow_table(msgs))
    assert df.schema == SCHEMA
    rows = df.collect()
    assert [(r.queue_offset, r.msg_id, r.keys, r.broker) for r in rows] == [
        (i, f"id{i}", ["a", "b"], "broker-b") for i in range(3)
    ]
    assert MessageQueue("T", rows[0].broker, rows[0].queue_id) == MessageQueue("T", "broker-b", 3)
