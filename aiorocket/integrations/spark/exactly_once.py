"""The ``rocketmq`` sink's exactly-once mode (``exactlyOnce=true``): a two-phase commit of
RocketMQ transactional messages tied to Spark's commit of a write.

1. On the driver, the writer makes sure the decision record exists and its coordinator runs
   (``coordinator.py``): the only member of the transaction group the sink's half messages
   name, so every check the broker sends about them reaches it.
2. Each task stores its rows as half messages (invisible to consumers), tagged with the write
   (a batch write's id, or the streaming query's id and micro-batch), the run (the writer
   instance the tasks got) and the task attempt, and reports them in its commit message.
3. The driver's commit records the decision (``txlog.py``): the attempt of each partition
   Spark chose and their half messages. A write already decided (a micro-batch replayed after
   a restart) keeps its first decision: this run's half messages are rolled back instead.
4. The coordinator commits the decided half messages (one END_TRANSACTION each) and reports;
   the commit returns once that pass is done (or after ``commitTimeout``; the rest follows).

Everything else is rolled back: attempts Spark did not choose (failed, killed, speculative),
aborted writes, and writes still undecided ``transactionTimeout`` after their half messages
were sent (the broker checks them; a commit that comes later fails).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiorocket import TransactionProducer
from aiorocket.errors import ConfigurationError
from aiorocket.integrations.spark.coordinator import (
    CoordinatorConfig,
    coordinator_alive,
    ensure_coordinator,
)
from aiorocket.integrations.spark.options import SinkOptions
from aiorocket.integrations.spark.outgoing import Layout, messages
from aiorocket.integrations.spark.sending import SinkCommit, prepare_all, producer_for, run
from aiorocket.integrations.spark.txlog import (
    TAG_PROPERTY,
    Decision,
    ExpiredWriteError,
    HalfSet,
    Tag,
    TxRecord,
)

__all__ = ["TxTarget", "abort_write", "commit_write", "write_partition_tx"]

log = logging.getLogger("aiorocket.spark")

#: seconds between looks at the coordinator's report while a commit waits
_REPORT_POLL = 0.05
#: the record's directory inside a streaming query's checkpoint
RECORD_DIR = "rocketmq-sink"


@dataclass(frozen=True)
class TxTarget:
    """Where a writer's exactly-once bookkeeping goes (plain values: writers pickle).

    Attributes:
        record: the decision record's directory, on the driver's host.
        group: the transaction group of the half messages (the coordinator's).
    """

    record: str
    group: str

    @classmethod
    def prepare(cls, opts: SinkOptions, *, streaming: bool) -> TxTarget:
        """The target of a new writer: the record (created if new) and its coordinator
        (started if none runs), on the driver.

        Raises:
            ConfigurationError: no usable directory for the record.
            RuntimeError: the coordinator did not start.
        """
        path = record_dir(opts, streaming=streaming)
        record = TxRecord(path)
        target = cls(str(record.path), record.group(opts.group))
        ensure_coordinator(target.config(opts))
        return target

    def config(self, opts: SinkOptions) -> CoordinatorConfig:
        """The coordinator's configuration."""
        return CoordinatorConfig(
            record=self.record,
            namesrv=opts.namesrv,
            group=opts.group,
            client=opts.client,
            in_flight=opts.max_in_flight,
            idle_timeout=opts.coordinator_idle,
            topics=(opts.topic,) if opts.topic else (),
        )


def record_dir(opts: SinkOptions, *, streaming: bool) -> str:
    """The decision record's directory: ``transactionLog``, else (streaming) the query's
    checkpoint's ``rocketmq-sink``.

    Raises:
        ConfigurationError: neither, or a checkpoint that is not a local path.
    """
    if opts.transaction_log:
        return _local(opts.transaction_log, "transactionLog")
    if streaming and opts.checkpoint:
        return str(Path(_local(opts.checkpoint, "checkpointLocation")) / RECORD_DIR)
    raise ConfigurationError(
        "rocketmq sink: exactlyOnce needs a directory on the driver's host for its decision "
        'record: option("transactionLog", path)'
        + (" (or a local checkpointLocation)" if streaming else "")
    )


def _local(path: str, name: str) -> str:
    if path.startswith("file://"):
        return path[len("file://") :]
    if path.startswith("file:"):
        return path[len("file:") :]
    if "://" in path:
        raise ConfigurationError(
            f"rocketmq sink: exactlyOnce keeps its decision record on the driver's local file "
            f'system, and {name} is {path}: give option("transactionLog", local path)'
        )
    return path


# -- the executors -----------------------------------------------------------------------------


def write_partition_tx(
    opts: SinkOptions,
    layout: Layout,
    items: Iterable[Any],
    scope: str | None,
    target: TxTarget,
    key: str,
    run_id: str,
) -> SinkCommit:
    """Check every row of the task's partition, store them all as half messages of
    ``target``'s group tagged with the write, run and task attempt, and report them.

    Raises:
        SinkInputError: a row that cannot be sent (nothing was sent).
        SinkSendError: a send failed (what was stored is rolled back).
        ConfigurationError: invalid settings.
    """
    from pyspark import TaskContext

    tc = TaskContext.get()
    partition = tc.partitionId() if tc is not None else 0
    attempt = tc.taskAttemptId() if tc is not None else 0
    tag = Tag(key, run_id, partition, attempt, round(opts.transaction_timeout)).render()
    out = messages(
        items,
        layout,
        partition=partition,
        max_size=opts.settings().max_message_size,
        scope=scope,
        extra={TAG_PROPERTY: tag},
    )
    commit = SinkCommit(partition, len(out), key, run_id, attempt)
    if not out:
        return commit
    producer = producer_for(opts)
    assert isinstance(producer, TransactionProducer)
    prepared = run(opts, prepare_all(producer, out, opts.max_in_flight, target.group))
    commit.halves = HalfSet.of(prepared[0].group, prepared)
    return commit


def new_run() -> str:
    """A run id (a writer instance: what its tasks tag their half messages with)."""
    return uuid.uuid4().hex


# -- the driver --------------------------------------------------------------------------------


def _reports(messages: Sequence[Any]) -> list[SinkCommit]:
    return [m for m in messages if isinstance(m, SinkCommit) and m.key is not None]


def commit_write(opts: SinkOptions, target: TxTarget, messages: Sequence[Any], what: str) -> None:
    """Decide the write the tasks' ``messages`` report, then wait (``commitTimeout`` at
    most) for the coordinator to commit it.

    Raises:
        ExpiredWriteError: the write was rolled back first (older than
            ``transactionTimeout``, or aborted).
        RuntimeError: the reports disagree (several writes, two attempts of a partition), or
            the coordinator cannot be started.
        OSError: the record could not be written.
    """
    reports = _reports(messages)
    if not reports:
        return
    writes = {(m.key, m.run) for m in reports}
    if len(writes) != 1:
        raise RuntimeError(f"rocketmq sink: {what} got reports of several writes: {writes}")
    ((key, run_id),) = writes
    assert key is not None
    assert run_id is not None
    twice = [p for p, n in Counter(m.partition for m in reports).items() if n > 1]
    if twice:
        raise RuntimeError(f"rocketmq sink: {what} got two reports of partitions {twice}")
    halves = tuple(m.halves for m in reports if m.halves is not None)
    decision = Decision(key, run_id, {m.partition: m.attempt for m in reports}, halves)
    record = TxRecord(target.record)
    config = target.config(opts)
    ensure_coordinator(config)
    try:
        in_force = record.decide(decision)
    except ExpiredWriteError:
        record.abort(key, run_id, halves)
        raise
    if in_force.run != run_id:
        log.warning(
            "rocketmq sink: %s was committed before (run %s): the rows of this run (%s) are "
            "rolled back",
            what,
            in_force.run,
            run_id,
        )
        record.abort(key, run_id, halves)
    _wait_reported(record, config, key, opts.commit_timeout, what)


def _wait_reported(
    record: TxRecord, config: CoordinatorConfig, key: str, timeout: float, what: str
) -> None:
    deadline = time.monotonic() + timeout
    next_look = 0.0
    # Until every row is committed: a report with rows pending (commits unanswered, found out
    # later by reading the target queues or by the broker's check) is not the end yet.
    while (report := record.reported(key)) is None or report.get("pending", 0):
        now = time.monotonic()
        if now > deadline:
            log.warning(
                "rocketmq sink: %s is decided but not committed after commitTimeout (%.0f s); "
                "the coordinator of %s commits it",
                what,
                timeout,
                record.path,
            )
            return
        if now >= next_look:
            if not coordinator_alive(record.path):
                # It died: the next one takes the decision over. (Never raise: the write is
                # decided, and an error here would have Spark abort a committed write.)
                try:
                    ensure_coordinator(config)
                except (RuntimeError, OSError) as exc:
                    log.error("rocketmq sink: cannot restart the coordinator: %s", exc)
            next_look = now + 1.0
        time.sleep(_REPORT_POLL)
    log.info("rocketmq sink: %s committed %d messages", what, report.get("applied", 0))


def abort_write(target: TxTarget, messages: Sequence[Any], what: str) -> None:
    """Roll back what the finished tasks of an aborted write stored (the others' half
    messages are rolled back when the broker checks them).

    Raises:
        OSError: the record could not be written.
    """
    reports = _reports(messages)
    record = TxRecord(target.record)
    for key, run_id in {(m.key, m.run) for m in reports}:
        assert key is not None
        assert run_id is not None
        halves = [m.halves for m in reports if m.key == key and m.halves is not None]
        record.abort(key, run_id, halves)
    log.warning("rocketmq sink: %s aborted; its half messages are rolled back", what)
