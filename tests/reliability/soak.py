"""The soak harness with chaos (docs/reliability.md R13), shared by the suite's short soak
(``test_soak.py``) and ``benchmarks/soak.py`` (30 minutes and more).

One process, one event loop: an embedded broker behind a :class:`~aiorocket.testing.ChaosProxy`,
a producer sending numbered messages at a steady rate, a push consumer recording every
delivery, and a fault every ``fault_every`` seconds, cycling through:

* ``stall``: the proxy black-holes all traffic for ``fault_length`` seconds;
* ``reset``: every connection is aborted with a TCP RST;
* ``truncate``: the next frame to each client is cut in half, then the connection closed;
* ``delay``: 200 ms more latency each way for ``fault_length`` seconds;
* ``bandwidth``: 64 KiB/s per direction for ``fault_length`` seconds;
* ``busy``: the broker answers SYSTEM_BUSY to the next 20 sends and 20 pulls;
* ``rebalance``: the broker tells the group to rebalance; a second member joins (and leaves
  at the next ``rebalance``);
* ``restart``: the consumer is closed gracefully and a new one started;
* ``redeliver``: the broker replays the last 20 messages of one queue (duplicates by design,
  counted apart).

Recovery of a fault is the time from its end to the first delivery of a message whose send
started after that end. Bookkeeping is preallocated arrays indexed by message number, so the
harness itself does not grow the process's memory while it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from aiorocket import Admin, ConcurrentContext, Message, Producer, PushConsumer, ReceivedMessage
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket.embedded import BrokerConfig, EmbeddedBroker, parse_delay_levels
from aiorocket.errors import RocketError
from aiorocket.testing import ChaosProxy

__all__ = ["FAULTS", "FaultRecord", "SoakReport", "run_soak"]

FAULTS = (
    "stall",
    "reset",
    "truncate",
    "delay",
    "busy",
    "rebalance",
    "bandwidth",
    "restart",
    "redeliver",
    "rebalance",
)
TOPIC = "Soak"
GROUP = "soak"
QUEUES = 8


@dataclass
class FaultRecord:
    """One injected fault: when it began and ended (seconds from the start) and how long
    delivery took to resume after its end (``nan`` if it never did)."""

    name: str
    start: float
    end: float
    recovery: float = math.nan


@dataclass
class SoakReport:
    """What a soak run measured."""

    seconds: float
    sent: int
    acked: int
    delivered: int
    lost: int
    duplicates: int
    redelivered_by_fault: int
    corrupt: int
    send_failures: int
    faults: list[FaultRecord] = field(default_factory=list)
    #: (seconds from the start, RSS MiB, fds, tasks) every ``sample_every`` seconds
    samples: list[tuple[float, float, int, int]] = field(default_factory=list)
    fds_baseline: int = 0
    fds_end: int = 0
    tasks_baseline: int = 0
    tasks_end: int = 0
    rss_baseline_mib: float = 0.0
    rss_end_mib: float = 0.0
    #: pull tasks the consumers' watchdog restarted (0 when every pull loop stayed alive)
    pull_restarts: int = 0

    @property
    def recoveries(self) -> list[float]:
        return [f.recovery for f in self.faults]

    @property
    def recovery_p99(self) -> float:
        values = sorted(self.recoveries)
        if not values:
            return 0.0
        return values[min(len(values) - 1, math.ceil(0.99 * len(values)) - 1)]

    @property
    def rss_slope_mib_per_min(self) -> float:
        """Least-squares slope of the RSS over the second half of the run."""
        half = [(t, r) for t, r, _, _ in self.samples if t >= self.seconds / 2]
        if len(half) < 3:
            return 0.0
        ts = [t for t, _ in half]
        rs = [r for _, r in half]
        return statistics.linear_regression(ts, rs).slope * 60

    def summary(self) -> dict[str, Any]:
        by_fault: dict[str, list[float]] = {}
        for f in self.faults:
            by_fault.setdefault(f.name, []).append(round(f.recovery, 3))
        return {
            "seconds": round(self.seconds, 1),
            "sent": self.sent,
            "acked": self.acked,
            "delivered": self.delivered,
            "lost": self.lost,
            "duplicates": self.duplicates,
            "redelivered_by_fault": self.redelivered_by_fault,
            "corrupt": self.corrupt,
            "send_failures": self.send_failures,
            "pull_restarts": self.pull_restarts,
            "faults": len(self.faults),
            "recovery_p50_s": round(statistics.median(self.recoveries), 3) if self.faults else 0,
            "recovery_p99_s": round(self.recovery_p99, 3),
            "recovery_max_s": round(max(self.recoveries), 3) if self.faults else 0,
            "recovery_by_fault_s": by_fault,
            "rss_baseline_mib": round(self.rss_baseline_mib, 1),
            "rss_end_mib": round(self.rss_end_mib, 1),
            "rss_slope_mib_per_min": round(self.rss_slope_mib_per_min, 3),
            "fds": [self.fds_baseline, self.fds_end, max((s[2] for s in self.samples), default=0)],
            "tasks": [
                self.tasks_baseline,
                self.tasks_end,
                max((s[3] for s in self.samples), default=0),
            ],
        }


def rss_mib() -> float:
    """This process's resident set size in MiB."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def body_of(i: int, size: int) -> bytes:
    head = b"%010d:" % i
    return head + b"." * max(0, size - len(head))


