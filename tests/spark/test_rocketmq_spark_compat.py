"""A job written for Apache rocketmq-spark (its option names, offsets JSON and row schema)
runs with only its format name changed to ``rocketmq``: a batch read of a range, a transform,
a batch write (plus ``mode("append")``, which Spark 4 requires of every Python data source),
and the same as a streaming query, on the embedded broker in local[2]."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aiorocket import SyncQueueReader
from tests.spark._support import BrokerThread, produce, spark_missing

pytestmark = pytest.mark.slow

if spark_missing() is None:
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from aiorocket.errors import ConfigurationError
    from aiorocket.integrations.spark.compat import flat_offsets, normalize

#: rocketmq-spark's RocketMQSource.schema, field by field
ITS_SCHEMA = (
    StructType(
        [
            StructField("topic", StringType()),
            StructField("flag", IntegerType()),
            StructField("body", BinaryType()),
            StructField("properties", StringType()),
            StructField("brokerName", StringType()),
            StructField("queueId", IntegerType()),
            StructField("queueOffset", LongType()),
            StructField("bornTimestamp", TimestampType()),
            StructField("storeTimestamp", TimestampType()),
        ]
    )
    if spark_missing() is None
    else None
)

FORMAT = "rocketmq"  # the job's only change: "org.apache.spark.sql.rocketmq.RocketMQSourceProvider"


def stored(addr: str, topic: str) -> list[Any]:
    with SyncQueueReader(namesrv=addr) as reader:
        return [
            m
            for mq in reader.queues(topic)
            for m in reader.read_range(mq, 0, reader.max_offset(mq))
        ]


def rocketmq_spark_batch_job(spark: Any, ns: str, src: str, dst: str, ending: str) -> list[Any]:
    """What a rocketmq-spark user wrote (Spark 2 style), format name aside."""
    df = (
        spark.read.format(FORMAT)
        .option("nameServer", ns)
        .option("topic", src)
        .option("subExpression", "a")
        .option("startingOffsets", "earliest")
        .option("endingOffsets", ending)
        .option("failOnDataLoss", "true")
        .option("pullTimeoutMs", "5000")
        .option("pullBatchSize", "32")
        .load()
    )
    rows: list[Any] = df.collect()
    out = df.selectExpr("topic", "CAST(body AS STRING) AS body", "'copied' AS tags")
    # rocketmq-spark's sink: the topic option wins over the rows' topic column. (Spark 4
    # refuses the default save mode, ErrorIfExists, for every Python data source: a batch
    # write needs mode("append"), the one change besides the format name.)
    out.write.format(FORMAT).mode("append").option("nameServer", ns).option("topic", dst).save()
    return rows


def test_batch_job_written_for_rocketmq_spark(spark: Any, broker_thread: BrokerThread) -> None:
    ns = broker_thread.address
    src, dst = "CompatIn", "CompatOut"
    produce(ns, src, 200)  # tags a/b alternate, keys k<i>, property seq
    with SyncQueueReader(namesrv=ns) as reader:
        mqs = reader.queues(src)
        ends = reader.max_offsets(mqs)
    # rocketmq-spark's JSON: queue ids per broker, every queue named
    per_broker: dict[str, dict[str, int]] = {}
    for mq in mqs:
        per_broker.setdefault(mq.broker_name, {})[str(mq.queue_id)] = ends[mq]
    ending = json.dumps({src: per_broker})
    rows = rocketmq_spark_batch_job(spark, ns, src, dst, ending)

    df = spark.read.format(FORMAT).option("nameServer", ns).option("topic", src).load()
    assert df.schema == ITS_SCHEMA
    assert len(rows) == 100  # subExpression "a": every other message
    seen = set()
    for r in rows:
        i = int(bytes(r.body).decode().rpartition("-")[2])
        seen.add(i)
        props = json.loads(r.properties)
        assert props["TAGS"] == "a"
        assert props["KEYS"] == f"k{i}"
        assert props["seq"] == str(i)
        assert "UNIQ_KEY" in props
        assert r.topic == src
        assert r.flag == 0
        assert r.brokerName == mqs[0].broker_name
        assert 0 <= r.queueId < len(mqs)
        assert r.queueOffset >= 0
        assert r.storeTimestamp >= r.bornTimestamp
    assert seen == set(range(0, 200, 2))
    got = stored(ns, dst)
    assert sorted(m.body.decode() for m in got) == sorted(f"{src}-{i}" for i in seen)
    assert {m.tags for m in got} == {"copied"}


def test_streaming_job_written_for_rocketmq_spark(
    spark: Any, broker_thread: BrokerThread, tmp_path: Path
) -> None:
    ns = broker_thread.address
    src, dst = "CompatStreamIn", "CompatStreamOut"
    produce(ns, src, 300)
    query = (
        spark.readStream.format(FORMAT)
        .option("nameServer", ns)
        .option("topic", src)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("CAST(body AS STRING) AS body", "topic")
        .writeStream.format(FORMAT)
        .option("nameServer", ns)
        .option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(180)
    assert query.exception() is None
    assert sorted(m.body.decode() for m in stored(ns, dst)) == sorted(
        f"{src}-{i}" for i in range(300)
    )


def test_option_aliases_and_offsets_json() -> None:
    if spark_missing() is not None:
        pytest.skip(str(spark_missing()))
    opts = normalize(
        {
            "nameServer": "h:1",
            "subExpression": "a || b",
            "pullTimeoutMs": "2500",
            "pullBatchSize": "16",
        }
    )
    assert opts == {
        "namesrv": "h:1",
        "tags": "a || b",
        "requesttimeout": "2.5",
        "schema": "rocketmq-spark",
    }
    assert normalize({"namesrv": "h:1"})["schema"] == "aiorocket"
    assert normalize({"nameServer": "h:1", "schema": "aiorocket"})["schema"] == "aiorocket"
    with pytest.raises(ConfigurationError, match="differ"):
        normalize({"nameServer": "h:1", "namesrv": "h:2"})
    with pytest.raises(ConfigurationError, match="pullBatchSize"):
        normalize({"nameServer": "h:1", "pullBatchSize": "0"})
    with pytest.raises(ConfigurationError, match="schema"):
        normalize({"namesrv": "h:1", "schema": "kafka"})
    nested = '{"t": {"broker-a": {"0": 23, "1": -1}, "broker-b": {"0": -2}}}'
    assert json.loads(flat_offsets(nested)) == {
        "t": {"broker-a:0": 23, "broker-a:1": -1, "broker-b:0": -2}
    }
    flat = '{"t": {"broker-a:0": 5}}'
    assert flat_offsets(flat) == flat
    assert flat_offsets("latest") == "latest"
