"""The exactly-once sink's coordinator against the embedded broker, without Spark: it commits
decided half messages once, answers the broker's checks (ROLLBACK for attempts not chosen,
for replayed runs and for writes undecided past ``transactionTimeout``; ROLLBACK for copies
of committed rows), and a coordinator that takes over from a dead one commits what is left
without committing anything twice, the broker restarted in between (so that its own
duplicate-END guard cannot hide a second COMMIT)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from aiorocket import (
    Message,
    PreparedMessage,
    QueueReader,
    TransactionProducer,
    TransactionState,
)
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from tests._harness.wait import wait_for
from tests.spark._support import spark_missing

if spark_missing() is not None:
    pytest.skip(str(spark_missing()), allow_module_level=True)

from aiorocket.integrations.spark.coordinator import CoordinatorConfig, serve
from aiorocket.integrations.spark.txlog import (
    TAG_PROPERTY,
    Decision,
    ExpiredWriteError,
    HalfSet,
    Tag,
    TxRecord,
)
from aiorocket.integrations.spark.txstate import Ledger, RowState, Verdict

#: a check pass every 0.2 s; half messages are checked once 0.5 s old
FAST_CHECKS: dict[str, Any] = {
    "default_queues": 2,
    "transaction_check_interval": 0.2,
    "transaction_timeout": 0.5,
}
TOPIC = "TxOut"


pytestmark = pytest.mark.broker(**FAST_CHECKS)


@pytest.fixture
def record(tmp_path: Path) -> TxRecord:
    return TxRecord(tmp_path / "record")


def config(broker: EmbeddedBroker, record: TxRecord, **changes: Any) -> CoordinatorConfig:
    settings: dict[str, Any] = {
        "record": str(record.path),
        "namesrv": broker.address,
        "group": "G",
        "idle_timeout": 3600.0,
        "grace": 0.5,
        "sweep_interval": 0.2,
        "topics": (TOPIC,),
    }
    settings.update(changes)
    return CoordinatorConfig(**settings)


@contextlib.asynccontextmanager
async def coordinator(cfg: CoordinatorConfig, **kw: Any) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(serve(cfg, stop=stop, **kw))
    try:
        await wait_for(lambda: Path(cfg.record, "coordinator.pid").exists(), timeout=10, what="up")
        yield
    finally:
        stop.set()
        assert await asyncio.wait_for(task, 30)


async def prepare(
    broker: EmbeddedBroker, record: TxRecord, tag: Tag, bodies: Sequence[str]
) -> HalfSet:
    """Half messages of ``bodies``, tagged as the sink tags them, in the record's group."""
    group = record.group("G")
    async with TransactionProducer(namesrv=broker.address, group="G") as p:
        prepared = [
            await p.prepare(
                Message(TOPIC, b.encode(), properties={TAG_PROPERTY: tag.render()}), group=group
            )
            for b in bodies
        ]
    return HalfSet.of(group, prepared)


async def delivered(broker: EmbeddedBroker) -> list[str]:
    async with QueueReader(namesrv=broker.address) as reader:
        out: list[str] = []
        try:
            queues = await reader.queues(TOPIC)
        except Exception:
            return out
        for mq in queues:
            end = await reader.max_offset(mq)
            out.extend([m.body.decode() async for m in reader.read_range(mq, 0, end)])
        return sorted(out)


def halves_resolved(broker: EmbeddedBroker) -> bool:
    """Every half message stored so far (copies the broker's checks made included) was
    committed or rolled back."""
    return broker.transactions.unresolved() == 0


def rows(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i:03}" for i in range(n)]


async def test_decided_attempt_is_committed_once_and_the_others_rolled_back(
    broker: EmbeddedBroker, record: TxRecord
) -> None:
    """Two attempts of partition 0 (a retried task), one of partition 1; the decision chooses
    attempt 8 of partition 0. The coordinator commits the chosen rows; the broker's checks of
    attempt 7's rows, and of the copies it made of chosen rows before the decision, are
    answered ROLLBACK."""
    a7 = await prepare(broker, record, Tag("w.1", "r", 0, 7), rows("a7-", 20))
    a8 = await prepare(broker, record, Tag("w.1", "r", 0, 8), rows("a8-", 20))
    b3 = await prepare(broker, record, Tag("w.1", "r", 1, 3), rows("b3-", 10))
    await asyncio.sleep(0.6)  # old enough to be checked: copies exist before the decision
    broker.transactions.check()
    async with coordinator(config(broker, record)):
        record.decide(Decision("w.1", "r", {0: 8, 1: 3}, (a8, b3)))
        await wait_for(lambda: complete(record, "w.1"), timeout=20, what="complete")
        await wait_for(lambda: halves_resolved(broker), timeout=20, what="checks answered")
    assert await delivered(broker) == sorted(rows("a8-", 20) + rows("b3-", 10))
    assert len(a7) == 20
    report = record.reported("w.1")
    assert report is not None
    assert report["complete"]
    assert record.decision("w.1") == Decision("w.1", "r", {0: 8, 1: 3}, (), True, report_at(record))


def complete(record: TxRecord, key: str) -> bool:
    report = record.reported(key)
    return report is not None and bool(report["complete"])


def report_at(record: TxRecord) -> int:
    d = record.decision("w.1")
    assert d is not None
    return d.at_ms