class _Ledger:
    """Per message number: acknowledged (0/1) and delivery count (saturating at 255)."""

    def __init__(self, capacity: int) -> None:
        self.acked = bytearray(capacity)
        self.delivered = bytearray(capacity)
        self.corrupt = 0
        #: message number -> monotonic time of its first delivery, for probes only
        self.watch: dict[int, float] = {}

    def record(self, msgs: list[ReceivedMessage], size: int) -> None:
        delivered = self.delivered
        watch = self.watch
        for m in msgs:
            body = m.body
            try:
                i = int(body[:10])
            except ValueError:
                self.corrupt += 1
                continue
            if body != body_of(i, size) or i >= len(delivered):
                self.corrupt += 1
                continue
            if delivered[i] < 255:
                delivered[i] += 1
            if i in watch and not watch[i]:
                watch[i] = time.monotonic()


async def run_soak(
    data_dir: Path,
    *,
    seconds: float,
    fault_every: float,
    fault_length: float,
    rate: float = 200.0,
    body_size: int = 128,
    sample_every: float = 1.0,
    collect_every: float | None = 10.0,
    drain_timeout: float = 60.0,
    progress: Callable[[str], None] | None = None,
) -> SoakReport:
    """Run the soak for ``seconds`` (faults included), then stop producing, heal, and wait
    up to ``drain_timeout`` for every acknowledged message; return what was measured.

    ``collect_every``: seconds between full garbage collections (``None``: CPython's own
    schedule). A fault leaves reference cycles (a closed consumer and its tasks, a cancelled
    request and its traceback) that only a full collection frees, and in a process with a
    large heap CPython runs one rarely (once in seven minutes here): without collections the
    RSS grows with faults until one runs, which says nothing about memory the process keeps.
    """
    say = progress or (lambda _line: None)
    capacity = int(rate * (seconds + 60) * 1.2) + 1000
    ledger = _Ledger(capacity)
    config = BrokerConfig(delay_levels=parse_delay_levels(" ".join(["1s"] * 18)))
    consumer_settings: dict[str, Any] = {
        "consume_from": "first",
        "rebalance_interval": 5.0,
        "pull_suspend_timeout": 5.0,
        "pull_timeout": 10.0,
        "offset_persist_interval": 1.0,
        "shutdown_grace": 5.0,
    }

    def new_consumer() -> PushConsumer:
        consumer = PushConsumer(group=GROUP, namesrv=proxy.address, **consumer_settings)
        consumer.subscribe(TOPIC)

        @consumer.listener
        async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
            ledger.record(msgs, body_size)

        return consumer

    report = SoakReport(0, 0, 0, 0, 0, 0, 0, 0, 0)
    loop = asyncio.get_running_loop()
    async with ChaosProxy() as proxy:
        cfg = replace(config, advertised_port=proxy.port)
        async with EmbeddedBroker(data_dir=data_dir, config=cfg) as broker:
            proxy.upstream = broker.listen_address
            # the topic exists with QUEUES queues before the consumer starts (the redeliver
            # fault picks any of them)
            async with Admin(namesrv=proxy.address) as admin:
                await admin.create_topic(TOPIC, queues=QUEUES)
            producer = Producer(namesrv=proxy.address, group="soak-producer")
            await producer.start()
            consumer = new_consumer()
            await consumer.start()
            extra: PushConsumer | None = None
            next_id = 0
            send_failures = 0
            stop_sending = asyncio.Event()
            redelivered = 0

            async def sender() -> None:
                nonlocal next_id, send_failures
                interval = 1.0 / rate
                due = loop.time()
                while not stop_sending.is_set():
                    i = next_id
                    next_id += 1
                    try:
                        await producer.send(Message(TOPIC, body_of(i, body_size)))
                    except RocketError:
                        send_failures += 1
                    else:
                        ledger.acked[i] = 1
                    due += interval
                    pause = due - loop.time()
                    if pause > 0:
                        await asyncio.sleep(pause)
                    else:
                        due = loop.time()  # behind (a fault): do not burst to catch up

            started = time.monotonic()

            def now() -> float:
                return time.monotonic() - started

            async def sampler() -> None:
                collected = loop.time()
                while True:
                    if collect_every is not None and loop.time() - collected >= collect_every:
                        gc.collect()
                        collected = loop.time()
                    report.samples.append((now(), rss_mib(), open_fds(), len(asyncio.all_tasks())))
                    await asyncio.sleep(sample_every)

            sending = asyncio.create_task(sender(), name="soak sender")
            sampling = asyncio.create_task(sampler(), name="soak sampler")
            # warm-up, then the baseline
            await asyncio.sleep(min(5.0, fault_every))
            report.rss_baseline_mib = rss_mib()
            report.fds_baseline = open_fds()
            report.tasks_baseline = len(asyncio.all_tasks())

            async def probe_after(record: FaultRecord) -> None:
                # the first delivery among the messages whose send starts after the fault
                # ended (some of them may fail to send, as the broker may still be busy)
                first = next_id + 1
                ids = range(first, first + int(rate * 10) + 10)
                for i in ids:
                    ledger.watch[i] = 0.0
                end = time.monotonic()
                try:
                    while not any(ledger.watch.get(i) for i in ids):
                        await asyncio.sleep(0.01)
                        if time.monotonic() - end > 120:
                            return
                    record.recovery = max(0.0, min(t for i in ids if (t := ledger.watch[i])) - end)
                finally:
                    for i in ids:
                        ledger.watch.pop(i, None)

            probes: list[asyncio.Task[None]] = []
            k = 0
            while now() + fault_every <= seconds:
                await asyncio.sleep(max(0.0, (k + 1) * fault_every - now()))
                name = FAULTS[k % len(FAULTS)]
                k += 1
                record = FaultRecord(name, now(), now())
                if name == "stall":
                    proxy.stall()
                    await asyncio.sleep(fault_length)
                    proxy.heal()
                elif name == "reset":
                    proxy.reset()
                elif name == "truncate":
                    proxy.truncate()
                    await asyncio.sleep(min(1.0, fault_length))
                    proxy.heal()
                elif name == "delay":
                    proxy.delay(0.2)
                    await asyncio.sleep(fault_length)
                    proxy.heal()
                elif name == "bandwidth":
                    proxy.bandwidth(64 * 1024)
                    await asyncio.sleep(fault_length)
                    proxy.heal()
                elif name == "busy":
                    broker.fail_next(RequestCode.SEND_MESSAGE_V2, ResponseCode.SYSTEM_BUSY, 20)
                    broker.fail_next(RequestCode.PULL_MESSAGE, ResponseCode.SYSTEM_BUSY, 20)
                elif name == "rebalance":
                    if extra is None:
                        extra = new_consumer()
                        await extra.start()
                    else:
                        report.pull_restarts += extra.statistics().pull_restarts
                        await extra.close()
                        extra = None
                    await broker.notify_rebalance(GROUP)
                elif name == "restart":
                    report.pull_restarts += consumer.statistics().pull_restarts
                    await consumer.close()
                    consumer = new_consumer()
                    await consumer.start()
                elif name == "redeliver":
                    queue = k % QUEUES
                    top = broker.store.max_offset(TOPIC, queue)
                    await broker.redeliver(TOPIC, queue, max(0, top - 20))
                    redelivered += min(20, top)
                record.end = now()
                report.faults.append(record)
                probes.append(asyncio.create_task(probe_after(record)))
                say(f"{record.end:7.1f} s  fault {name:<9} sent {next_id}")

            await asyncio.sleep(max(0.0, seconds - now()))
            stop_sending.set()
            await sending
            proxy.heal()
            broker._require_faults().clear()
            drain_until = time.monotonic() + drain_timeout
            sent = next_id

            def missing() -> int:
                return sum(1 for i in range(sent) if ledger.acked[i] and not ledger.delivered[i])

            while missing() and time.monotonic() < drain_until:
                await asyncio.sleep(0.5)
            if extra is not None:
                report.pull_restarts += extra.statistics().pull_restarts
                await extra.close()
                extra = None
            for probe in probes:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(probe, max(0.1, drain_until - time.monotonic()))
            # quiet: counts come back to the baseline (held pulls end within their hold)
            quiet_until = time.monotonic() + 20
            while time.monotonic() < quiet_until and (
                open_fds() > report.fds_baseline or len(asyncio.all_tasks()) > report.tasks_baseline
            ):
                await asyncio.sleep(0.25)
            report.fds_end = open_fds()
            report.tasks_end = len(asyncio.all_tasks())
            report.rss_end_mib = rss_mib()
            sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampling
            report.seconds = now()
            report.pull_restarts += consumer.statistics().pull_restarts
            await consumer.close()
            await producer.close()

    acked = [i for i in range(sent) if ledger.acked[i]]
    report.sent = sent
    report.acked = len(acked)
    report.delivered = sum(1 for i in range(sent) if ledger.delivered[i])
    report.lost = sum(1 for i in acked if not ledger.delivered[i])
    report.duplicates = sum(max(0, ledger.delivered[i] - 1) for i in range(sent))
    report.redelivered_by_fault = redelivered
    report.corrupt = ledger.corrupt
    report.send_failures = send_failures
    return report
