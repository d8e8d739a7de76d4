"""aiorocket beside the Java client, on the embedded broker and on the Java broker.

In one run, for each broker (the embedded broker in a child process; then the name server and
broker of the Apache RocketMQ install ``ROCKETMQ_HOME`` names, whose Java client is the peer):

* fill one 8-queue topic with ``--messages`` x 128 B (default 1M, so the JVM's JIT is warm);
* drain it with a fresh group, alternating contenders so drift hits both alike:
  aiorocket's batch handler (32 per call) | Java ``DefaultMQPushConsumer``, no-op listener,
  ``consumeMessageBatchMaxSize`` 32 | aiorocket's per-message ``async def`` handler | Java with
  batch 1 (both Java runs with the default 20 consume threads); then aiorocket's batch and
  per-message drains again with ``--members`` processes in one group (default 2: what
  ``aiorocket run --workers 2`` deploys), timed from the settled group's first pull;
* a sync send loop (one in flight, 128 B) for ``--seconds``: Java ``DefaultMQProducer`` beside
  aiorocket's ``Producer.send``; and aiorocket pipelined (``--in-flight`` sends in flight).

Figures: msgs/s and CPU µs per message of the client process. Java's figures run from its first
to its last message (JVM start-up and client start left out: the kinder measure for Java);
aiorocket's from ``start()`` to the last message. Writes
``benchmarks/results/java_peers-<timestamp>.json``.

    python benchmarks/java_peers.py [--messages 1000000] [--repeat 2] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from consumer import broker_process, drain, drain_processes, fill  # noqa: E402

from aiorocket import Message, Producer  # noqa: E402
from tests.interop.apache.cluster import JavaCluster  # noqa: E402
from tests.interop.apache.install import (  # noqa: E402
    InstallError,
    compile_java,
    find_install,
    tools_options,
)

RESULTS = Path(__file__).parent / "results"
JAVA_SOURCE = Path(__file__).parent / "java" / "JBench.java"
BODY = b"x" * 128


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def compile_bench(out: Path) -> Path:
    """Compile ``java/JBench.java`` against the install's jars into ``out``."""
    return compile_java(out, [JAVA_SOURCE])


async def run_java(classes: Path, *args: str, timeout: float = 900) -> dict[str, Any]:
    """Run ``JBench`` with ``args``; its JSON line (the client's own log lines are skipped)."""
    install = find_install()
    assert install is not None
    tmp = Path(tempfile.gettempdir())
    argv = install.java_argv("JBench", *args, classpath=[classes], jvm_options=tools_options(tmp))
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "TMPDIR": tempfile.gettempdir()},
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    lines = [ln for ln in out.decode(errors="replace").splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"JBench {' '.join(args[:1])} printed no result")
    result: dict[str, Any] = json.loads(lines[-1])
    if not result.get("ok"):
        raise RuntimeError(f"JBench {args[0]} did not finish: {result}")
    return result


async def java_drain(
    classes: Path, addr: str, topic: str, group: str, n: int, batch: int
) -> tuple[float, float]:
    """(seconds, CPU seconds) of the Java push consumer, first to last message."""
    r = await run_java(classes, "drain", addr, topic, group, str(n), "900", str(batch), "20")
    return r["seconds_first_to_last"], r["cpu_first_to_last"]


async def our_sync_loop(addr: str, topic: str, seconds: float) -> tuple[float, float]:
    """(msgs/s, CPU µs per message) of ``await producer.send`` one at a time."""
    async with Producer(namesrv=addr, group="bench-sync") as p:
        for _ in range(2000):
            await p.send(Message(topic, BODY))
        n, t0, c0 = 0, time.perf_counter(), _cpu()
        while time.perf_counter() - t0 < seconds:
            await p.send(Message(topic, BODY))
            n += 1
        t, c = time.perf_counter() - t0, _cpu() - c0
    return n / t, c / n * 1e6


