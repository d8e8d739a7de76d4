"""``aiorocket demo``: the orders app of ``examples/orders.py`` on an in-process embedded broker.

It starts an [`EmbeddedBroker`][aiorocket.embedded.EmbeddedBroker] on a temporary data directory,
runs the app (a concurrent billing subscriber with transient failures retried through
``%RETRY%`` and one poison order that ends in ``%DLQ%``; an orderly fulfilment subscriber that
checks each order's event sequence), produces orders for about 25 seconds, shows live progress
and ends with a summary. It exits 0 only when every event was handled, the poison order was
dead-lettered and no order saw its events out of sequence.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["add_demo_parser", "run_demo", "run_demo_command"]


def add_demo_parser(sub: Any) -> None:
    """Add the ``demo`` subcommand to an ``argparse`` subparsers object."""
    p: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help="run the orders demo on an in-process embedded broker",
        description="The orders app of examples/orders.py on an embedded broker in this "
        "process (no setup): a billing subscriber whose transient failures are retried "
        "through %RETRY% and whose poison order ends in %DLQ%, and an orderly fulfilment "
        "subscriber checking each order's event sequence; live progress, then a summary. "
        "Exits 0 when every event was handled in sequence and the poison order was "
        "dead-lettered.",
    )
    p.add_argument(
        "--messages", type=int, default=7_500, help="order events to produce (default 7500)"
    )
    p.add_argument("--duration", type=float, default=25.0, help="seconds to spread production over")
    p.add_argument("--seed", type=int, default=7, help="random seed (which orders are flaky)")


def run_demo_command(args: argparse.Namespace) -> int:
    """Entry point of ``aiorocket demo``."""
    if args.messages < 30:
        print("aiorocket demo: --messages must be at least 30", file=sys.stderr)
        return 2
    return asyncio.run(run_demo(messages=args.messages, duration=args.duration, seed=args.seed))


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class _Run:
    """What one demo run measured."""

    produced: int = 0
    elapsed: float = 0.0
    production: float = 0.0
    handled: int = 0
    retried: int = 0
    dead: int = 0
    latencies: list[float] = field(default_factory=list)


async def run_demo(*, messages: int, duration: float, seed: int = 7) -> int:
    """Run the demo; returns the process exit code."""
    # Imported here so that `aiorocket --help` stays fast.
    from aiorocket import Admin
    from aiorocket.cli._orders import EVENTS, POISON_ORDER, Ledger, build_app
    from aiorocket.embedded import BrokerConfig, EmbeddedBroker

    rng = random.Random(seed)
    orders = messages // len(EVENTS)
    flaky = frozenset(
        rng.sample([o for o in range(1, orders + 1) if o != POISON_ORDER], k=max(1, orders // 100))
    )
    ledger = Ledger(flaky_orders=flaky)
    consumer_settings = {
        "consume_from": "first",
        "rebalance_interval": 2.0,
        "offset_persist_interval": 1.0,
        "shutdown_grace": 5.0,
    }
    with tempfile.TemporaryDirectory(prefix="aiorocket-demo-") as data:
        config = BrokerConfig(default_queues=8)
        async with EmbeddedBroker(port=0, data_dir=Path(data), config=config) as broker:
            print(f"embedded broker on {broker.address} (data in {data})")
            # As an operator would (a name server does not create topics when consumers look
            # them up): the subscribers find the topic at start, with all 8 queues.
            async with Admin(namesrv=broker.address) as admin:
                await admin.create_topic("orders", queues=8)
                await admin.create_topic("order-status", queues=2)
            app = build_app(broker.address, ledger, consumer=consumer_settings)
            async with app:
                print("app started: billing (concurrent) and fulfilment (orderly) subscribers")
                run = await _drive(app, ledger, orders, messages, duration)
    return _summary(run, ledger, orders, len(flaky))


async def _drive(app: Any, ledger: Any, orders: int, messages: int, duration: float) -> _Run:
    """Produce the orders over ``duration`` seconds with live progress, then wait (60 s at
    most) until every event was handled and the poison order dead-lettered."""
    from aiorocket.cli._orders import EVENTS, OrderEvent

    run = _Run()
    t0 = time.perf_counter()

    async def produce_order(order_id: int, start_at: float) -> None:
        await asyncio.sleep(max(0.0, start_at - time.perf_counter()))
        for seq, event in enumerate(EVENTS):
            body = OrderEvent(order_id=order_id, seq=seq, event=event, amount_cents=100 * order_id)
            # One sharding key per order: its events share a queue, so the orderly
            # subscriber sees created → paid → shipped in sequence.
            await app.publish(
                "orders", body, tags=event, keys=[str(order_id)], sharding_key=str(order_id)
            )
            run.produced += 1

    tty = sys.stdout.isatty()

    async def progress() -> None:
        # A live line on a terminal; a plain line every 2 s in a log.
        while True:
            await asyncio.sleep(0.5 if tty else 2.0)
            line = _progress(app, ledger, run.produced, messages, t0)
            if tty:
                print("\r\x1b[2K" + line, end="", flush=True)
            else:
                print(line, flush=True)

    ticker = asyncio.create_task(progress())
    try:
        async with asyncio.TaskGroup() as tg:
            for i in range(orders):
                tg.create_task(produce_order(i + 1, t0 + duration * i / orders))
        run.production = time.perf_counter() - t0
        expected_billed = orders - 1  # every order but the poison one
        deadline = time.perf_counter() + 60
        while time.perf_counter() < deadline and not (  # noqa: ASYNC110 - counters
            len(ledger.billed) >= expected_billed
            and ledger.fulfilled_events >= orders * len(EVENTS)
            and _dead_lettered(app) >= 1
        ):
            await asyncio.sleep(0.1)
    finally:
        ticker.cancel()
    run.elapsed = time.perf_counter() - t0
    final = _progress(app, ledger, run.produced, messages, t0)
    print(("\r\x1b[2K" if tty else "") + final)
    stats = app.statistics()
    run.latencies = [x for s in stats.values() for x in s.latencies_ms]
    run.handled = sum(s.handled for s in stats.values())
    run.retried = sum(s.failed for s in stats.values())
    run.dead = _dead_lettered(app)
    return run


def _summary(run: _Run, ledger: Any, orders: int, flaky: int) -> int:
    """Print the summary; the exit code (0: complete and in order)."""
    from aiorocket.cli._orders import EVENTS, POISON_ORDER

    complete = (
        len(ledger.billed) == orders - 1
        and ledger.fulfilled_events == orders * len(EVENTS)
        and run.dead == 1
    )
    ok = complete and ledger.order_violations == 0
    verdict = "OK" if ok else ("INCOMPLETE" if not complete else "ORDER VIOLATED")
    latencies = run.latencies
    rows = [
        ("produced", f"{run.produced}"),
        (
            "consumed",
            f"{run.handled} (billed {len(ledger.billed)} orders, "
            f"fulfilled {ledger.fulfilled_events} events)",
        ),
        ("retried", f"{run.retried} ({flaky} flaky orders, retried via %RETRY%billing)"),
        ("dead-lettered", f"{run.dead} (order {POISON_ORDER} in %DLQ%billing after 3 attempts)"),
        (
            "order violations",
            f"{ledger.order_violations} (in-order replays: {ledger.redelivered_in_order})",
        ),
        (
            "throughput",
            f"{run.handled / run.elapsed:,.0f} msgs/s over {run.elapsed:.1f} s "
            f"(production took {run.production:.1f} s)",
        ),
        (
            "store->handler",
            f"p50 {_percentile(latencies, 0.5):.1f} ms, p99 {_percentile(latencies, 0.99):.1f} ms",
        ),
        ("result", verdict),
    ]
    print("\nsummary")
    for name, value in rows:
        print(f"  {name:<18} {value}")
    return 0 if ok else 1


def _dead_lettered(app: Any) -> int:
    return int(sum(s.dead_lettered for s in app.statistics().values()))


def _progress(app: Any, ledger: Any, produced: int, total: int, t0: float) -> str:
    stats = app.statistics().values()
    handled = sum(s.handled for s in stats)
    retried = sum(s.failed for s in stats)
    elapsed = max(time.perf_counter() - t0, 1e-6)
    lat = [x for s in stats for x in list(s.latencies_ms)[-500:]]
    p50 = statistics.median(lat) if lat else 0.0
    return (
        f"[{elapsed:5.1f}s] produced {produced}/{total}  consumed {handled}"
        f"  billed {len(ledger.billed)}  fulfilled {ledger.fulfilled_events}"
        f"  retried {retried}  DLQ {_dead_lettered(app)}  violations {ledger.order_violations}"
        f"  {handled / elapsed:,.0f} msg/s  latency p50 {p50:.1f} ms"
    )
