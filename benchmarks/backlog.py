"""Consumer memory under a growing backlog with a slow handler (docs/performance.md P6).

The broker (``aiorocket broker``) and the consumer each run in their own process; this process
produces. The consumer's handler sleeps ``--handler-ms`` per message with at most
``--concurrency`` calls at once, so it consumes ``concurrency / handler`` msgs/s, while this
process sends ``--rate`` msgs/s (``--body`` bytes each) to a topic of 8 queues for
``--seconds``: the backlog grows without end on the broker, and the consumer must stop pulling
at its flow-control thresholds (``pull_threshold_for_queue`` messages or
``pull_threshold_size_for_queue`` MiB cached per queue) instead of buffering it.

Every ``--sample`` seconds the consumer's RSS is read from ``/proc`` and the consumer reports
its cached messages and bytes (``PushConsumer.statistics()``). The verdict:

* bounded: the most messages ever cached stay within the thresholds (per queue, the threshold
  plus one pull batch, since a pull already under way when the threshold is crossed still
  lands);
* flat: a least-squares line through the RSS samples of the last half drifts by less than
  ``max(1 MiB, 5 % of the RSS growth above the idle consumer)`` over that half.

Writes ``benchmarks/results/backlog-<timestamp>.json`` with the whole time series.

    python benchmarks/backlog.py [--seconds 120] [--rate 500] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from latency import (
    broker_process,
    create_topic,
    paced_send,
    proc_cpu_seconds,
    proc_rss_mib,
)

from aiorocket import Producer

RESULTS = Path(__file__).parent / "results"
TOPIC = "BacklogBench"
QUEUES = 8
STATUS_PREFIX = "@@STATUS "

# Prints "ready" once it holds every queue, then one status line per interval until stdin
# closes.
_CONSUMER = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import aiorocket as rmq

    addr, topic, queues = sys.argv[1], sys.argv[2], int(sys.argv[3])
    delay, concurrency, interval = float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
    threshold, threshold_mib, pull_batch = int(sys.argv[7]), int(sys.argv[8]), int(sys.argv[9])
    prefix = sys.argv[10]

    async def main():
        consumed = 0
        consumer = rmq.PushConsumer(
            group="backlog",
            namesrv=addr,
            consume_from="first",
            concurrency=concurrency,
            pull_threshold_for_queue=threshold,
            pull_threshold_size_for_queue=threshold_mib,
            pull_batch_size=pull_batch,
        )
        consumer.subscribe(topic)

        @consumer.listener
        async def handler(msgs, ctx):
            nonlocal consumed
            await asyncio.sleep(delay * len(msgs))
            consumed += len(msgs)

        def status():
            st = consumer.statistics()
            held = [q for q in st.queues.values() if q.queue.topic == topic]
            return {
                "t": time.time(),
                "consumed": consumed,
                "queues": len(held),
                "cached_count": sum(q.cached_count for q in held),
                "cached_bytes": sum(q.cached_bytes for q in held),
                "max_queue_cached": max((q.cached_count for q in held), default=0),
                "flow_control_pauses": st.flow_control_pauses,
                "tasks": len(asyncio.all_tasks()),
            }

        async with consumer:
            while status()["queues"] < queues:
                await asyncio.sleep(0.05)
            print("ready", flush=True)
            stdin_closed = asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            while not stdin_closed.done():
                print(prefix + json.dumps(status()), flush=True)
                await asyncio.wait([stdin_closed], timeout=interval)

    asyncio.run(main())
    """
)


