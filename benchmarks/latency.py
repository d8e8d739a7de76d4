"""Store→handler latency at a steady 1k msg/s (docs/performance.md P4).

One run, one embedded broker (``aiorocket broker`` in its own process), one aiorocket producer in
this process sending 128 B messages at ``--rate`` msgs/s, paced against the clock, to a topic of
8 queues. Two consumers, each in its own process and its own group, receive every message side
by side, so both see the same messages, broker wake-ups and machine noise:

* aiorocket's ``PushConsumer`` with a per-message ``async def`` handler (default settings);
* the Apache C++ client's ``PushConsumer`` (PyPI ``rocketmq`` 0.4.4) with a Python callback.

(``--sequential`` runs them one after the other instead, each on its own topic.)

Both handlers note the wall-clock time a message reaches them. Store→handler latency is that time
minus the message's ``store_timestamp`` (stamped by the broker, whole milliseconds, so each
figure carries up to 1 ms of truncation); send→handler latency uses a nanosecond send time the
producer puts in a property. Messages sent during the first ``--warmup`` seconds are left out;
the measured ``--seconds`` are cut into ``--windows`` windows whose p99 give the spread. Each
consumer process's CPU time over the measured span gives CPU µs per message.

Writes ``benchmarks/results/latency-<timestamp>.json`` (with a percentile curve for charts).

    python benchmarks/latency.py [--rate 1000] [--seconds 40] [--warmup 5] [--quick] [--no-cpp]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiorocket import Message, Producer
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._remoting import ConnectionPool

RESULTS = Path(__file__).parent / "results"
QUEUES = 8
BODY = b"x" * 128
SENT_PROPERTY = "bench_sent_ns"
RESULT_PREFIX = "@@RESULT "
_LISTENING = re.compile(r"listening on (\d+\.\d+\.\d+\.\d+:\d+)")
_TICKS = os.sysconf("SC_CLK_TCK")

# -- helpers shared with backlog.py --------------------------------------------------------------


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (from ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def proc_rss_mib(pid: int) -> float:
    """Resident set size of process ``pid`` in MiB (``VmRSS``), NaN once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of an already sorted list, nearest rank."""
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, max(0, round(q * len(sorted_values)) - 1))]


@asynccontextmanager
async def broker_process(queues: int = QUEUES) -> AsyncIterator[tuple[str, int]]:
    """Run ``aiorocket broker`` on a free port in a temporary directory.

    Yields:
        the broker's address (name server and broker share it) and its process id.
    """
    data = tempfile.mkdtemp(prefix="aiorocket-bench-")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiorocket",
        "broker",
        "--port",
        "0",
        "--data-dir",
        data,
        "--default-queues",
        str(queues),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        m = _LISTENING.search(line)
        if m is None:
            raise SystemExit(f"the broker did not start: {line!r}")
        yield m.group(1), proc.pid
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        await asyncio.to_thread(shutil.rmtree, data, True)


async def create_topic(addr: str, topic: str, queues: int = QUEUES) -> None:
    """Create ``topic`` with ``queues`` read and write queues on the broker at ``addr``."""
    pool = ConnectionPool()
    try:
        conn = await pool.get(addr)
        cmd = RemotingCommand.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            {
                "topic": topic,
                "defaultTopic": "TBW102",
                "readQueueNums": str(queues),
                "writeQueueNums": str(queues),
                "perm": "6",
                "topicFilterType": "SINGLE_TAG",
                "order": "false",
            },
        )
        resp = await conn.request(cmd, timeout=10)
        if resp.code != 0:
            raise SystemExit(f"creating topic {topic} failed: {resp.code} {resp.remark}")
    finally:
        await pool.close()


async def paced_send(
    producer: Producer,
    topic: str,
    *,
    rate: float,
    seconds: float,
    body: bytes,
    stamp: bool = True,
) -> dict[str, Any]:
    """Send ``rate`` msgs/s for ``seconds``, on schedule even when a send is slow.

    Sends are started as tasks at their due time (never more than a tick late in bulk), so a
    stalled send does not delay the next ones. With ``stamp`` each message carries its send time
    (``time.time_ns()``) in the :data:`SENT_PROPERTY` property.

    Returns:
        messages sent, failed sends and the achieved rate.
    """
    pending: set[asyncio.Task[Any]] = set()
    sent = failed = 0

    def done(task: asyncio.Task[Any]) -> None:
        nonlocal failed
        pending.discard(task)
        if task.cancelled() or task.exception() is not None:
            failed += 1

    t0 = time.perf_counter()
    while (now := time.perf_counter() - t0) < seconds:
        due = min(int(now * rate) + 1, int(seconds * rate))
        while sent < due:
            props = {SENT_PROPERTY: str(time.time_ns())} if stamp else None
            task = asyncio.create_task(producer.send(Message(topic, body, properties=props)))
            pending.add(task)
            task.add_done_callback(done)
            sent += 1
        await asyncio.sleep(max(0.0, due / rate - (time.perf_counter() - t0)))
    elapsed = time.perf_counter() - t0
    if pending:
        await asyncio.wait(pending, timeout=30)
    return {"sent": sent, "failed": failed, "msgs_per_s": sent / elapsed}


# -- consumers -----------------------------------------------------------------------------------

# Both consumer scripts print "ready" once subscribed, keep (receive_ns, store_ms, sent_ns) per
# message, and print them as one result line when stdin closes.
_PY_CONSUMER = textwrap.dedent(
    """
    import asyncio, json, sys, time
    import aiorocket as rmq

    addr, topic, group, queues = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    prop, prefix = sys.argv[5], sys.argv[6]

    async def main():
        samples = []
        note = samples.append
        clock = time.time_ns
        consumer = rmq.PushConsumer(group=group, namesrv=addr, consume_from="first")
        consumer.subscribe(topic)

        @consumer.listener
        async def handler(msgs, ctx):
            now = clock()
            for m in msgs:
                note((now, m.store_timestamp, m.properties.get(prop, "0")))

        async with consumer:
            while len([q for q in consumer.statistics().queues if q.topic == topic]) < queues:
                await asyncio.sleep(0.05)
            print("ready", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
            rows = [(r, s, int(t)) for r, s, t in samples]
            print(prefix + json.dumps(rows), flush=True)

    asyncio.run(main())
    """
)

_CPP_CONSUMER = textwrap.dedent(
    """
    import json, os, sys, time
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever the native library prints goes to stderr
    from rocketmq.client import PushConsumer

    addr, topic, group = sys.argv[1], sys.argv[2], sys.argv[3]
    prop, prefix = sys.argv[5], sys.argv[6]
    samples = []
    note = samples.append
    clock = time.time_ns

    def callback(msg):
        note((clock(), msg.store_timestamp, msg.get_property(prop)))

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(addr)
    consumer.subscribe(topic, callback)
    consumer.start()
    time.sleep(3.0)  # no hook tells when its rebalance is done: give it time
    out.write("ready\\n")
    out.flush()
    sys.stdin.read()
    rows = [(r, s, int(t or 0)) for r, s, t in list(samples)]
    out.write(prefix + json.dumps(rows) + "\\n")
    out.flush()
    # The binding's shutdown can hang or crash; the broker copes with a vanished client.
    os._exit(0)
    """
)


def _summarise(
    rows: list[list[int]], t_start_ns: int, t_end_ns: int, windows: int
) -> dict[str, Any]:
    """Latency figures of the messages sent within [t_start_ns, t_end_ns)."""
    kept = [r for r in rows if t_start_ns <= r[2] < t_end_ns]
    store = sorted(r[0] / 1e6 - r[1] for r in kept)
    send = sorted((r[0] - r[2]) / 1e6 for r in kept)
    span = (t_end_ns - t_start_ns) / windows
    window_p99 = []
    for w in range(windows):
        lo, hi = t_start_ns + w * span, t_start_ns + (w + 1) * span
        part = sorted(r[0] / 1e6 - r[1] for r in kept if lo <= r[2] < hi)
        if part:
            window_p99.append(percentile(part, 0.99))
    curve_q = [i / 1000 for i in range(1, 1001)]
    return {
        "messages": len(kept),
        "store_to_handler_ms": {
            "p50": percentile(store, 0.5),
            "p90": percentile(store, 0.9),
            "p99": percentile(store, 0.99),
            "p999": percentile(store, 0.999),
            "max": store[-1] if store else float("nan"),
            "mean": statistics.fmean(store) if store else float("nan"),
            "p99_per_window": window_p99,
            "p99_window_median": statistics.median(window_p99) if window_p99 else float("nan"),
            "p99_window_spread_pct": (
                (max(window_p99) - min(window_p99)) / statistics.median(window_p99) * 100
                if window_p99 and statistics.median(window_p99) > 0
                else float("nan")
            ),
        },
        "send_to_handler_ms": {
            "p50": percentile(send, 0.5),
            "p99": percentile(send, 0.99),
            "max": send[-1] if send else float("nan"),
        },
        # 1000 points of the distribution, for the CDF chart.
        "curve": {
            "quantiles": curve_q,
            "store_to_handler_ms": [percentile(store, q) for q in curve_q],
            "send_to_handler_ms": [percentile(send, q) for q in curve_q],
        },
    }


async def _read_result(stdout: asyncio.StreamReader) -> list[list[int]]:
    """Read the consumer's lines until its result line; return the decoded rows."""
    while True:
        line = await stdout.readline()
        if not line:
            raise RuntimeError("the consumer exited without a result")
        text = line.decode(errors="replace")
        if text.startswith(RESULT_PREFIX):
            rows: list[list[int]] = json.loads(text[len(RESULT_PREFIX) :])
            return rows


async def measure(
    addr: str, contenders: list[str], producer: Producer, args: argparse.Namespace
) -> dict[str, dict[str, Any] | None]:
    """Run the contenders' consumer processes side by side (one group each) on a fresh topic
    under paced production; return each one's figures (None for one that failed)."""
    topic = "Latency_" + "_".join(contenders)
    await create_topic(addr, topic)
    procs: dict[str, asyncio.subprocess.Process] = {}
    try:
        for contender in contenders:
            script = _PY_CONSUMER if contender == "aiorocket" else _CPP_CONSUMER
            procs[contender] = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                script,
                addr,
                topic,
                f"latency-{contender}",
                str(QUEUES),
                SENT_PROPERTY,
                RESULT_PREFIX,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                limit=1 << 26,  # the result line holds every sample
            )
        for contender, proc in procs.items():
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise RuntimeError(f"{contender} consumer did not start: {line!r}")
        await asyncio.sleep(1.0)
        t_start_ns = time.time_ns() + int(args.warmup * 1e9)
        t_end_ns = t_start_ns + int(args.seconds * 1e9)
        cpu: dict[str, list[float]] = {}

        async def cpu_marks() -> None:
            await asyncio.sleep(args.warmup)
            for name, proc in procs.items():
                cpu[name] = [proc_cpu_seconds(proc.pid)]
            await asyncio.sleep(args.seconds)
            for name, proc in procs.items():
                cpu[name].append(proc_cpu_seconds(proc.pid))

        marks = asyncio.create_task(cpu_marks())
        production = await paced_send(
            producer, topic, rate=args.rate, seconds=args.warmup + args.seconds, body=BODY
        )
        await marks
        await asyncio.sleep(args.drain)  # late messages still count (and show in max)
        rows: dict[str, list[list[int]]] = {}
        for contender, proc in procs.items():
            assert proc.stdin is not None
            assert proc.stdout is not None
            proc.stdin.close()
            rows[contender] = await asyncio.wait_for(_read_result(proc.stdout), 60)
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
    out: dict[str, dict[str, Any] | None] = {}
    for contender in contenders:
        result = _summarise(rows[contender], t_start_ns, t_end_ns, args.windows)
        used = cpu[contender][1] - cpu[contender][0]
        result.update(
            {
                "production": production,
                "received_total": len(rows[contender]),
                "expected_total": production["sent"],
                "consumer_cpu_us_per_msg": used / max(result["messages"], 1) * 1e6,
                "consumer_cpu_share": used / args.seconds,
            }
        )
        out[contender] = result
    return out


