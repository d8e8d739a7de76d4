"""The exactly-once cluster scenario, shared by the embedded-broker test
(``test_sink_cluster.py``) and the Apache RocketMQ interop test: ``n`` messages go through a
streaming query RocketMQ -> transform -> RocketMQ with ``exactlyOnce=true`` on a standalone
cluster (``eo_driver.py``, a driver process of its own); while it runs, an executor JVM is
SIGKILLed, later the driver (its process group: Python, JVM, workers) and the sink's
coordinator are SIGKILLed too, and the query is restarted from its checkpoint. A push
consumer of the output topic must then receive each of the ``n`` results exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiorocket import PushConsumer, ReceivedMessage, SyncQueueReader
from tests._harness.wait import wait_for_blocking
from tests.spark._cluster import Cluster, executor_pids, group_alive
from tests.spark._support import produce
from tests.spark._support import stored as stored_count

__all__ = ["Outcome", "run_scenario"]

DRIVER = Path(__file__).with_name("eo_driver.py")


@dataclass
class Outcome:
    """What the scenario saw."""

    expected: set[bytes]
    #: the output as a push consumer received it, and as the queues store it
    received: Counter[bytes]
    stored: Counter[bytes]
    #: seconds of each phase
    timings: dict[str, float] = field(default_factory=dict)
    #: output messages stored when the executor, and when the driver, were killed
    at_executor_kill: int = 0
    at_driver_kill: int = 0

    def missing(self, counts: Counter[bytes]) -> int:
        """Expected results the counts lack."""
        return len(self.expected - set(counts))

    def duplicates(self, counts: Counter[bytes]) -> int:
        """Copies beyond the first, over all results."""
        return sum(c - 1 for c in counts.values() if c > 1)

    def check_exactly_once(self) -> None:
        """Every expected result once, and nothing else, both as received and as stored."""
        for counts in (self.received, self.stored):
            assert self.missing(counts) == 0, f"{self.missing(counts)} missing"
            assert self.duplicates(counts) == 0, f"{self.duplicates(counts)} duplicates"
            assert set(counts) == self.expected, set(counts) ^ self.expected


def result_of(src: str, i: int) -> bytes:
    """What the query makes of input message ``i``."""
    return f"{src}-{i}".upper().encode() + b":out"


def _read(namesrv: str, topic: str) -> Counter[bytes]:
    with SyncQueueReader(namesrv=namesrv) as reader:
        return Counter(
            m.body
            for mq in reader.queues(topic)
            for m in reader.read_range(mq, 0, reader.max_offset(mq))
        )


def _start_driver(
    cluster: Cluster,
    namesrv: str,
    src: str,
    dst: str,
    work: Path,
    run: int,
    per_trigger: int,
    tx_timeout: float,
) -> subprocess.Popen[bytes]:
    log = (work / f"driver-{run}.log").open("wb")
    with log:
        return subprocess.Popen(
            [
                sys.executable,
                str(DRIVER),
                "--master", cluster.url,
                "--namesrv", namesrv,
                "--src", src,
                "--dst", dst,
                "--checkpoint", str(work / "cp"),
                "--per-trigger", str(per_trigger),
                "--tx-timeout", str(tx_timeout),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its JVM and Python workers share its process group
        )  # fmt: skip


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    wait_for_blocking(lambda: not group_alive(proc.pid), timeout=60, what="the driver's group")


def _kill_coordinator(record: Path) -> None:
    from aiorocket.integrations.spark.coordinator import coordinator_alive

    with contextlib.suppress(OSError, ValueError):
        os.kill(int((record / "coordinator.pid").read_text()), signal.SIGKILL)
    wait_for_blocking(lambda: not coordinator_alive(record), timeout=30, what="coordinator dead")


def consume(
    namesrv: str, topic: str, expected: int, *, quiet: float, timeout: float
) -> Counter[bytes]:
    """Everything a new push consumer group (from the first offset) receives of ``topic``:
    until it has ``expected`` distinct bodies and nothing more came for ``quiet`` seconds."""

    async def go() -> Counter[bytes]:
        got: Counter[bytes] = Counter()
        last = [time.monotonic()]
        consumer = PushConsumer(
            group=f"eo-check-{os.getpid()}-{int(time.time())}",
            namesrv=namesrv,
            consume_from="first",
            rebalance_interval=1.0,
            consume_batch_size=32,
        )
        consumer.subscribe(topic)

        @consumer.listener
        async def on(msgs: list[ReceivedMessage], _: object) -> None:
            got.update(m.body for m in msgs)
            last[0] = time.monotonic()

        deadline = time.monotonic() + timeout
        async with consumer:
            while time.monotonic() < deadline:
                if len(got) >= expected and time.monotonic() - last[0] >= quiet:
                    break
                await asyncio.sleep(0.2)
        return got

    return asyncio.run(go())


def run_scenario(
    *,
    namesrv: str,
    cluster: Cluster,
    work: Path,
    n: int,
    per_trigger: int,
    tx_timeout: float,
    settle: Callable[[float], None],
    prefix: str = "Eo",
) -> Outcome:
    """Run the scenario (topics ``<prefix>In`` / ``<prefix>Out``, created beforehand where
    the broker does not create topics on a first send); ``settle`` waits, after the restarted
    query ended, until the broker's checks can change nothing any more (its argument:
    ``time.monotonic()`` when the first driver was killed).

    Raises:
        AssertionError: a phase did not happen (the stream ended before a kill, a driver
            failed, a wait timed out).
    """
    from aiorocket.integrations.spark.coordinator import stop

    src, dst = f"{prefix}In", f"{prefix}Out"
    record = work / "cp" / "rocketmq-sink"
    expected = {result_of(src, i) for i in range(n)}
    t = time.monotonic()
    timings: dict[str, float] = {}
    produce(namesrv, src, n)
    timings["produce"] = time.monotonic() - t
    first = _start_driver(cluster, namesrv, src, dst, work, 1, per_trigger, tx_timeout)
    try:
        t = time.monotonic()
        wait_for_blocking(
            lambda: stored_count(namesrv, dst) >= n // 8 or first.poll() is not None,
            timeout=600,
            what="the first results",
        )
        at_executor = stored_count(namesrv, dst)
        assert first.poll() is None, (work / "driver-1.log").read_text()[-3000:]
        assert at_executor < n, "the stream ended before the executor was killed"
        victims = [p for w in cluster.workers for p in executor_pids(w.pid)]
        assert victims, "no executor found"
        os.kill(victims[0], signal.SIGKILL)
        timings["to_executor_kill"] = time.monotonic() - t
        wait_for_blocking(
            lambda: stored_count(namesrv, dst) >= n // 2 or first.poll() is not None,
            timeout=600,
            what="half the results",
        )
        at_driver = stored_count(namesrv, dst)
        assert first.poll() is None, "the stream ended before the driver was killed"
        assert at_driver < n, "the stream ended before the driver was killed"
        _kill_group(first)
        _kill_coordinator(record)
        killed_at = time.monotonic()
        timings["to_driver_kill"] = killed_at - t
    finally:
        if first.poll() is None:
            _kill_group(first)
    t = time.monotonic()
    second = _start_driver(cluster, namesrv, src, dst, work, 2, per_trigger, tx_timeout)
    try:
        assert second.wait(900) == 0, (work / "driver-2.log").read_text()[-3000:]
    finally:
        if second.poll() is None:
            _kill_group(second)
    timings["restarted_run"] = time.monotonic() - t
    t = time.monotonic()
    settle(killed_at)
    timings["settle"] = time.monotonic() - t
    t = time.monotonic()
    received = consume(namesrv, dst, n, quiet=5.0, timeout=300)
    timings["consume"] = time.monotonic() - t
    stored = _read(namesrv, dst)
    stop(record)
    return Outcome(expected, received, stored, timings, at_executor, at_driver)
