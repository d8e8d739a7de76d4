"""The ``rocketmq`` sink's exactly-once mode in a local[2] session on the embedded broker:
batch and streaming writes read back once each, a batch write whose driver (and coordinator)
died between the tasks and the commit leaves nothing visible and runs again once, a
micro-batch replayed after the driver's commit (Spark's commit log lost) is not delivered
twice, and what exactly-once refuses on the driver."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiorocket import ReceivedMessage, SyncQueueReader
from aiorocket.embedded import BrokerConfig
from tests._harness.broker import FAST_DELAYS
from tests._harness.wait import wait_for_blocking
from tests.spark._support import BrokerThread, produce, rocketmq_stream, spark_missing

pytestmark = pytest.mark.slow

if spark_missing() is None:
    from pyspark.sql import functions as F  # noqa: N812

    from aiorocket.integrations.spark.coordinator import coordinator_alive, stop
    from aiorocket.integrations.spark.sink import writer_for
    from aiorocket.integrations.spark.txlog import TxRecord

#: checks every 2 s once a half message is 1 s old (15 checks: 30 s before a discard)
TX_BROKER = BrokerConfig(
    default_queues=4,
    delay_levels=FAST_DELAYS,
    transaction_check_interval=2.0,
    transaction_timeout=1.0,
)
#: generous timeouts: the suite shares two cores with Spark's JVM and workers
SLOW_CLIENT = {"sendTimeout": "30", "requestTimeout": "20"}


@pytest.fixture(scope="module")
def broker_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    bt = BrokerThread(tmp_path_factory.mktemp("broker"), TX_BROKER)
    yield bt
    bt.close()


@pytest.fixture
def txlog(tmp_path: Path) -> Iterator[Path]:
    """A decision record's directory; its coordinator is stopped (by its pid) afterwards."""
    path = tmp_path / "txlog"
    yield path
    stop(path)
    assert not coordinator_alive(path)


def read_all(addr: str, topic: str) -> list[ReceivedMessage]:
    out: list[ReceivedMessage] = []
    with SyncQueueReader(namesrv=addr) as reader:
        try:
            queues = reader.queues(topic)
        except Exception:
            return out
        for mq in queues:
            out.extend(reader.read_range(mq, 0, reader.max_offset(mq)))
    return out


def bodies(addr: str, topic: str) -> Counter[bytes]:
    return Counter(m.body for m in read_all(addr, topic))


def unresolved(bt: BrokerThread) -> int:
    async def count() -> int:
        return bt.broker.transactions.unresolved()

    return bt.run(count())


def _write(df: Any, addr: str, **options: str) -> None:
    w = df.write.format("rocketmq").mode("append").option("namesrv", addr)
    for k, v in {**SLOW_CLIENT, **options}.items():
        w = w.option(k, v)
    w.save()


def test_batch_write_delivers_each_row_once(
    spark: Any, broker_thread: BrokerThread, txlog: Path
) -> None:
    addr = broker_thread.address
    topic = "EoBatch"
    n = 3_000
    df = spark.range(n, numPartitions=3).select(
        F.concat(F.lit("row-"), F.col("id").cast("string")).alias("body"),
        F.lit("t").alias("tags"),
    )
    _write(df, addr, topic=topic, exactlyOnce="true", transactionLog=str(txlog))
    got = read_all(addr, topic)
    assert Counter(m.body for m in got) == Counter(f"row-{i}".encode() for i in range(n))
    assert {m.tags for m in got} == {"t"}
    # each carries the tag of the half message it was (write, run, partition, attempt)
    assert all(m.properties["SPARK_TXN"].startswith("write.") for m in got)
    record = TxRecord(txlog)
    (key,) = record.decision_keys()
    wait_for_blocking(
        lambda: (record.reported(key) or {}).get("complete"), timeout=120, what="complete"
    )
    decision = record.decision(key)
    assert decision is not None
    assert decision.complete
    assert sorted(decision.chosen) == [0, 1, 2]


