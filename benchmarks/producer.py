"""Producer throughput and latency (docs/performance.md P3).

In one run, against one embedded broker (started in a separate process so broker and client do
not share an event loop or a core's time slices unfairly):

* aiorocket: pipelined ``send`` of 128 B messages (N in flight), msgs/s and CPU µs per message;
* aiorocket: one send in flight at a time, latency p50/p99;
* the Apache C++ client (PyPI ``rocketmq==0.4.4``) in a subprocess: a ``send_sync`` loop,
  msgs/s (what a Python user would pick today).

Prints the figures and the ratio to the P3 goal (>= 2x the C++ loop) and writes JSON under
``benchmarks/results/``.

    python benchmarks/producer.py [--seconds 5] [--in-flight 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from aiorocket import Message, Producer

RESULTS = Path(__file__).parent / "results"
BODY = b"x" * 128

_CPP_LOOP = r"""
import sys, time
from rocketmq.client import Producer, Message
namesrv, topic, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
p = Producer("bench_cpp")
p.set_namesrv_addr(namesrv)
p.start()
body = b"x" * 128
def one():
    m = Message(topic)
    m.set_body(body)
    p.send_sync(m)
for _ in range(200):
    one()
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < seconds:
    one()
    n += 1
print("RESULT", n / (time.perf_counter() - t0), flush=True)
p.shutdown()
"""


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _pipelined(namesrv: str, seconds: float, in_flight: int) -> tuple[float, float]:
    async with Producer(namesrv=namesrv, group="bench_py") as producer:
        for _ in range(500):
            await producer.send(Message("bench_py", BODY))
        count = 0
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal count
            while time.perf_counter() < stop:
                await producer.send(Message("bench_py", BODY))
                count += 1

        c0, t0 = _cpu(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        elapsed, cpu = time.perf_counter() - t0, _cpu() - c0
    return count / elapsed, cpu / count * 1e6


async def _latency(namesrv: str, n: int) -> tuple[float, float]:
    async with Producer(namesrv=namesrv, group="bench_lat") as producer:
        for _ in range(200):
            await producer.send(Message("bench_lat", BODY))
        samples = []
        for _ in range(n):
            t0 = time.perf_counter()
            await producer.send(Message("bench_lat", BODY))
            samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def _cpp(namesrv: str, seconds: float) -> float | None:
    try:
        out = subprocess.run(
            [sys.executable, "-c", _CPP_LOOP, namesrv, "bench_cpp", str(seconds)],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
    except subprocess.TimeoutExpired:
        return None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return float(line.split()[1])
    print(f"C++ client run failed: {out.stderr.strip()[-300:]}", file=sys.stderr)
    return None


def main() -> int:
    """Run the producer benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--in-flight", type=int, default=256)
    ap.add_argument("--latency-samples", type=int, default=2000)
    ap.add_argument("--windows", type=int, default=3)
    args = ap.parse_args()

    port = _free_port()
    namesrv = f"127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as data:
        log = Path(data) / "broker.log"
        with log.open("wb") as sink:
            broker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "aiorocket",
                    "broker",
                    "--port",
                    str(port),
                    "--data-dir",
                    data,
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            while b"listening" not in log.read_bytes():
                if broker.poll() is not None:
                    raise SystemExit(f"the broker did not start: {log.read_text()}")
                time.sleep(0.05)
            rates, cpus = [], []
            for _ in range(args.windows):
                rate, cpu_us = asyncio.run(_pipelined(namesrv, args.seconds, args.in_flight))
                rates.append(rate)
                cpus.append(cpu_us)
            p50, p99 = asyncio.run(_latency(namesrv, args.latency_samples))
            cpp_rates = [r for r in (_cpp(namesrv, args.seconds) for _ in range(args.windows)) if r]
        finally:
            os.killpg(broker.pid, signal.SIGTERM)
            try:
                broker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(broker.pid, signal.SIGKILL)
                print(
                    f"the broker did not stop on SIGTERM:\n{log.read_text()[-2000:]}",
                    file=sys.stderr,
                )

    ours = statistics.median(rates)
    cpp = statistics.median(cpp_rates) if cpp_rates else None
    ratio = ours / cpp if cpp else None
    print(f"{'figure':<46} {'value':>12}  goal")
    spread = (max(rates) - min(rates)) / ours
    print(f"{'aiorocket pipelined send, 128 B (msgs/s)':<46} {ours:>12,.0f}  spread {spread:.0%}")
    print(f"{'aiorocket CPU per message (us)':<46} {statistics.median(cpus):>12.1f}")
    print(f"{'aiorocket one in flight, latency p50 (ms)':<46} {p50:>12.3f}")
    print(f"{'aiorocket one in flight, latency p99 (ms)':<46} {p99:>12.3f}")
    if cpp is not None and ratio is not None:
        print(f"{'C++ client send_sync loop (msgs/s)':<46} {cpp:>12,.0f}")
        verdict = "met" if ratio >= 2 else "missed"
        print(f"{'ratio aiorocket / C++':<46} {ratio:>12.2f}  >= 2.0 (P3): {verdict}")
    else:
        print("C++ client: not measured (the rocketmq wheel did not run)")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"producer-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {
                "benchmark": "producer",
                "python": sys.version,
                "platform": platform.platform(),
                "settings": vars(args),
                "aiorocket_pipelined_msgs_per_s": rates,
                "aiorocket_cpu_us_per_msg": cpus,
                "latency_ms_p50": p50,
                "latency_ms_p99": p99,
                "cpp_send_sync_msgs_per_s": cpp_rates,
                "ratio": ratio,
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
