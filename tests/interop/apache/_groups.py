"""Helpers of the consumer-group tests against Java brokers: topics, member processes, records.

Topics are created with UPDATE_AND_CREATE_TOPIC (17) sent straight to each broker, as
``mqadmin updateTopic`` does, without the 5-10 s a JVM of ``mqadmin`` needs to start; the Java
broker registers the new topic with the name server at once
(``AdminBrokerProcessor.updateAndCreateTopic`` -> ``registerIncrementBrokerData``).

Group members run ``tests/consumer/consumer_proc.py`` (concurrent) or ``orderly_proc.py``
(orderly) in their own processes; each writes its deliveries and held queues as JSON lines,
which :class:`Records` reads incrementally.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiorocket import MessageQueue, QueueReader
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._remoting.pool import ConnectionPool

ROOT = Path(__file__).resolve().parents[3]
CONSUMER_PROC = ROOT / "tests" / "consumer" / "consumer_proc.py"
ORDERLY_PROC = ROOT / "tests" / "consumer" / "orderly_proc.py"

#: seconds a member process may take to print READY (importing aiorocket and joining the
#: group; much more than the ~1 s it takes when both cores are busy with Java brokers)
SPAWN_TIMEOUT = 60.0


async def create_topic(brokers: Iterable[str], topic: str, queues: int) -> None:
    """Create ``topic`` with ``queues`` read and write queues on every broker address.

    Raises:
        AssertionError: a broker refused.
    """
    pool = ConnectionPool()
    try:
        for addr in brokers:
            conn = await pool.get(addr)
            resp = await conn.request(
                RemotingCommand.request(
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
                ),
                timeout=30.0,
            )
            assert resp.code == 0, (addr, resp.code, resp.remark)
    finally:
        await pool.close()


async def wait_route(
    namesrv: str, topic: str, queues: int, timeout: float = 30.0
) -> list[MessageQueue]:
    """Wait until the name server's route of ``topic`` lists ``queues`` readable queues."""
    async with QueueReader(namesrv=namesrv) as reader:
        found: list[MessageQueue] = []

        async def complete() -> bool:
            nonlocal found
            try:
                found = await reader.queues(topic)
            except Exception:  # not registered yet: ask again
                return False
            return len(found) == queues

        await eventually(complete, timeout, f"a route of {topic} with {queues} queues")
        return found


