"""The exactly-once sink's coordinator: one long-lived process per decision record, on the
driver's host, that commits what the driver decided and answers the broker's checks.

The driver's commit only *records* a decision (``txlog.py``); this process then sends one
END_TRANSACTION per half message to commit (as requests, so it learns each outcome) and is
the only member of the record's transaction group, so every CHECK_TRANSACTION_STATE about
the sink's half messages comes to it. It answers from the record and from what it did itself
(``txstate.py``): COMMIT for a row of a decision it has not committed yet, ROLLBACK for the
copies of committed rows and for every half message no decision chose (an undecided run
expires once older than its ``transactionTimeout``, which its tag carries), UNKNOWN while an
outcome is in flight.

Spark's commit runs in a short-lived Python worker, so the coordinator is a process of its
own: started by the first writer of a record (`ensure_coordinator`, detached from the
worker), holding ``coordinator.lock`` while it lives, and leaving once it was idle for
``idle_timeout`` (no decision, no check, no progress). Killed, it is started again by the
next writer or commit of the record; it then treats every row of an unfinished decision as
unsure, waits ``grace`` past the last heartbeat of its predecessor, and reads the rows' target
queues to learn which were committed before it commits the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from aiorocket import (
    MessageQueue,
    PreparedMessage,
    QueueReader,
    ReceivedMessage,
    TransactionProducer,
    TransactionState,
)
from aiorocket.errors import RocketError, TopicNotExistError
from aiorocket.integrations.spark.txlog import TAG_PROPERTY, Decision, Tag, TxRecord
from aiorocket.integrations.spark.txstate import Ledger, Row, RowState, Verdict
from aiorocket.settings import ClientSettings

__all__ = [
    "CoordinatorConfig",
    "coordinator_alive",
    "ensure_coordinator",
    "main",
    "serve",
    "stop",
]

log = logging.getLogger("aiorocket.spark.coordinator")

#: the settings a queue reader takes (the sink's client settings also hold producer ones)
_CLIENT_FIELDS: Final = frozenset(ClientSettings.model_fields)
#: direct END_TRANSACTIONs per row before it waits for the broker's check instead
_MAX_ATTEMPTS: Final = 3
#: seconds a new coordinator keeps trying to take the lock (a probe may hold it briefly)
_LOCK_TRIES: Final = 2.0
#: what the coordinator's process runs (``-m`` would import this module twice)
_ENTRY: Final = (
    "import sys; from aiorocket.integrations.spark.coordinator import main; sys.exit(main())"
)


@dataclass(frozen=True)
class CoordinatorConfig:
    """What a coordinator needs (plain values: it travels to the process as JSON on stdin,
    so secrets never touch the disk).

    Attributes:
        record: the decision record's directory.
        namesrv: name server address(es).
        group: the sink's producer group; the transaction group is named from it and the
            record's id.
        client: client settings (namespace, credentials, TLS, request timeout).
        in_flight: END_TRANSACTIONs in flight at once.
        idle_timeout: seconds without decisions, checks or progress after which it leaves
            (what it did not finish stays in the record for the next one).
        grace: seconds after which an END whose answer never came has surely landed or never
            will (default: twice the request timeout plus 5).
        poll_interval: seconds between looks at the record for new decisions.
        beat_interval: seconds between heartbeats written to the record.
        sweep_interval: seconds between passes over rows still to commit or unsure.
        scan_margin: seconds before a row's send at which reading its target queue starts
            (clock skew between executors and brokers).
        topics: topics whose brokers it heartbeats from the start.
    """

    record: str
    namesrv: str
    group: str
    client: dict[str, Any] = field(default_factory=dict)
    in_flight: int = 256
    idle_timeout: float = 600.0
    grace: float | None = None
    poll_interval: float = 0.05
    beat_interval: float = 1.0
    sweep_interval: float = 2.0
    scan_margin: float = 60.0
    topics: tuple[str, ...] = ()

    def grace_seconds(self) -> float:
        """`grace`, or its default."""
        if self.grace is not None:
            return self.grace
        return 2 * float(self.client.get("request_timeout", 3.0)) + 5.0

    def to_json(self) -> str:
        """The JSON the process reads."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> CoordinatorConfig:
        """The config `to_json` wrote."""
        data = json.loads(text)
        data["topics"] = tuple(data.get("topics", ()))
        return cls(**data)


