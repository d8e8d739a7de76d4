"""The ``rocketmq`` Spark sink against the real Apache RocketMQ broker: 100,000 rows written
by a batch write, and the same rows written again by a streaming query (the ``rocketmq``
source reading the first topic), each topic read back by aiorocket and by the Java 4.9.8 push
consumer (``JClient push``): bodies, keys, tags and properties intact, every row once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from aiorocket import SyncQueueReader
from tests.interop.apache._groups import create_topic, wait_route
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name
from tests.spark._support import rocketmq_stream

pytestmark = [pytest.mark.slow, pytest.mark.spark]

N = 100_000
QUEUES = 4
#: Java clients boot in seconds on an idle machine, much slower under load
JAVA_TIMEOUT = 180.0


def _expected(i: int) -> tuple[str, list[str], str, dict[str, str]]:
    return (
        f"spark-{i}-Gr\u00fc\u00dfe-\u2713",
        [f"k{i}", f"kb{i}"],
        f"t{i % 3}",
        {"idx": str(i), "uni": f"\u017elu\u0165ou\u010dk\u00fd k\u016f\u0148 \u2713 {i}"},
    )


def _rows(spark: Any) -> Any:
    from pyspark.sql import functions as F  # noqa: N812

    i = F.col("id").cast("string")
    return spark.range(N, numPartitions=4).select(
        F.concat(F.lit("spark-"), i, F.lit("-Gr\u00fc\u00dfe-\u2713")).cast("binary").alias("body"),
        F.array(F.concat(F.lit("k"), i), F.concat(F.lit("kb"), i)).alias("keys"),
        F.concat(F.lit("t"), (F.col("id") % 3).cast("string")).alias("tags"),
        F.create_map(
            F.lit("idx"),
            i,
            F.lit("uni"),
            F.concat(F.lit("\u017elu\u0165ou\u010dk\u00fd k\u016f\u0148 \u2713 "), i),
        ).alias("properties"),
    )


def _check_aiorocket(ns: str, topic: str) -> None:
    seen: set[int] = set()
    with SyncQueueReader(namesrv=ns) as reader:
        for mq in reader.queues(topic):
            for m in reader.read_range(mq, 0, reader.max_offset(mq)):
                i = int(m.properties["idx"])
                body, keys, tags, props = _expected(i)
                assert m.body.decode() == body
                assert m.keys == keys
                assert m.tags == tags
                assert {k: m.properties[k] for k in props} == props
                assert i not in seen
                seen.add(i)
    assert len(seen) == N


async def _check_java(java_classes: Path, ns: str, topic: str, tmp: Path) -> None:
    client = await JavaClient.start(
        java_classes, "JClient", "push", ns, topic, unique_name("jsink"), "concurrent", tmp=tmp
    )
    try:
        await client.wait_until(
            lambda c: len(c.of("msg")) >= N, JAVA_TIMEOUT, f"{N} messages of {topic}"
        )
    finally:
        await client.stop()
    msgs = client.of("msg")
    idx = [int(e["idx"]) for e in msgs]
    assert sorted(idx) == list(range(N))
    for e in msgs:
        body, keys, tags, props = _expected(int(e["idx"]))
        assert e["body"] == body
        assert e["keys"] == " ".join(keys)
        assert e["tags"] == tags
        assert e["uni"] == props["uni"]


def test_batch_and_streaming_writes_read_by_aiorocket_and_java(
    java_cluster: JavaCluster, java_classes: Path, spark: Any, tmp_path: Path
) -> None:
    ns = java_cluster.namesrv
    batch_topic, stream_topic = unique_name("SparkSinkB"), unique_name("SparkSinkS")

    async def topics() -> None:
        for topic in (batch_topic, stream_topic):
            await create_topic([java_cluster.broker_addr("broker-a")], topic, QUEUES)
            await wait_route(ns, topic, QUEUES)

    asyncio.run(topics())

    # 30 s per send rather than 3: one failed send fails the write (a local session does not
    # retry tasks), and a loaded CI machine can hold a Java broker's answer for seconds.
    (
        _rows(spark)
        .write.format("rocketmq")
        .mode("append")
        .option("namesrv", ns)
        .option("topic", batch_topic)
        .option("sendTimeout", "30")
        .save()
    )
    _check_aiorocket(ns, batch_topic)

    query = (
        rocketmq_stream(
            spark, ns, batch_topic, startingOffsets="earliest", maxOffsetsPerTrigger="25000"
        )
        .select("body", "keys", "tags", "properties")
        .writeStream.format("rocketmq")
        .option("namesrv", ns)
        .option("topic", stream_topic)
        .option("sendTimeout", "30")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    assert query.exception() is None
    _check_aiorocket(ns, stream_topic)

    asyncio.run(_check_java(java_classes, ns, batch_topic, tmp_path / "java-b"))
    asyncio.run(_check_java(java_classes, ns, stream_topic, tmp_path / "java-s"))