async def eventually(check: Callable[[], Any], timeout: float, what: str) -> None:
    """Call (and await, if needed) ``check`` every 100 ms until it is true.

    Raises:
        AssertionError: it was not within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.1)


@dataclass
class Member:
    """One member process of a consumer group."""

    name: str
    proc: asyncio.subprocess.Process
    out: Path
    killed_at: float | None = None
    stopped_at: float | None = None


async def spawn(
    script: Path, name: str, namesrv: str, group: str, topic: str, out_dir: Path, *extra: str
) -> Member:
    """Start a member process and wait for its READY line."""
    out = out_dir / f"{name}.jsonl"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(script),
        *("--namesrv", namesrv, "--group", group, "--topic", topic),
        *("--out", str(out), "--name", name, *extra),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), SPAWN_TIMEOUT)
    except BaseException:
        proc.kill()
        await proc.wait()
        raise
    assert line.strip() == b"READY", line
    return Member(name, proc, out)


async def stop(member: Member, sig: int) -> None:
    """SIGTERM (a clean leave: drain, commit, unlock, unregister) or SIGKILL, by PID."""
    if member.proc.returncode is not None:
        return
    if sig == signal.SIGKILL:
        member.killed_at = time.time()
    else:
        member.stopped_at = time.time()
    member.proc.send_signal(sig)
    code = await asyncio.wait_for(member.proc.wait(), 60)
    assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL), (member.name, code)


async def stop_all(members: Sequence[Member]) -> None:
    """SIGTERM every member still running (the tests' ``finally``); SIGKILL if it hangs."""
    for m in members:
        if m.proc.returncode is None:
            try:
                await stop(m, signal.SIGTERM)
            except (TimeoutError, AssertionError):
                m.proc.kill()
                await m.proc.wait()


@dataclass
class Records:
    """Every JSON line the members wrote, read incrementally (a line cut by SIGKILL is left)."""

    out_dir: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    _pos: dict[Path, int] = field(default_factory=dict)

    def refresh(self) -> list[dict[str, Any]]:
        for path in sorted(self.out_dir.glob("*.jsonl")):
            with path.open("rb") as f:
                f.seek(self._pos.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1
            self._pos[path] = self._pos.get(path, 0) + end
            for line in data[:end].splitlines():
                try:
                    self.rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # torn by SIGKILL mid-write
        return self.rows

    def latest(self, kind: str, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The newest row of ``kind`` of each named member."""
        wanted = set(names)
        out: dict[str, dict[str, Any]] = {}
        for r in self.rows:
            if r["k"] == kind and r["c"] in wanted:
                prev = out.get(r["c"])
                if prev is None or r["t"] >= prev["t"]:
                    out[r["c"]] = r
        return out


# -- orderly records ----------------------------------------------------------------------------


def handler_calls(rows: Iterable[dict[str, Any]], ends: dict[str, float]) -> list[dict[str, Any]]:
    """``orderly_proc`` handler calls as ``{c, q, s, e, lk, ids}``; a call cut short by SIGKILL
    ends at the kill (``ends``: member -> kill time)."""
    open_: dict[tuple[str, int], dict[str, Any]] = {}
    out = []
    for r in sorted((r for r in rows if r["k"] in ("s", "e")), key=lambda r: r["t"]):
        key = (r["c"], r["q"])
        if r["k"] == "s":
            assert key not in open_, f"{key}: two calls at once in one member"
            open_[key] = {"c": r["c"], "q": r["q"], "s": r["t"], "lk": r["lk"], "ids": r["ids"]}
        else:
            call = open_.pop(key)
            call["e"] = r["t"]
            out.append(call)
    for (c, _), call in open_.items():
        call["e"] = ends.get(c, float("inf"))
        out.append(call)
    return out


def check_key_order(calls: Sequence[dict[str, Any]], keys: int, per_key: int) -> int:
    """Per key (bodies ``"<key>:<n>"``), in delivery order: numbers start at 0, never skip, and
    go back only to replay a suffix (a hand-over re-delivering uncommitted work). Returns how
    many deliveries were replays."""
    seqs: dict[str, list[int]] = {}
    for call in sorted(calls, key=lambda c: c["s"]):
        for body in call["ids"]:
            k, n = body.split(":")
            seqs.setdefault(k, []).append(int(n))
    assert len(seqs) == keys, sorted(seqs)
    replays = 0
    for k, seq in seqs.items():
        assert seq[0] == 0, (k, seq[:5])
        top = 0
        for prev, n in itertools.pairwise(seq):
            assert n <= top + 1, f"key {k} skipped from {top} to {n}"
            assert n == prev + 1 or n <= prev, f"key {k}: {prev} then {n}"
            replays += n <= top
            top = max(top, n)
        assert top == per_key - 1, (k, top)
    return replays


def check_no_overlap(calls: Sequence[dict[str, Any]]) -> None:
    """Handler calls of different members on one queue never overlap in time."""
    by_queue: dict[int, list[dict[str, Any]]] = {}
    for call in calls:
        by_queue.setdefault(call["q"], []).append(call)
    for q, cs in by_queue.items():
        cs.sort(key=lambda c: c["s"])
        latest: dict[str, float] = {}
        for c in cs:
            others = [end for name, end in latest.items() if name != c["c"]]
            assert not others or max(others) <= c["s"], (
                f"queue {q}: {c['c']} started at {c['s']} while another member ran until "
                f"{max(others)}"
            )
            latest[c["c"]] = max(latest.get(c["c"], 0.0), c["e"])
