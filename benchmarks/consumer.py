"""Push-consumer benchmark (docs/performance.md P1, P2, P5).

Runs the embedded broker in a child process (so this process's CPU is the consumer's), fills
a topic (8 queues, 128 B bodies) and drains it, in one run, with:

* (a) ``PushConsumer`` with a no-op **batch** handler (``consume_batch_size`` 32);
* (b) ``PushConsumer`` with a per-message ``async def`` handler (``consume_batch_size`` 1);
* (a) and (b) again with ``orderly=True`` (broker queue locks, one handler call per queue at a
  time, 8 queues in parallel), printed beside the concurrent figures;
* ``PullConsumer`` read by the application: ``async for`` one message at a time, and
  ``poll(max_messages=32)`` batches, beside (a) and (b);
* the pure decode loop (``decode_messages``) over the very bytes the broker serves;
* (a) and (b) again against a broker serving 256 messages per pull instead of 32;
* (a) and (b) again on uvloop (when installed), the loop ``aiorocket run`` picks;
* the Apache C++ client's ``PushConsumer`` (PyPI ``rocketmq`` 0.4.4) with a Python callback,
  in its own process, when the wheel is installed (``--no-cpp`` skips it);

and measures the idle cost of a consumer holding 64 queues. Prints msgs/s and CPU µs per
message (median of ``--repeat`` runs, with the spread) and the P1/P2/P5 ratios, and writes
them to ``benchmarks/results/consumer-<timestamp>.json``.

    python benchmarks/consumer.py [--messages 500000] [--repeat 3] [--loop uvloop] [--quick]

Where the time goes (py-spy, batch handler, 32 messages per pull): record decoding about half
of the consumer's CPU; the rest is ~23 µs per pull (request, response, task wake-ups) and
~1.3 µs per message (process queue, ``ReceivedMessage``) — see BENCHMARKS.md for the profiles
and what was changed because of them.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aiorocket as rmq  # noqa: E402
from aiorocket._client.instance import ClientInstance  # noqa: E402
from aiorocket._producer.producer import Producer  # noqa: E402
from aiorocket._protocol import accel  # noqa: E402
from aiorocket._protocol.headers import PullMessageRequestHeader  # noqa: E402
from aiorocket._protocol.message import decode_messages  # noqa: E402
from aiorocket.models import Message  # noqa: E402
from aiorocket.settings import ClientSettings  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TOPIC = "BenchDrain"
IDLE_TOPIC = "BenchIdle"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


_BROKER = textwrap.dedent(
    """
    import asyncio, sys
    from aiorocket.embedded import BrokerConfig, EmbeddedBroker

    async def main():
        config = BrokerConfig(
            default_queues=int(sys.argv[2]),
            max_pull_messages=int(sys.argv[3]),
            max_pull_bytes=max(256 * 1024, int(sys.argv[3]) * 1024),
        )
        async with EmbeddedBroker(data_dir=sys.argv[1], config=config) as broker:
            print("listening on", broker.address, flush=True)
            await asyncio.Event().wait()

    asyncio.run(main())
    """
)


@contextlib.asynccontextmanager
async def broker_process(queues: int, max_pull: int = 32) -> AsyncIterator[str]:
    """An embedded broker in a child process; yields its address."""
    data = tempfile.mkdtemp(prefix="aiorocket-bench-")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _BROKER,
        data,
        str(queues),
        str(max_pull),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
    addr = line.split("listening on ")[1].split()[0]
    try:
        yield addr
    finally:
        proc.terminate()
        await proc.wait()
        await asyncio.to_thread(shutil.rmtree, data, True)


async def fill(addr: str, n: int, size: int, topic: str = TOPIC) -> None:
    """Send ``n`` messages of ``size`` bytes over the topic's 8 queues, in batches."""
    body = b"x" * size
    async with Producer(namesrv=addr, group="bench-fill") as p:
        queues = [rmq.MessageQueue(topic, "broker-a", q) for q in range(8)]
        per = n // 8
        batch = 256

        async def one_queue(mq: rmq.MessageQueue) -> None:
            for start in range(0, per, batch):
                count = min(batch, per - start)
                await p.send_batch([Message(topic, body) for _ in range(count)], queue=mq)

        await asyncio.gather(*(one_queue(mq) for mq in queues))


