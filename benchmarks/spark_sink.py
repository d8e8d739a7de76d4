"""Spark sink benchmark: rows/s written by the ``rocketmq`` sink per executor core, beside
aiorocket's pipelined producer in a plain process, in the same run (goal: >= 0.7), and the
exactly-once sink beside the at-least-once one (P12: >= 0.5).

Runs the embedded broker in a child process (4 queues) and measures, alternating, each
``--repeat`` times, with the same message (128 B body, a tag, two keys, one user property)
and the same sends in flight (``--in-flight``, 256 by default):

* **producer**: ``Producer.send`` pipelined from this process (the P3 figure's loop over a
  fixed number of messages);
* **sink, in process**: the sink's own work on Arrow record batches already in memory
  (``write_partition``: checking rows, building messages, pipelined sends), no Spark;
* **spark**: ``df.write.format("rocketmq")`` of a cached DataFrame in a ``local[1]`` session:
  one executor core (its Python worker does the sends; the JVM feeds it Arrow batches);
* **spark, exactly once**: the same write with ``exactlyOnce=true``: the task stores half
  messages, the driver records its decision and the sink's coordinator (a process of its own
  on the driver's host) commits them; the write ends when they are committed.

Prints the figures and the ratios and writes ``benchmarks/results/spark_sink-<stamp>.json``.

    python benchmarks/spark_sink.py [--rows 100000] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from spark_source import broker_process  # noqa: E402

from aiorocket import Message, Producer  # noqa: E402

RESULTS = Path(__file__).parent / "results"
BODY = b"x" * 128


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _message(topic: str, i: int) -> Message:
    return Message(topic, BODY, tags="t", keys=[f"k{i}", "g"], properties={"p": "v"})


def producer_run(addr: str, n: int, in_flight: int) -> tuple[float, float]:
    """``n`` pipelined sends from this process: (messages/s, CPU µs per message)."""

    async def go() -> tuple[float, float]:
        async with Producer(namesrv=addr, group="bench-sink-producer") as producer:
            await producer.send(_message("BenchSinkProducer", 0))  # route, connection
            it = iter(range(n))

            async def worker() -> None:
                for i in it:
                    await producer.send(_message("BenchSinkProducer", i))

            c0, t0 = _cpu(), time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(in_flight)))
            wall, cpu = time.perf_counter() - t0, _cpu() - c0
        return n / wall, cpu / n * 1e6

    return asyncio.run(go())


def _batches(n: int) -> list[Any]:
    import pyarrow as pa

    out = []
    for lo in range(0, n, 10_000):
        hi = min(lo + 10_000, n)
        out.append(
            pa.RecordBatch.from_pydict(
                {
                    "body": pa.array([BODY] * (hi - lo), pa.binary()),
                    "keys": pa.array([[f"k{i}", "g"] for i in range(lo, hi)]),
                    "tags": pa.array(["t"] * (hi - lo)),
                    "properties": pa.array(
                        [[("p", "v")]] * (hi - lo), pa.map_(pa.string(), pa.string())
                    ),
                }
            )
        )
    return out


def sink_in_process(addr: str, n: int, in_flight: int) -> tuple[float, float]:
    """The sink's ``write_partition`` over Arrow batches in memory: (rows/s, CPU µs/row)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    from aiorocket.integrations.spark.outgoing import Layout
    from aiorocket.integrations.spark.sink import SinkOptions, write_partition

    schema = StructType(
        [
            StructField("body", BinaryType()),
            StructField("keys", ArrayType(StringType())),
            StructField("tags", StringType()),
            StructField("properties", MapType(StringType(), StringType())),
        ]
    )
    opts = SinkOptions.parse(
        {"namesrv": addr, "topic": "BenchSinkDirect", "maxInFlight": str(in_flight)}
    )
    layout = Layout.of(schema, opts.topic)
    batches = _batches(n)
    write_partition(opts, layout, _batches(10), None)  # route, connection
    c0, t0 = _cpu(), time.perf_counter()
    commit = write_partition(opts, layout, batches, None)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    assert commit.messages == n
    return n / wall, cpu / n * 1e6