# -- reading target queues ---------------------------------------------------------------------


@dataclass
class _Scan:
    start_ms: int
    next_offset: int
    found: set[str]


class _QueueScans:
    """Which rows reached their target queue: each queue is read from (the first offset
    stored at or after) the earliest send asked about to its end, once, then only what was
    added since."""

    def __init__(self, reader: QueueReader, margin_ms: int) -> None:
        self._reader = reader
        self._margin_ms = margin_ms
        self._scans: dict[MessageQueue, _Scan] = {}
        self._locks: dict[MessageQueue, asyncio.Lock] = {}

    async def committed(self, rows: Iterable[PreparedMessage]) -> set[str]:
        by_queue: dict[MessageQueue, list[PreparedMessage]] = {}
        for p in rows:
            by_queue.setdefault(MessageQueue(p.topic, p.broker_name, p.queue_id), []).append(p)
        out: set[str] = set()
        for mq, wanted in by_queue.items():
            async with self._locks.setdefault(mq, asyncio.Lock()):
                found = await self._scan(mq, min(p.born_ms for p in wanted) - self._margin_ms)
            out |= {p.msg_id for p in wanted} & found
        return out

    async def _scan(self, mq: MessageQueue, start_ms: int) -> set[str]:
        scan = self._scans.get(mq)
        if scan is None or start_ms < scan.start_ms:
            first = await self._reader.offset_for_timestamp(mq, max(start_ms, 0))
            scan = self._scans[mq] = _Scan(start_ms, first, set())
        end = await self._reader.max_offset(mq)
        async for batch in self._reader.read_range_batches(
            mq, scan.next_offset, end, tolerate_loss=True
        ):
            scan.found.update(m.msg_id for m in batch)
        scan.next_offset = max(scan.next_offset, end)
        return scan.found

    def forget(self) -> None:
        self._scans.clear()


# -- the coordinator ---------------------------------------------------------------------------


