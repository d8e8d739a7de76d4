"""How precisely timer messages arrive: ``--count`` messages due at +1 s ... +``--spread`` s.

Each message is sent with ``deliver_at`` (absolute, ms) and consumed by a push consumer; per
message it records how late the broker stored the delivered copy in the real topic (its store
time minus the due time: the broker's own precision) and how late the handler saw it (the
consumer's pull latency on top). Reports early deliveries (must be 0), median and max lateness.
Runs against the embedded broker, or with ``--rocketmq-home`` a 5.x Apache broker started from
that install (whose timer wheel works in ``timerPrecisionMs`` slots, 1 s by default). Writes
``benchmarks/results/timer_precision-<timestamp>.json``.

    python benchmarks/timer_precision.py [--count 50] [--spread 60] [--rocketmq-home PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _five import on_broker, write_results  # noqa: E402

import aiorocket as rmq  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TOPIC = "TimerPrecision"


async def run(namesrv: str, args: argparse.Namespace) -> dict[str, Any]:
    due: dict[str, int] = {}
    stored_late: list[int] = []
    seen_late: list[int] = []
    done = asyncio.Event()
    consumer = rmq.PushConsumer(group=f"TimerPrecision-{os.getpid()}", namesrv=namesrv)
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        now = int(time.time() * 1000)
        for m in msgs:
            d = due[m.body.decode()]
            stored_late.append(m.store_timestamp - d)
            seen_late.append(now - d)
        if len(seen_late) >= args.count:
            done.set()

    async with consumer, rmq.Producer(namesrv=namesrv, group="TimerPrecisionP") as producer:
        start = datetime.now(UTC)
        step = (args.spread - 1) / max(1, args.count - 1)
        for i in range(args.count):
            at = start + timedelta(seconds=1 + i * step)
            body = f"t{i}"
            due[body] = int(at.timestamp() * 1000)
            await producer.send(rmq.Message(TOPIC, body), deliver_at=at)
        await asyncio.wait_for(done.wait(), timeout=args.spread + 120)
    result = {
        "early": sum(1 for x in stored_late if x < 0),
        "stored_late_ms": {"median": statistics.median(stored_late), "max": max(stored_late)},
        "seen_late_ms": {"median": statistics.median(seen_late), "max": max(seen_late)},
        "stored": stored_late,
    }
    print(f"early: {result['early']} of {args.count}")
    print(f"stored late (ms): median {statistics.median(stored_late)}, max {max(stored_late)}")
    print(f"seen late (ms):   median {statistics.median(seen_late)}, max {max(seen_late)}")
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=50)
    p.add_argument("--spread", type=float, default=60.0)
    p.add_argument("--rocketmq-home", default=None, help="a 5.x Apache install to run against")
    args = p.parse_args()
    result = on_broker(args, TOPIC, 4, lambda namesrv: run(namesrv, args))
    write_results("timer_precision", args, result)


if __name__ == "__main__":
    main()