async def raw_bodies(addr: str) -> list[bytes]:
    """Pull every message of the topic once, keeping the raw pull bodies (same bytes the
    consumer receives)."""
    client = ClientInstance(ClientSettings(namesrv=(addr,)))
    client.start(lambda coro: None)
    bodies: list[bytes] = []
    try:
        await client.fetch_route(TOPIC)
        broker = await client.find_broker("broker-a", TOPIC)
        for q in range(8):
            offset = 0
            while True:
                header = PullMessageRequestHeader(
                    consumer_group="bench-raw",
                    topic=TOPIC,
                    queue_id=q,
                    queue_offset=offset,
                    max_msg_nums=32,
                    sys_flag=0x4,  # the subscription travels with the pull
                    commit_offset=0,
                    suspend_timeout_millis=0,
                    subscription="*",
                    sub_version=0,
                )
                resp = await client.pull_message(broker, header, timeout=10)
                if resp.code != 0:
                    break
                bodies.append(resp.body)
                offset = resp.header.next_begin_offset
    finally:
        await client.close()
    return bodies


def decode_loop(bodies: list[bytes]) -> tuple[float, float, int]:
    """Decode every body; (seconds, CPU seconds, messages)."""
    t0, c0 = time.perf_counter(), _cpu()
    n = 0
    for b in bodies:
        n += len(decode_messages(b))
    return time.perf_counter() - t0, _cpu() - c0, n


