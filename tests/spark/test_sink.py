"""The ``rocketmq`` Spark sink: batch and streaming writes read back with aiorocket, per-key
order, idempotent ids, and input errors raised before anything is sent. One local[2]
SparkSession for the module; the embedded broker runs on its own thread."""

from __future__ import annotations

import datetime
import pickle
from pathlib import Path
from typing import Any

import pytest

from tests.spark._support import (
    BrokerThread,
    produce,
    read_all,
    rocketmq_stream,
    spark_missing,
    stored,
)

pytestmark = pytest.mark.slow

if spark_missing() is None:
    import pyarrow as pa
    from pyspark.sql import functions as F  # noqa: N812
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    from aiorocket.integrations.spark.outgoing import Layout
    from aiorocket.integrations.spark.sink import RocketMQBatchWriter, SinkOptions

    ROW_SCHEMA = StructType(
        [
            StructField("body", BinaryType()),
            StructField("keys", ArrayType(StringType())),
            StructField("tags", StringType()),
            StructField("properties", MapType(StringType(), StringType())),
        ]
    )


def _rows(n: int) -> list[tuple[Any, ...]]:
    return [
        (f"m-{i}".encode(), [f"k{i}", f"g{i % 7}"], f"t{i % 3}", {"seq": str(i), "p": "v"})
        for i in range(n)
    ]


def _write(df: Any, addr: str, **options: str) -> None:
    w = df.write.format("rocketmq").mode("append").option("namesrv", addr)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def test_batch_write_keeps_body_keys_tags_properties(
    spark: Any, broker_thread: BrokerThread
) -> None:
    addr = broker_thread.address
    topic = "SinkBatch"
    n = 3_000
    df = spark.createDataFrame(_rows(n), ROW_SCHEMA).repartition(3)
    _write(df, addr, topic=topic)
    got = read_all(addr, topic)
    assert len(got) == n
    by_body = {m.body: m for m in got}
    assert len(by_body) == n  # every row once
    for i in range(n):
        m = by_body[f"m-{i}".encode()]
        assert m.keys == [f"k{i}", f"g{i % 7}"]
        assert m.tags == f"t{i % 3}"
        assert m.properties["seq"] == str(i)
        assert m.properties["p"] == "v"
    assert len({m.msg_id for m in got}) == n


def test_topic_column_string_body_and_string_keys(spark: Any, broker_thread: BrokerThread) -> None:
    """A ``topic`` column routes each row; a null topic falls back to the option; string
    bodies are sent as UTF-8, string keys split on spaces (as ``KEYS`` travels)."""
    addr = broker_thread.address
    rows = [("SinkRouteA" if i % 2 else None, f"é-{i}", f"a{i} b{i}") for i in range(200)]
    df = spark.createDataFrame(rows, "topic string, body string, keys string")
    _write(df, addr, topic="SinkRouteB")
    a, b = read_all(addr, "SinkRouteA"), read_all(addr, "SinkRouteB")
    assert sorted(m.body.decode() for m in a) == sorted(f"é-{i}" for i in range(1, 200, 2))
    assert sorted(m.body.decode() for m in b) == sorted(f"é-{i}" for i in range(0, 200, 2))
    for m in a + b:
        i = m.body.decode().split("-")[1]
        assert m.keys == [f"a{i}", f"b{i}"]


def test_sharding_keys_keep_per_key_order(spark: Any, broker_thread: BrokerThread) -> None:
    """Pipelined sends (64 in flight) of one partition: messages of one key stay in the
    order of the rows, and each key keeps one queue."""
    addr = broker_thread.address
    topic = "SinkOrdered"
    n = 4_000
    rows = [(f"{i % 5}", i, f"body-{i}") for i in range(n)]
    df = (
        spark.createDataFrame(rows, "sharding_key string, seq int, body string")
        .coalesce(1)
        .sortWithinPartitions("seq")
    )
    _write(df, addr, topic=topic, maxInFlight="64")
    got = read_all(addr, topic)
    assert len(got) == n
    seen: dict[str, list[int]] = {}
    queues: dict[str, set[int]] = {}
    for m in got:
        key = m.properties["__SHARDINGKEY"]
        seen.setdefault(key, []).append(int(m.body.decode().split("-")[1]))
        queues.setdefault(key, set()).add(m.queue_id)
    assert set(seen) == {str(k) for k in range(5)}
    for key, seqs in seen.items():
        assert seqs == sorted(seqs), f"key {key} out of order"
        assert len(queues[key]) == 1