def test_batch_write_killed_before_its_commit_leaves_nothing_and_runs_again_once(
    spark: Any, broker_thread: BrokerThread, txlog: Path
) -> None:
    """The tasks of a write stored their rows; the driver died before its commit, and the
    coordinator with it (SIGKILL). Once the broker checks those half messages (older than
    their write's transactionTimeout, 20 s), the coordinator the rerun starts rolls them
    back: nothing of the first run is ever visible, and the rerun delivers every row once."""
    addr = broker_thread.address
    topic = "EoKilled"
    rows = [(f"k-{i}",) for i in range(400)]
    options = {
        "namesrv": addr,
        "topic": topic,
        "exactlyOnce": "true",
        "transactionLog": str(txlog),
        "transactionTimeout": "20",
        **SLOW_CLIENT,
    }
    df = spark.createDataFrame(rows, "body string")
    writer = writer_for(options, df.schema, streaming=False)
    # The first run's tasks, as Spark would run them (no commit follows).
    import pyarrow as pa

    batch = pa.RecordBatch.from_pylist([{"body": r[0]} for r in rows])
    report = writer.write(iter([batch]))
    assert report.messages == 400
    assert report.halves is not None
    pid = int((txlog / "coordinator.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    wait_for_blocking(lambda: not coordinator_alive(txlog), timeout=30, what="coordinator dead")
    assert bodies(addr, topic) == Counter()

    _write(df, addr, topic=topic, exactlyOnce="true", transactionLog=str(txlog))
    record = TxRecord(txlog)
    assert report.key is not None
    assert report.run is not None
    wait_for_blocking(
        lambda: record.is_expired(report.key or "", report.run or ""),
        timeout=120,
        what="the first run rolled back",
    )
    wait_for_blocking(lambda: unresolved(broker_thread) == 0, timeout=120, what="all resolved")
    assert bodies(addr, topic) == Counter(r[0].encode() for r in rows)


def test_streaming_replayed_batch_is_not_delivered_twice(
    spark: Any, broker_thread: BrokerThread, tmp_path: Path
) -> None:
    """rocketmq -> rocketmq with exactlyOnce; then Spark's commit of the last micro-batch is
    lost (the driver died after the sink's commit) and the restarted query replays it: the
    record keeps the first decision, the replay's rows are rolled back."""
    addr = broker_thread.address
    src, dst = "EoStreamIn", "EoStreamOut"
    n = 3_000
    produce(addr, src, n)
    cp = tmp_path / "cp"

    def run_query() -> None:
        query = (
            rocketmq_stream(
                spark, addr, src, startingOffsets="earliest", maxOffsetsPerTrigger="1000"
            )
            .select(F.upper(F.col("body").cast("string")).alias("body"))
            .writeStream.format("rocketmq")
            .option("namesrv", addr)
            .option("topic", dst)
            .option("exactlyOnce", "true")
            .option("sendTimeout", "30")
            .option("requestTimeout", "20")
            .option("checkpointLocation", str(cp))
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(300)
        assert query.exception() is None

    record_dir = cp / "rocketmq-sink"
    try:
        run_query()
        expected = Counter(f"{src}-{i}".upper().encode() for i in range(n))
        assert bodies(addr, dst) == expected
        record = TxRecord(record_dir)
        keys = sorted(record.decision_keys(), key=lambda k: int(k.rpartition(".")[2]))
        assert len(keys) >= 3
        # Spark's commit of the last micro-batch is lost: it is replayed by a new run.
        last = keys[-1].rpartition(".")[2]
        (cp / "commits" / last).unlink()
        (cp / "commits" / f".{last}.crc").unlink(missing_ok=True)
        run_query()
        wait_for_blocking(lambda: unresolved(broker_thread) == 0, timeout=120, what="resolved")
        assert bodies(addr, dst) == expected
        assert sorted(record.decision_keys()) == sorted(keys)  # no new decision
    finally:
        stop(record_dir)


def test_exactly_once_refusals(spark: Any, broker_thread: BrokerThread, tmp_path: Path) -> None:
    addr = broker_thread.address
    df = spark.createDataFrame([("a", "k")], "body string, sharding_key string")
    with pytest.raises(Exception, match="cannot have sharding_key"):
        _write(df, addr, topic="EoNo", exactlyOnce="true", transactionLog=str(tmp_path / "t"))
    plain = spark.createDataFrame([("a",)], "body string")
    with pytest.raises(Exception, match="transactionLog"):
        _write(plain, addr, topic="EoNo", exactlyOnce="true")
    with pytest.raises(Exception, match="local file system"):
        _write(plain, addr, topic="EoNo", exactlyOnce="true", transactionLog="hdfs://nn/x")
    assert bodies(addr, "EoNo") == Counter()
