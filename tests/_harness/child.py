"""Consumer processes of the multi-process tests: both sides of them.

The test side starts a member script (``python <script> --namesrv … --out FILE --name NAME``)
with the repository on ``PYTHONPATH``, waits for its ``READY`` line, stops it with a signal and
reads the JSON lines it wrote. The member side (the scripts) parses the common options,
writes those lines and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from aiorocket import PushConsumer
from aiorocket._producer.producer import Producer
from aiorocket.models import Message, ReceivedMessage

__all__ = [
    "ROOT",
    "Child",
    "broker_cli",
    "delivered_ids",
    "JsonLines",
    "latest_owners",
    "member_consumer",
    "member_options",
    "member_parser",
    "produce_at_rate",
    "read_rows",
    "start_script",
    "stop_child",
    "stop_member",
    "stop_members",
    "stop_on_signals",
    "until_stopped",
    "wait_delivered",
    "wait_flowing",
    "wait_one_owner_each",
]

#: the repository's root, on the children's ``PYTHONPATH`` so they import ``tests._harness``
ROOT = Path(__file__).resolve().parents[2]


# -- the test side ---------------------------------------------------------------------------


@dataclass
class Child:
    """A running member process and what the test noted about it."""

    name: str
    proc: asyncio.subprocess.Process
    out: Path | None = None
    killed_at: float | None = None
    stopped_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


async def start_script(
    script: Path, *args: str, ready_timeout: float
) -> asyncio.subprocess.Process:
    """Run ``python script *args`` and return once it printed ``READY`` (killed if it does not
    within ``ready_timeout`` seconds)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        *args,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), ready_timeout)
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    assert line.strip() == b"READY", line
    return proc


def member_options(namesrv: str, group: str, topic: str, out: Path, name: str) -> list[str]:
    """The options every member script takes (see :func:`member_parser`)."""
    return [
        *("--namesrv", namesrv, "--group", group, "--topic", topic),
        *("--out", str(out), "--name", name),
    ]


async def stop_child(child: Child, sig: int, timeout: float) -> None:
    """Send ``sig`` (SIGTERM: a clean exit 0 expected; SIGKILL: noted in ``killed_at``)."""
    if sig == signal.SIGKILL:
        child.killed_at = time.time()
    child.proc.send_signal(sig)
    code = await asyncio.wait_for(child.proc.wait(), timeout)
    assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL), (child.name, code)


async def stop_member(child: Child, sig: int, timeout: float) -> None:
    """:func:`stop_child`, unless the process has exited already; a SIGTERM is noted in
    ``stopped_at``."""
    if child.proc.returncode is not None:
        return
    if sig != signal.SIGKILL:
        child.stopped_at = time.time()
    await stop_child(child, sig, timeout)


async def stop_members(members: Iterable[Child], timeout: float) -> None:
    """SIGTERM every member still running (a test's ``finally``); SIGKILL one that hangs."""
    for m in members:
        if m.proc.returncode is None:
            try:
                await stop_member(m, signal.SIGTERM, timeout)
            except (TimeoutError, AssertionError):
                m.proc.kill()
                await m.proc.wait()


def read_rows(out_dir: Path) -> list[dict[str, Any]]:
    """Every JSON line the members wrote under ``out_dir`` (``*.jsonl``)."""
    rows: list[dict[str, Any]] = []
    for path in out_dir.glob("*.jsonl"):
        # A line cut by SIGKILL mid-write is incomplete; skip it.
        rows.extend(json.loads(x) for x in path.read_text().splitlines() if x.endswith("}"))
    return rows


def delivered_ids(out_dir: Path) -> set[str]:
    """The ids of every delivery the members recorded (their ``"k": "d"`` lines)."""
    return {r["id"] for r in read_rows(out_dir) if r["k"] == "d"}


def latest_owners(out_dir: Path, names: Iterable[str]) -> dict[str, list[int]]:
    """The latest held queues each named member reported (its ``"k": "a"`` lines)."""
    wanted = set(names)
    latest: dict[str, tuple[float, list[int]]] = {}
    for r in read_rows(out_dir):
        newer = r["c"] not in latest or r["t"] >= latest[r["c"]][0]
        if r["k"] == "a" and r["c"] in wanted and newer:
            latest[r["c"]] = (r["t"], r["queues"])
    return {c: qs for c, (_, qs) in latest.items()}


async def wait_one_owner_each(out_dir: Path, live: Iterable[Child], *, timeout: float) -> float:
    """Wait until the live members hold the 8 queues exactly once between them; the seconds
    it took.

    Raises:
        AssertionError: not within ``timeout``.
    """
    names = [c.name for c in live]
    start = time.monotonic()
    while True:
        held = latest_owners(out_dir, names)
        count = Counter(q for qs in held.values() for q in qs)
        if (
            len(held) == len(names)
            and sorted(count) == list(range(8))
            and set(count.values()) == {1}
        ):
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"queues not settled: {held}")
        await asyncio.sleep(0.1)


async def produce_at_rate(
    namesrv: str, topic: str, group: str, ids: list[str], rate: float, batch: int = 50
) -> None:
    """Send one message per id (its body), in batches, at about ``rate`` messages a second."""
    async with Producer(namesrv=namesrv, group=group) as p:
        start = time.monotonic()
        for i in range(0, len(ids), batch):
            await p.send_batch([Message(topic, x.encode()) for x in ids[i : i + batch]])
            ahead = start + (i + batch) / rate - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)


