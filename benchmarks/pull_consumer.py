"""Pull-consumer benchmark: the application-driven drains beside the push consumer's, in one run.

Runs the embedded broker in a child process (so this process's CPU is the consumer's), fills a
topic (8 queues, 128 B bodies) and drains it with a fresh group each time, in this order:

* ``PushConsumer`` with a no-op batch handler (``consume_batch_size`` 32);
* ``PushConsumer`` with a per-message ``async def`` handler;
* ``PullConsumer`` read with ``poll(max_messages=32)`` batches;
* ``PullConsumer`` read with ``async for``, one message at a time;

then the idle cost of a pull consumer owning 64 queues (parked long polls). Prints msgs/s and
CPU µs per message (median of ``--repeat`` runs) and writes them to
``benchmarks/results/pull_consumer-<timestamp>.json``. The same contenders run in
``consumer.py`` too (``make bench``); this script is the quick look (~30 s with the defaults).

    python benchmarks/pull_consumer.py [--messages 200000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from consumer import _cpu, _summary, broker_process, drain, fill, pull_drain  # noqa: E402

import aiorocket as rmq  # noqa: E402

RESULTS = HERE / "results"
IDLE_TOPIC = "BenchPullIdle"


async def idle_cost(seconds: float) -> dict[str, Any]:
    """CPU share of a pull consumer owning 64 empty queues that nobody reads from."""
    async with broker_process(64) as addr:
        consumer = rmq.PullConsumer(group="bench-pull-idle", namesrv=addr)
        consumer.subscribe(IDLE_TOPIC)
        async with consumer:
            await asyncio.sleep(2.0)  # settle: every queue has its long poll parked
            t0, c0 = time.perf_counter(), _cpu()
            await asyncio.sleep(seconds)
            t1, c1 = time.perf_counter(), _cpu()
            owned = len([mq for mq in consumer.assignment() if mq.topic == IDLE_TOPIC])
    return {"queues": owned, "cpu_percent": (c1 - c0) / (t1 - t0) * 100, "seconds": seconds}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    n = args.messages - args.messages % 8
    results: dict[str, Any] = {"messages": n, "body_bytes": args.size}
    async with broker_process(8) as addr:
        await fill(addr, n, args.size)
        print(f"filled {n} x {args.size} B", flush=True)
        for name in ("batch_handler", "per_message_handler", "pull_poll_batch", "pull_async_for"):
            runs = []
            for i in range(args.repeat):
                group = f"bench-pc-{name}-{i}".replace("_", "-")
                if name.startswith("pull_"):
                    runs.append(await pull_drain(addr, n, group, poll=name == "pull_poll_batch"))
                else:
                    runs.append(await drain(addr, n, group, batch=name == "batch_handler"))
            results[name] = _summary(runs, n)
            print(f"{name}: {results[name]}", flush=True)
    results["idle_64_queues"] = await idle_cost(args.idle_seconds)
    print(f"idle: {results['idle_64_queues']}", flush=True)
    return results


def main() -> int:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--idle-seconds", type=float, default=3.0)
    args = ap.parse_args()
    res = asyncio.run(run(args))
    res.update(
        {
            "benchmark": "pull_consumer",
            "python": sys.version,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
        }
    )
    print()
    print(f"{'contender':<24}{'msgs/s':>12}{'spread':>9}{'CPU us/msg':>12}")
    for key in ("batch_handler", "per_message_handler", "pull_poll_batch", "pull_async_for"):
        row = res[key]
        spread = f"{row['spread_pct']:.0f}%"
        print(f"{key:<24}{row['msgs_per_s']:>12,.0f}{spread:>9}{row['cpu_us_per_msg']:>12.2f}")
    idle = res["idle_64_queues"]
    print(f"idle pull consumer, {idle['queues']} queues: {idle['cpu_percent']:.2f} % of a core")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"pull_consumer-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(res, indent=2))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
