"""The header dialect of a client's requests: JSON (the default) against the binary ROCKETMQ
header (``serialize_type="rocketmq"``, docs/protocol.md §1.5).

Two measurements, both dialects side by side in one run:

* **per pull** (the consumer's own cost of one round trip, no I/O): encoding a queue's
  PULL_MESSAGE from its template, then splitting a FOUND response out of the receive buffer
  and decoding its header (the broker answers in the request's dialect). CPU time per pull,
  min and median of ``--windows`` windows;
* **drain** (``--drain N``): a ``PushConsumer`` with a no-op batch handler (32 per call, 32
  per pull) drains N × 128 B from an embedded broker in a child process, alternating the
  dialects ``--rounds`` times with a fresh group each time; consumer CPU per message
  (``getrusage``) and broker CPU per message (``/proc/<pid>/stat``).

    python benchmarks/dialect.py [--windows 9] [--drain 200000 --rounds 3]

For instruction counts, run one dialect's loop under callgrind, twice (``--iterations 0`` and
``--iterations N``), and divide the difference by N::

    valgrind --tool=callgrind python benchmarks/dialect.py --only json --iterations 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from consumer import _BROKER, _cpu, fill  # noqa: E402

import aiorocket as rmq  # noqa: E402
from aiorocket._client.pull import PreparedPull  # noqa: E402
from aiorocket._protocol import accel  # noqa: E402
from aiorocket._protocol.codes import SerializeType  # noqa: E402
from aiorocket._protocol.command import RemotingCommand  # noqa: E402
from aiorocket._protocol.frame import FrameDecoder, encode_command  # noqa: E402
from aiorocket._protocol.headers import (  # noqa: E402
    PullMessageRequestHeader,
    PullMessageResponseHeader,
)

DIALECTS = {"json": SerializeType.JSON, "rocketmq": SerializeType.ROCKETMQ}
TOPIC = "BenchDialect"


def pull_round_trip(dialect: str) -> Callable[[int], None]:
    """A loop of ``n`` pulls' client-side codec work in ``dialect``."""
    stype = DIALECTS[dialect]
    prepared = PreparedPull(
        PullMessageRequestHeader(
            consumer_group="bench-consumer-group",
            topic="BenchmarkTopic",
            queue_id=3,
            queue_offset=0,
            max_msg_nums=32,
            sys_flag=0x6,
            commit_offset=0,
            suspend_timeout_millis=15000,
            subscription="*",
            sub_version=1_700_000_000_000,
            expression_type="TAG",
            broker_name="broker-a",
        )
    )
    template = prepared.binary_template if stype == SerializeType.ROCKETMQ else prepared.template
    header = PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=123_488, min_offset=0, max_offset=500_000
    )
    # The body's size does not depend on the dialect; 32 records of ~200 B.
    response = encode_command(
        RemotingCommand(
            code=0,
            opaque=7,
            flag=1,
            remark="FOUND",
            ext_fields=header.to_ext(),
            body=b"r" * 6400,
            serialize_type=stype,
        )
    )
    decoder = FrameDecoder()
    from_ext = PullMessageResponseHeader.from_ext

    def run(n: int) -> None:
        offset = 123_456
        for i in range(n):
            template.encode(i, (offset, 0x6, offset - 32))
            view = decoder.get_buffer(len(response))
            view[: len(response)] = response
            decoder.buffer_updated(len(response))
            cmd = decoder.next_command()
            assert isinstance(cmd, RemotingCommand)
            from_ext(cmd.ext_fields)
            offset += 32

    return run


def per_pull(windows: int, iterations: int) -> dict[str, list[float]]:
    """CPU µs per pull of each dialect, one figure per window, the dialects alternating."""
    loops = {d: pull_round_trip(d) for d in DIALECTS}
    for run in loops.values():
        run(1000)  # warm-up
    out: dict[str, list[float]] = {d: [] for d in DIALECTS}
    for _ in range(windows):
        for d, run in loops.items():
            c0 = time.process_time()
            run(iterations)
            out[d].append((time.process_time() - c0) / iterations * 1e6)
    return out


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.asynccontextmanager
async def broker() -> AsyncIterator[tuple[str, int]]:
    """An embedded broker in a child process: (address, pid)."""
    with tempfile.TemporaryDirectory(prefix="aiorocket-bench-") as data:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _BROKER,
            data,
            "8",
            "32",
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        try:
            yield line.split("listening on ")[1].split()[0], proc.pid
        finally:
            proc.terminate()
            await proc.wait()


async def drain_once(addr: str, n: int, group: str, dialect: str) -> tuple[float, float]:
    """Consume the topic with a fresh group; (seconds, CPU seconds) to the last message."""
    done = asyncio.Event()
    count = 0
    consumer = rmq.PushConsumer(
        group=group,
        namesrv=addr,
        consume_from="first",
        pull_batch_size=32,
        consume_batch_size=32,
        serialize_type=dialect,
    )
    consumer.subscribe(TOPIC)

    async def handler(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        nonlocal count
        count += len(msgs)
        if count >= n:
            done.set()

    consumer.register_listener(handler)
    t0, c0 = time.perf_counter(), _cpu()
    async with consumer:
        await asyncio.wait_for(done.wait(), 600)
        t1, c1 = time.perf_counter(), _cpu()
    return t1 - t0, c1 - c0


async def drains(n: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Alternating drains of each dialect: consumer and broker CPU µs per message, rates."""
    out: dict[str, dict[str, list[float]]] = {
        d: {"consumer_us": [], "broker_us": [], "rate": []} for d in DIALECTS
    }
    async with broker() as (addr, pid):
        await fill(addr, n, 128, topic=TOPIC)
        for r in range(rounds):
            for d in DIALECTS:
                b0 = _proc_cpu(pid)
                secs, cpu = await drain_once(addr, n, f"bench-{d}-{r}", d)
                out[d]["broker_us"].append((_proc_cpu(pid) - b0) / n * 1e6)
                out[d]["consumer_us"].append(cpu / n * 1e6)
                out[d]["rate"].append(n / secs)
    return out


def _fmt(xs: list[float], digits: int = 2) -> str:
    return f"median {statistics.median(xs):.{digits}f}, min {min(xs):.{digits}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--windows", type=int, default=9)
    ap.add_argument("--iterations", type=int, default=50_000, help="pulls per window")
    ap.add_argument("--only", choices=tuple(DIALECTS), help="run one dialect's loop once")
    ap.add_argument("--drain", type=int, default=0, help="messages per drain (0: no drains)")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.only:
        pull_round_trip(args.only)(args.iterations)
        return
    print(f"compiled codec: {accel.ACTIVE}, Python {sys.version.split()[0]}")
    for d, xs in per_pull(args.windows, args.iterations).items():
        print(f"per pull, {d:8s}: {_fmt(xs)} µs CPU")
    if args.drain:
        for d, figs in asyncio.run(drains(args.drain, args.rounds)).items():
            print(
                f"drain {args.drain} × 128 B, {d:8s}: consumer {_fmt(figs['consumer_us'])} µs/msg;"
                f" broker {_fmt(figs['broker_us'])} µs/msg;"
                f" rate {_fmt(figs['rate'], 0)} msg/s"
            )


if __name__ == "__main__":
    main()