async def our_pipelined(
    addr: str, topic: str, seconds: float, in_flight: int
) -> tuple[float, float]:
    """(msgs/s, CPU µs per message) with ``in_flight`` sends outstanding."""
    async with Producer(namesrv=addr, group="bench-pipelined") as p:
        for _ in range(2000):
            await p.send(Message(topic, BODY))
        n, t0, c0 = 0, time.perf_counter(), _cpu()
        end = t0 + seconds

        async def sender() -> None:
            nonlocal n
            while time.perf_counter() < end:
                await p.send(Message(topic, BODY))
                n += 1

        await asyncio.gather(*(sender() for _ in range(in_flight)))
        t, c = time.perf_counter() - t0, _cpu() - c0
    return n / t, c / n * 1e6


def _summary(runs: list[tuple[float, float]], n: int) -> dict[str, float]:
    rates = [n / s for s, _ in runs]
    med = statistics.median(rates)
    return {
        "msgs_per_s": med,
        "spread_pct": (max(rates) - min(rates)) / med * 100,
        "cpu_us_per_msg": statistics.median(c / n * 1e6 for _, c in runs),
        "runs": len(runs),
    }


async def one_broker(
    label: str, addr: str, classes: Path, args: argparse.Namespace, topic: str
) -> dict[str, Any]:
    """Fill, drain with each contender, then the producer loops; the figures of one broker."""
    n = args.messages - args.messages % 8
    t0 = time.perf_counter()
    await fill(addr, n, 128, topic=topic)
    print(f"[{label}] filled {n} x 128 B in {time.perf_counter() - t0:.1f} s", flush=True)
    runs: dict[str, list[tuple[float, float]]] = {}
    contenders: list[tuple[str, Callable[[str], Awaitable[tuple[float, float]]]]] = [
        ("aiorocket_batch", lambda g: drain(addr, n, g, batch=True, topic=topic)),
        ("java_batch_32", lambda g: java_drain(classes, addr, topic, g, n, 32)),
        ("aiorocket_per_message", lambda g: drain(addr, n, g, batch=False, topic=topic)),
        ("java_batch_1", lambda g: java_drain(classes, addr, topic, g, n, 1)),
    ]
    if args.members > 1:
        m = args.members
        contenders += [
            (
                f"aiorocket_batch_{m}_members",
                lambda g: drain_processes(addr, n, g, batch=True, processes=m, topic=topic),
            ),
            (
                f"aiorocket_per_message_{m}_members",
                lambda g: drain_processes(addr, n, g, batch=False, processes=m, topic=topic),
            ),
        ]
    for i in range(args.repeat):
        for name, run in contenders:
            result = await run(f"bench-{label}-{name}-{i}".replace("_", "-"))
            runs.setdefault(name, []).append(result)
            s, c = result
            print(f"[{label}] {name}: {n / s:,.0f} msg/s, {c / n * 1e6:.2f} us/msg", flush=True)
    out: dict[str, Any] = {"messages": n}
    for name, rs in runs.items():
        out[name] = _summary(rs, n)
    ptopic = topic + "Produce"
    java = await run_java(classes, "produce", addr, ptopic, str(args.seconds), "128")
    out["java_producer_sync"] = {
        "msgs_per_s": java["count"] / java["seconds"],
        "cpu_us_per_msg": java["cpu"] / java["count"] * 1e6,
    }
    rate, cpu = await our_sync_loop(addr, ptopic, args.seconds)
    out["aiorocket_producer_sync"] = {"msgs_per_s": rate, "cpu_us_per_msg": cpu}
    rate, cpu = await our_pipelined(addr, ptopic, args.seconds, args.in_flight)
    out["aiorocket_producer_pipelined"] = {"msgs_per_s": rate, "cpu_us_per_msg": cpu}
    for key in ("java_producer_sync", "aiorocket_producer_sync", "aiorocket_producer_pipelined"):
        row = out[key]
        print(
            f"[{label}] {key}: {row['msgs_per_s']:,.0f} msg/s, {row['cpu_us_per_msg']:.1f} us/msg",
            flush=True,
        )
    out["ratio_per_message_vs_java_batch_1"] = (
        out["aiorocket_per_message"]["msgs_per_s"] / out["java_batch_1"]["msgs_per_s"]
    )
    out["ratio_batch_vs_java_batch_32"] = (
        out["aiorocket_batch"]["msgs_per_s"] / out["java_batch_32"]["msgs_per_s"]
    )
    for name in list(out):
        if name.endswith("_members"):
            peer = "java_batch_32" if name.startswith("aiorocket_batch") else "java_batch_1"
            out[f"ratio_{name}_vs_{peer}"] = out[name]["msgs_per_s"] / out[peer]["msgs_per_s"]
    out["ratio_producer_sync_vs_java"] = (
        out["aiorocket_producer_sync"]["msgs_per_s"] / out["java_producer_sync"]["msgs_per_s"]
    )
    return out