class _Coordinator:
    def __init__(
        self, config: CoordinatorConfig, record: TxRecord, last_beat: float, stop: asyncio.Event
    ) -> None:
        self._config = config
        self._record = record
        self._last_beat = last_beat
        self._ledger = Ledger(config.grace_seconds())
        self._producer = TransactionProducer(
            namesrv=config.namesrv,
            group=record.group(config.group),
            check=self._check,
            check_concurrency=64,
            check_backlog=1_000_000,
            **config.client,
        )
        reader_settings = {k: v for k, v in config.client.items() if k in _CLIENT_FIELDS}
        self._reader = QueueReader(namesrv=config.namesrv, **reader_settings)
        self._scans = _QueueScans(self._reader, int(config.scan_margin * 1000))
        self._topics: set[str] = set()
        self._passing: set[str] = set()
        self._aborting: set[str] = set()
        self._sweeping = False
        self._active = time.monotonic()
        self._stop = stop
        self._tasks: set[asyncio.Task[None]] = set()

    # -- lifecycle ------------------------------------------------------------------------------

    async def run(self) -> None:
        async with self._producer, self._reader:
            await self._learn_topics(self._config.topics)
            for key in self._record.decision_keys():
                d = self._record.decision(key)
                if d is not None:
                    # Whatever the previous coordinator did stopped at its last heartbeat.
                    self._take(d, unsure_since=None if d.complete else self._last_beat)
            log.info("coordinator of %s started (pid %d)", self._record.path, os.getpid())
            next_beat = next_sweep = 0.0
            while not self._stop.is_set():
                now = time.monotonic()
                if now >= next_beat:
                    await asyncio.to_thread(self._beat)
                    next_beat = now + self._config.beat_interval
                await self._poll()
                if now >= next_sweep and not self._sweeping:
                    self._spawn(self._sweep())
                    next_sweep = now + self._config.sweep_interval
                if self._idle(now):
                    log.info("idle for %.0f s: leaving", now - self._active)
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self._config.poll_interval)
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _idle(self, now: float) -> bool:
        # Rows still pending do not keep it: if nothing happened for so long (no check, no
        # progress) the broker is gone or done with them, and they are in the record for
        # the next coordinator, which starts by finding out about them.
        return (
            now - self._active >= self._config.idle_timeout
            and not self._passing
            and not self._aborting
        )

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("coordinator task failed", exc_info=task.exception())

    def _beat(self) -> None:
        path = self._record.path / "coordinator.beat"
        path.write_text(str(time.time()))

    async def _learn_topics(self, topics: Iterable[str]) -> None:
        for topic in set(topics) - self._topics:
            try:
                await self._producer.checks_from(topic)
            except TopicNotExistError:
                continue  # created by the first send; learnt from the first decision
            except RocketError as exc:
                log.warning("cannot learn the brokers of %s yet: %s", topic, exc)
                continue
            self._topics.add(topic)

    # -- decisions and aborts -------------------------------------------------------------------

    async def _poll(self) -> None:
        for key in await asyncio.to_thread(self._record.decision_keys):
            if key not in self._ledger:
                d = await asyncio.to_thread(self._record.decision, key)
                if d is not None:
                    self._take(d)
        for path in await asyncio.to_thread(self._record.aborts):
            if path.name not in self._aborting:
                self._aborting.add(path.name)
                self._spawn(self._abort(path))

    async def _abort(self, path: Path) -> None:
        self._active = time.monotonic()
        key, _, run = path.name[:-5].partition("@")
        self._ledger.expired.add((key, run))
        try:
            halves = await asyncio.to_thread(TxRecord.abort_halves, path)
            await self._end_all([p for h in halves for p in h], TransactionState.ROLLBACK)
            await asyncio.to_thread(path.unlink, missing_ok=True)
        finally:
            self._aborting.discard(path.name)
        log.info("rolled back the half messages of aborted %s (run %s)", key, run)

    def _take(self, decision: Decision, *, unsure_since: float | None = None) -> None:
        if decision.key in self._ledger:
            return
        self._active = time.monotonic()
        self._ledger.add(decision, unsure_since=unsure_since)
        if not decision.complete:
            log.info(
                "decision %s: run %s, %d partitions",
                decision.key,
                decision.run,
                len(decision.chosen),
            )
            self._spawn(self._pass(decision.key))

    async def _sweep(self) -> None:
        self._sweeping = True
        try:
            for key in list(self._ledger.decisions):
                if not self._ledger.is_complete(key) and key not in self._passing:
                    await self._pass(key)
            if next(self._ledger.pending(), None) is None:
                self._scans.forget()
        finally:
            self._sweeping = False

    async def _pass(self, key: str) -> None:
        """Commit what is to commit of ``key`` (after finding out about unsure rows), then
        report; a complete decision is compacted."""
        if key in self._passing:
            return
        self._passing.add(key)
        try:
            d = self._ledger.decisions[key]
            await self._learn_topics(d.topics())
            rows = self._ledger.rows(key)
            now = time.time()
            grace = self._ledger.grace
            due = [r for r in rows if r.state is RowState.UNSURE and now - r.since >= grace]
            if due:
                await self._resolve(due)
            todo = [r for r in rows if r.state is RowState.TO_APPLY and r.attempts < _MAX_ATTEMPTS]
            await self._commit_rows(todo)
            applied = sum(r.state is RowState.APPLIED for r in rows)
            complete = self._ledger.is_complete(key)
            if complete:
                await asyncio.to_thread(self._record.compact, key)
                self._ledger.complete(key)
            if todo or due or complete:
                # (a pass that did nothing leaves the last report as it is)
                await asyncio.to_thread(
                    self._record.report,
                    key,
                    applied=applied,
                    pending=len(rows) - applied,
                    complete=complete,
                )
                log.info("%s: %d of %d committed", key, applied, len(rows))
        finally:
            self._passing.discard(key)

    async def _resolve(self, rows: Sequence[Row]) -> None:
        since = {id(r): r.since for r in rows}
        try:
            found = await self._scans.committed(r.prepared for r in rows)
        except RocketError as exc:
            log.warning("cannot read the target queues yet: %s", exc)
            return
        self._active = time.monotonic()
        for r in rows:
            # (a check may have answered COMMIT for it meanwhile: then it is unsure anew)
            if r.state is RowState.UNSURE and r.since == since[id(r)]:
                r.state = RowState.APPLIED if r.prepared.msg_id in found else RowState.TO_APPLY

    async def _commit_rows(self, rows: Sequence[Row]) -> None:
        errors: list[RocketError] = []

        async def one(row: Row) -> None:
            if row.state is not RowState.TO_APPLY:
                return  # a check answered it meanwhile
            row.state = RowState.APPLYING
            row.attempts += 1
            try:
                await self._producer.end(row.prepared, TransactionState.COMMIT)
            except RocketError as exc:
                # No answer, or a refusal: it may or may not be committed; find out later.
                errors.append(exc)
                row.state, row.since = RowState.UNSURE, time.time()
            else:
                row.state = RowState.APPLIED
                self._active = time.monotonic()

        await _bounded(self._config.in_flight, [one(r) for r in rows])
        if errors:
            log.warning(
                "%d of %d commits unanswered or refused (%s)", len(errors), len(rows), errors[0]
            )

    async def _end_all(self, prepared: Sequence[PreparedMessage], state: TransactionState) -> None:
        async def one(p: PreparedMessage) -> None:
            with contextlib.suppress(RocketError):  # the broker's check settles it otherwise
                await self._producer.end(p, state)

        await _bounded(self._config.in_flight, [one(p) for p in prepared])

    # -- checks -------------------------------------------------------------------------------

    async def _check(self, msg: ReceivedMessage) -> TransactionState:
        self._active = time.monotonic()
        tag = Tag.parse(msg.properties.get(TAG_PROPERTY))
        if tag is None:
            return TransactionState.UNKNOWN  # not a half message of this sink
        if tag.key not in self._ledger and (tag.key, tag.run) not in self._ledger.expired:
            early = await self._undecided(tag, msg.born_timestamp)
            if early is not None:
                return early
        verdict = self._ledger.verdict(tag, msg.msg_id, time.time())
        if verdict is Verdict.RESOLVE:
            row = self._ledger.row(tag.key, msg.msg_id)
            assert row is not None
            await self._resolve([row])
            verdict = self._ledger.verdict(tag, msg.msg_id, time.time())
            if verdict is Verdict.RESOLVE:
                verdict = Verdict.UNKNOWN
        if verdict is Verdict.COMMIT:
            row = self._ledger.row(tag.key, msg.msg_id)
            assert row is not None
            # The answer is oneway: whether it lands is known only by reading, later.
            row.state, row.since = RowState.UNSURE, time.time()
        return TransactionState(verdict.value)

    async def _undecided(self, tag: Tag, born_ms: int) -> TransactionState | None:
        """A check of a write this coordinator holds no decision of: take the decision if the
        record has one (``None``), else UNKNOWN while the write may still decide, else
        expire it and answer ROLLBACK."""
        record = self._record
        d = await asyncio.to_thread(record.decision, tag.key)
        if d is None:
            if await asyncio.to_thread(record.is_expired, tag.key, tag.run):
                self._ledger.expired.add((tag.key, tag.run))
                return TransactionState.ROLLBACK
            if time.time() * 1000 - born_ms < tag.timeout * 1000:
                return TransactionState.UNKNOWN
            d = await asyncio.to_thread(record.expire, tag.key, tag.run)
            if d is None:
                self._ledger.expired.add((tag.key, tag.run))
                log.warning(
                    "%s (run %s) undecided after transactionTimeout (%d s): rolled back",
                    tag.key,
                    tag.run,
                    tag.timeout,
                )
                return TransactionState.ROLLBACK
        self._take(d)
        return None


