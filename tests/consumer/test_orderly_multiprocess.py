"""Orderly consumer processes against one embedded broker (RELIABILITY.md
R6, R7).

Each process (``orderly_proc.py``) records the start and end of every handler call and its
live locks; the checks read those records:

* per key, deliveries in time order start at 0, never skip a number, and a re-delivery only
  replays a suffix (the numbers go back, then climb one by one again);
* per queue, handler calls of different processes never overlap in time;
* with SIGSTOP past the broker lease, the other member takes the stopped member's queues only
  once the lease has run out, and the resumed member delivers nothing before re-locking.

The broker lease is shortened to a few seconds and the members renew twice a second, so a
killed or stopped owner's queues move on within seconds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.embedded.config import BrokerConfig
from aiorocket.models import Message

SCRIPT = Path(__file__).with_name("orderly_proc.py")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


@dataclass
class Proc:
    name: str
    proc: asyncio.subprocess.Process
    out: Path
    killed_at: float | None = None


@dataclass
class Records:
    """Every record of every process, read incrementally (the broker shares this loop, so
    re-reading whole files while waiting would stall it)."""

    out_dir: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    _pos: dict[Path, int] = field(default_factory=dict)

    def refresh(self) -> list[dict[str, Any]]:
        for path in sorted(self.out_dir.glob("*.jsonl")):
            with path.open("rb") as f:
                f.seek(self._pos.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1  # a line cut by SIGKILL stays unread
            self._pos[path] = self._pos.get(path, 0) + end
            for line in data[:end].splitlines():
                try:
                    self.rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # torn by SIGKILL mid-write
        return self.rows

    def delivered(self) -> set[str]:
        return {i for r in self.rows if r["k"] == "s" for i in r["ids"]}


async def spawn(name: str, broker: EmbeddedBroker, out_dir: Path, *extra: str) -> Proc:
    out = out_dir / f"{name}.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(SCRIPT),
        *("--namesrv", broker.address, "--group", "ord-mp", "--topic", "OrdMP"),
        *("--out", str(out), "--name", name, *extra),
        stdout=asyncio.subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert line.strip() == b"READY", line
    return Proc(name, proc, out)


async def stop(p: Proc, sig: int) -> None:
    if sig == signal.SIGKILL:
        p.killed_at = time.time()
    p.proc.send_signal(sig)
    code = await asyncio.wait_for(p.proc.wait(), 30)
    assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL)


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def wait_delivered(records: Records, wanted: set[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        records.refresh()
        missing = wanted - records.delivered()
        if not missing:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(missing)} never delivered, e.g. {sorted(missing)[:5]}")
        await asyncio.sleep(0.25)


def calls(rows: list[dict[str, Any]], ends: dict[str, float]) -> list[dict[str, Any]]:
    """Handler calls as ``{c, q, s, e, lk, ids}``; a call cut short by SIGKILL ends at the
    kill (``ends``: process -> kill time)."""
    open_: dict[tuple[str, int], dict[str, Any]] = {}
    out = []
    for r in sorted((r for r in rows if r["k"] in "se"), key=lambda r: r["t"]):
        key = (r["c"], r["q"])
        if r["k"] == "s":
            assert key not in open_, f"{key}: two calls at once in one process"
            open_[key] = {"c": r["c"], "q": r["q"], "s": r["t"], "lk": r["lk"], "ids": r["ids"]}
        else:
            call = open_.pop(key)
            call["e"] = r["t"]
            out.append(call)
    for (c, _), call in open_.items():
        call["e"] = ends.get(c, float("inf"))
        out.append(call)
    return out


def check_order(all_calls: list[dict[str, Any]], keys: int, per_key: int) -> int:
    """Per key: numbers start at 0, never skip, and go back only to replay a suffix. Returns
    the number of re-deliveries."""
    seqs: dict[str, list[int]] = defaultdict(list)
    for call in sorted(all_calls, key=lambda c: c["s"]):
        for body in call["ids"]:
            k, n = body.split(":")
            seqs[k].append(int(n))
    assert len(seqs) == keys
    replays = 0
    for k, seq in seqs.items():
        assert seq[0] == 0, (k, seq[:5])
        top = 0
        for prev, n in itertools.pairwise(seq):
            assert n <= top + 1, f"key {k} skipped from {top} to {n}"
            assert n == prev + 1 or n <= prev, f"key {k}: {prev} then {n}"
            replays += n <= top
            top = max(top, n)
        assert top == per_key - 1
        firsts: list[int] = []
        for n in seq:
            if n not in firsts:
                firsts.append(n)
        assert firsts == list(range(per_key)), f"key {k}: first deliveries out of order"
    return replays


def check_no_overlap(all_calls: list[dict[str, Any]]) -> None:
    """Calls of different processes on one queue never overlap in time."""
    by_queue: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for call in all_calls:
        by_queue[call["q"]].append(call)
    for q, cs in by_queue.items():
        cs.sort(key=lambda c: c["s"])
        latest: dict[str, float] = {}  # per process, the latest end so far
        for c in cs:
            others = [end for name, end in latest.items() if name != c["c"]]
            assert not others or max(others) <= c["s"], (
                f"queue {q}: {c['c']} started at {c['s']} while another member ran until "
                f"{max(others)}"
            )
            latest[c["c"]] = max(latest.get(c["c"], 0.0), c["e"])


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    config = BrokerConfig(default_queues=8, lock_lease=3.0)
    async with EmbeddedBroker(data_dir=tmp_path / "broker", config=config) as b:
        yield b


#: R7: the broker lease, and a channel expiry short enough that the other member wants the
#: stopped member's queues well before that lease runs out
LEASE = 4.0


@pytest.fixture
async def stop_broker(tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    config = BrokerConfig(
        default_queues=4, lock_lease=LEASE, channel_expiry=2.0, channel_scan_interval=0.25
    )
    async with EmbeddedBroker(data_dir=tmp_path / "broker", config=config) as b:
        yield b


async def produce(broker: EmbeddedBroker, keys: list[str], per_key: int, seconds: float) -> None:
    """``per_key`` numbered messages per key, each key by sharding key, spread over time."""
    step = 10
    rounds = per_key // step
    async with Producer(namesrv=broker.address, group="ord-mp-producer") as p:
        start = time.monotonic()
        for r in range(rounds):
            for k in keys:
                batch = [
                    Message("OrdMP", f"{k}:{n}".encode()) for n in range(r * step, (r + 1) * step)
                ]
                await p.send_batch(batch, sharding_key=k)
            ahead = start + (r + 1) * seconds / rounds - time.monotonic()
            if ahead > 0:
                await asyncio.sleep(ahead)


async def test_orderly_members_join_and_leave_keeping_per_key_order(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """50 keys x 200 messages; three members join and leave (cleanly and by SIGKILL)."""
    keys = [f"key{i:02d}" for i in range(50)]
    per_key = 200
    wanted = {f"{k}:{n}" for k in keys for n in range(per_key)}
    out = tmp_path / "out"
    out.mkdir()
    records = Records(out)
    sleep = ("--sleep", "0.002")
    live = list(await asyncio.gather(*(spawn(n, broker, out, *sleep) for n in ("a", "b", "c"))))
    killed: list[Proc] = []
    production = asyncio.create_task(produce(broker, keys, per_key, seconds=8.0))
    try:
        await asyncio.sleep(1.5)
        b = next(p for p in live if p.name == "b")
        live.remove(b)
        await stop(b, signal.SIGKILL)  # its queues stay locked until the 3 s lease ends
        killed.append(b)
        await asyncio.sleep(1.5)
        live.append(await spawn("b2", broker, out, *sleep))
        await asyncio.sleep(1.0)
        c = next(p for p in live if p.name == "c")
        live.remove(c)
        await stop(c, signal.SIGTERM)  # drains, flushes, unlocks, leaves
        await asyncio.sleep(0.5)
        live.append(await spawn("c2", broker, out, *sleep))
        await asyncio.sleep(1.0)
        a = next(p for p in live if p.name == "a")
        live.remove(a)
        await stop(a, signal.SIGKILL)
        killed.append(a)
        await asyncio.sleep(0.5)
        live.append(await spawn("a2", broker, out, *sleep))
        await production
        await wait_delivered(records, wanted, timeout=30)
    finally:
        production.cancel()
        for p in live:
            if p.proc.returncode is None:
                await stop(p, signal.SIGTERM)
    rows = records.refresh()
    all_calls = calls(rows, {p.name: p.killed_at or 0.0 for p in killed})
    assert records.delivered() == wanted
    check_no_overlap(all_calls)
    replays = check_order(all_calls, len(keys), per_key)
    # Replays come only from hand-overs (uncommitted work of killed members, or the last
    # call of a dropped queue): a small share of the 10,000 messages.
    assert replays < 2000, replays
    members = {c["c"] for c in all_calls}
    assert {"a", "b", "c"} <= members
    # Late joiners took queues over (how many depends on timing; a slow machine may finish
    # the backlog before the last one's locks come free).
    assert members & {"a2", "b2", "c2"}


async def test_a_stopped_owner_loses_its_queues_only_after_the_lease_and_relocks_before_delivering(
    stop_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """R7: SIGSTOP the owner past the broker lease (4 s), then SIGCONT."""
    broker = stop_broker
    lease = LEASE
    keys = [f"k{i}" for i in range(16)]
    per_key = 100
    wanted = {f"{k}:{n}" for k in keys for n in range(per_key)}
    out = tmp_path / "out"
    out.mkdir()
    records = Records(out)
    opts = ("--sleep", "0.01", "--heartbeat-interval", "0.4")
    a = await spawn("a", broker, out, *opts)
    bee = await spawn("b", broker, out, *opts)
    production = asyncio.create_task(produce(broker, keys, per_key, seconds=12.0))
    try:
        await asyncio.sleep(2.0)
        os.kill(a.proc.pid, signal.SIGSTOP)
        while process_state(a.proc.pid) != "T":
            await asyncio.sleep(0.005)
        t_stop = time.time()
        await asyncio.sleep(lease + 2.0)  # past the lease; b has taken over meanwhile
        t_cont = time.time()
        os.kill(a.proc.pid, signal.SIGCONT)
        await production
        await wait_delivered(records, wanted, timeout=30)
        await asyncio.sleep(1.0)  # a has rejoined and holds queues again
    finally:
        production.cancel()
        for p in (a, bee):
            if p.proc.returncode is None:
                os.kill(p.proc.pid, signal.SIGCONT)
                await stop(p, signal.SIGTERM)
    rows = records.refresh()
    all_calls = calls(rows, {})
    # a's last view of its locks before the stop: the latest snapshot and call records.
    a_locks: dict[int, float] = {}
    for r in rows:
        if r["c"] == "a" and r["t"] < t_stop:
            if r["k"] == "a":
                for q, lk in r["locks"].items():
                    a_locks[int(q)] = max(a_locks.get(int(q), 0.0), lk)
            elif r["k"] == "s":
                a_locks[r["q"]] = max(a_locks.get(r["q"], 0.0), r["lk"])
    a_queues = {q for q, lk in a_locks.items() if lk > t_stop - 2.0}  # held when stopped
    assert a_queues, "a held no queue when it was stopped"
    for q in a_queues:
        b_on_q = [c for c in all_calls if c["c"] == "b" and c["q"] == q and c["s"] > t_stop]
        b_during = [c for c in b_on_q if c["s"] < t_cont]
        assert b_during, f"b never took queue {q} while a was stopped"
        first = min(c["s"] for c in b_during)
        # The broker hands the queue over only after a's lease (from a's last grant, which
        # is no earlier than its recorded request time) has run out.
        assert first >= a_locks[q] + lease, (q, first - a_locks[q])
    # In flight at the stop: a call of a that started before it (its end came after SIGCONT).
    in_flight = [c for c in all_calls if c["c"] == "a" and c["s"] < t_stop < c["e"]]
    assert len(in_flight) <= len(a_queues)
    resumed = [c for c in all_calls if c["c"] == "a" and c["s"] > t_stop]
    assert resumed, "a never consumed again after SIGCONT"
    for c in resumed:
        assert c["s"] > t_cont
        assert c["lk"] > t_cont, f"a delivered on queue {c['q']} before re-locking it"
    check_no_overlap([c for c in all_calls if c not in in_flight])
    check_order(all_calls, len(keys), per_key)