def test_stream_from_source_to_sink(
    spark: Any, broker_thread: BrokerThread, tmp_path: Path
) -> None:
    """The source's rows (minus their topic) written by a streaming query: bodies, keys,
    tags and user properties intact; the source's system properties are not copied."""
    addr = broker_thread.address
    src, dst = "SinkStreamIn", "SinkStreamOut"
    ids = produce(addr, src, 2_500)
    query = (
        rocketmq_stream(spark, addr, src, startingOffsets="earliest", maxOffsetsPerTrigger="1000")
        .select("body", "keys", "tags", "properties")
        .writeStream.format("rocketmq")
        .option("namesrv", addr)
        .option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    got = read_all(addr, dst)
    assert len(got) == 2_500
    by_body = {m.body: m for m in got}
    for i in range(2_500):
        m = by_body[f"{src}-{i}".encode()]
        assert m.keys == [f"k{i}"]
        assert m.tags == ("a", "b")[i % 2]
        assert m.properties["seq"] == str(i)
    # new messages: fresh ids, not the source's
    assert not {m.msg_id for m in got} & set(ids)


def test_stream_idempotent_keys_follow_query_and_batch(
    spark: Any, broker_thread: BrokerThread, tmp_path: Path
) -> None:
    """``idempotentKeys``: each message's msg_id is also one of its keys, unique per row."""
    addr = broker_thread.address
    dst = "SinkStreamIds"
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "500")
        .load()
        .select(F.col("value").cast("string").alias("body"))
        .writeStream.format("rocketmq")
        .option("namesrv", addr)
        .option("topic", dst)
        .option("idempotentKeys", "true")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        from tests._harness.wait import wait_for_blocking

        wait_for_blocking(lambda: stored(addr, dst) >= 500, timeout=60, what="500 messages")
    finally:
        query.stop()
    got = read_all(addr, dst)
    assert len({m.msg_id for m in got}) == len(got)
    for m in got:
        assert len(m.msg_id) == 32
        assert m.keys[-1] == m.msg_id
        assert m.properties["UNIQ_KEY"] == m.msg_id


def test_batch_retry_resends_with_the_same_ids(broker_thread: BrokerThread) -> None:
    """A retried task (the same pickled writer and partition) sends its rows again with the
    ids of the first attempt; another write gets other ids."""
    addr = broker_thread.address
    topic = "SinkRetryIds"
    opts = SinkOptions.parse({"namesrv": addr, "topic": topic, "idempotentKeys": "true"})
    layout = Layout.of(ROW_SCHEMA, opts.topic)
    writer = RocketMQBatchWriter(opts, layout)
    batch = pa.RecordBatch.from_pylist(
        [
            {"body": f"r{i}".encode(), "keys": None, "tags": None, "properties": None}
            for i in range(50)
        ]
    )
    pickle.loads(pickle.dumps(writer)).write(iter([batch]))
    pickle.loads(pickle.dumps(writer)).write(iter([batch]))  # the "retry"
    RocketMQBatchWriter(opts, layout).write(iter([batch]))  # another write
    got = read_all(addr, topic)
    assert len(got) == 150
    ids: dict[bytes, list[str]] = {}
    for m in got:
        ids.setdefault(m.body, []).append(m.msg_id)
    for body, seen in ids.items():
        assert len(seen) == 3
        assert len(set(seen)) == 2, body  # the retry repeats the first attempt's id


def _error(spark: Any, df: Any, addr: str, **options: str) -> str:
    with pytest.raises(Exception) as info:
        _write(df, addr, **options)
    return str(info.value)


def test_bad_input_fails_before_sending(spark: Any, broker_thread: BrokerThread) -> None:
    addr = broker_thread.address
    topic = "SinkBad"
    good = [(f"ok-{i}", "SinkBad") for i in range(20)]

    # a null body at row 20 of the only partition: nothing of the partition is sent
    df = spark.createDataFrame([*good, (None, "SinkBad")], "body string, topic string").coalesce(1)
    msg = _error(spark, df, addr)
    assert "row 20" in msg
    assert "column body" in msg
    assert "null" in msg
    assert stored(addr, topic) == 0

    df = spark.createDataFrame([*good, ("x" * 2000, "SinkBad")], "body string, topic string")
    msg = _error(spark, df.coalesce(1), addr, maxMessageSize="1024")
    assert "row 20" in msg
    assert "column body" in msg
    assert "2000 bytes" in msg
    assert stored(addr, topic) == 0

    df = spark.createDataFrame([*good, ("x", "bad topic!")], "body string, topic string")
    msg = _error(spark, df.coalesce(1), addr)
    assert "row 20" in msg
    assert "column topic" in msg
    assert "bad topic!" in msg
    assert stored(addr, topic) == 0

    # checked on the driver: no body column, a column of the wrong type, no topic at all
    msg = _error(spark, spark.createDataFrame([("a",)], "value string"), addr, topic=topic)
    assert "needs a body column" in msg
    msg = _error(
        spark, spark.createDataFrame([("a", 1)], "body string, tags int"), addr, topic=topic
    )
    assert "column tags is int" in msg
    msg = _error(spark, spark.createDataFrame([("a",)], "body string"), addr)
    assert 'option("topic"' in msg