def _cpp_available() -> bool:
    """True when the ``rocketmq`` wheel (the C++ client) is importable."""
    try:
        import rocketmq.client  # noqa: F401
    except (ImportError, OSError):
        return False
    return True


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run every contender against one broker; return the results document."""
    results: dict[str, Any] = {
        "benchmark": "latency",
        "python": sys.version,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "settings": {
            k: v
            for k, v in vars(args).items()
            if k in ("rate", "seconds", "warmup", "windows", "sequential")
        },
        "queues": QUEUES,
        "body_bytes": len(BODY),
    }
    contenders = ["aiorocket"]
    if not args.no_cpp and _cpp_available():
        contenders.append("cpp")
    async with (
        broker_process() as (addr, _pid),
        Producer(namesrv=addr, group="latency-producer") as producer,
    ):
        rounds = [[c] for c in contenders] if args.sequential else [contenders]
        for group in rounds:
            print(f"latency: {' + '.join(group)} ...", flush=True)
            try:
                results.update(await measure(addr, group, producer, args))
            except (RuntimeError, TimeoutError) as exc:
                print(f"latency: {' + '.join(group)} failed: {exc}", file=sys.stderr)
                results.update(dict.fromkeys(group))
    if "cpp" not in results:
        results["cpp"] = None
    return results


def _report(res: dict[str, Any]) -> None:
    """Print the table of figures."""
    print()
    print(
        f"{'consumer':<12}{'msgs':>8}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
        f"{'p99 spread':>12}{'send→h p99':>12}{'CPU us/msg':>12}"
    )
    for name in ("aiorocket", "cpp"):
        r = res.get(name)
        if not r:
            print(f"{name:<12}  not measured")
            continue
        s, d = r["store_to_handler_ms"], r["send_to_handler_ms"]
        print(
            f"{name:<12}{r['messages']:>8}{s['p50']:>9.2f}{s['p99']:>9.2f}{s['max']:>9.2f}"
            f"{s['p99_window_spread_pct']:>11.0f}%{d['p99']:>12.2f}"
            f"{r['consumer_cpu_us_per_msg']:>12.1f}"
        )
    ours = res.get("aiorocket")
    if ours:
        s = ours["store_to_handler_ms"]
        ok = s["p99"] <= 10 and s["max"] <= 150
        print(
            f"P4: p99 {s['p99']:.2f} ms (<= 10), max {s['max']:.2f} ms (<= 150): "
            f"{'met' if ok else 'missed'}"
        )


def main() -> int:
    """Parse the command line, run the benchmark, print and save the results."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=1000.0, help="messages per second")
    ap.add_argument("--seconds", type=float, default=40.0, help="measured seconds")
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds left out at the start")
    ap.add_argument("--windows", type=int, default=5, help="windows for the p99 spread")
    ap.add_argument("--drain", type=float, default=2.0, help="wait after the last send")
    ap.add_argument("--no-cpp", action="store_true", help="skip the C++ client")
    ap.add_argument(
        "--sequential",
        action="store_true",
        help="one consumer at a time, each on its own topic (default: side by side)",
    )
    ap.add_argument("--quick", action="store_true", help="10 s measured, 2 s warm-up")
    ap.add_argument("--output", type=Path, help="write the JSON here instead")
    args = ap.parse_args()
    if args.quick:
        args.seconds, args.warmup = 10.0, 2.0
    res = asyncio.run(run(args))
    _report(res)
    RESULTS.mkdir(exist_ok=True)
    out = args.output or RESULTS / f"latency-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
