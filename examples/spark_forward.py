"""Hand a consumer's messages to Spark in micro-batches with :class:`SparkForwarder`.

    python -m examples.spark_forward [--messages 5000] [--out DIR] [--namesrv HOST:PORT]

A push consumer of group ``spark-forward`` reads ``orders``; the forwarder gathers up to 1000
messages (or 1 s worth), builds a DataFrame with the ``rocketmq`` source's columns and calls
``write_batch(df, batch_id)`` in a worker thread, which appends the batch to Parquet and
prints a per-tag count. Only then are the messages acknowledged: if the process dies while
Spark works on a batch, that batch is delivered again on the next start, nothing is lost.

Without ``--namesrv`` an embedded broker runs in this process and the example sends
``--messages`` orders first. Stops once every order was written (or on Ctrl-C).

Needs ``pip install "aiorocketmq[spark]"`` and a Java runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from aiorocket import Message, Producer, PushConsumer
from aiorocket.embedded import EmbeddedBroker

__all__ = ["main"]

TOPIC = "orders"
GROUP = "spark-forward"


async def send_orders(namesrv: str, count: int) -> None:
    """Send ``count`` JSON orders tagged ``created`` or ``paid``."""
    async with Producer(namesrv=namesrv, group="spark-forward-example") as producer:
        for lo in range(0, count, 500):
            await producer.send_batch(
                [
                    Message(
                        TOPIC,
                        json.dumps({"id": i}).encode(),
                        tags="paid" if i % 3 == 0 else "created",
                        keys=[str(i)],
                    )
                    for i in range(lo, min(lo + 500, count))
                ]
            )


async def forward(namesrv: str, out: Path, expected: int) -> int:
    """Consume ``orders`` into Parquet through Spark until ``expected`` rows were written
    (0: until interrupted); returns the rows written."""
    from aiorocket.integrations.spark import SparkForwarder
    from examples.spark_ingest import spark_session

    spark = spark_session()
    written = 0
    all_done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def write_batch(df: Any, batch_id: int) -> None:
        # Runs in a worker thread; the consumer keeps heartbeating meanwhile.
        nonlocal written
        df.write.mode("append").parquet(str(out))
        counts = {r.tags: r["count"] for r in df.groupBy("tags").count().collect()}
        written += sum(counts.values())
        print(f"batch {batch_id}: {counts}", flush=True)
        if expected and written >= expected:
            loop.call_soon_threadsafe(all_done.set)

    forwarder = SparkForwarder(spark, write_batch, max_rows=1000, max_interval=1.0)
    # The forwarder holds a batch's handler calls until Spark is done with it, so many calls
    # must be allowed in flight: 64 x 32 messages cover two batches of 1000.
    consumer = PushConsumer(
        group=GROUP, namesrv=namesrv, consume_from="first", consume_batch_size=32, concurrency=64
    )
    consumer.subscribe(TOPIC)
    consumer.register_listener(forwarder.listener)
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGINT, all_done.set)
    try:
        async with forwarder, consumer:
            await all_done.wait()
    finally:
        spark.stop()
    return written


async def run(args: argparse.Namespace) -> int:
    """Send (with an embedded broker) and forward."""
    if args.namesrv:
        return await forward(args.namesrv, args.out, 0)
    async with EmbeddedBroker() as broker:
        await send_orders(broker.address, args.messages)
        return await forward(broker.address, args.out, args.messages)


def main(argv: list[str] | None = None) -> int:
    """Run the example."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=5_000)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "aiorocket-forward")
    ap.add_argument("--namesrv", help="consume from this name server instead")
    args = ap.parse_args(argv)
    written = asyncio.run(run(args))
    print(f"{written} rows appended to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