async def _bounded(limit: int, coros: Sequence[Any]) -> None:
    it = iter(coros)

    async def worker() -> None:
        for coro in it:
            await coro

    await asyncio.gather(*(worker() for _ in range(max(1, min(limit, len(coros))))))


# -- the process -------------------------------------------------------------------------------


def _try_lock(path: Path) -> int | None:
    """An fd holding ``path``'s exclusive lock, or ``None`` when another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def coordinator_alive(record: str | os.PathLike[str]) -> bool:
    """Whether a coordinator of ``record`` runs (holds its lock)."""
    fd = _try_lock(Path(record) / "coordinator.lock")
    if fd is None:
        return True
    os.close(fd)
    return False


def ensure_coordinator(config: CoordinatorConfig, *, timeout: float = 60.0) -> None:
    """Start the coordinator of ``config.record`` unless one runs: a detached process (its
    own session; it outlives the caller) running this module with this Python.

    Raises:
        RuntimeError: it did not start within ``timeout`` (the message holds the end of its
            log).
        OSError: it could not be started.
    """
    record = TxRecord(config.record)
    if coordinator_alive(record.path):
        return
    logfile = record.path / "coordinator.log"
    with logfile.open("ab") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", _ENTRY],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
            close_fds=True,
        )
    assert proc.stdin is not None
    proc.stdin.write(config.to_json().encode())
    proc.stdin.close()
    deadline = time.monotonic() + timeout
    proc.wait(timeout)  # the first process exits once the coordinator forked off
    while not coordinator_alive(record.path):
        if time.monotonic() > deadline:
            tail = logfile.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the rocketmq sink's coordinator did not start:\n{tail}")
        time.sleep(0.05)


def stop(record: str | os.PathLike[str], *, timeout: float = 30.0) -> bool:
    """Stop the coordinator of ``record`` (SIGTERM to the pid it wrote) and wait until it
    left; ``False`` when none ran."""
    path = Path(record)
    try:
        pid = int((path / "coordinator.pid").read_text())
    except (OSError, ValueError):
        return False
    if not coordinator_alive(path):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while coordinator_alive(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return True


async def serve(
    config: CoordinatorConfig, *, stop: asyncio.Event | None = None, last_beat: float | None = None
) -> bool:
    """Be the coordinator of ``config.record`` until idle (or ``stop`` is set); ``False``
    at once when another process is it.

    ``last_beat`` (seconds since the epoch) is when a previous coordinator may last have
    acted (default: its last heartbeat in the record): unfinished decisions are treated as
    unsure from then on.

    Raises:
        RocketError: the name server could not be reached at start.
        OSError: the record could not be read or written.
    """
    record = TxRecord(config.record)
    deadline = time.monotonic() + _LOCK_TRIES
    fd = _try_lock(record.path / "coordinator.lock")
    while fd is None:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
        fd = _try_lock(record.path / "coordinator.lock")
    try:
        if last_beat is None:
            beat = record.path / "coordinator.beat"
            last_beat = beat.stat().st_mtime if beat.exists() else 0.0
        (record.path / "coordinator.pid").write_text(str(os.getpid()))
        await _Coordinator(config, record, last_beat, stop or asyncio.Event()).run()
        return True
    finally:
        os.close(fd)


def _run(config: CoordinatorConfig, out: IO[str]) -> int:
    logging.basicConfig(
        stream=out, level=logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    log.setLevel(logging.INFO)

    async def go() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(config, stop=stop)

    asyncio.run(go())
    return 0


def main() -> int:
    """The process: read the config from stdin, fork off a detached child that runs the
    coordinator (the parent exits at once, so whoever started it need not reap it)."""
    config = CoordinatorConfig.from_json(sys.stdin.read())
    if os.fork() > 0:
        return 0
    os.setsid()
    with contextlib.suppress(OSError):
        os.chdir("/")
    return _run(config, sys.stderr)