async def wait_delivered(
    delivered: Callable[[], set[str]], ids: Iterable[str], *, timeout: float, interval: float
) -> None:
    """Wait until every id is in ``delivered()``, polled every ``interval`` seconds (the
    suite's one wait for deliveries: ``delivered`` reads what members wrote so far, e.g.
    :meth:`tests._harness.orderly.Records.delivered_now`).

    Raises:
        AssertionError: some were not within ``timeout``.
    """
    wanted = set(ids)
    deadline = time.monotonic() + timeout
    while True:
        missing = wanted - delivered()
        if not missing:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(missing)} never delivered, e.g. {sorted(missing)[:5]}")
        await asyncio.sleep(interval)


async def wait_flowing(out_dir: Path, more: int, *, total: int, timeout: float = 60.0) -> None:
    """Wait until ``more`` further ids were delivered under ``out_dir`` (as `delivered_ids`
    counts them), or all ``total`` of them: messages flow on between two membership changes,
    however fast the machine is (a sleep would be too short on a slow one, too long on a fast
    one).

    Raises:
        AssertionError: they were not within ``timeout``.
    """
    ids: set[str] = set()
    read_to: dict[Path, int] = {}

    def delivered() -> int:
        # Only what was appended since the last look: re-parsing whole files while messages
        # flow would stall the broker sharing this loop. A line cut by SIGKILL stays unread.
        for path in sorted(out_dir.glob("*.jsonl")):
            with path.open("rb") as f:
                f.seek(read_to.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1
            read_to[path] = read_to.get(path, 0) + end
            rows = (json.loads(x) for x in data[:end].splitlines() if x.endswith(b"}"))
            ids.update(r["id"] for r in rows if r["k"] == "d")
        return len(ids)

    want = min(delivered() + more, total)
    deadline = time.monotonic() + timeout
    while delivered() < want:
        if time.monotonic() > deadline:
            raise AssertionError(f"fewer than {more} more deliveries within {timeout} s")
        await asyncio.sleep(0.1)


async def broker_cli(
    data_dir: Path, *extra: str, stderr: int | None = asyncio.subprocess.PIPE
) -> asyncio.subprocess.Process:
    """``python -m aiorocket broker --port 0 --data-dir DIR *extra``, its stdout piped (and
    its stderr, unless ``stderr`` says otherwise)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "aiorocket", "broker", "--port", "0", "--data-dir", str(data_dir), *extra),
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
    )


#: the line ``aiorocket broker`` prints once it serves
_LISTENING = re.compile(rb"listening on (\d+\.\d+\.\d+\.\d+:\d+)")


async def started_broker_cli(data_dir: Path, *extra: str) -> tuple[asyncio.subprocess.Process, str]:
    """:func:`broker_cli`, once it says it is listening; the process and its address.

    Raises:
        AssertionError: it did not start (its first line and stderr say why).
    """
    proc = await broker_cli(data_dir, *extra)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    m = _LISTENING.search(line)
    if m is None:
        proc.kill()
        _, err = await proc.communicate()
        raise AssertionError(f"broker did not start: {line!r} {err!r}")
    return proc, m.group(1).decode()


# -- the member side -------------------------------------------------------------------------


def member_parser() -> argparse.ArgumentParser:
    """The options of :func:`member_options`, each required."""
    parser = argparse.ArgumentParser()
    for option in ("--namesrv", "--group", "--topic", "--out", "--name"):
        parser.add_argument(option, required=True)
    return parser


def member_consumer(args: argparse.Namespace, **settings: Any) -> tuple[JsonLines, PushConsumer]:
    """The member's ``--out`` file, and a push consumer of its group subscribed to its topic,
    with the ``--rebalance-interval`` and ``--persist-interval`` options (and a 5 s shutdown
    grace)."""
    consumer = PushConsumer(
        group=args.group,
        namesrv=args.namesrv,
        rebalance_interval=args.rebalance_interval,
        offset_persist_interval=args.persist_interval,
        shutdown_grace=5.0,
        **settings,
    )
    consumer.subscribe(args.topic)
    return JsonLines(args.out, args.name), consumer


class JsonLines:
    """The ``--out`` file of a member: each line flushed to the OS at once, so a SIGKILL
    loses nothing already written."""

    def __init__(self, path: str, name: str) -> None:
        self._out: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115
        self.name = name

    def write(self, obj: dict[str, Any]) -> None:
        """One line."""
        self.write_all([obj])

    def write_all(self, objs: Iterable[dict[str, Any]]) -> None:
        """Several lines, flushed once."""
        self._out.write("".join(json.dumps(o, separators=(",", ":")) + "\n" for o in objs))
        self._out.flush()

    def deliveries(self, msgs: Iterable[ReceivedMessage], body: Callable[[bytes], str]) -> None:
        """A ``"k": "d"`` line per message (queue, offset, ``body(m.body)``, reconsume times)."""
        now = time.time()
        self.write_all(
            {
                "k": "d",
                "c": self.name,
                "q": m.queue_id,
                "o": m.queue_offset,
                "id": body(m.body),
                "r": m.reconsume_times,
                "t": now,
            }
            for m in msgs
        )

    def close(self) -> None:
        """Close the file."""
        self._out.close()


def stop_on_signals(on_signal: Callable[[], None] | None = None) -> asyncio.Event:
    """An event set by SIGTERM or SIGINT (which also call ``on_signal``)."""
    stop = asyncio.Event()

    def handler() -> None:
        stop.set()
        if on_signal is not None:
            on_signal()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, handler)
    return stop


async def until_stopped(
    stop: asyncio.Event, snapshot: Callable[[], Awaitable[None] | None]
) -> None:
    """Call ``snapshot`` every 100 ms until ``stop`` is set."""
    while not stop.is_set():
        result = snapshot()
        if result is not None:
            await result
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)