def _slope_per_s(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t, y) points; 0 with fewer than two points."""
    if len(points) < 2:
        return 0.0
    ts = [t for t, _ in points]
    ys = [y for _, y in points]
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    var = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in points) / var if var else 0.0


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start broker and consumer, produce at the set rate while sampling; return the document."""
    samples: list[dict[str, Any]] = []
    statuses: list[dict[str, Any]] = []
    async with broker_process(QUEUES) as (addr, broker_pid):
        await create_topic(addr, TOPIC, QUEUES)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _CONSUMER,
            addr,
            TOPIC,
            str(QUEUES),
            str(args.handler_ms / 1000),
            str(args.concurrency),
            str(args.sample),
            str(args.threshold),
            str(args.threshold_mib),
            str(args.pull_batch),
            STATUS_PREFIX,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            limit=1 << 20,
        )
        assert proc.stdin is not None
        assert proc.stdout is not None
        stdout = proc.stdout

        async def read_statuses() -> None:
            while line := await stdout.readline():
                text = line.decode(errors="replace")
                if text.startswith(STATUS_PREFIX):
                    statuses.append(json.loads(text[len(STATUS_PREFIX) :]))

        try:
            line = await asyncio.wait_for(stdout.readline(), 60)
            if line.strip() != b"ready":
                raise SystemExit(f"the consumer did not start: {line!r}")
            reader = asyncio.create_task(read_statuses())
            await asyncio.sleep(2.0)
            idle_rss = proc_rss_mib(proc.pid)
            t0 = time.time()
            cpu0 = proc_cpu_seconds(proc.pid)

            async def sampler() -> None:
                while True:
                    samples.append(
                        {
                            "t": time.time() - t0,
                            "rss_mib": proc_rss_mib(proc.pid),
                            "cpu_s": proc_cpu_seconds(proc.pid) - cpu0,
                            "broker_rss_mib": proc_rss_mib(broker_pid),
                        }
                    )
                    await asyncio.sleep(args.sample)

            sampling = asyncio.create_task(sampler())
            async with Producer(namesrv=addr, group="backlog-producer") as producer:
                production = await paced_send(
                    producer,
                    TOPIC,
                    rate=args.rate,
                    seconds=args.seconds,
                    body=b"x" * args.body,
                    stamp=False,
                )
            sampling.cancel()
            proc.stdin.close()
            await asyncio.wait_for(reader, 30)
        finally:
            if proc.returncode is None:
                try:
                    await asyncio.wait_for(proc.wait(), 30)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()

    for s in statuses:
        s["t"] -= t0
    half = args.seconds / 2
    last = [(s["t"], s["rss_mib"]) for s in samples if s["t"] >= half]
    slope = _slope_per_s(last)
    drift = slope * (args.seconds - half)
    growth = statistics.median([y for _, y in last]) - idle_rss if last else float("nan")
    tolerance = max(1.0, 0.05 * growth)
    bound_per_queue = args.threshold + args.pull_batch
    max_cached = max((s["cached_count"] for s in statuses), default=0)
    max_queue_cached = max((s["max_queue_cached"] for s in statuses), default=0)
    max_cached_mib = max((s["cached_bytes"] for s in statuses), default=0) / 2**20
    plateau_cached = statistics.median(
        [s["cached_count"] for s in statuses if s["t"] >= half] or [0]
    )
    bounded = max_queue_cached <= bound_per_queue and max_cached_mib <= QUEUES * args.threshold_mib
    flat = abs(drift) <= tolerance
    consumed = statuses[-1]["consumed"] if statuses else 0
    return {
        "benchmark": "backlog",
        "python": sys.version,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "settings": {
            "seconds": args.seconds,
            "rate": args.rate,
            "body_bytes": args.body,
            "handler_ms": args.handler_ms,
            "concurrency": args.concurrency,
            "queues": QUEUES,
            "pull_threshold_for_queue": args.threshold,
            "pull_threshold_size_for_queue_mib": args.threshold_mib,
            "pull_batch_size": args.pull_batch,
            "sample_s": args.sample,
        },
        "production": production,
        "consumed": consumed,
        "consume_rate": consumed / args.seconds,
        "idle_rss_mib": idle_rss,
        "peak_rss_mib": max((s["rss_mib"] for s in samples), default=float("nan")),
        "last_half_rss_median_mib": statistics.median([y for _, y in last] or [float("nan")]),
        "growth_mib": growth,
        "last_half_slope_mib_per_min": slope * 60,
        "last_half_drift_mib": drift,
        "flat_tolerance_mib": tolerance,
        "flat": flat,
        "max_cached_messages": max_cached,
        "max_queue_cached_messages": max_queue_cached,
        "cached_bound_per_queue": bound_per_queue,
        "max_cached_mib": max_cached_mib,
        "plateau_cached_messages": plateau_cached,
        "rss_per_cached_message_bytes": growth * 2**20 / plateau_cached if plateau_cached else None,
        "bounded": bounded,
        "met": bounded and flat,
        "samples": samples,
        "statuses": statuses,
    }


def _report(r: dict[str, Any]) -> None:
    """Print the figures and the verdict."""
    s = r["settings"]
    print()
    print(
        f"backlog: {r['production']['sent']:,} sent at {s['rate']:.0f}/s, "
        f"{r['consumed']:,} consumed ({r['consume_rate']:.0f}/s, handler {s['handler_ms']} ms "
        f"x {s['concurrency']})"
    )
    print(
        f"consumer RSS: idle {r['idle_rss_mib']:.1f} MiB, peak {r['peak_rss_mib']:.1f} MiB, "
        f"last-half median {r['last_half_rss_median_mib']:.1f} MiB"
    )
    print(
        f"last-half slope {r['last_half_slope_mib_per_min']:+.2f} MiB/min "
        f"(drift {r['last_half_drift_mib']:+.2f} MiB, tolerance {r['flat_tolerance_mib']:.2f})"
    )
    print(
        f"cached: max {r['max_cached_messages']:,} messages ({r['max_cached_mib']:.1f} MiB), "
        f"max per queue {r['max_queue_cached_messages']} (bound {r['cached_bound_per_queue']})"
    )
    verdict = "met" if r["met"] else "missed"
    print(f"P6: bounded={r['bounded']} flat={r['flat']}: {verdict}")


def main() -> int:
    """Parse the command line, run the benchmark, print and save the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120.0, help="production time (<= 180)")
    ap.add_argument("--rate", type=float, default=500.0, help="messages sent per second")
    ap.add_argument("--body", type=int, default=1024, help="body bytes")
    ap.add_argument("--handler-ms", type=float, default=100.0, help="handler time per message")
    ap.add_argument("--concurrency", type=int, default=16, help="handler calls at once")
    ap.add_argument("--threshold", type=int, default=1000, help="pull_threshold_for_queue")
    ap.add_argument("--threshold-mib", type=int, default=100, help="... size, MiB per queue")
    ap.add_argument("--pull-batch", type=int, default=32, help="the consumer's pull_batch_size")
    ap.add_argument("--sample", type=float, default=1.0, help="seconds between samples")
    ap.add_argument("--quick", action="store_true", help="40 s of production at 1000/s")
    ap.add_argument("--output", type=Path, help="write the JSON here instead")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.rate = 40.0, 1000.0
    res = asyncio.run(run(args))
    _report(res)
    RESULTS.mkdir(exist_ok=True)
    out = args.output or RESULTS / f"backlog-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
