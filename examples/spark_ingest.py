"""Stream a RocketMQ topic into Parquet with Spark Structured Streaming.

    python -m examples.spark_ingest [--messages 10000] [--out DIR] [--namesrv HOST:PORT]

Without ``--namesrv`` an embedded broker runs in this process (on a thread of its own, since
Spark calls block), keeping its data under ``DIR/broker``. The example sends ``--messages``
orders, then runs a streaming query ``rocketmq -> Parquet`` that stops once everything that
was there at its start is written (``Trigger.AvailableNow``), and reads the Parquet back. Run
it again with the same ``--out``: the query resumes from its checkpoint and writes only the
new messages.

Needs ``pip install "aiorocketmq[spark]"`` and a Java runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiorocket import Message, Producer
from aiorocket.embedded import EmbeddedBroker

__all__ = ["main"]

TOPIC = "orders"


@contextmanager
def embedded_broker(data_dir: Path) -> Iterator[str]:
    """An embedded broker served by an event loop on a daemon thread; yields its address."""
    loop = asyncio.new_event_loop()
    broker = EmbeddedBroker(data_dir=data_dir)
    ready = threading.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(broker.start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, name="embedded-broker", daemon=True)
    thread.start()
    ready.wait()
    try:
        yield broker.address
    finally:
        asyncio.run_coroutine_threadsafe(broker.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def send_orders(namesrv: str, count: int) -> None:
    """Send ``count`` JSON orders, tagged ``created`` or ``paid``, keyed by order id."""

    async def go() -> None:
        async with Producer(namesrv=namesrv, group="spark-ingest-example") as producer:
            for lo in range(0, count, 500):
                await producer.send_batch(
                    [
                        Message(
                            TOPIC,
                            json.dumps({"id": i, "amount": i % 100}).encode(),
                            tags="paid" if i % 3 == 0 else "created",
                            keys=[str(i)],
                        )
                        for i in range(lo, min(lo + 500, count))
                    ]
                )

    asyncio.run(go())


def spark_session() -> Any:
    """A small local session with the ``rocketmq`` source registered."""
    from pyspark.sql import SparkSession

    from aiorocket.integrations.spark import register

    # Python workers must run this interpreter (the one with aiorocket installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("aiorocket-spark-ingest")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register(spark)
    return spark


def ingest(spark: Any, namesrv: str, out: Path) -> int:
    """Run the streaming query until it has written what was there; returns the row count
    of the Parquet table."""
    from pyspark.sql import functions as F  # noqa: N812

    stream = (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "5000")
        .option("group", "spark-ingest")  # RocketMQ's lag tools see the query's progress
        .load()
        .select(
            "msg_id",
            "queue_id",
            "queue_offset",
            "tags",
            F.col("keys")[0].alias("order_id"),
            F.col("body").cast("string").alias("json"),
            "store_timestamp",
        )
    )
    query = (
        stream.writeStream.format("parquet")
        .option("path", str(out / "data"))
        .option("checkpointLocation", str(out / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    for progress in query.recentProgress:
        print(f"batch {progress['batchId']}: {progress['numInputRows']} rows")
    table = spark.read.parquet(str(out / "data"))
    table.groupBy("tags").count().orderBy("tags").show()
    return int(table.count())


def main(argv: list[str] | None = None) -> int:
    """Send orders and ingest them into Parquet."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "aiorocket-ingest")
    ap.add_argument("--namesrv", help="use this name server instead of an embedded broker")
    args = ap.parse_args(argv)
    spark = spark_session()
    try:
        if args.namesrv:
            send_orders(args.namesrv, args.messages)
            total = ingest(spark, args.namesrv, args.out)
        else:
            with embedded_broker(args.out / "broker") as namesrv:
                send_orders(namesrv, args.messages)
                total = ingest(spark, namesrv, args.out)
    finally:
        spark.stop()
    print(f"{total} rows in {args.out / 'data'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
