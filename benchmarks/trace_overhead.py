"""What message trace costs: pipelined send rate and per-message drain rate, trace off beside
trace on, same broker, same run, alternating ``--rounds`` times.

The broker is the embedded one in a child process (``aiorocket broker``), so this process's
CPU is the client's. ``send``: a producer keeps ``--in-flight`` sends going for ``--seconds``.
``drain``: a push consumer with a per-message handler drains ``--messages`` messages from the
first offset. With trace on every send writes a Pub record and every handler call SubBefore /
SubAfter records, batched by the trace dispatcher into ``RMQ_SYS_TRACE_TOPIC``. Prints the
medians and the on/off ratios; writes ``benchmarks/results/trace_overhead-<timestamp>.json``.

    python benchmarks/trace_overhead.py [--seconds 5] [--in-flight 256] [--messages 50000]
        [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _five import drain, write_results  # noqa: E402

import aiorocket as rmq  # noqa: E402
from tests._harness.child import started_broker_cli  # noqa: E402

RESULTS = Path(__file__).parent / "results"


async def send_rate(namesrv: str, topic: str, seconds: float, in_flight: int, trace: bool) -> float:
    """Acknowledged sends a second, ``in_flight`` at a time."""
    done = 0
    async with rmq.Producer(namesrv=namesrv, group=f"TraceBenchP{os.getpid()}", trace=trace) as p:
        await p.send(rmq.Message(topic, b"warm"))
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                await p.send(rmq.Message(topic, b"x" * 128))
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        took = time.perf_counter() - start
    return done / took


async def run(namesrv: str, args: argparse.Namespace) -> dict[str, Any]:
    topic = "TraceBench"
    async with rmq.Producer(namesrv=namesrv, group="TraceBenchFill") as p:
        for start in range(0, args.messages, 1000):
            await asyncio.gather(
                *(
                    p.send(rmq.Message(topic, b"y" * 128))
                    for _ in range(min(1000, args.messages - start))
                )
            )
    rates: dict[str, list[float]] = {"send off": [], "send on": [], "drain off": [], "drain on": []}
    dropped: list[int] = []  # handler calls whose trace records the dispatcher had to drop
    for r in range(args.rounds):
        for trace in (False, True):
            label = "on" if trace else "off"
            s = await send_rate(namesrv, "TraceBenchSend", args.seconds, args.in_flight, trace)
            rates[f"send {label}"].append(s)
            kept: list[rmq.PushConsumer] = []
            took = await drain(
                namesrv, f"TraceBench-{r}-{label}", topic, args.messages, trace=trace, keep=kept
            )
            d = args.messages / took
            rates[f"drain {label}"].append(d)
            tracer = kept[0].tracer
            lost = f"  trace records dropped {tracer.dropped:,}" if tracer is not None else ""
            if tracer is not None:
                dropped.append(tracer.dropped)
            print(
                f"round {r + 1} trace {label:>3}: send {s:>9,.0f}/s  drain {d:>9,.0f}/s{lost}",
                flush=True,
            )
    med = {k: statistics.median(v) for k, v in rates.items()}
    print()
    for what in ("send", "drain"):
        on, off = med[f"{what} on"], med[f"{what} off"]
        print(f"{what:>5}: off {off:>9,.0f}/s  on {on:>9,.0f}/s  ({on / off:.2f}x)")
    print(f"trace records dropped while draining: {dropped}")
    return {"rates": rates, "median": med, "dropped": dropped}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as d:
        proc, address = await started_broker_cli(Path(d), "--flush", "async")
        try:
            return await run(address, args)
        finally:
            proc.terminate()
            await proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--in-flight", type=int, default=256)
    p.add_argument("--messages", type=int, default=50_000)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    result = asyncio.run(main_async(args))
    write_results("trace_overhead", args, result)


if __name__ == "__main__":
    main()