async def drain(
    addr: str,
    n: int,
    group: str,
    *,
    batch: bool,
    pull_batch: int = 32,
    orderly: bool = False,
    topic: str = TOPIC,
) -> tuple[float, float]:
    """Consume the whole topic with a fresh group; (seconds, CPU seconds) from start to the
    last message."""
    done = asyncio.Event()
    count = 0
    consumer = rmq.PushConsumer(
        group=group,
        namesrv=addr,
        consume_from="first",
        pull_batch_size=pull_batch,
        consume_batch_size=pull_batch if batch else 1,
        orderly=orderly,
    )
    consumer.subscribe(topic)

    if orderly:

        async def ordered(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
            nonlocal count
            count += len(msgs)
            if count >= n:
                done.set()

        consumer.register_listener(ordered)
    elif batch:

        async def handler(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            nonlocal count
            count += len(msgs)
            if count >= n:
                done.set()

    else:

        async def handler(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            nonlocal count
            count += 1
            if count >= n:
                done.set()

    if not orderly:
        consumer.register_listener(handler)
    t0, c0 = time.perf_counter(), _cpu()
    async with consumer:
        await asyncio.wait_for(done.wait(), 600)
        t1, c1 = time.perf_counter(), _cpu()
    return t1 - t0, c1 - c0


async def drain_processes(
    addr: str,
    n: int,
    group: str,
    *,
    batch: bool,
    processes: int,
    topic: str = TOPIC,
    queues: int = 8,
) -> tuple[float, float]:
    """Consume the whole topic with ``processes`` member processes of a fresh group (what
    ``aiorocket run --workers N`` deploys); (seconds, CPU seconds of all members) from the
    moment the settled group starts pulling to its last message."""
    child = Path(__file__).with_name("drain_child.py")
    args = [addr, topic, group, str(n // queues), "32" if batch else "1", str(queues)]
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            str(child),
            *args,
            str(processes),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        for _ in range(processes)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            line = await asyncio.wait_for(p.stdout.readline(), 90)
            if line.strip() != b"ready":
                raise RuntimeError(f"drain member did not get ready: {line!r}")
        for p in procs:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            await p.stdin.drain()
        starts, ends, cpu = [], [], 0.0
        for p in procs:
            assert p.stdout is not None
            line = await asyncio.wait_for(p.stdout.readline(), 600)
            word, t0, t1, c = line.decode().split()
            if word != "done":
                raise RuntimeError(f"drain member failed: {line!r}")
            starts.append(float(t0))
            ends.append(float(t1))
            cpu += float(c)
        for p in procs:
            await asyncio.wait_for(p.wait(), 60)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
    return max(ends) - min(starts), cpu


async def pull_drain(
    addr: str, n: int, group: str, *, poll: bool, topic: str = TOPIC
) -> tuple[float, float]:
    """Read the whole topic with a fresh ``PullConsumer`` group: ``async for`` one message at
    a time, or ``poll`` batches of 32; (seconds, CPU seconds) from start to the last message."""
    consumer = rmq.PullConsumer(group=group, namesrv=addr, consume_from="first")
    consumer.subscribe(topic)
    count = 0
    t0, c0 = time.perf_counter(), _cpu()
    async with consumer:
        if poll:
            while count < n:
                batch = await consumer.poll(max_messages=32, timeout=60)
                if not batch:
                    raise RuntimeError(f"pull drain stalled at {count} of {n}")
                count += len(batch)
        else:
            async for _msg in consumer:
                count += 1
                if count >= n:
                    break
        t1, c1 = time.perf_counter(), _cpu()
    return t1 - t0, c1 - c0


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def _uvloop_drain(addr: str, n: int, group: str, batch: bool) -> tuple[float, float]:
    import uvloop

    result: tuple[float, float] = uvloop.run(drain(addr, n, group, batch=batch))
    return result


_CPP_CONSUMER = textwrap.dedent(
    """
    import json, resource, sys, threading, time
    from rocketmq.client import PushConsumer

    addr, topic, group, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    lock = threading.Lock()
    done = threading.Event()
    state = {"count": 0}

    def cpu():
        r = resource.getrusage(resource.RUSAGE_SELF)
        return r.ru_utime + r.ru_stime

    def callback(msg):
        with lock:
            state["count"] += 1
            c = state["count"]
            if c == 1:
                state["t_first"], state["cpu_first"] = time.perf_counter(), cpu()
            if c == n:
                state["t_last"], state["cpu_last"] = time.perf_counter(), cpu()
                done.set()
        return None  # the wrapper answers CONSUME_SUCCESS unless the callback raises

    consumer = PushConsumer(group)
    consumer.set_namesrv_addr(addr)
    consumer.subscribe(topic, callback)
    t0, c0 = time.perf_counter(), cpu()
    consumer.start()
    ok = done.wait(600)
    print(json.dumps({
        "ok": ok,
        "seconds": state.get("t_last", 0) - t0,
        "cpu": state.get("cpu_last", 0) - c0,
        "seconds_first_to_last": state.get("t_last", 0) - state.get("t_first", 0),
        "cpu_first_to_last": state.get("cpu_last", 0) - state.get("cpu_first", 0),
    }), flush=True)
    consumer.shutdown()
    """
)


async def cpp_drain(addr: str, n: int, group: str) -> dict[str, Any] | None:
    """The C++ client's PushConsumer in a child process; None if it is not installed."""
    try:
        import rocketmq.client  # noqa: F401
    except ImportError:
        return None
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CPP_CONSUMER,
        addr,
        TOPIC,
        group,
        str(n),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 900)
    try:
        result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    except (IndexError, ValueError):
        return None
    return result if result.get("ok") else None


async def idle_cost(seconds: float) -> dict[str, Any]:
    """CPU share of a consumer holding 64 empty queues, and its outstanding pulls."""
    async with broker_process(64) as addr:
        consumer = rmq.PushConsumer(group="bench-idle", namesrv=addr)
        consumer.subscribe(IDLE_TOPIC)

        @consumer.listener
        async def handler(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            pass

        async with consumer:
            await asyncio.sleep(2.0)  # settle: every queue has its long poll parked
            t0, c0 = time.perf_counter(), _cpu()
            await asyncio.sleep(seconds)
            t1, c1 = time.perf_counter(), _cpu()
            held = len([mq for mq in consumer.statistics().queues if mq.topic == IDLE_TOPIC])
            pool = consumer._client._pool
            pending = sum(c.pending_count for c in pool.connections().values()) if pool else 0
    return {
        "queues": held,
        "cpu_percent": (c1 - c0) / (t1 - t0) * 100,
        "outstanding_pulls": pending,
        "seconds": seconds,
    }


def _summary(runs: list[tuple[float, float]], n: int) -> dict[str, float]:
    rates = [n / s for s, _ in runs]
    cpus = [c / n * 1e6 for _, c in runs]
    med = statistics.median(rates)
    return {
        "msgs_per_s": med,
        "spread_pct": (max(rates) - min(rates)) / med * 100,
        "cpu_us_per_msg": statistics.median(cpus),
    }


async def _drains_only(args: argparse.Namespace, n: int, results: dict[str, Any]) -> dict[str, Any]:
    """The batch and per-message drains alone (what ``baseline.py`` compares across revisions)."""
    async with broker_process(8) as addr:
        await fill(addr, n, args.size)
        results["codec"] = accel.describe()
        for name, batch in (("batch_handler", True), ("per_message_handler", False)):
            runs = []
            for i in range(args.repeat):
                group = f"bench-{name}-{i}".replace("_", "-")
                runs.append(await drain(addr, n, group, batch=batch))
            results[name] = _summary(runs, n)
            print(f"{name}: {results[name]}", flush=True)
    return results


async def run(args: argparse.Namespace) -> dict[str, Any]:
    n = args.messages - args.messages % 8
    results: dict[str, Any] = {"messages": n, "body_bytes": args.size}
    if args.drains_only:
        return await _drains_only(args, n, results)
    async with broker_process(8, max_pull=256) as addr:
        # Large pulls: the broker serves up to 256 messages per pull (its
        # maxTransferCountOnMessageInMemory raised from 32), the consumer asks for 256.
        await fill(addr, n, args.size)
        for name, batch in (("batch_handler_256", True), ("per_message_handler_256", False)):
            runs = []
            for i in range(args.repeat):
                group = f"bench-{name}-{i}".replace("_", "-")
                runs.append(await drain(addr, n, group, batch=batch, pull_batch=256))
            results[name] = _summary(runs, n)
            print(f"{name}: {results[name]}", flush=True)
    async with broker_process(8) as addr:
        t0 = time.perf_counter()
        await fill(addr, n, args.size)
        print(f"filled {n} x {args.size} B in {time.perf_counter() - t0:.1f} s", flush=True)
        bodies = await raw_bodies(addr)
        # The pure-Python decode loop is the fixed yardstick of P1, whichever codec the
        # consumer runs; the compiled loop is shown beside it when the extension is built.
        compiled = accel.ACTIVE
        accel.use(False)
        try:
            decode_runs = [decode_loop(bodies)[:2] for _ in range(args.repeat)]
        finally:
            accel.use(compiled)
        results["decode_loop"] = _summary(decode_runs, n)
        print(f"decode loop (pure Python): {results['decode_loop']}", flush=True)
        if compiled:
            decode_runs = [decode_loop(bodies)[:2] for _ in range(args.repeat)]
            results["decode_loop_compiled"] = _summary(decode_runs, n)
            print(f"decode loop (compiled): {results['decode_loop_compiled']}", flush=True)
        results["codec"] = accel.describe()
        del bodies
        for name, batch, orderly in (
            ("batch_handler", True, False),
            ("per_message_handler", False, False),
            ("orderly_batch_handler", True, True),
            ("orderly_per_message_handler", False, True),
        ):
            runs = []
            for i in range(args.repeat):
                group = f"bench-{name}-{i}".replace("_", "-")
                runs.append(await drain(addr, n, group, batch=batch, orderly=orderly))
            results[name] = _summary(runs, n)
            print(f"{name}: {results[name]}", flush=True)
        for name, poll in (("pull_async_for", False), ("pull_poll_batch", True)):
            runs = []
            for i in range(args.repeat):
                group = f"bench-{name}-{i}".replace("_", "-")
                runs.append(await pull_drain(addr, n, group, poll=poll))
            results[name] = _summary(runs, n)
            print(f"{name}: {results[name]}", flush=True)
        if args.loop == "asyncio" and _has_uvloop():
            # The same drains on uvloop (what `aiorocket run` uses when it is installed), each
            # in a thread of its own running a uvloop loop; this loop just waits meanwhile.
            for name, batch in (
                ("batch_handler_uvloop", True),
                ("per_message_handler_uvloop", False),
            ):
                runs = []
                for i in range(args.repeat):
                    group = f"bench-{name}-{i}".replace("_", "-")
                    runs.append(await asyncio.to_thread(_uvloop_drain, addr, n, group, batch))
                results[name] = _summary(runs, n)
                print(f"{name}: {results[name]}", flush=True)
        if not args.no_cpp:
            cpp = await cpp_drain(addr, n, "bench-cpp")
            if cpp is not None:
                results["cpp_push_consumer"] = {
                    "msgs_per_s": n / cpp["seconds"],
                    "msgs_per_s_first_to_last": n / max(cpp["seconds_first_to_last"], 1e-9),
                    "cpu_us_per_msg": cpp["cpu"] / n * 1e6,
                }
                print(f"C++ PushConsumer: {results['cpp_push_consumer']}", flush=True)
            else:
                results["cpp_push_consumer"] = None
                print("C++ PushConsumer: not available", flush=True)
    results["idle_64_queues"] = await idle_cost(args.idle_seconds)
    print(f"idle: {results['idle_64_queues']}", flush=True)
    dec = results["decode_loop"]["msgs_per_s"]
    results["P1_batch_vs_decode"] = results["batch_handler"]["msgs_per_s"] / dec
    results["P1_batch_256_vs_decode"] = results["batch_handler_256"]["msgs_per_s"] / dec
    cpp_res = results.get("cpp_push_consumer")
    results["P2_per_message_vs_cpp"] = (
        results["per_message_handler"]["msgs_per_s"] / cpp_res["msgs_per_s"] if cpp_res else None
    )
    return results


def main() -> int:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--messages", type=int, default=500_000)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    ap.add_argument("--no-cpp", action="store_true", help="skip the C++ client")
    ap.add_argument("--quick", action="store_true", help="100k messages, one run, 3 s idle")
    ap.add_argument(
        "--drains-only", action="store_true", help="only the batch and per-message drains"
    )
    args = ap.parse_args()
    if args.quick:
        args.messages, args.repeat, args.idle_seconds = 100_000, 1, 3.0
    runner: Callable[[Any], Any] = asyncio.run
    if args.loop == "uvloop":
        import uvloop

        runner = uvloop.run
    res = runner(run(args))
    res.update(
        {
            "benchmark": "consumer",
            "python": sys.version,
            "machine": platform.machine(),
            "loop": args.loop,
            "cpus": os.cpu_count(),
        }
    )
    print()
    if args.drains_only:
        for key in ("batch_handler", "per_message_handler"):
            row = res[key]
            print(f"{key:<34}{row['msgs_per_s']:>12,.0f}{row['cpu_us_per_msg']:>12.2f}")
        _write(res)
        return 0
    print(f"{'contender':<34}{'msgs/s':>12}{'spread':>9}{'CPU us/msg':>12}")
    for key in (
        "decode_loop",
        "decode_loop_compiled",
        "batch_handler",
        "orderly_batch_handler",
        "per_message_handler",
        "orderly_per_message_handler",
        "pull_poll_batch",
        "pull_async_for",
        "batch_handler_256",
        "per_message_handler_256",
        "batch_handler_uvloop",
        "per_message_handler_uvloop",
        "cpp_push_consumer",
    ):
        row = res.get(key)
        if row:
            spread = f"{row['spread_pct']:.0f}%" if "spread_pct" in row else "-"
            print(f"{key:<34}{row['msgs_per_s']:>12,.0f}{spread:>9}{row['cpu_us_per_msg']:>12.2f}")
    print(f"P1 batch / pure decode loop: {res['P1_batch_vs_decode']:.2f} (goal >= 0.6)")
    print(f"P1 batch, 256 per pull / decode loop: {res['P1_batch_256_vs_decode']:.2f}")
    if res["P2_per_message_vs_cpp"] is not None:
        print(f"P2 per-message / C++: {res['P2_per_message_vs_cpp']:.2f} (goal >= 3)")
    idle = res["idle_64_queues"]
    print(
        f"P5 idle, {idle['queues']} queues: {idle['cpu_percent']:.2f} % of a core, "
        f"{idle['outstanding_pulls']} outstanding pulls (goal <= 1 %)"
    )
    _write(res)
    return 0


def _write(res: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"consumer-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(res, indent=2))
    print(f"written to {path}")


if __name__ == "__main__":
    sys.exit(main())
