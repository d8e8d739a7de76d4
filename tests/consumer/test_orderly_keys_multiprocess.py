"""Orderly consumer processes ordered by key against one embedded broker.

The processes are ``orderly_proc.py --order-by sharding_key``; the producer sends each key by
``sharding_key``, which also sets ``__SHARDINGKEY``. The checks of
``test_orderly_multiprocess`` apply per key: deliveries start at 0, never skip, and a
re-delivery only replays an in-order suffix (the committed offset is the smallest unfinished
one); calls of different processes on one queue never overlap. Within a process at most one
call per key runs at a time, while calls of different keys of a queue do overlap.
"""

from __future__ import annotations

import asyncio
import signal
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from aiorocket.embedded.broker import EmbeddedBroker
from tests._harness.child import Child, wait_delivered
from tests.consumer.conftest import create_topic
from tests.consumer.test_orderly_multiprocess import (
    LOCK_LEASE_3S,
    QUEUES,
    check_run,
    new_run,
    producing,
    spawn,
    stop,
)

pytestmark = [pytest.mark.slow, LOCK_LEASE_3S]

KEYED = ("--order-by", "sharding_key", "--sleep", "0.01")


def keyed_calls(rows: list[dict[str, Any]], ends: dict[str, float]) -> list[dict[str, Any]]:
    """Handler calls as ``{c, q, y, s, e, ids}``; one process never runs two calls of a key at
    once (asserted); a call cut short by SIGKILL ends at the kill (``ends``)."""
    open_: dict[tuple[str, int, str | None], dict[str, Any]] = {}
    out = []
    for r in sorted((r for r in rows if r["k"] in "se"), key=lambda r: r["t"]):
        key = (r["c"], r["q"], r["y"])
        if r["k"] == "s":
            assert key not in open_, f"{key}: two calls of one key at once in one process"
            assert r["y"] is not None
            assert {i.split(":")[0] for i in r["ids"]} == {r["y"]}
            open_[key] = {"c": r["c"], "q": r["q"], "y": r["y"], "s": r["t"], "ids": r["ids"]}
        else:
            call = open_.pop(key)
            call["e"] = r["t"]
            out.append(call)
    for (c, _, _), call in open_.items():
        call["e"] = ends.get(c, float("inf"))
        out.append(call)
    return out


def peak_per_queue(calls: list[dict[str, Any]]) -> int:
    """The most calls of one queue in one process running at once."""
    events: dict[tuple[str, int], list[tuple[float, int]]] = defaultdict(list)
    for c in calls:
        events[c["c"], c["q"]] += [(c["s"], 1), (c["e"], -1)]
    peak = 0
    for evs in events.values():
        now = 0
        for _, d in sorted(evs):
            now += d
            peak = max(peak, now)
    return peak


async def test_sigkill_and_restart_replay_only_in_order_suffixes_per_key(
    broker: EmbeddedBroker,
    tmp_path: Path,
) -> None:
    """20 keys x 100 messages; the only member is killed mid-stream and a new one started: each
    key replays what its killed calls and the uncommitted tail had, in order, and nothing is
    lost or skipped."""
    keys = [f"key{i:02d}" for i in range(20)]
    per_key = 100
    wanted, out, records = new_run(tmp_path, keys, per_key)
    await create_topic(broker, "OrdMP", queues=QUEUES)
    a = await spawn("a", broker, out, *KEYED)
    live: list[Child] = [a]
    async with producing(broker, keys, per_key, 4.0, live) as production:
        # kill it mid-stream: once it is consuming (a loaded machine may take seconds to start it)
        async with asyncio.timeout(60):
            while sum(1 for r in records.refresh() if r["c"] == "a" and r["k"] == "s") < 20:
                await asyncio.sleep(0.05)
        live.remove(a)
        await stop(a, signal.SIGKILL)
        live.append(await spawn("a2", broker, out, *KEYED))
        await production
        await wait_delivered(records.delivered_now, wanted, timeout=60, interval=0.25)
    rows = records.refresh()
    all_calls = keyed_calls(rows, {"a": a.killed_at or 0.0})
    replays = check_run(records, all_calls, wanted, len(keys), per_key)
    assert replays > 0  # the killed calls (and any uncommitted tail) came again
    assert {c["c"] for c in all_calls} == {"a", "a2"}
    assert peak_per_queue(all_calls) > 1  # keys of one queue ran side by side


async def test_two_members_and_one_leaving_keep_each_key_in_order(
    broker: EmbeddedBroker,
    tmp_path: Path,
) -> None:
    """Members a and b share the queues; b leaves (SIGTERM: running calls drain, offsets are
    flushed, locks released) mid-stream and a takes its queues over: per-key order holds
    across the hand-over and the two never run calls of one queue at the same time."""
    keys = [f"key{i:02d}" for i in range(20)]
    per_key = 100
    wanted, out, records = new_run(tmp_path, keys, per_key)
    await create_topic(broker, "OrdMP", queues=QUEUES)
    a, b = await asyncio.gather(spawn("a", broker, out, *KEYED), spawn("b", broker, out, *KEYED))
    async with producing(broker, keys, per_key, 4.0, [a, b]) as production:
        # b leaves mid-stream: once it is consuming (as the kill above waits for a)
        async with asyncio.timeout(60):
            while sum(1 for r in records.refresh() if r["c"] == "b" and r["k"] == "s") < 20:
                await asyncio.sleep(0.05)
        await stop(b, signal.SIGTERM)
        await production
        await wait_delivered(records.delivered_now, wanted, timeout=60, interval=0.25)
    rows = records.refresh()
    all_calls = keyed_calls(rows, {})
    check_run(records, all_calls, wanted, len(keys), per_key)
    b_queues = {c["q"] for c in all_calls if c["c"] == "b"}
    b_left = max(c["e"] for c in all_calls if c["c"] == "b")
    assert b_queues
    assert {c["q"] for c in all_calls if c["c"] == "a" and c["s"] > b_left} & b_queues
    assert peak_per_queue(all_calls) > 1
