"""What the RocketMQ 5 benchmarks (``pop_drain``, ``timer_precision``, ``trace_overhead``)
share: a broker to run against (the embedded one in this process, or a 5.x Apache broker
started from ``--rocketmq-home`` on loopback), a push consumer drained to a count, and the
results file."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiorocket as rmq  # noqa: E402
from aiorocket.embedded import BrokerConfig, EmbeddedBroker  # noqa: E402

RESULTS = Path(__file__).parent / "results"

#: ``run(namesrv)``: the benchmark proper, its figures
Run = Callable[[str], Awaitable[dict[str, Any]]]


def on_broker(args: argparse.Namespace, topic: str, queues: int, run: Run) -> dict[str, Any]:
    """``run`` against the broker ``args.rocketmq_home`` names (``topic`` created there with
    ``queues`` queues first), else against an embedded broker of ``queues`` default queues."""
    if args.rocketmq_home is None:

        async def embedded() -> dict[str, Any]:
            with tempfile.TemporaryDirectory() as d:
                config = BrokerConfig(default_queues=queues)
                async with EmbeddedBroker(data_dir=Path(d), config=config) as broker:
                    return await run(broker.address)

        return asyncio.run(embedded())
    os.environ["ROCKETMQ_HOME"] = args.rocketmq_home
    from tests.interop.apache._groups import create_topic
    from tests.interop.apache.cluster import JavaCluster
    from tests.interop.apache.install import install

    found = install()
    assert found is not None
    with tempfile.TemporaryDirectory() as d, JavaCluster(Path(d), install=found) as cluster:

        async def apache() -> dict[str, Any]:
            await create_topic([cluster.broker_addr("broker-a")], topic, queues)
            return await run(cluster.namesrv)

        return asyncio.run(apache())


async def drain(
    namesrv: str,
    group: str,
    topic: str,
    n: int,
    *,
    batch: int = 1,
    keep: list[rmq.PushConsumer] | None = None,
    **settings: Any,
) -> float:
    """Seconds a push consumer of ``group`` (``settings``) takes to hand ``n`` messages of
    ``topic`` (from the first offset) to a no-op handler of ``batch``-message calls; the
    consumer is appended to ``keep`` (to read its statistics once closed)."""
    got = 0
    done = asyncio.Event()
    consumer = rmq.PushConsumer(
        group=group,
        namesrv=namesrv,
        consume_from="first",
        consume_batch_size=batch,
        shutdown_grace=30.0,
        **settings,
    )
    consumer.subscribe(topic)
    if keep is not None:
        keep.append(consumer)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        nonlocal got
        got += len(msgs)
        if got >= n:
            done.set()

    start = time.perf_counter()
    async with consumer:
        await asyncio.wait_for(done.wait(), timeout=600)
        return time.perf_counter() - start


def write_results(name: str, args: argparse.Namespace, result: dict[str, Any]) -> None:
    """``benchmarks/results/<name>-<timestamp>.json``, and say where."""
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    broker = "apache" if getattr(args, "rocketmq_home", None) else "embedded"
    out.write_text(json.dumps({"broker": broker, "args": vars(args), **result}, indent=2))
    print(f"written {out.relative_to(ROOT)}")
