"""POP drain beside pull drain of the same backlog, same broker, same run.

One backlog of ``--messages`` messages (``--queues`` queues) on one broker; then, in turn and
``--rounds`` times, a fresh consumer group drains all of it (from the first offset) with:

* ``pull``: a push consumer in pull mode (client-side rebalance, offsets committed);
* ``pop``: a push consumer in POP mode (``consume_mode="pop"``: acks, no rebalance);
* ``simple``: a :class:`~aiorocket.SimpleConsumer` doing ``receive(32)`` + ``ack_all``.

Each figure is messages a second from the consumer's start until the last message reached the
handler (POP: and every ack was sent). The broker is the embedded one (in this process, as the
other drain benchmarks run it), or, with ``--rocketmq-home``, a 5.x Apache broker started
from that install on loopback. Writes ``benchmarks/results/pop_drain-<timestamp>.json``.

    python benchmarks/pop_drain.py [--messages 20000] [--queues 4] [--rounds 2]
        [--rocketmq-home PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _five import drain, on_broker, write_results  # noqa: E402

import aiorocket as rmq  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TOPIC = "PopDrainBench"
MODES = ("pull", "pop", "simple")


async def fill(namesrv: str, n: int) -> None:
    """The backlog: ``n`` 100-byte messages."""
    body = b"x" * 100
    async with rmq.Producer(namesrv=namesrv, group="PopDrainProducer") as p:
        for start in range(0, n, 500):
            await asyncio.gather(
                *(p.send(rmq.Message(TOPIC, body)) for _ in range(min(500, n - start)))
            )


async def drain_simple(namesrv: str, group: str, n: int) -> float:
    """Seconds four simple consumers take to receive and ack all ``n``."""
    got = 0

    async def member(c: rmq.SimpleConsumer) -> None:
        nonlocal got
        while got < n:
            msgs = await c.receive(32)
            if msgs:
                await c.ack_all(msgs)
                got += len(msgs)

    start = time.perf_counter()
    async with AsyncExitStack() as stack:
        members = []
        for _ in range(4):
            c = rmq.SimpleConsumer(
                group=group, namesrv=namesrv, consume_from="first", await_duration=1.0
            )
            c.subscribe(TOPIC)
            members.append(await stack.enter_async_context(c))
        await asyncio.wait_for(asyncio.gather(*(member(c) for c in members)), timeout=600)
        took = time.perf_counter() - start
    return took


async def run(namesrv: str, args: argparse.Namespace) -> dict[str, Any]:
    await fill(namesrv, args.messages)
    rates: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            group = f"PopDrain-{mode}-{r}-{os.getpid()}"
            if mode == "simple":
                took = await drain_simple(namesrv, group, args.messages)
            else:
                took = await drain(
                    namesrv, group, TOPIC, args.messages, batch=32, consume_mode=mode
                )
            rates[mode].append(args.messages / took)
            print(f"round {r + 1} {mode:>6}: {args.messages / took:>10,.0f} msg/s", flush=True)
    med = {m: statistics.median(v) for m, v in rates.items()}
    print()
    for mode in MODES:
        print(f"{mode:>6}: {med[mode]:>10,.0f} msg/s  ({med[mode] / med['pull']:.2f}x pull)")
    return {"rates": rates, "median": med}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--messages", type=int, default=20_000)
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rocketmq-home", default=None, help="a 5.x Apache install to run against")
    args = p.parse_args()
    result = on_broker(args, TOPIC, args.queues, lambda namesrv: run(namesrv, args))
    write_results("pop_drain", args, result)


if __name__ == "__main__":
    main()
