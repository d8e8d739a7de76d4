"""A pull-consumer process for multi-process tests: records every message it processed as a JSON
line, in the format of ``consumer_proc.py``.

    python pull_consumer_proc.py --namesrv HOST:PORT --group G --topic T --out FILE --name NAME
        [--mode poll|iter] [--batch N] [--sleep S] [--pull-threshold N] [--memory]

Lines written to ``--out`` (flushed before the next message is asked for, so what the
consumer acknowledges is on disk even after a SIGKILL):

* ``{"k": "d", "c": name, "q": queue_id, "o": offset, "id": body, "r": reconsume_times,
  "t": time}`` per processed message;
* ``{"k": "a", "c": name, "t": time, "queues": [queue ids]}`` with the owned queues of the
  topic, every 100 ms;
* with ``--memory``, ``{"k": "m", "c": name, "t": time, "rss_kb": ..., "peak_kb": ...,
  "cached": largest per-queue cache, "buffered": messages cached in all}`` every 200 ms.

``--mode poll`` reads ``poll(max_messages=--batch)`` batches, ``--mode iter`` uses ``async
for``; ``--sleep`` pauses that long per batch (per message with ``iter``): a slow application.
Prints ``READY`` once started. SIGTERM or SIGINT ends the reading loop and leaves ``async
with`` (a clean close: everything processed is committed; exit 0).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path

import aiorocket as rmq
from tests._harness.child import JsonLines, member_parser, stop_on_signals, until_stopped


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def main(args: argparse.Namespace) -> int:
    out = JsonLines(args.out, args.name)
    consumer = rmq.PullConsumer(
        group=args.group,
        namesrv=args.namesrv,
        consume_from="first",
        rebalance_interval=args.rebalance_interval,
        auto_commit_interval=args.commit_interval,
        pull_threshold_for_queue=args.pull_threshold,
    )
    consumer.subscribe(args.topic)

    def record(msgs: list[rmq.ReceivedMessage]) -> None:
        out.deliveries(msgs, lambda body: body.decode(errors="replace")[:40])

    loop = asyncio.get_running_loop()
    closing: list[asyncio.Task[None]] = []

    def on_signal() -> None:
        if args.mode == "iter" and not closing:
            # Ends `async for` (a reader waiting for a message has processed the previous one).
            closing.append(loop.create_task(consumer.close()))

    stop = stop_on_signals(on_signal)
    next_memory = 0.0

    def snapshot() -> None:
        nonlocal next_memory
        now = time.time()
        held = sorted(mq.queue_id for mq in consumer.assignment() if mq.topic == args.topic)
        out.write({"k": "a", "c": args.name, "t": now, "queues": held})
        if args.memory and now >= next_memory:
            next_memory = now + 0.2
            owned = list(consumer._queues.entries.values())
            out.write(
                {
                    "k": "m",
                    "c": args.name,
                    "t": now,
                    "rss_kb": _rss_kb(),
                    "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                    "cached": max((o.pq.cached_count for o in owned), default=0),
                    "buffered": sum(o.pq.cached_count for o in owned),
                }
            )

    async with consumer:
        print("READY", flush=True)
        watcher = asyncio.create_task(until_stopped(stop, snapshot))
        if args.mode == "poll":
            while not stop.is_set():
                batch = await consumer.poll(max_messages=args.batch, timeout=0.1)
                if batch and args.sleep:
                    await asyncio.sleep(args.sleep)
                record(batch)
        else:
            async for msg in consumer:
                if args.sleep:
                    await asyncio.sleep(args.sleep)
                record([msg])
                if stop.is_set():
                    break
        stop.set()
        await watcher
    out.write({"k": "a", "c": args.name, "t": time.time(), "queues": [], "closed": True})
    out.close()
    return 0


if __name__ == "__main__":
    parser = member_parser()
    parser.add_argument("--mode", choices=("poll", "iter"), default="poll")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--pull-threshold", type=int, default=1000)
    parser.add_argument("--rebalance-interval", type=float, default=1.0)
    parser.add_argument("--commit-interval", type=float, default=1.0)
    parser.add_argument("--memory", action="store_true")
    sys.exit(asyncio.run(main(parser.parse_args())))
