"""Spark source benchmark (docs/performance.md P8): the Arrow path against the row path, and the
planning time of a micro-batch.

Runs the embedded broker in a child process, fills a topic (4 queues, 128 B bodies, a tag,
a key and one user property per message) and measures, each ``--repeat`` times:

* **conversion**: messages already read (in memory) turned into what a Spark Python worker
  sends to the JVM: Arrow record batches built by the source (Arrow path), or row tuples
  converted by PySpark's own ``records_to_arrow_batches`` (row path). This is the work the
  two paths do differently; P8 is judged on it.
* **decode**: pull bodies already in memory turned into Arrow record batches by the
  compiled column builder, and by decoding messages and building columns from them.
* **executor read**: one partition (a whole queue) read through the source's ``read()`` and
  PySpark's conversion, as a Python worker does it: pulls and decoding included. Three
  contenders, alternating: the Arrow path with the compiled column builder, the Arrow path
  through messages (the reference; what executors did before the builder) and the row path,
  each with its rate and this process's CPU time per row (the broker runs elsewhere).
* **spark**: ``spark.read.format("rocketmq") ... write.format("noop")`` over the whole
  topic in a ``local[2]`` session (JVM included; both cores shared with the broker).
* **planning**: a streaming query over the topic (``maxOffsetsPerTrigger``, AvailableNow);
  per micro-batch, Spark's ``latestOffset + getBatch + queryPlanning`` durations, and the
  source's own driver-side work (``latestOffset`` + ``partitions``) timed in-process.

Prints the figures and the P8 ratios and writes them to
``benchmarks/results/spark-<timestamp>.json``.

    python benchmarks/spark_source.py [--messages 200000] [--repeat 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aiorocket import Message, MessageQueue, Producer, ReceivedMessage, SyncQueueReader  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TOPIC = "BenchSpark"
QUEUES = 4

_BROKER = textwrap.dedent(
    """
    import asyncio, sys
    from aiorocket.embedded import BrokerConfig, EmbeddedBroker

    async def main():
        config = BrokerConfig(default_queues=int(sys.argv[2]))
        async with EmbeddedBroker(data_dir=sys.argv[1], config=config) as broker:
            print("listening on", broker.address, flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())
    """
)


@contextmanager
def broker_process() -> Iterator[str]:
    """An embedded broker in a child process (its CPU is not ours); yields its address."""
    data = tempfile.mkdtemp(prefix="aiorocket-bench-")
    proc = subprocess.Popen(
        [sys.executable, "-c", _BROKER, data, str(QUEUES)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        yield line.split("listening on ")[1].split()[0]
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(data, ignore_errors=True)


def fill(addr: str, n: int, size: int) -> None:
    """``n`` messages of ``size`` bytes, spread evenly over the queues, in batches."""
    body = b"x" * size

    async def go() -> None:
        async with Producer(namesrv=addr, group="bench-spark-fill") as p:

            async def one(q: int) -> None:
                mq = MessageQueue(TOPIC, "broker-a", q)
                for lo in range(0, n // QUEUES, 500):
                    hi = min(lo + 500, n // QUEUES)
                    await p.send_batch(
                        [
                            Message(TOPIC, body, tags="t", keys=[f"k{i}"], properties={"p": "v"})
                            for i in range(lo, hi)
                        ],
                        queue=mq,
                    )

            await asyncio.gather(*(one(q) for q in range(QUEUES)))

    asyncio.run(go())


def _median(values: list[float]) -> dict[str, float]:
    med = statistics.median(values)
    return {"median": med, "spread_pct": (max(values) - min(values)) / med * 100 if med else 0.0}


def _rate(runs: list[tuple[int, float]]) -> dict[str, float]:
    out = _median([n / s for n, s in runs])
    return {"rows_per_s": out["median"], "spread_pct": out["spread_pct"]}


def conversion(addr: str, repeat: int) -> dict[str, Any]:
    """Arrow path vs row path over messages already in memory (one queue)."""
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    from aiorocket.integrations.spark.rows import SCHEMA, arrow_batches
    from aiorocket.integrations.spark.rows import rows as row_tuples
    from aiorocket.integrations.spark.source import QueueRange, RocketMQDataSource

    mq = MessageQueue(TOPIC, "broker-a", 0)
    with SyncQueueReader(namesrv=addr) as reader:
        lists: list[list[ReceivedMessage]] = list(
            reader.read_range_batches(mq, 0, reader.max_offset(mq))
        )
    n = sum(len(x) for x in lists)
    part = QueueRange(TOPIC, "broker-a", 0, 0, n)
    source = RocketMQDataSource({"namesrv": addr, "topic": TOPIC})

    def arrow() -> int:
        batches = records_to_arrow_batches(arrow_batches(iter(lists), part), 10_000, SCHEMA, source)
        return sum(b.num_rows for b in batches)

    def rows() -> int:
        batches = records_to_arrow_batches(row_tuples(iter(lists), part), 10_000, SCHEMA, source)
        return sum(b.num_rows for b in batches)

    return {"messages": n, **_compare(arrow, rows, repeat)}


def decode(addr: str, repeat: int) -> dict[str, Any]:
    """Pull bodies already in memory (one queue) to Arrow: the compiled column builder
    against decoding messages and building columns from them (no network: the ceiling of
    the executor read's decoding)."""
    from aiorocket._reader import InlineReader
    from aiorocket.integrations.spark import columns
    from aiorocket.integrations.spark.rows import ARROW_SCHEMA, arrow_batches
    from aiorocket.integrations.spark.source import QueueRange, _message_lists

    mq = MessageQueue(TOPIC, "broker-a", 0)
    with SyncQueueReader(namesrv=addr) as sync:
        end = sync.max_offset(mq)
    with InlineReader(namesrv=addr) as reader:
        chunks = list(reader.read_range_raw(mq, 0, end))
    part = QueueRange(TOPIC, "broker-a", 0, 0, end)

    def compiled() -> int:
        batches = columns.arrow_batches(iter(chunks), TOPIC, "broker-a", 0, ARROW_SCHEMA)
        return sum(b.num_rows for b in batches)

    def messages() -> int:
        batches = arrow_batches(_message_lists(iter(chunks), part), part)
        return sum(b.num_rows for b in batches)

    if not columns.AVAILABLE:
        return {"messages": end, "skipped": "the compiled column builder is not built"}
    out = _compare(compiled, messages, repeat)
    return {
        "messages": end,
        "compiled": out["arrow"],
        "messages_path": out["rows"],
        "ratio": out["ratio"],
    }


def executor_read(addr: str, repeat: int) -> dict[str, Any]:
    """One partition read end to end by the source, as a Spark Python worker does: the Arrow
    path with the compiled column builder, the Arrow path through messages (the reference,
    and what executors did before the builder), and the row path; alternating, each with
    its rate and this process's CPU time per row."""
    from pyspark.sql.worker.plan_data_source_read import records_to_arrow_batches

    from aiorocket.integrations.spark import columns
    from aiorocket.integrations.spark.source import SCHEMA, QueueRange, RocketMQDataSource

    with SyncQueueReader(namesrv=addr) as reader:
        end = reader.max_offset(MessageQueue(TOPIC, "broker-a", 0))
    part = QueueRange(TOPIC, "broker-a", 0, 0, end)

    def run(use_arrow: str, compiled: bool) -> Callable[[], int]:
        source = RocketMQDataSource({"namesrv": addr, "topic": TOPIC, "useArrow": use_arrow})
        reader = source.reader(SCHEMA)

        def go() -> int:
            columns.use(compiled)
            try:
                batches = records_to_arrow_batches(reader.read(part), 10_000, SCHEMA, source)
                return sum(b.num_rows for b in batches)
            finally:
                columns.use(columns.AVAILABLE)

        return go

    contenders = {
        "arrow": run("true", columns.AVAILABLE),
        "arrow_messages": run("true", False),
        "rows": run("false", False),
    }
    for fn in contenders.values():
        fn()  # warm up (imports, caches)
    runs: dict[str, list[tuple[int, float, float]]] = {k: [] for k in contenders}
    for _ in range(repeat):
        for key, fn in contenders.items():
            t0, c0 = time.perf_counter(), time.process_time()
            n = fn()
            runs[key].append((n, time.perf_counter() - t0, time.process_time() - c0))
    out: dict[str, Any] = {"messages": end, "compiled_builder": columns.AVAILABLE}
    for key, rs in runs.items():
        out[key] = {
            **_rate([(n, w) for n, w, _ in rs]),
            "cpu_us_per_row": statistics.median(c / n * 1e6 for n, _, c in rs),
        }
    out["ratio"] = out["arrow"]["rows_per_s"] / out["rows"]["rows_per_s"]
    out["ratio_vs_messages"] = out["arrow"]["rows_per_s"] / out["arrow_messages"]["rows_per_s"]
    out["cpu_ratio_vs_messages"] = (
        out["arrow_messages"]["cpu_us_per_row"] / out["arrow"]["cpu_us_per_row"]
    )
    return out


def _compare(arrow: Callable[[], int], rows: Callable[[], int], repeat: int) -> dict[str, Any]:
    arrow()  # warm up (imports, caches)
    a_runs: list[tuple[int, float]] = []
    r_runs: list[tuple[int, float]] = []
    for _ in range(repeat):
        for fn, runs in ((arrow, a_runs), (rows, r_runs)):
            t0 = time.perf_counter()
            n = fn()
            runs.append((n, time.perf_counter() - t0))
    a, r = _rate(a_runs), _rate(r_runs)
    return {"arrow": a, "rows": r, "ratio": a["rows_per_s"] / r["rows_per_s"]}


def _session() -> Any:
    from pyspark.sql import SparkSession

    from aiorocket.integrations.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-spark-source")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def spark_read(spark: Any, addr: str, n: int, repeat: int) -> dict[str, Any]:
    """The whole topic through a batch query into Spark's no-op sink."""

    def run(use_arrow: str) -> Callable[[], int]:
        def go() -> int:
            (
                spark.read.format("rocketmq")
                .option("namesrv", addr)
                .option("topic", TOPIC)
                .option("useArrow", use_arrow)
                .load()
                .write.format("noop")
                .mode("overwrite")
                .save()
            )
            return n

        return go

    return {"messages": n, **_compare(run("true"), run("false"), repeat)}


def planning(spark: Any, addr: str, per_trigger: int) -> dict[str, Any]:
    """Per micro-batch planning: Spark's progress durations, and the source's own calls."""
    from aiorocket.integrations.spark.source import SCHEMA, RocketMQDataSource

    checkpoint = tempfile.mkdtemp(prefix="aiorocket-bench-cp-")
    try:
        query = (
            spark.readStream.format("rocketmq")
            .option("namesrv", addr)
            .option("topic", TOPIC)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(per_trigger))
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)
    spark_ms = [
        sum(p["durationMs"].get(k, 0) for k in ("latestOffset", "getBatch", "queryPlanning"))
        for p in progress
    ]
    trigger_ms = [p["durationMs"]["triggerExecution"] for p in progress]

    # The source alone: what the driver's Python process does to plan one batch.
    source = RocketMQDataSource(
        {
            "namesrv": addr,
            "topic": TOPIC,
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": str(per_trigger),
        }
    )
    stream = source.streamReader(SCHEMA)
    start = stream.latestOffset(stream.initialOffset(), stream.getDefaultReadLimit())
    own_ms = []
    for _ in range(50):
        t0 = time.perf_counter()
        end = stream.latestOffset(start, stream.getDefaultReadLimit())
        stream.partitions(start, end)
        own_ms.append((time.perf_counter() - t0) * 1000)
        stream.commit(end)
        start = end
    stream.stop()
    return {
        "micro_batches": len(progress),
        "rows_per_batch": per_trigger,
        "spark_planning_ms": {**_median(spark_ms), "max": max(spark_ms)},
        "trigger_ms": _median(trigger_ms),
        "source_planning_ms": {**_median(own_ms), "max": max(own_ms)},
    }


