"""Orderly consumer processes against one embedded broker (docs/reliability.md
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
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message
from tests._harness.child import Child, member_options, start_script, stop_child, wait_delivered
from tests._harness.orderly import Records, check_key_order, check_no_overlap, handler_calls
from tests._harness.wait import wait_for
from tests.consumer.conftest import create_topic

SCRIPT = Path(__file__).with_name("orderly_proc.py")

#: a 3 s lock lease
LOCK_LEASE_3S = pytest.mark.broker(lock_lease=3.0)

pytestmark = [pytest.mark.slow, LOCK_LEASE_3S]


#: queues of the members' topic, created before they start (as an operator would)
QUEUES = 8


async def spawn(name: str, broker: EmbeddedBroker, out_dir: Path, *extra: str) -> Child:
    out = out_dir / f"{name}.jsonl"
    options = member_options(broker.address, "ord-mp", "OrdMP", out, name)
    return Child(name, await start_script(SCRIPT, *options, *extra, ready_timeout=30), out)


async def stop(p: Child, sig: int) -> None:
    await stop_child(p, sig, timeout=30)


async def stop_live(members: list[Child]) -> None:
    """SIGTERM every member still running (the tests' ``finally``)."""
    for p in members:
        if p.proc.returncode is None:
            await stop(p, signal.SIGTERM)


def new_run(tmp_path: Path, keys: list[str], per_key: int) -> tuple[set[str], Path, Records]:
    """The bodies a run must deliver (``"<key>:<n>"``), the members' output folder and its
    records."""
    wanted = {f"{k}:{n}" for k in keys for n in range(per_key)}
    out = tmp_path / "out"
    out.mkdir()
    return wanted, out, Records(out)


def check_run(
    records: Records, all_calls: list[dict[str, Any]], wanted: set[str], keys: int, per_key: int
) -> int:
    """Everything was delivered, in per-key order, without two members on one queue at once;
    the number of replays."""
    assert records.delivered() == wanted
    check_no_overlap(all_calls)
    return check_key_order(all_calls, keys, per_key, firsts_in_order=True)


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def flowing(records: Records, more: int, wanted: set[str], member: str | None = None) -> None:
    """Wait until ``more`` further handler calls started (of ``member``; ``None``: anyone's),
    or everything ``wanted`` was delivered: messages flow on between two membership changes,
    however fast the machine is."""

    def started() -> int:
        return sum(1 for r in records.refresh() if r["k"] == "s" and member in (None, r["c"]))

    want = started() + more
    await wait_for(
        lambda: started() >= want or records.delivered() >= wanted,
        timeout=60,
        what=f"{more} more calls",
        interval=0.05,
    )


#: R7: the broker lease, and a channel expiry short enough that the other member wants the
#: stopped member's queues well before that lease runs out
LEASE = 4.0


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


@contextlib.asynccontextmanager
async def producing(
    broker: EmbeddedBroker, keys: list[str], per_key: int, seconds: float, members: list[Child]
) -> AsyncIterator[asyncio.Task[None]]:
    """:func:`produce` in the background; on the way out (also on failure) it is cancelled and
    the members still running in ``members`` (which the body may change) are stopped."""
    production = asyncio.create_task(produce(broker, keys, per_key, seconds))
    try:
        yield production
    finally:
        production.cancel()
        await stop_live(members)


async def test_orderly_members_join_and_leave_keeping_per_key_order(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """50 keys x 200 messages; three members join and leave (cleanly and by SIGKILL)."""
    keys = [f"key{i:02d}" for i in range(50)]
    per_key = 200
    wanted, out, records = new_run(tmp_path, keys, per_key)
    await create_topic(broker, "OrdMP", queues=QUEUES)
    sleep = ("--sleep", "0.002")
    live = list(await asyncio.gather(*(spawn(n, broker, out, *sleep) for n in ("a", "b", "c"))))
    killed: list[Child] = []
    async with producing(broker, keys, per_key, 8.0, live) as production:
        await flowing(records, 1000, wanted)
        b = next(p for p in live if p.name == "b")
        live.remove(b)
        await stop(b, signal.SIGKILL)  # its queues stay locked until the 3 s lease ends
        killed.append(b)
        await flowing(records, 800, wanted)
        live.append(await spawn("b2", broker, out, *sleep))
        await flowing(records, 600, wanted)
        c = next(p for p in live if p.name == "c")
        live.remove(c)
        await stop(c, signal.SIGTERM)  # drains, flushes, unlocks, leaves
        await asyncio.sleep(0.5)
        live.append(await spawn("c2", broker, out, *sleep))
        await flowing(records, 600, wanted)
        a = next(p for p in live if p.name == "a")
        live.remove(a)
        await stop(a, signal.SIGKILL)
        killed.append(a)
        await asyncio.sleep(0.5)
        live.append(await spawn("a2", broker, out, *sleep))
        await production
        await wait_delivered(records.delivered_now, wanted, timeout=30, interval=0.25)
    rows = records.refresh()
    all_calls = handler_calls(rows, {p.name: p.killed_at or 0.0 for p in killed})
    replays = check_run(records, all_calls, wanted, len(keys), per_key)
    # Replays come only from hand-overs (uncommitted work of killed members, or the last
    # call of a dropped queue): a small share of the 10,000 messages.
    assert replays < 2000, replays
    members = {c["c"] for c in all_calls}
    assert {"a", "b", "c"} <= members
    # Late joiners took queues over (how many depends on timing; a slow machine may finish
    # the backlog before the last one's locks come free).
    assert members & {"a2", "b2", "c2"}


@pytest.mark.broker(lock_lease=LEASE, channel_expiry=2.0, channel_scan_interval=0.25)
async def test_a_stopped_owner_loses_its_queues_only_after_the_lease_and_relocks_before_delivering(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """R7: SIGSTOP the owner past the broker lease (4 s), then SIGCONT."""
    lease = LEASE
    keys = [f"k{i}" for i in range(16)]
    per_key = 100
    wanted, out, records = new_run(tmp_path, keys, per_key)
    opts = ("--sleep", "0.01", "--heartbeat-interval", "0.4")
    await create_topic(broker, "OrdMP", queues=4)
    a = await spawn("a", broker, out, *opts)
    bee = await spawn("b", broker, out, *opts)
    production = asyncio.create_task(produce(broker, keys, per_key, seconds=12.0))
    try:
        await flowing(records, 200, wanted, member="a")
        os.kill(a.proc.pid, signal.SIGSTOP)
        while process_state(a.proc.pid) != "T":
            await asyncio.sleep(0.005)
        t_stop = time.time()
        await asyncio.sleep(lease + 2.0)  # past the lease; b has taken over meanwhile
        t_cont = time.time()
        os.kill(a.proc.pid, signal.SIGCONT)
        await production
        await wait_delivered(records.delivered_now, wanted, timeout=30, interval=0.25)

        def a_resumed() -> bool:
            return any(
                c["c"] == "a" and c["s"] > t_cont for c in handler_calls(records.refresh(), {})
            )

        await wait_for(a_resumed, timeout=10, what="a consuming again", interval=0.1)
    finally:
        production.cancel()
        for p in (a, bee):
            if p.proc.returncode is None:
                os.kill(p.proc.pid, signal.SIGCONT)
                await stop(p, signal.SIGTERM)
    rows = records.refresh()
    all_calls = handler_calls(rows, {})
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
    check_key_order(all_calls, len(keys), per_key, firsts_in_order=True)
