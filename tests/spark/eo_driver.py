"""A Spark driver for the exactly-once cluster tests: one streaming query, RocketMQ ->
transform -> RocketMQ with ``exactlyOnce=true``, on a standalone cluster.

    python eo_driver.py --master spark://HOST:PORT --namesrv HOST:PORT --src TOPIC
        --dst TOPIC --checkpoint DIR [--per-trigger N] [--tx-timeout S]

The transform turns each body ``b`` into ``b.upper() + ":out"``. The query runs with
``Trigger.AvailableNow``: it reads what the source held when it started (from its checkpoint
on), then ends. Prints ``READY`` once the query started and ``DONE <batches>`` when it ended
cleanly; exits non-zero when it failed.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--master", required=True)
    ap.add_argument("--namesrv", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--dst", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--per-trigger", type=int, default=1000)
    ap.add_argument("--tx-timeout", type=float, default=60.0)
    args = ap.parse_args()

    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = path
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import functions as F  # noqa: N812

    from aiorocket.integrations.spark import register
    from tests.spark._cluster import cluster_spark_session

    spark = cluster_spark_session(args.master, "exactly-once-driver", path)
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    query = (
        spark.readStream.format("rocketmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.per_trigger))
        .load()
        .select(F.concat(F.upper(F.col("body").cast("string")), F.lit(":out")).alias("body"))
        .writeStream.format("rocketmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.dst)
        .option("exactlyOnce", "true")
        .option("transactionTimeout", str(args.tx_timeout))
        .option("sendTimeout", "30")
        .option("requestTimeout", "20")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print("READY", flush=True)
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        print(f"FAILED {error}", flush=True)
        return 1
    batches = query.lastProgress["batchId"] if query.lastProgress else -1
    print(f"DONE {batches}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
