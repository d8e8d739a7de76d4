"""Send outage across a DLedger leader change: aiorocket's producer beside the Java producer.

A DLedger (Raft) group of three brokers of the Apache RocketMQ install ``ROCKETMQ_HOME``
names, on loopback. Both producers send synchronously at ``--rate`` messages a second (each
to its own topic, both with their default retries and a 3 s send timeout, routes polled every
30 s as Java does); after ``--warmup`` seconds the leader is SIGKILLed, and both go on for
``--seconds`` more. Per producer: the last failed send and the first acknowledged one after
the kill (seconds after it), and how many sends failed; and when the name server named the new
leader. Writes ``benchmarks/results/ha_failover-<timestamp>.json``.

    python benchmarks/ha_failover.py [--rate 100] [--warmup 10] [--seconds 40] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from java_peers import compile_bench, run_java  # noqa: E402

import aiorocket as rmq  # noqa: E402
from tests.interop.apache.cluster import JavaCluster, dledger_group  # noqa: E402
from tests.interop.apache.install import InstallError, find_install  # noqa: E402

RESULTS = Path(__file__).parent / "results"


async def java_rate(classes: Path, ns: str, topic: str, rate: float, seconds: float) -> Any:
    """Run ``JBench rate``; its acknowledged and failed send times (ms)."""
    return await run_java(
        classes, "rate", ns, topic, str(rate), str(seconds), timeout=seconds + 120
    )


async def aiorocket_rate(ns: str, topic: str, rate: float, seconds: float) -> dict[str, Any]:
    """aiorocket's producer at ``rate`` for ``seconds``; its send times (ms) like Java's."""
    acked: list[int] = []
    failed: list[int] = []
    async with rmq.Producer(namesrv=ns, group="HaBenchPy", route_refresh_interval=30.0) as p:
        start, i = time.monotonic(), 0
        while time.monotonic() - start < seconds:
            try:
                await p.send(rmq.Message(topic, f"p{i}"))
            except rmq.RocketError:
                failed.append(int(time.time() * 1000))
            else:
                acked.append(int(time.time() * 1000))
            i += 1
            ahead = start + i / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)
    return {"acked": acked, "failed": failed}


def outage(times: dict[str, list[int]], killed_ms: int) -> dict[str, float]:
    """Seconds from the kill to the last failure and to the first success after it."""
    failed = [t for t in times["failed"] if t >= killed_ms - 1000]
    ok = [t for t in times["acked"] if t > killed_ms]
    return {
        "failed_sends": len(failed),
        "last_failure_s": (max(failed) - killed_ms) / 1000 if failed else 0.0,
        "first_ack_after_s": (min(ok) - killed_ms) / 1000 if ok else float("inf"),
    }


async def one_round(args: argparse.Namespace, classes: Path, tmp: Path) -> dict[str, Any]:
    with JavaCluster(tmp, brokers=dledger_group("broker-a")) as cluster:
        ns = cluster.namesrv
        leader = cluster.master_of("broker-a")
        total = args.warmup + args.seconds
        java = asyncio.create_task(java_rate(classes, ns, "HaBenchJ", args.rate, total))
        ours = asyncio.create_task(aiorocket_rate(ns, "HaBenchP", args.rate, total))
        await asyncio.sleep(args.warmup)
        assert leader is not None
        await asyncio.to_thread(cluster.kill_broker, leader)
        killed_ms = int(time.time() * 1000)
        named_ms = None
        while named_ms is None and time.time() * 1000 < killed_ms + args.seconds * 1000:
            master = await asyncio.to_thread(cluster.master_of, "broker-a")
            if master not in (None, leader):
                named_ms = int(time.time() * 1000)
            await asyncio.sleep(0.05)
        results: dict[str, Any] = {
            "java": outage(await java, killed_ms),
            "aiorocket": outage(await ours, killed_ms),
        }
    results["name_server_named_new_leader_s"] = (
        (named_ms - killed_ms) / 1000 if named_ms is not None else None
    )
    return results


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="aiorocket-ha-") as tmp:
        classes = compile_bench(Path(tmp) / "classes")
        return [await one_round(args, classes, Path(tmp) / f"round{r}") for r in range(args.repeat)]


def main() -> int:
    """Run the rounds, print the table, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=100.0)
    ap.add_argument("--warmup", type=float, default=10.0)
    ap.add_argument("--seconds", type=float, default=40.0, help="after the kill")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    try:
        install = find_install()
    except InstallError as exc:
        print(f"ha_failover: not run: {exc}", flush=True)
        return 2
    if install is None:
        print("ha_failover: not run: ROCKETMQ_HOME is not set", flush=True)
        return 2
    rounds = asyncio.run(run(args))
    print(f"\nApache RocketMQ {install.version}, DLedger group of 3, {args.rate:.0f} msg/s")
    print(f"{'round':<7}{'producer':<11}{'failed':>8}{'last failure':>14}{'first ack':>11}")
    for i, r in enumerate(rounds):
        for who in ("aiorocket", "java"):
            o = r[who]
            print(
                f"{i:<7}{who:<11}{o['failed_sends']:>8}{o['last_failure_s']:>13.2f}s"
                f"{o['first_ack_after_s']:>10.2f}s"
            )
        print(f"{i:<7}name server named the new leader at {r['name_server_named_new_leader_s']} s")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"ha_failover-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out = {"benchmark": "ha_failover", "version": install.version, "args": vars(args)}
    path.write_text(json.dumps({**out, "rounds": rounds}, indent=2))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
