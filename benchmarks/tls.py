"""What TLS costs: producer throughput and push-consumer drain, TLS vs plain.

One embedded broker in a separate process, in TLS "permissive" mode, so the plain and the TLS
clients talk to the very same broker on the same port (certificates are made for the run with
``trustme`` in a temporary directory). For each transport, in alternation:

* produce: ``--messages`` messages of ``--size`` bytes, ``--in-flight`` sends pipelined;
* drain: a push consumer (no-op handler) reads them from the start of the topic.

Prints msgs/s of both transports and the TLS/plain ratio (median of ``--repeat`` runs). Not
part of ``run_all.py``.

    python benchmarks/tls.py [--messages 50000] [--size 128] [--repeat 3] [--loop uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trustme

from aiorocket import ConcurrentContext, Message, Producer, PushConsumer, ReceivedMessage

_LISTENING = re.compile(r"listening on (\d+\.\d+\.\d+\.\d+:\d+)")


def start_broker(tmp: Path) -> tuple[subprocess.Popen[str], str, Path]:
    """Start ``aiorocket broker`` in permissive TLS mode; its process, address and CA file."""
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert.private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiorocket",
            "broker",
            "--port",
            "0",
            "--data-dir",
            str(tmp / "data"),
            "--tls-cert",
            str(tmp / "server.pem"),
            "--tls-mode",
            "permissive",
            "--default-queues",
            "8",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = _LISTENING.search(line)
    if m is None:
        proc.kill()
        raise SystemExit(f"broker did not start: {line!r}")
    return proc, m.group(1), tmp / "ca.pem"


async def produce(namesrv: str, topic: str, n: int, size: int, in_flight: int, **tls: Any) -> float:
    """Send ``n`` messages with ``in_flight`` pipelined; msgs/s."""
    body = b"x" * size
    async with Producer(namesrv=namesrv, **tls) as producer:
        await producer.send(Message(topic, body))  # route and connections before the clock
        per_worker, extra = divmod(n - 1, in_flight)

        async def worker(count: int) -> None:
            for _ in range(count):
                await producer.send(Message(topic, body))

        start = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            for i in range(in_flight):
                tg.create_task(worker(per_worker + (1 if i < extra else 0)))
        return (n - 1) / (time.perf_counter() - start)


async def drain(namesrv: str, topic: str, group: str, n: int, **tls: Any) -> float:
    """Consume ``n`` messages from the start of ``topic``; msgs/s from the first message on."""
    seen = 0
    first = 0.0
    done = asyncio.Event()
    consumer = PushConsumer(
        group=group, namesrv=namesrv, consume_from="first", consume_batch_size=32, **tls
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def on(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        nonlocal seen, first
        if not first:
            first = time.perf_counter()
        seen += len(msgs)
        if seen >= n:
            done.set()

    async with consumer:
        await asyncio.wait_for(done.wait(), 600)
        return seen / (time.perf_counter() - first)


async def run(args: argparse.Namespace, namesrv: str, ca: Path) -> dict[str, list[float]]:
    """Alternate plain and TLS runs; every figure, by name."""
    out: dict[str, list[float]] = {}
    transports: dict[str, dict[str, Any]] = {"plain": {}, "tls": {"tls": True, "tls_ca": ca}}
    for r in range(args.repeat):
        for name, tls in transports.items():
            topic = f"Bench_{name}_{r}_{int(time.time())}"
            tput = await produce(namesrv, topic, args.messages, args.size, args.in_flight, **tls)
            rate = await drain(namesrv, topic, f"g_{topic}", args.messages, **tls)
            out.setdefault(f"produce {name}", []).append(tput)
            out.setdefault(f"drain {name}", []).append(rate)
            print(f"run {r + 1} {name:5}: produce {tput:9,.0f} msg/s  drain {rate:9,.0f} msg/s")
    return out


def main() -> None:
    """Parse the options, run, print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="aiorocket-tls-bench-") as d:
        proc, namesrv, ca = start_broker(Path(d))
        try:
            if args.loop == "uvloop":
                import uvloop

                figures = uvloop.run(run(args, namesrv, ca))
            else:
                figures = asyncio.run(run(args, namesrv, ca))
        finally:
            proc.terminate()
            proc.wait(30)
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"\n{args.messages} messages of {args.size} B, {args.loop}, median of {args.repeat}")
    for what in ("produce", "drain"):
        plain, tls = med[f"{what} plain"], med[f"{what} tls"]
        ratio = tls / plain
        print(f"{what:8} plain {plain:9,.0f} msg/s  tls {tls:9,.0f} msg/s  tls/plain {ratio:.2f}")


if __name__ == "__main__":
    main()
