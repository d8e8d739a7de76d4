"""Request/reply round trip beside a plain send's, at one in flight, on the embedded broker.

One embedded broker; an aiorocket responder (a ``PushConsumer`` answering every request with
``Producer.reply``) and a requester in this process. Measured one after the other, each after
a warm-up, every call awaited before the next:

* ``Producer.request``: request stored → pulled by the responder (a held pull woken by the
  store) → reply sent → pushed by the broker to the requester (docs/protocol.md §13);
* ``Producer.send``: the message stored and acknowledged, the peer every request includes.

Prints p50 / p99 / max of both and their ratio, and writes
``benchmarks/results/request_reply-<stamp>.json``.

    python benchmarks/request_reply.py [--requests 2000] [--warmup 200] [--quick]

The default run takes about 15 seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker

RESULTS = Path(__file__).parent / "results"
TOPIC = "RequestReplyBench"


def summary(samples_ms: list[float]) -> dict[str, float]:
    """p50, p99, max and mean of ``samples_ms``."""
    ordered = sorted(samples_ms)
    return {
        "p50": statistics.median(ordered),
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max": ordered[-1],
        "mean": statistics.fmean(ordered),
        "samples": len(ordered),
    }


async def timed(calls: int, call: Any) -> list[float]:
    out = []
    for i in range(calls):
        t0 = time.perf_counter()
        await call(i)
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="request-reply-") as tmp:
        async with EmbeddedBroker(port=0, data_dir=Path(tmp)) as broker:
            ns = broker.address
            async with rmq.Admin(namesrv=ns) as admin:
                await admin.create_topic(TOPIC, queues=4)
            consumer = rmq.PushConsumer(group="rr-bench-responder", namesrv=ns)
            consumer.subscribe(TOPIC)
            async with (
                rmq.Producer(namesrv=ns, group="rr-bench-replies") as replies,
                rmq.Producer(namesrv=ns, group="rr-bench-requester") as producer,
            ):

                @consumer.listener
                async def answer(
                    msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
                ) -> None:
                    for msg in msgs:
                        if "CORRELATION_ID" in msg.properties:
                            await replies.reply(msg, msg.body)

                async with consumer:  # started: its first rebalance took the queues

                    async def request(i: int) -> None:
                        reply = await producer.request(rmq.Message(TOPIC, b"%d" % i), timeout=10)
                        assert reply.body == b"%d" % i

                    async def send(i: int) -> None:
                        await producer.send(rmq.Message(TOPIC, b"%d" % i))

                    await timed(args.warmup, request)
                    req = await timed(args.requests, request)
                    await timed(args.warmup, send)
                    snd = await timed(args.requests, send)
    r, s = summary(req), summary(snd)
    return {
        "benchmark": "request_reply",
        "python": sys.version,
        "platform": platform.platform(),
        "requests": args.requests,
        "warmup": args.warmup,
        "request_ms": r,
        "send_ms": s,
        "p50_ratio": r["p50"] / s["p50"],
        "p99_ratio": r["p99"] / s["p99"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--quick", action="store_true", help="200 of each (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.requests, args.warmup = 200, 50
    doc = asyncio.run(run(args))
    r, s = doc["request_ms"], doc["send_ms"]
    print(f"one in flight, {args.requests} calls each after {args.warmup} warm-up calls")
    for name, d in (("request/reply", r), ("plain send   ", s)):
        print(f"  {name}: p50 {d['p50']:.3f} ms  p99 {d['p99']:.3f} ms  max {d['max']:.3f} ms")
    print(f"  request/send: p50 {doc['p50_ratio']:.2f}x  p99 {doc['p99_ratio']:.2f}x")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"request_reply-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(doc, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
