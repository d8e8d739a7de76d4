"""Embedded broker throughput, wake-up latency, cold start and memory (docs/performance.md P7).

The broker runs as ``aiorocket broker`` in a separate process (so its CPU and RSS are its own);
this script is the client, speaking raw remoting commands through ``ConnectionPool``:

* cold start: ``EmbeddedBroker`` start on an empty directory (in process), and the CLI's time
  from ``exec`` to "listening";
* produce: pipelined SEND_BATCH_MESSAGE of 128 B messages into 8 queues, msgs/s per window,
  and the broker's CPU µs per message; this also fills the store;
* RSS of the broker process against the number of stored messages while filling (target:
  1M messages, or as many as fit in ``--fill-seconds``);
* pull served: ``--pull-loops`` consumer groups each running one pull loop per queue (as a
  push consumer runs them) from offset 0, 32 messages per pull, msgs/s;
* held-pull wake-up: a pull held on an idle queue, then one message sent; the time from the
  send to the pull's answer, p50/p99.

Prints each figure beside its P7 target and writes JSON to
``benchmarks/results/broker-<timestamp>.json``.

    python benchmarks/broker.py [--messages 1000000] [--fill-seconds 60] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import PullSysFlag, RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import RequestTemplate
from aiorocket._protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader
from aiorocket._protocol.message import BatchItem, encode_batch_body
from aiorocket._remoting import Connection, ConnectionPool
from aiorocket.embedded import EmbeddedBroker

RESULTS = Path(__file__).parent / "results"
TOPIC = "BrokerBench"
QUEUES = 8
BATCH = 64
BODY = b"x" * 128
_LISTENING = re.compile(rb"listening on (\d+\.\d+\.\d+\.\d+:\d+)")
_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime + stime


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def _cold_start(rounds: int) -> dict[str, float]:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        broker = EmbeddedBroker()
        await broker.start()
        times.append(time.perf_counter() - t0)
        await broker.close()
    return {"in_process_ms_median": statistics.median(times) * 1000, "rounds": rounds}


async def _start_cli(data_dir: Path, loop: str) -> tuple[asyncio.subprocess.Process, str, float]:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiorocket",
        "broker",
        "--port",
        "0",
        "--data-dir",
        str(data_dir),
        "--max-pull-messages",
        "32",
        "--loop",
        loop,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    m = _LISTENING.search(line)
    if m is None:
        raise SystemExit(f"broker did not start: {line!r}")
    return proc, m.group(1).decode(), time.perf_counter() - t0


def _batch_request() -> tuple[dict[str, str], bytes]:
    items = [
        BatchItem(0, BODY, mp.encode_properties({mp.UNIQ_KEY: f"{i:032X}", mp.TAGS: "bench"}))
        for i in range(BATCH)
    ]
    header = SendMessageRequestHeader(
        producer_group="bench",
        topic=TOPIC,
        queue_id=0,
        born_timestamp=int(time.time() * 1000),
        properties=mp.encode_properties({mp.WAIT: "true"}),
        batch=True,
    )
    return header.to_ext(v2=True), encode_batch_body(items)


async def _produce(
    conns: list[Connection],
    pid: int,
    *,
    target: int,
    seconds: float,
    window: float,
    in_flight: int,
) -> dict[str, Any]:
    ext, body = _batch_request()
    sent = 0
    stop = time.monotonic() + seconds
    windows: list[dict[str, float]] = []
    errors = 0

    async def loop(conn: Connection, q0: int) -> None:
        nonlocal sent, errors
        q = q0
        while sent < target and time.monotonic() < stop:
            e = dict(ext)
            e["e"] = str(q % QUEUES)
            q += 1
            cmd = RemotingCommand.request(RequestCode.SEND_BATCH_MESSAGE, e, body)
            resp = await conn.request(cmd, timeout=30)
            if resp.code != 0:
                errors += 1
            else:
                sent += BATCH

    async def sampler() -> None:
        last_n, last_t, last_cpu = 0, time.perf_counter(), _cpu_seconds(pid)
        while sent < target and time.monotonic() < stop:
            await asyncio.sleep(window)
            n, t, cpu = sent, time.perf_counter(), _cpu_seconds(pid)
            if n > last_n:
                windows.append(
                    {
                        "stored": n,
                        "msgs_per_s": (n - last_n) / (t - last_t),
                        "broker_cpu_us_per_msg": (cpu - last_cpu) / (n - last_n) * 1e6,
                        "broker_rss_mib": _rss_mib(pid),
                    }
                )
            last_n, last_t, last_cpu = n, t, cpu

    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        tg.create_task(sampler())
        for i in range(in_flight):
            tg.create_task(loop(conns[i % len(conns)], i))
    elapsed = time.perf_counter() - t0
    rates = [w["msgs_per_s"] for w in windows[1:]] or [sent / elapsed]
    return {
        "stored": sent,
        "seconds": elapsed,
        "errors": errors,
        "msgs_per_s_median": statistics.median(rates),
        "msgs_per_s_min": min(rates),
        "msgs_per_s_max": max(rates),
        "broker_cpu_us_per_msg_median": statistics.median(
            [w["broker_cpu_us_per_msg"] for w in windows] or [float("nan")]
        ),
        "windows": windows,
    }


async def _pull_served(
    conns: list[Connection], pid: int, *, seconds: float, loops_per_queue: int
) -> dict[str, Any]:
    served = 0
    stop = time.monotonic() + seconds

    async def loop(conn: Connection, queue: int, group: str) -> None:
        nonlocal served
        offset = 0
        header = PullMessageRequestHeader(
            consumer_group=group,
            topic=TOPIC,
            queue_id=queue,
            queue_offset=0,
            max_msg_nums=32,
            sys_flag=int(PullSysFlag.SUBSCRIPTION),
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription="*",
            sub_version=0,
        )
        # The header encoded once, as a push consumer's pull loop does (PreparedPull): the
        # client's CPU per pull stays small beside the broker's, which is what is measured.
        template = RequestTemplate(
            RemotingCommand.request(RequestCode.PULL_MESSAGE, header.to_ext()), ("queueOffset",)
        )
        while time.monotonic() < stop:
            resp = await conn.request_template(template, (offset,), timeout=30)
            nxt = int(resp.ext_fields["nextBeginOffset"])
            if resp.code == 0:
                served += nxt - offset
                offset = nxt
            else:
                offset = 0  # drained: read the queue again

    cpu0 = _cpu_seconds(pid)
    own0 = time.process_time()
    t0 = time.perf_counter()
    async with asyncio.TaskGroup() as tg:
        i = 0
        for g in range(loops_per_queue):
            for q in range(QUEUES):
                tg.create_task(loop(conns[i % len(conns)], q, f"g{g}"))
                i += 1
    elapsed = time.perf_counter() - t0
    cpu = _cpu_seconds(pid) - cpu0
    own = time.process_time() - own0
    return {
        "client_cpu_share": own / elapsed,
        "broker_cpu_share": cpu / elapsed,
        "served": served,
        "seconds": elapsed,
        "msgs_per_s": served / elapsed,
        "broker_cpu_us_per_msg": cpu / max(served, 1) * 1e6,
        "pull_loops": loops_per_queue * QUEUES,
    }


async def _wake_latency(consumer: Connection, producer: Connection, rounds: int) -> dict[str, Any]:
    topic = "BrokerBenchIdle"
    await consumer.request(
        RemotingCommand.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    )
    latencies = []
    header = SendMessageRequestHeader(
        producer_group="bench", topic=topic, queue_id=0, born_timestamp=0, properties=None
    )
    send_ext = header.to_ext(v2=True)
    for offset in range(rounds):
        pull = PullMessageRequestHeader(
            consumer_group="wake",
            topic=topic,
            queue_id=0,
            queue_offset=offset,
            max_msg_nums=32,
            sys_flag=int(PullSysFlag.SUBSCRIPTION | PullSysFlag.SUSPEND),
            commit_offset=0,
            suspend_timeout_millis=15000,
            subscription="*",
            sub_version=0,
        )
        held = asyncio.ensure_future(
            consumer.request(
                RemotingCommand.request(RequestCode.PULL_MESSAGE, pull.to_ext()), timeout=30
            )
        )
        await asyncio.sleep(0.01)  # let the broker park it
        t0 = time.perf_counter()
        sent = asyncio.ensure_future(
            producer.request(RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, send_ext, BODY))
        )
        resp = await held
        latencies.append(time.perf_counter() - t0)
        await sent
        assert resp.code == 0, resp
    return {
        "rounds": rounds,
        "p50_ms": _pct(latencies, 0.5) * 1000,
        "p99_ms": _pct(latencies, 0.99) * 1000,
        "max_ms": max(latencies) * 1000,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "broker",
        "python": sys.version,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "broker_loop": args.broker_loop,
    }
    print("cold start ...", flush=True)
    results["cold_start"] = await _cold_start(5)
    with tempfile.TemporaryDirectory(prefix="aiorocket-bench-") as tmp:
        proc, address, cli_start = await _start_cli(Path(tmp), args.broker_loop)
        results["cold_start"]["cli_exec_to_listening_ms"] = cli_start * 1000
        # One pool per connection: a pool keeps a single connection per address.
        pools = [ConnectionPool() for _ in range(args.connections)]
        try:
            conns = [await p.get(address) for p in pools]
            create = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_TOPIC,
                {
                    "topic": TOPIC,
                    "defaultTopic": "TBW102",
                    "readQueueNums": str(QUEUES),
                    "writeQueueNums": str(QUEUES),
                    "perm": "6",
                    "topicFilterType": "SINGLE_TAG",
                    "order": "false",
                },
            )
            assert (await conns[0].request(create)).code == 0
            rss_empty = _rss_mib(proc.pid)
            print(f"produce / fill up to {args.messages:,} messages ...", flush=True)
            results["produce"] = await _produce(
                conns,
                proc.pid,
                target=args.messages,
                seconds=args.fill_seconds,
                window=args.window,
                in_flight=args.in_flight,
            )
            results["rss"] = {
                "empty_mib": rss_empty,
                "samples": [
                    {"stored": w["stored"], "rss_mib": w["broker_rss_mib"]}
                    for w in results["produce"]["windows"]
                ],
                "final_mib": _rss_mib(proc.pid),
                "stored": results["produce"]["stored"],
            }
            print("pull served ...", flush=True)
            results["pull"] = await _pull_served(
                conns, proc.pid, seconds=args.pull_seconds, loops_per_queue=args.pull_loops
            )
            print("held-pull wake-up ...", flush=True)
            results["wake_up"] = await _wake_latency(conns[0], conns[-1], args.wake_rounds)
        finally:
            for p in pools:
                await p.close()
            proc.terminate()
            await proc.wait()
    return results


def _report(r: dict[str, Any]) -> None:
    p, pull, w, cs, rss = r["produce"], r["pull"], r["wake_up"], r["cold_start"], r["rss"]
    rows = [
        ("produce, batched 128 B (msgs/s, median)", f"{p['msgs_per_s_median']:,.0f}", ">= 50,000"),
        ("  broker CPU per message (µs)", f"{p['broker_cpu_us_per_msg_median']:.1f}", "-"),
        ("pull served (msgs/s)", f"{pull['msgs_per_s']:,.0f}", ">= 200,000"),
        ("  broker CPU per message (µs)", f"{pull['broker_cpu_us_per_msg']:.1f}", "-"),
        (
            "  CPU share broker / client (cores)",
            f"{pull['broker_cpu_share']:.2f} / {pull['client_cpu_share']:.2f}",
            "-",
        ),
        ("held-pull wake-up p50 (ms)", f"{w['p50_ms']:.2f}", "-"),
        ("held-pull wake-up p99 (ms)", f"{w['p99_ms']:.2f}", "<= 10"),
        ("cold start, in process (ms)", f"{cs['in_process_ms_median']:.1f}", "< 1000"),
        ("cold start, CLI exec→listening (ms)", f"{cs['cli_exec_to_listening_ms']:.0f}", "-"),
        (
            f"broker RSS with {rss['stored']:,} stored (MiB)",
            f"{rss['final_mib']:.1f} (empty: {rss['empty_mib']:.1f})",
            "independent of count",
        ),
    ]
    width = max(len(a) for a, _, _ in rows)
    print()
    print(f"{'figure':<{width}}  {'measured':>24}  target (P7)")
    for name, value, target in rows:
        print(f"{name:<{width}}  {value:>24}  {target}")
    print(
        "RSS vs stored:",
        ", ".join(f"{s['stored']:,}→{s['rss_mib']:.0f}" for s in rss["samples"][::3]),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--fill-seconds", type=float, default=60.0)
    parser.add_argument("--pull-seconds", type=float, default=8.0)
    parser.add_argument("--window", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--wake-rounds", type=int, default=300)
    parser.add_argument(
        "--pull-loops", type=int, default=4, help="concurrent pull loops per queue (groups)"
    )
    parser.add_argument("--broker-loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    args = parser.parse_args()
    if args.quick:
        args.messages, args.fill_seconds, args.pull_seconds = 100_000, 10.0, 2.0
        args.window, args.wake_rounds = 0.5, 50
    results = asyncio.run(run(args))
    _report(results)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"broker-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
