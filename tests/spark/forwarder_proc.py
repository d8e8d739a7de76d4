"""A process running a PushConsumer + SparkForwarder, for the crash test of test_forwarder.

    python forwarder_proc.py --namesrv HOST:PORT --group G --topic T --out FILE

Each Spark batch writes to ``--out`` (flushed and fsynced, so a SIGKILL loses nothing
written), from inside ``fn``:

* ``{"k": "start", "b": batch_id, "ids": [msg ids]}`` once the batch's rows were collected
  (the sink has them), then sleeps ``--fn-sleep`` seconds;
* ``{"k": "done", "b": batch_id}`` when ``fn`` returns (the messages are acknowledged next).

Prints ``READY`` once the consumer started. SIGTERM closes consumer and forwarder gracefully.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import aiorocket as rmq
from aiorocket.integrations.spark import SparkForwarder
from tests.spark._support import spark_session


async def main(args: argparse.Namespace) -> int:
    spark = spark_session("forwarder-proc")
    out = open(args.out, "a", encoding="utf-8")  # noqa: SIM115

    def write(obj: dict[str, Any]) -> None:
        out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        out.flush()
        os.fsync(out.fileno())

    def fn(df: Any, batch_id: int) -> None:
        ids = [r.msg_id for r in df.select("msg_id").collect()]
        write({"k": "start", "b": batch_id, "ids": ids, "t": time.time()})
        time.sleep(args.fn_sleep)
        write({"k": "done", "b": batch_id, "t": time.time()})

    forwarder = SparkForwarder(spark, fn, max_rows=args.max_rows, max_interval=0.5)
    consumer = rmq.PushConsumer(
        group=args.group,
        namesrv=args.namesrv,
        consume_batch_size=32,
        concurrency=64,
        offset_persist_interval=0.1,
        rebalance_interval=1.0,
        shutdown_grace=20.0,
    )
    consumer.subscribe(args.topic)
    consumer.register_listener(forwarder.listener)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with forwarder, consumer:
        print("READY", flush=True)
        await stop.wait()
    out.close()
    spark.stop()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--max-rows", type=int, default=500)
    parser.add_argument("--fn-sleep", type=float, default=0.0)
    sys.exit(asyncio.run(main(parser.parse_args())))
