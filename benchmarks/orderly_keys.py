"""Orderly drain ordered by key vs ordered by queue, with a 10 ms handler.

One queue holds ``--keys`` keys x ``--per-key`` numbered messages, each sent with
``sharding_key`` (so it carries ``__SHARDINGKEY``), the keys taking turns. An orderly
``PushConsumer`` whose ``async def`` handler awaits ``--handler-ms`` (a database round trip)
drains it twice, in one run, against one embedded broker:

* ``order_by="queue"`` (every RocketMQ client's orderly consumption: one call per queue at a
  time), whose floor is ``keys x per_key x handler``;
* ``order_by="sharding_key"`` (one call per key at a time, the keys of the queue side by side
  up to ``concurrency``), whose floor is ``per_key x handler``.

Each drain is timed from the first handler call to the end of the last one; both check that
every key arrived in order and count the most calls of one key running at once (must be 1).
Prints both figures and the speed-up, and writes ``benchmarks/results/orderly_keys-<stamp>.json``.

    python benchmarks/orderly_keys.py [--keys 20] [--per-key 100] [--handler-ms 10] [--quick]

The default run takes about half a minute (the queue-ordered drain is most of it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker

RESULTS = Path(__file__).parent / "results"
TOPIC = "OrderlyKeysBench"


async def fill(broker: EmbeddedBroker, keys: int, per_key: int) -> rmq.MessageQueue:
    """Send every message to queue 0, keys taking turns; returns the queue."""
    mq = rmq.MessageQueue(TOPIC, "broker-a", 0)  # the embedded broker's default name
    async with rmq.Producer(namesrv=broker.address, group="orderly-keys-bench") as producer:
        for n in range(per_key):
            await asyncio.gather(
                *(
                    producer.send(
                        rmq.Message(TOPIC, f"k{k}:{n}".encode()), queue=mq, sharding_key=f"k{k}"
                    )
                    for k in range(keys)
                )
            )
    return mq


async def drain(
    broker: EmbeddedBroker, order_by: str, total: int, handler_s: float, concurrency: int
) -> dict[str, Any]:
    """Drain the topic with a fresh group ordered by ``order_by``; the figures of the drain."""
    seqs: dict[str, list[int]] = defaultdict(list)
    running: dict[str | None, int] = defaultdict(int)
    peak_key = peak = now = 0
    first = last = 0.0
    done = asyncio.Event()
    consumer = rmq.PushConsumer(
        group=f"orderly-keys-{order_by}",
        namesrv=broker.address,
        orderly=True,
        order_by=order_by,  # type: ignore[arg-type]
        consume_from="first",
        concurrency=concurrency,
        pull_threshold_for_queue=total,
    )
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        nonlocal peak_key, peak, now, first, last
        if not first:
            first = time.perf_counter()
        key = msgs[0].body.split(b":")[0].decode()
        running[key] += 1
        now += 1
        peak_key, peak = max(peak_key, running[key]), max(peak, now)
        await asyncio.sleep(handler_s)
        running[key] -= 1
        now -= 1
        for m in msgs:
            k, n = m.body.decode().split(":")
            seqs[k].append(int(n))
        last = time.perf_counter()
        if sum(map(len, seqs.values())) >= total:
            done.set()

    async with consumer:
        await asyncio.wait_for(done.wait(), timeout=max(120.0, total * handler_s * 3))
    seconds = last - first
    in_order = all(seq == list(range(len(seq))) for seq in seqs.values())
    return {
        "order_by": order_by,
        "messages": total,
        "seconds": seconds,
        "msgs_per_s": total / seconds,
        "every_key_in_order": in_order,
        "max_calls_of_one_key_at_once": peak_key,
        "max_calls_at_once": peak,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    total = args.keys * args.per_key
    handler_s = args.handler_ms / 1000
    with tempfile.TemporaryDirectory(prefix="orderly-keys-") as tmp:
        async with EmbeddedBroker(port=0, data_dir=Path(tmp)) as broker:
            await fill(broker, args.keys, args.per_key)
            queue = await drain(broker, "queue", total, handler_s, args.concurrency)
            keyed = await drain(broker, "sharding_key", total, handler_s, args.concurrency)
    return {
        "benchmark": "orderly_keys",
        "python": sys.version,
        "platform": platform.platform(),
        "keys": args.keys,
        "per_key": args.per_key,
        "handler_ms": args.handler_ms,
        "concurrency": args.concurrency,
        "queue_ordered": queue,
        "key_ordered": keyed,
        "speedup": keyed["msgs_per_s"] / queue["msgs_per_s"],
        "queue_ordered_floor_s": total * handler_s,
        "key_ordered_floor_s": args.per_key * handler_s,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keys", type=int, default=20)
    ap.add_argument("--per-key", type=int, default=100)
    ap.add_argument("--handler-ms", type=float, default=10.0)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--quick", action="store_true", help="20 keys x 20 messages (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.per_key = 20
    doc = asyncio.run(run(args))
    q, k = doc["queue_ordered"], doc["key_ordered"]
    print(f"{args.keys} keys x {args.per_key} messages in one queue, handler {args.handler_ms} ms")
    for name, d, floor in (
        ("ordered by queue", q, doc["queue_ordered_floor_s"]),
        ("ordered by key  ", k, doc["key_ordered_floor_s"]),
    ):
        print(
            f"  {name}: {d['seconds']:6.2f} s  {d['msgs_per_s']:8,.0f} msg/s  "
            f"(floor {floor:.2f} s; in order: {d['every_key_in_order']}, "
            f"max calls of a key at once: {d['max_calls_of_one_key_at_once']}, "
            f"max calls at once: {d['max_calls_at_once']})"
        )
    print(f"  key-ordered / queue-ordered drain rate: {doc['speedup']:.1f}x")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"orderly_keys-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")
    ok = all(d["every_key_in_order"] and d["max_calls_of_one_key_at_once"] == 1 for d in (q, k))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
