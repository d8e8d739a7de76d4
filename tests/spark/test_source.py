"""The ``rocketmq`` Spark source: streaming recovery, admission control, offset
ranges, timestamps, consumer-group commits. One local[2] SparkSession for the module; the
broker runs on its own thread."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from aiorocket import MessageQueue, SyncQueueReader
from tests._harness.wait import wait_for_blocking
from tests.spark._support import BrokerThread, produce, rocketmq_stream, spark_missing

pytestmark = pytest.mark.slow

if spark_missing() is None:
    from pyspark.sql import functions as F  # noqa: N812


def _batch(spark: Any, addr: str, topic: str, **options: str) -> Any:
    reader = spark.read.format("rocketmq").option("namesrv", addr).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _produce(addr: str, topic: str, n: int) -> tuple[list[MessageQueue], dict[MessageQueue, int]]:
    """Send ``n`` messages to ``topic``; its queues and their max offsets afterwards."""
    produce(addr, topic, n)
    with SyncQueueReader(namesrv=addr) as reader:
        mqs = reader.queues(topic)
        return mqs, reader.max_offsets(mqs)


def _offsets(spark_json: str) -> dict[MessageQueue, int]:
    out = {}
    for topic, queues in json.loads(spark_json).items():
        for key, off in queues.items():
            broker, _, qid = key.rpartition(":")
            out[MessageQueue(topic, broker, int(qid))] = off
    return out


def test_stream_restart_from_checkpoint_no_loss_no_duplicates(
    spark: Any, broker_thread: BrokerThread, tmp_path: Path
) -> None:
    """R17: 20k messages over 4 queues into a Parquet sink; the query is stopped mid-stream
    and restarted from its checkpoint."""
    addr = broker_thread.address
    topic = "SparkRestart"
    ids = produce(addr, topic, 12_000)
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")

    def start() -> Any:
        return (
            rocketmq_stream(
                spark, addr, topic, startingOffsets="earliest", maxOffsetsPerTrigger="2500"
            )
            .writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="100 milliseconds")
            .start()
        )

    query = start()
    wait_for_blocking(
        lambda: query.lastProgress is not None and query.lastProgress["batchId"] >= 2,
        timeout=60.0,
        what="two micro-batches",
    )
    query.stop()
    first_run = spark.read.parquet(out).count()
    assert 0 < first_run < 12_000  # stopped mid-stream

    ids += produce(addr, topic, 8_000, start=12_000)
    query = start()
    query.processAllAvailable()
    query.stop()

    rows = spark.read.parquet(out).select("msg_id", "queue_id", "queue_offset", "body")
    got = [r.msg_id for r in rows.select("msg_id").collect()]
    assert len(got) == 20_000
    assert len(set(got)) == 20_000  # no duplicates
    assert set(got) == set(ids)  # no loss
    per_queue = rows.groupBy("queue_id").agg(
        F.count("*").alias("n"),
        F.min("queue_offset").alias("lo"),
        F.max("queue_offset").alias("hi"),
    )
    for r in per_queue.collect():
        assert (r.lo, r.hi) == (0, r.n - 1)  # every offset of every queue, once


def test_max_offsets_per_trigger_bounds_micro_batches(
    spark: Any, broker_thread: BrokerThread, tmp_path: Path
) -> None:
    addr = broker_thread.address
    topic = "SparkLimit"
    produce(addr, topic, 5_000)
    sizes: dict[int, int] = {}

    def record(df: Any, batch_id: int) -> None:
        sizes[batch_id] = df.count()

    query = (
        rocketmq_stream(spark, addr, topic, startingOffsets="earliest", maxOffsetsPerTrigger="700")
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sum(sizes.values()) == 5_000
    assert max(sizes.values()) == 700
    assert all(n <= 700 for n in sizes.values())
    assert len(sizes) >= 5_000 // 700 + 1
    for p in query.recentProgress:
        assert p["numInputRows"] <= 700


def test_group_offsets_follow_committed_micro_batches(
    spark: Any, broker_thread: BrokerThread, tmp_path: Path
) -> None:
    """With ``group`` the broker's offsets for the group reach the end of the last committed
    micro-batch, and never run ahead of a batch still being processed."""
    addr = broker_thread.address
    topic, group = "SparkGroup", "spark-group"
    produce(addr, topic, 3_000)
    ahead: list[str] = []
    lock = threading.Lock()

    with SyncQueueReader(namesrv=addr) as reader:
        mqs = reader.queues(topic)

        def check(df: Any, batch_id: int) -> None:
            # While this batch runs, the group must not have passed its first rows.
            firsts = {
                r.queue_id: r.lo
                for r in df.groupBy("queue_id").agg(F.min("queue_offset").alias("lo")).collect()
            }
            with lock:
                for mq in mqs:
                    committed = reader.committed_offset(group, mq) or 0
                    if mq.queue_id in firsts and committed > firsts[mq.queue_id]:
                        ahead.append(f"batch {batch_id}: {mq} at {committed}")

        query = (
            rocketmq_stream(
                spark,
                addr,
                topic,
                startingOffsets="earliest",
                maxOffsetsPerTrigger="1000",
                group=group,
            )
            .writeStream.foreachBatch(check)
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(processingTime="100 milliseconds")
            .start()
        )
        try:
            query.processAllAvailable()
            end = _offsets(query.lastProgress["sources"][0]["endOffset"])
            assert sum(end.values()) == 3_000
            assert {mq: reader.committed_offset(group, mq) for mq in mqs} == end

            produce(addr, topic, 500, start=3_000)
            query.processAllAvailable()
            end = _offsets(query.lastProgress["sources"][0]["endOffset"])
            assert sum(end.values()) == 3_500
            wait_for_blocking(
                lambda: {mq: reader.committed_offset(group, mq) for mq in mqs} == end,
                timeout=10,
                what="group offsets at the last committed batch",
            )
        finally:
            query.stop()
    assert ahead == []


def test_batch_read_returns_exactly_the_range(spark: Any, broker_thread: BrokerThread) -> None:
    addr = broker_thread.address
    topic = "SparkRange"
    mqs, maxes = _produce(addr, topic, 2_000)
    starting = {topic: {f"{mq.broker_name}:{mq.queue_id}": 10 * mq.queue_id for mq in mqs}}
    ending = {topic: {f"{mq.broker_name}:{mq.queue_id}": maxes[mq] - 5 for mq in mqs}}
    options = {
        "startingOffsets": json.dumps(starting),
        "endingOffsets": json.dumps(ending),
        "maxOffsetsPerPartition": "100",
    }
    df = _batch(spark, addr, topic, **options)
    rows = sorted(
        (r.queue_id, r.queue_offset) for r in df.select("queue_id", "queue_offset").collect()
    )
    want = sorted((mq.queue_id, o) for mq in mqs for o in range(10 * mq.queue_id, maxes[mq] - 5))
    assert rows == want

    # Re-reading gives the same rows, through the Arrow path and through the row path.
    full = df.orderBy("queue_id", "queue_offset").collect()
    again = _batch(spark, addr, topic, **options).orderBy("queue_id", "queue_offset").collect()
    as_rows = (
        _batch(spark, addr, topic, useArrow="false", **options)
        .orderBy("queue_id", "queue_offset")
        .collect()
    )
    assert full == again == as_rows
    first = full[0]
    assert first.topic == topic
    assert first.broker == "broker-a"
    assert first.body == f"{topic}-{first.properties['seq']}".encode()
    assert first.keys == [f"k{first.properties['seq']}"]
    assert first.tags in ("a", "b")
    assert first.msg_id == first.properties["UNIQ_KEY"]
    assert first.reconsume_times == 0
    assert first.store_timestamp >= first.born_timestamp

    # Bare queue ids when the topic lives on one broker; tag filtering.
    only_q0 = _batch(
        spark,
        addr,
        topic,
        startingOffsets=json.dumps({topic: {"0": 0}}),
        endingOffsets=json.dumps({topic: {"0": 20, "1": 0, "2": 0, "3": 0}}),
        tags="a",
    )
    got = only_q0.select("queue_id", "queue_offset", "tags").collect()
    assert {r.queue_id for r in got} == {0}
    assert all(r.tags == "a" for r in got)
    assert 0 < len(got) <= 20


def test_starting_offsets_by_timestamp(
    spark: Any, broker_thread: BrokerThread, tmp_path: Path
) -> None:
    addr = broker_thread.address
    topic = "SparkTime"
    early = set(produce(addr, topic, 1_000))
    with SyncQueueReader(namesrv=addr) as reader:
        mqs = reader.queues(topic)
        newest = max(
            m.store_timestamp for mq in mqs for m in reader.read_range(mq, 0, reader.max_offset(mq))
        )
    wait_for_blocking(
        lambda: __import__("time").time() * 1000 > newest + 5,
        timeout=60.0,
        what="the clock to move",
    )
    late = set(produce(addr, topic, 1_000, start=1_000))
    with SyncQueueReader(namesrv=addr) as reader:
        cut = min(
            m.store_timestamp
            for mq in mqs
            for m in reader.read_range(mq, 0, reader.max_offset(mq))
            if m.msg_id in late
        )
    assert cut > newest

    batch_after = _batch(spark, addr, topic, startingOffsets=str(cut))
    assert {r.msg_id for r in batch_after.select("msg_id").collect()} == late
    batch_before = _batch(spark, addr, topic, endingOffsets=str(cut))
    assert {r.msg_id for r in batch_before.select("msg_id").collect()} == early

    seen: list[str] = []

    def record(df: Any, batch_id: int) -> None:
        seen.extend(r.msg_id for r in df.select("msg_id").collect())

    query = (
        rocketmq_stream(spark, addr, topic, startingOffsets=str(cut))
        .writeStream.foreachBatch(record)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert sorted(seen) == sorted(late)


def test_fail_on_data_loss(spark: Any, broker_thread: BrokerThread) -> None:
    addr = broker_thread.address
    topic = "SparkLoss"
    mqs, maxes = _produce(addr, topic, 40)
    beyond = json.dumps({topic: {f"broker-a:{mq.queue_id}": maxes[mq] + 10 for mq in mqs}})
    with pytest.raises(Exception, match="data loss"):
        _batch(spark, addr, topic, endingOffsets=beyond).count()
    assert _batch(spark, addr, topic, endingOffsets=beyond, failOnDataLoss="false").count() == 40


def test_options_are_checked(spark: Any, broker_thread: BrokerThread) -> None:
    addr = broker_thread.address
    with pytest.raises(Exception, match="namesrv"):
        spark.read.format("rocketmq").option("topic", "X").load().count()
    with pytest.raises(Exception, match="startingOffsets"):
        _batch(spark, addr, "X", startingOffsets="yesterday").count()
    # A stream's options are checked when the query starts running: the query fails.
    query = (
        rocketmq_stream(spark, addr, "X", maxOffsetsPerTrigger="0")
        .writeStream.format("noop")
        .start()
    )
    try:
        with pytest.raises(Exception, match="maxOffsetsPerTrigger"):
            query.awaitTermination(60)
    finally:
        query.stop()