async def test_undecided_write_expires_then_its_commit_fails(
    broker: EmbeddedBroker, record: TxRecord
) -> None:
    """Half messages of a write nobody decides are rolled back once older than
    transactionTimeout (the driver died between the tasks and the commit); a commit that
    comes after that fails, and nothing was delivered."""
    halves = await prepare(broker, record, Tag("w.2", "r", 0, 1, timeout=1), rows("x", 5))
    async with coordinator(config(broker, record)):
        await wait_for(lambda: record.is_expired("w.2", "r"), timeout=20, what="expiry")
        await wait_for(lambda: halves_resolved(broker), timeout=20, what="rolled back")
    with pytest.raises(ExpiredWriteError):
        record.decide(Decision("w.2", "r", {0: 1}, (halves,)))
    assert await delivered(broker) == []


async def test_a_replayed_write_keeps_its_first_decision(
    broker: EmbeddedBroker, record: TxRecord
) -> None:
    """A micro-batch replayed by a new run (a restart after the commit) decides again: the
    record keeps the first run's decision, the replay's rows are rolled back."""
    first = await prepare(broker, record, Tag("q.5", "run1", 0, 1), rows("one", 8))
    again = await prepare(broker, record, Tag("q.5", "run2", 0, 1), rows("two", 8))
    async with coordinator(config(broker, record)):
        assert record.decide(Decision("q.5", "run1", {0: 1}, (first,))).run == "run1"
        in_force = record.decide(Decision("q.5", "run2", {0: 1}, (again,)))
        assert in_force.run == "run1"
        record.abort("q.5", "run2", [again])  # what the sink's commit does for the replay
        await wait_for(lambda: not record.aborts(), timeout=20, what="abort handled")
        await wait_for(lambda: halves_resolved(broker), timeout=20, what="checks answered")
    assert await delivered(broker) == rows("one", 8)


async def test_a_new_coordinator_finishes_a_dead_ones_decision_once(
    tmp_path: Path, record: TxRecord
) -> None:
    """The previous coordinator committed some rows of a decision and died (no report). The
    broker restarts (forgetting which transactions it ended); the next coordinator waits out
    the grace, reads the target queue, and commits only the rows not there yet."""
    data = tmp_path / "broker"
    async with EmbeddedBroker(data_dir=data, config=BrokerConfig(**FAST_CHECKS)) as broker:
        halves = await prepare(broker, record, Tag("w.3", "r", 0, 1), rows("r", 30))
        record.decide(Decision("w.3", "r", {0: 1}, (halves,)))
        done: list[PreparedMessage] = list(halves)[:12]
        async with TransactionProducer(namesrv=broker.address, group="dead") as dead:
            for p in done:
                await dead.end(p, TransactionState.COMMIT)
    async with EmbeddedBroker(data_dir=data, config=BrokerConfig(**FAST_CHECKS)) as broker:
        async with coordinator(config(broker, record), last_beat=time.time()):
            await wait_for(lambda: complete(record, "w.3"), timeout=30, what="complete")
            await wait_for(lambda: halves_resolved(broker), timeout=20, what="checks answered")
        assert await delivered(broker) == rows("r", 30)


def test_ledger_verdicts() -> None:
    """The answers to checks, from the ledger alone."""
    group = "G_TX"
    p = [PreparedMessage(group, "b", i, 100 + i, f"ID{i}", TOPIC, 0, 0) for i in range(3)]
    ledger = Ledger(grace=5.0)
    chosen = Tag("k", "r", 0, 2)
    ledger.add(Decision("k", "r", {0: 2}, (HalfSet.of(group, p),)))
    assert ledger.verdict(chosen, "ID0", 0.0) is Verdict.COMMIT
    assert ledger.verdict(Tag("k", "r", 0, 1), "ID0", 0.0) is Verdict.ROLLBACK  # other attempt
    assert ledger.verdict(Tag("k", "r2", 0, 2), "ID0", 0.0) is Verdict.ROLLBACK  # other run
    assert ledger.verdict(chosen, "NOT-LISTED", 0.0) is Verdict.ROLLBACK
    assert ledger.verdict(Tag("other", "r", 0, 2), "ID0", 0.0) is Verdict.UNKNOWN  # not held
    row = ledger.row("k", "ID0")
    assert row is not None
    row.state = RowState.APPLYING
    assert ledger.verdict(chosen, "ID0", 0.0) is Verdict.UNKNOWN
    row.state, row.since = RowState.UNSURE, 100.0
    assert ledger.verdict(chosen, "ID0", 104.0) is Verdict.UNKNOWN  # within the grace
    assert ledger.verdict(chosen, "ID0", 106.0) is Verdict.RESOLVE
    row.state = RowState.APPLIED
    assert ledger.verdict(chosen, "ID0", 0.0) is Verdict.ROLLBACK  # a copy of a committed row
    assert not ledger.is_complete("k")
    for r in ledger.rows("k"):
        r.state = RowState.APPLIED
    assert ledger.is_complete("k")
    ledger.complete("k")
    assert ledger.verdict(chosen, "ID1", 0.0) is Verdict.ROLLBACK
    ledger.expired.add(("gone", "r"))
    assert ledger.verdict(Tag("gone", "r", 0, 0), "X", 0.0) is Verdict.ROLLBACK


def test_half_sets_and_tags_round_trip() -> None:
    p = [
        PreparedMessage("G", f"broker-{i % 2}", i, 10**12 + i, f"ID{i}", f"T{i % 3}", i % 4, 17 + i)
        for i in range(7)
    ]
    hs = HalfSet.of("G", p)
    assert list(hs) == p
    assert list(HalfSet.from_json(hs.to_json())) == p
    assert len(HalfSet.of("G", [])) == 0
    assert list(HalfSet.of("G", [])) == []
    tag = Tag("q-1.5", "abc", 3, 12, 30)
    assert Tag.parse(tag.render()) == tag
    assert Tag.parse("a|b|c") is None
    assert Tag.parse(None) is None