def main() -> int:
    """Run the benchmark, print the figures, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--per-trigger", type=int, default=20_000)
    ap.add_argument("--quick", action="store_true", help="40k messages, one run")
    args = ap.parse_args()
    if args.quick:
        args.messages, args.repeat, args.per_trigger = 40_000, 1, 5_000
    n = args.messages - args.messages % QUEUES
    results: dict[str, Any] = {"messages": n, "body_bytes": args.size, "queues": QUEUES}
    with broker_process() as addr:
        t0 = time.perf_counter()
        fill(addr, n, args.size)
        print(f"filled {n} x {args.size} B in {time.perf_counter() - t0:.1f} s", flush=True)
        results["conversion"] = conversion(addr, args.repeat)
        print(f"conversion: {results['conversion']}", flush=True)
        results["decode"] = decode(addr, args.repeat)
        print(f"decode (bodies in memory): {results['decode']}", flush=True)
        results["executor_read"] = executor_read(addr, args.repeat)
        print(f"executor read: {results['executor_read']}", flush=True)
        spark = _session()
        try:
            results["spark"] = spark_read(spark, addr, n, args.repeat)
            print(f"spark (noop sink): {results['spark']}", flush=True)
            results["planning"] = planning(spark, addr, args.per_trigger)
            print(f"planning: {results['planning']}", flush=True)
        finally:
            spark.stop()
    results["P8_arrow_vs_rows"] = results["conversion"]["ratio"]
    results["P8_planning_ms"] = results["planning"]["spark_planning_ms"]["median"]
    import pyarrow
    import pyspark

    results.update(
        {
            "benchmark": "spark_source",
            "python": sys.version,
            "pyspark": pyspark.__version__,
            "pyarrow": pyarrow.__version__,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        }
    )
    print()
    print(f"{'stage':<16}{'Arrow rows/s':>14}{'row rows/s':>14}{'ratio':>8}")
    for key in ("conversion", "executor_read", "spark"):
        r = results[key]
        print(
            f"{key:<16}{r['arrow']['rows_per_s']:>14,.0f}{r['rows']['rows_per_s']:>14,.0f}"
            f"{r['ratio']:>8.1f}"
        )
    ex = results["executor_read"]
    print(
        f"executor read, CPU per row: compiled columns {ex['arrow']['cpu_us_per_row']:.2f} us, "
        f"through messages {ex['arrow_messages']['cpu_us_per_row']:.2f} us, rows "
        f"{ex['rows']['cpu_us_per_row']:.2f} us; compiled vs messages "
        f"{ex['ratio_vs_messages']:.1f}x rate, {ex['cpu_ratio_vs_messages']:.1f}x CPU"
    )
    plan = results["planning"]
    print(
        f"planning per micro-batch: Spark {plan['spark_planning_ms']['median']:.0f} ms "
        f"(max {plan['spark_planning_ms']['max']:.0f}), source "
        f"{plan['source_planning_ms']['median']:.1f} ms "
        f"(max {plan['source_planning_ms']['max']:.1f})"
    )
    print(
        f"P8: Arrow/rows {results['P8_arrow_vs_rows']:.1f}x (target >= 8), "
        f"planning {results['P8_planning_ms']:.0f} ms (target <= 200)"
    )
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"spark-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
