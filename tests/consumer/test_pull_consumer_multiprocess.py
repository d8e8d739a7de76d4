"""Pull consumers in member processes against the embedded broker:

* two ``PullConsumer`` processes (one reading ``poll`` batches, one ``async for``) and one
  ``PushConsumer`` process in one group share an 8-queue topic while 20k messages flow and
  members join and leave (SIGKILL and clean leaves): nothing is lost, every queue has one
  owner after each settle, duplicates come only from work not committed yet (the last commit
  interval of a killed member, or a hand-over); then a clean close and a restart: no
  duplicates at all;
* a slow application: a backlog many times the pull thresholds, read slowly; the process's
  memory stays at the thresholds (RSS measured).

Childs are ``pull_consumer_proc.py`` and ``consumer_proc.py``; each writes what it processed
and the queues it owns as JSON lines, which the checks read.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message, MessageQueue
from tests._harness.child import (
    Child,
    delivered_ids,
    member_options,
    produce_at_rate,
    read_rows,
    start_script,
    stop_member,
    stop_members,
    wait_delivered,
    wait_flowing,
    wait_one_owner_each,
)
from tests._harness.deliveries import check_clean_restart, check_none_lost, stray_duplicates
from tests._harness.wait import wait_for
from tests.consumer.conftest import create_topic

HERE = Path(__file__).parent
PULL_PROC = HERE / "pull_consumer_proc.py"
PUSH_PROC = HERE / "consumer_proc.py"
TOPIC = "PullFlow"
GROUP = "pull-flow"
#: commit interval of every member (auto commit of the pull members, persistence of the push
#: member): the window of uncommitted work a SIGKILL may replay
COMMIT = 1.0


async def spawn(kind: str, name: str, broker: EmbeddedBroker, out_dir: Path, *extra: str) -> Child:
    script = PULL_PROC if kind != "push" else PUSH_PROC
    args = ["--mode", kind, "--commit-interval", str(COMMIT)] if kind != "push" else []
    if kind == "push":
        args = ["--persist-interval", str(COMMIT)]
    options = member_options(broker.address, GROUP, TOPIC, out_dir / f"{name}.jsonl", name)
    return Child(name, await start_script(script, *options, *args, *extra, ready_timeout=60))


async def stop(m: Child, sig: int) -> None:
    await stop_member(m, sig, timeout=60)


async def stop_all(members: list[Child]) -> None:
    await stop_members(members, timeout=60)


@pytest.mark.slow
async def test_pull_and_push_members_join_and_leave_while_messages_flow(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    out = tmp_path / "phase1"
    out.mkdir()
    await create_topic(broker, TOPIC)
    live = list(
        await asyncio.gather(
            spawn("poll", "p1", broker, out),
            spawn("iter", "p2", broker, out),
            spawn("push", "s1", broker, out),
        )
    )
    members = list(live)
    await wait_one_owner_each(out, live, timeout=20.0)
    ids = [f"m{i}" for i in range(20_000)]
    production = asyncio.create_task(
        produce_at_rate(broker.address, TOPIC, "pull-flow-producer", ids, rate=2000)
    )
    settles: list[float] = []
    changes: list[float] = []  # membership changes (joins and clean leaves)
    killed: list[Child] = []

    async def replace(name: str, sig: int, kind: str, new: str) -> None:
        """Member ``name`` leaves (SIGTERM) or is killed (SIGKILL), then ``new`` joins."""
        old = next(m for m in live if m.name == name)
        live.remove(old)
        if sig == signal.SIGTERM:
            changes.append(time.time())
        await stop(old, sig)
        if sig == signal.SIGKILL:
            killed.append(old)
        settles.append(await wait_one_owner_each(out, live, timeout=20.0))
        changes.append(time.time())
        live.append(await spawn(kind, new, broker, out))
        members.append(live[-1])
        changes.append(time.time())  # joined (a loaded machine may take seconds to start it)
        settles.append(await wait_one_owner_each(out, live, timeout=20.0))

    try:
        await wait_flowing(out, 3000, total=len(ids))  # (about 1.5 s of the 2,000/s production)
        # The polling member is SIGKILLed; another one joins.
        await replace("p1", signal.SIGKILL, "poll", "p1b")
        await wait_flowing(out, 1500, total=len(ids))
        # The push member leaves cleanly; another push member joins.
        await replace("s1", signal.SIGTERM, "push", "s2")
        await wait_flowing(out, 1500, total=len(ids))
        # The iterating member leaves cleanly; another one joins.
        await replace("p2", signal.SIGTERM, "iter", "p2b")
        await production
        await wait_delivered(lambda: delivered_ids(out), ids, timeout=60, interval=0.2)
        await wait_one_owner_each(out, live, timeout=20.0)
        for m in live:
            changes.append(time.time())
            await stop(m, signal.SIGTERM)
    finally:
        production.cancel()
        await stop_all(members)

    rows, counts, first = check_none_lost(out, ids)
    dup_ids = [i for i, n in counts.items() if n > 1]
    # Uncommitted work of the killed member: what it processed in its last commit interval.
    kills = {m.name: m.killed_at for m in killed if m.killed_at is not None}
    by_kill = [
        i
        for i in dup_ids
        if first[i]["c"] in kills and first[i]["t"] >= kills[first[i]["c"]] - COMMIT - 1.0
    ]
    window = sum(
        1
        for r in rows
        if r["c"] in kills and kills[r["c"]] - COMMIT - 1.0 <= r["t"] <= kills[r["c"]]
    )
    # Uncommitted work at a hand-over: a queue's old owner processed it after its last commit
    # (its revocation commits what it acknowledged, but the new owner may have read the
    # offset first), close to a membership change.
    others = [i for i in dup_ids if i not in set(by_kill)]
    stray, detail = stray_duplicates(rows, first, others, changes, COMMIT)
    print(
        f"\n{len(rows)} deliveries, {len(dup_ids)} duplicated ids ({len(by_kill)} after the "
        f"SIGKILL, bound {window}; {len(others)} at hand-overs), settle times "
        f"{[round(s, 2) for s in settles]}"
    )
    assert len(by_kill) <= window
    assert stray == [], (detail, changes, kills)
    assert max(counts.values()) <= 3
    # Childs of both kinds took part (the later ones may join after the last message was read
    # on a slow machine).
    assert {r["c"] for r in rows} >= {"p1", "p2", "s1"}

    # A clean close in mid-stream, then a restart: no duplicates at all.
    out2 = tmp_path / "phase2"
    out2.mkdir()
    ids2 = [f"n{i}" for i in range(4000)]
    d = await spawn("poll", "d", broker, out2, "--sleep", "0.005", "--batch", "8")
    production = asyncio.create_task(
        produce_at_rate(broker.address, TOPIC, "pull-flow-producer", ids2, rate=2000)
    )
    rest: list[Child] = [d]
    try:
        await wait_flowing(out2, 800, total=len(ids2))  # mid-stream: a fifth of the 4,000
        await stop(d, signal.SIGTERM)
        rest.append(await spawn("iter", "d2", broker, out2))
        await production
        await wait_delivered(lambda: delivered_ids(out2), ids2, timeout=30, interval=0.2)
        await asyncio.sleep(0.5)
        await stop(rest[-1], signal.SIGTERM)
    finally:
        production.cancel()
        await stop_all(rest)
    check_clean_restart(out2, ids2, "d", "read before the clean close")


@pytest.mark.slow
async def test_a_slow_application_keeps_the_processes_memory_at_the_thresholds(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """A 80 MB backlog (20k incompressible 4000-byte bodies) read at ~1000 msgs/s by a process
    whose queues may cache 100 messages each: its caches stay at the threshold (+ one pull
    batch) and its RSS grows by a few MB, where prefetching the backlog would add ~80 MB."""
    per_queue = 2500
    async with Producer(
        namesrv=broker.address, group="pull-mem-producer", default_topic_queue_nums=8
    ) as p:
        for qid in range(8):
            mq = MessageQueue(TOPIC, "broker-a", qid)
            for _ in range(0, per_queue, 200):
                await p.send_batch(
                    [Message(TOPIC, os.urandom(4000)) for _i in range(200)], queue=mq
                )
    out = tmp_path / "mem"
    out.mkdir()
    m = await spawn(
        "poll",
        "slow",
        broker,
        out,
        "--memory",
        "--pull-threshold",
        "100",
        "--batch",
        "10",
        "--sleep",
        "0.01",
    )

    def watched() -> bool:
        # Long enough to see a cache grow past its threshold: 15 memory samples (one every
        # 0.2 s) since caching began, and 2,000 messages read.
        rows = read_rows(out)
        cached = [r for r in rows if r["k"] == "m" and r["cached"] > 0]
        return len(cached) >= 15 and sum(1 for r in rows if r["k"] == "d") >= 2000

    try:
        await wait_for(watched, timeout=60, what="the slow reader watched", interval=0.2)
    finally:
        await stop(m, signal.SIGTERM)
    rows = read_rows(out)
    mem = sorted((r for r in rows if r["k"] == "m"), key=lambda r: r["t"])
    read = sum(1 for r in rows if r["k"] == "d")
    assert len(mem) >= 10
    first = next(r for r in mem if r["cached"] > 0)  # prefetching has started
    peak_mb = max(r["rss_kb"] for r in mem) / 1024
    growth_mb = peak_mb - first["rss_kb"] / 1024
    print(
        f"\nslow reader: {read} messages read of {8 * per_queue}, largest cache "
        f"{max(r['cached'] for r in mem)}, RSS at the first sample with a cache "
        f"{first['rss_kb'] / 1024:.1f} MB, peak {peak_mb:.1f} MB (+{growth_mb:.1f} MB)"
    )
    assert 1000 < read < 8 * per_queue - 2000  # it was slow: most of the backlog still waits
    assert max(r["cached"] for r in mem) <= 100 + 32  # threshold + one pull batch
    assert max(r["buffered"] for r in mem) <= 8 * (100 + 32)
    # The caches hold at most ~4.2 MB of bodies; prefetching the backlog would add ~80 MB.
    assert growth_mb < 30, mem[-3:]