def _session() -> Any:
    from pyspark.sql import SparkSession

    from aiorocket.integrations.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("bench-spark-sink")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def spark_write(spark: Any, addr: str, n: int, in_flight: int, txlog: Path | None = None) -> float:
    """A cached DataFrame of ``n`` rows written by the sink in one task (exactly once with a
    ``txlog`` directory): rows/s."""
    from pyspark.sql import functions as F  # noqa: N812

    df = (
        spark.range(n, numPartitions=1)
        .select(
            F.lit(BODY).alias("body"),
            F.array(F.concat(F.lit("k"), F.col("id").cast("string")), F.lit("g")).alias("keys"),
            F.lit("t").alias("tags"),
            F.create_map(F.lit("p"), F.lit("v")).alias("properties"),
        )
        .cache()
    )
    df.count()

    def write() -> None:
        w = (
            df.write.format("rocketmq")
            .mode("append")
            .option("namesrv", addr)
            .option("topic", "BenchSinkSpark")
            .option("maxInFlight", str(in_flight))
        )
        if txlog is not None:
            w = w.option("exactlyOnce", "true").option("transactionLog", str(txlog))
        w.save()

    t0 = time.perf_counter()
    write()
    return n / (time.perf_counter() - t0)


def _med(values: list[float]) -> dict[str, float]:
    med = statistics.median(values)
    return {"median": med, "spread_pct": (max(values) - min(values)) / med * 100 if med else 0.0}


def main() -> int:
    """Run the benchmark, print the figures, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--quick", action="store_true", help="20k rows, one run")
    args = ap.parse_args()
    if args.quick:
        args.rows, args.repeat = 20_000, 1
    n, k = args.rows, args.in_flight
    runs: dict[str, list[float]] = {
        "producer": [],
        "sink_in_process": [],
        "spark": [],
        "spark_exactly_once": [],
    }
    cpu: dict[str, list[float]] = {"producer": [], "sink_in_process": []}
    txlog = Path(tempfile.mkdtemp(prefix="bench-sink-txlog-"))
    with broker_process() as addr:
        spark = _session()
        try:
            spark_write(spark, addr, 2_000, k)  # warm up: the JVM, the Python worker, routes
            spark_write(spark, addr, 2_000, k, txlog)  # and the coordinator
            for _ in range(args.repeat):
                rate, us = producer_run(addr, n, k)
                runs["producer"].append(rate)
                cpu["producer"].append(us)
                rate, us = sink_in_process(addr, n, k)
                runs["sink_in_process"].append(rate)
                cpu["sink_in_process"].append(us)
                runs["spark"].append(spark_write(spark, addr, n, k))
                runs["spark_exactly_once"].append(spark_write(spark, addr, n, k, txlog))
                print({key: round(v[-1]) for key, v in runs.items()}, flush=True)
        finally:
            spark.stop()
            from aiorocket.integrations.spark.coordinator import stop

            stop(txlog)
            shutil.rmtree(txlog, ignore_errors=True)
    results: dict[str, Any] = {
        "benchmark": "spark_sink",
        "rows": n,
        "in_flight": k,
        "body_bytes": len(BODY),
        **{key: {"rows_per_s": _med(v)} for key, v in runs.items()},
    }
    for key, v in cpu.items():
        results[key]["cpu_us_per_row"] = statistics.median(v)
    prod = results["producer"]["rows_per_s"]["median"]
    results["ratio_spark_vs_producer"] = results["spark"]["rows_per_s"]["median"] / prod
    results["ratio_in_process_vs_producer"] = (
        results["sink_in_process"]["rows_per_s"]["median"] / prod
    )
    results["ratio_exactly_once_vs_spark"] = (
        results["spark_exactly_once"]["rows_per_s"]["median"]
        / results["spark"]["rows_per_s"]["median"]
    )
    import pyarrow
    import pyspark

    results.update(
        {
            "python": sys.version,
            "pyspark": pyspark.__version__,
            "pyarrow": pyarrow.__version__,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "load_average": os.getloadavg(),
        }
    )
    print()
    print(f"{'contender':<34}{'rows/s':>10}{'spread':>9}{'CPU us/row':>12}")
    for key, label in (
        ("producer", "pipelined producer (plain process)"),
        ("sink_in_process", "sink, in process (no Spark)"),
        ("spark", "sink, Spark local[1] (1 core)"),
        ("spark_exactly_once", "sink exactly once, local[1] (1 core)"),
    ):
        r = results[key]
        cpu_text = f"{r['cpu_us_per_row']:.1f}" if "cpu_us_per_row" in r else "-"
        print(
            f"{label:<34}{r['rows_per_s']['median']:>10,.0f}"
            f"{r['rows_per_s']['spread_pct']:>8.0f}%{cpu_text:>12}"
        )
    print(
        f"sink per executor core / pipelined producer: {results['ratio_spark_vs_producer']:.2f} "
        f"(goal >= 0.7); in process: {results['ratio_in_process_vs_producer']:.2f}"
    )
    print(
        f"exactly once / at least once, per executor core: "
        f"{results['ratio_exactly_once_vs_spark']:.2f} (P12: goal >= 0.5)"
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"spark_sink-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
