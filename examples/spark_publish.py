"""Read a topic with Spark, enrich each message and publish the result to another topic.

    python -m examples.spark_publish [--messages 10000] [--out DIR] [--namesrv HOST:PORT]

A streaming query reads ``orders`` (the ``rocketmq`` source), parses each JSON body, adds a
``band`` (``small``/``large``) and a ``vat`` amount, and writes the enriched order to
``orders-enriched`` (the ``rocketmq`` sink) with the band as its tag, the order id as its key,
the customer as its sharding key (one customer's orders stay in order) and the source's
message id as a property. ``idempotentKeys`` gives every message an id derived from the
query, micro-batch, partition and row, so a message sent twice (a retried task) carries the
same id twice. The query stops once everything that was there at its start is written
(``Trigger.AvailableNow``); the example then reads ``orders-enriched`` back with aiorocket.

Without ``--namesrv`` an embedded broker runs in this process (see
``examples/spark_ingest.py``). Run it again with the same ``--out``: the query resumes from
its checkpoint and publishes only the new orders.

Needs ``pip install "aiorocketmq[spark]"`` and a Java runtime.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from aiorocket import SyncQueueReader
from examples.spark_ingest import TOPIC, embedded_broker, send_orders, spark_session

__all__ = ["main"]

OUT_TOPIC = "orders-enriched"


def publish(spark: Any, namesrv: str, checkpoint: Path) -> None:
    """Run the enrich-and-publish query until it has written what was there."""
    from pyspark.sql import functions as F  # noqa: N812

    order = F.from_json(F.col("body").cast("string"), "id long, amount int")
    enriched = (
        spark.readStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "5000")
        .load()
        .select("msg_id", order.alias("o"))
        .select(
            "msg_id",
            "o.id",
            "o.amount",
            F.when(F.col("o.amount") >= 50, "large").otherwise("small").alias("band"),
        )
    )
    out = enriched.select(
        F.to_json(
            F.struct("id", "amount", "band", F.round(F.col("amount") * 0.2, 2).alias("vat"))
        ).alias("body"),
        F.array(F.col("id").cast("string")).alias("keys"),
        F.col("band").alias("tags"),
        F.concat(F.lit("customer-"), (F.col("id") % 10).cast("string")).alias("sharding_key"),
        F.create_map(F.lit("source_msg_id"), F.col("msg_id")).alias("properties"),
    )
    query = (
        out.writeStream.format("rocketmq")
        .option("namesrv", namesrv)
        .option("topic", OUT_TOPIC)
        .option("idempotentKeys", "true")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    for progress in query.recentProgress:
        print(f"batch {progress['batchId']}: {progress['numInputRows']} rows")


def summary(namesrv: str) -> Counter[str]:
    """How many enriched orders each tag (band) has."""
    tags: Counter[str] = Counter()
    with SyncQueueReader(namesrv=namesrv) as reader:
        for mq in reader.queues(OUT_TOPIC):
            for m in reader.read_range(mq, 0, reader.max_offset(mq)):
                tags[m.tags or ""] += 1
    return tags


def main(argv: list[str] | None = None) -> int:
    """Send orders, enrich and publish them, and count the result per band."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "aiorocket-publish")
    ap.add_argument("--namesrv", help="use this name server instead of an embedded broker")
    args = ap.parse_args(argv)
    spark = spark_session()
    try:
        if args.namesrv:
            send_orders(args.namesrv, args.messages)
            publish(spark, args.namesrv, args.out / "checkpoint")
            bands = summary(args.namesrv)
        else:
            with embedded_broker(args.out / "broker") as namesrv:
                send_orders(namesrv, args.messages)
                publish(spark, namesrv, args.out / "checkpoint")
                bands = summary(namesrv)
    finally:
        spark.stop()
    print(f"{OUT_TOPIC}: {dict(sorted(bands.items()))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