async def run(args: argparse.Namespace, classes: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    async with broker_process(8) as addr:
        results["embedded"] = await one_broker("embedded", addr, classes, args, "BenchJavaE")
    with tempfile.TemporaryDirectory(prefix="aiorocket-bench-java-") as tmp:
        cluster = JavaCluster(Path(tmp), broker_conf={"defaultTopicQueueNums": "8"})
        with cluster:
            topic = "BenchJavaJ"
            for t in (topic, topic + "Produce"):
                # 8 queues, as on the embedded broker (auto-creation would give the producer's 4)
                cluster.admin("updateTopic", "-c", "DefaultCluster", "-t", t, "-r", "8", "-w", "8")
            results["java_broker"] = await one_broker(
                "java-broker", cluster.namesrv, classes, args, topic
            )
    return results


def main() -> int:
    """Run the benchmark, print the table, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0, help="each producer loop")
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument(
        "--members",
        type=int,
        default=2,
        help="also drain with this many member processes in one group (1: skip)",
    )
    ap.add_argument("--quick", action="store_true", help="100k messages, one run, 2 s loops")
    args = ap.parse_args()
    if args.quick:
        args.messages, args.repeat, args.seconds = 100_000, 1, 2.0
    try:
        problem = None if find_install() else "ROCKETMQ_HOME is not set"
    except InstallError as exc:
        problem = str(exc)
    if problem is not None:
        print(f"java_peers: not run: {problem}", flush=True)
        return 2
    with tempfile.TemporaryDirectory(prefix="aiorocket-jbench-") as classes:
        compile_bench(Path(classes))
        res = asyncio.run(run(args, Path(classes)))
    res.update(
        {
            "benchmark": "java_peers",
            "python": sys.version,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "java_threads": 20,
        }
    )
    print()
    print(f"{'broker':<13}{'contender':<30}{'msgs/s':>12}{'spread':>9}{'CPU us/msg':>12}")
    for side in ("embedded", "java_broker"):
        for key in (
            "aiorocket_batch",
            "java_batch_32",
            "aiorocket_per_message",
            "java_batch_1",
            "aiorocket_producer_sync",
            "java_producer_sync",
            "aiorocket_producer_pipelined",
            f"aiorocket_batch_{args.members}_members",
            f"aiorocket_per_message_{args.members}_members",
        ):
            if key not in res[side]:
                continue
            row = res[side][key]
            spread = f"{row['spread_pct']:.0f}%" if "spread_pct" in row else "-"
            print(
                f"{side:<13}{key:<30}{row['msgs_per_s']:>12,.0f}{spread:>9}"
                f"{row['cpu_us_per_msg']:>12.2f}"
            )
        d = res[side]
        print(
            f"{side}: per-message / Java batch 1 = {d['ratio_per_message_vs_java_batch_1']:.2f}; "
            f"batch / Java batch 32 = {d['ratio_batch_vs_java_batch_32']:.2f}; "
            f"sync send / Java = {d['ratio_producer_sync_vs_java']:.2f}"
        )
        for key, value in d.items():
            if key.startswith("ratio_") and "_members_" in key:
                print(f"{side}: {key[len('ratio_') :]} = {value:.2f}")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"java_peers-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(res, indent=2))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