def test_overwrite_is_refused(spark: Any, broker_thread: BrokerThread) -> None:
    df = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception, match="only appends"):
        (
            df.write.format("rocketmq")
            .mode("overwrite")
            .option("namesrv", broker_thread.address)
            .option("topic", "SinkOverwrite")
            .save()
        )


def test_timer_and_delay_columns(spark: Any, broker_thread: BrokerThread) -> None:
    """``delay_level`` travels as DELAY; ``deliver_at`` as TIMER_DELIVER_MS (the embedded
    broker speaks 5.x)."""
    addr = broker_thread.address
    topic = "SinkTimers"
    at = datetime.datetime.now(datetime.UTC) + datetime.timedelta(milliseconds=300)
    df = spark.createDataFrame(
        [("d", 1, None), ("t", None, at)], "body string, delay_level int, deliver_at timestamp"
    )
    _write(df, addr, topic=topic)
    from tests._harness.wait import wait_for_blocking

    wait_for_blocking(lambda: stored(addr, topic) == 2, timeout=30, what="both delivered")
    got = {m.body: m for m in read_all(addr, topic)}
    micros = (at - datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)) // datetime.timedelta(
        microseconds=1
    )
    # the producer rounds up to the millisecond: never before the asked instant
    assert got[b"t"].properties["TIMER_DELIVER_MS"] == str(-(-micros // 1000))
    assert got[b"d"].properties.get("DELAY") == "1"


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("keys", ["ok", "two words"], "non-empty without spaces"),
        ("keys", ["ok", ""], "non-empty without spaces"),
        ("tags", "a||b", "contain no '||'"),
        ("properties", [("k", "v\x01")], "without \\x01 or \\x02"),
    ],
)
def test_row_errors_name_row_and_column(column: str, value: Any, problem: str) -> None:
    """Checked without Spark: the third row is bad; the error names it and its column."""
    if spark_missing() is not None:
        pytest.skip(str(spark_missing()))
    from aiorocket.integrations.spark.outgoing import SinkInputError, messages

    rows: list[dict[str, Any]] = [
        {"body": b"b", "keys": ["k"], "tags": "t", "properties": [("p", "v")]} for _ in range(3)
    ]
    rows[2][column] = value
    batch = pa.RecordBatch.from_pylist(
        rows,
        schema=pa.schema(
            [
                ("body", pa.binary()),
                ("keys", pa.list_(pa.string())),
                ("tags", pa.string()),
                ("properties", pa.map_(pa.string(), pa.string())),
            ]
        ),
    )
    layout = Layout.of(ROW_SCHEMA, "T")
    with pytest.raises(SinkInputError) as info:
        messages([batch], layout, partition=7, max_size=1024, scope=None)
    assert f"partition 7, row 2: column {column}" in str(info.value)
    assert problem in str(info.value)


def test_system_properties_are_dropped_and_ids_set() -> None:
    if spark_missing() is not None:
        pytest.skip(str(spark_missing()))
    from aiorocket.integrations.spark.outgoing import message_id, messages

    batch = pa.RecordBatch.from_pylist(
        [{"body": b"b", "properties": [("UNIQ_KEY", "X"), ("KEYS", "a"), ("mine", "1")]}],
        schema=pa.schema(
            [("body", pa.binary()), ("properties", pa.map_(pa.string(), pa.string()))]
        ),
    )
    layout = Layout(frozenset({"body", "properties"}), "T")
    (plain,) = messages([batch], layout, partition=0, max_size=1024, scope=None)
    assert dict(plain.message.properties) == {"mine": "1"}
    (keyed,) = messages([batch], layout, partition=3, max_size=1024, scope="s")
    uid = message_id("s", 3, 0)
    assert keyed.message.properties["UNIQ_KEY"] == uid
    assert keyed.message.keys == (uid,)
    assert uid != message_id("s", 3, 1) != message_id("s", 4, 0)
