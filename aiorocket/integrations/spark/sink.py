"""The ``rocketmq`` Spark sink: ``df.write.format("rocketmq")`` and
``df.writeStream.format("rocketmq")`` (PySpark Python Data Source API, pyspark >= 4.0).

Each task turns its partition's rows into messages (the columns are in
`outgoing`), checking every row before it sends any, then
sends them with pipelined asynchronous sends (``maxInFlight`` at a time; messages of one
sharding key one after another, so their order holds) through one producer per Python worker
process, kept across the tasks that process runs (PySpark reuses its workers). The task returns
only when every send was acknowledged; a failed send fails the task and Spark retries it.

Delivery is at least once: a retried task, or a micro-batch replayed after a restart, sends its
rows again. With ``idempotentKeys`` every message's ``UNIQ_KEY`` (its ``msg_id``) and one of
its keys is derived from the write (a batch write's id, or a streaming query's id and
micro-batch id), the partition and the row's position, so a duplicate carries the same id as
its original and consumers can drop it. That holds when a partition's rows come back in the
same order on a retry (a replayable source such as ``rocketmq`` or Kafka, no nondeterministic
shuffle before the write).

Options (names are case-insensitive):

``namesrv``
    name server address(es). Required.
``topic``
    the topic of rows without a ``topic`` column (or whose ``topic`` is null).
``group``
    producer group (default ``SPARK_ROCKETMQ_SINK``).
``idempotentKeys``
    ``true``: deterministic ``UNIQ_KEY`` and key per row (see above). Default ``false``.
``maxInFlight``
    sends a task keeps in flight (default 256).
``sendTimeout``, ``retries``, ``maxMessageSize``
    the producer's settings: seconds per send, retries included (3); further attempts of a
    failed send (2); the largest body in bytes (4 MiB).
``namespace``, ``accessKey``, ``secretKey``, ``requestTimeout``, ``tls``, ``tlsCa``, ``tlsVerify``
    client settings, as the source takes them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from aiorocket.integrations.spark.compat import ROCKETMQ_SPARK
from aiorocket.integrations.spark.exactly_once import (
    TxTarget,
    abort_write,
    commit_write,
    new_run,
    write_partition_tx,
)
from aiorocket.integrations.spark.options import DEFAULT_GROUP, SinkOptions
from aiorocket.integrations.spark.outgoing import Layout, messages
from aiorocket.integrations.spark.sending import (
    SinkCommit,
    SinkSendError,
    producer_for,
    run,
    send_all,
)

try:  # pyspark >= 4.1: streaming writers get Arrow record batches
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamBase
except ImportError:  # pragma: no cover - depends on the installed pyspark
    _StreamBase = DataSourceStreamWriter  # type: ignore[assignment,misc]

__all__ = [
    "DEFAULT_GROUP",
    "RocketMQBatchWriter",
    "RocketMQStreamWriter",
    "SinkCommit",
    "SinkOptions",
    "SinkSendError",
    "write_partition",
]

log = logging.getLogger("aiorocket.spark")


def _partition() -> tuple[int, Any]:
    from pyspark import TaskContext

    tc = TaskContext.get()
    return (tc.partitionId() if tc is not None else 0), tc


def write_partition(
    opts: SinkOptions, layout: Layout, items: Iterable[Any], scope: str | None
) -> SinkCommit:
    """Check every row of the task's partition, then send them all and wait for every
    acknowledgement (the work of both writers' ``write``).

    Raises:
        SinkInputError: a row that cannot be sent (nothing was sent).
        SinkSendError: a send failed.
        ConfigurationError: invalid settings.
    """
    partition, _ = _partition()
    max_size = opts.settings().max_message_size
    out = messages(items, layout, partition=partition, max_size=max_size, scope=scope)
    if not out:
        return SinkCommit(partition, 0)
    run(opts, send_all(producer_for(opts), out, opts.max_in_flight))
    return SinkCommit(partition, len(out))


def _total(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(m.messages for m in messages if isinstance(m, SinkCommit))


def _abort(tx: TxTarget | None, messages: list[WriterCommitMessage | None], what: str) -> None:
    """A write (or micro-batch) failed for good: roll back what exactly-once tasks sent,
    or say what at-least-once tasks left stored."""
    if tx is not None:
        abort_write(tx, messages, what)
        return
    log.warning(
        "rocketmq sink: %s aborted; %d messages of finished tasks stay stored",
        what,
        _total(messages),
    )


class RocketMQBatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketmq")``: each task sends its partition (see the module
    documentation); ``idempotentKeys`` ids are scoped by a write id made on the driver, which
    also names the write in exactly-once mode."""

    def __init__(self, opts: SinkOptions, layout: Layout, tx: TxTarget | None = None) -> None:
        self._opts = opts
        self._layout = layout
        self._tx = tx
        self._write_id = uuid.uuid4().hex

    def write(self, iterator: Iterable[Any]) -> SinkCommit:
        """Send one partition (as half messages in exactly-once mode).

        Raises:
            SinkInputError, SinkSendError: as `write_partition`.
        """
        scope = f"write:{self._write_id}" if self._opts.idempotent_keys else None
        if self._tx is not None:
            key = f"write.{self._write_id}"
            return write_partition_tx(
                self._opts, self._layout, iterator, scope, self._tx, key, self._write_id
            )
        return write_partition(self._opts, self._layout, iterator, scope)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded: log the count; in exactly-once mode commit the write.

        Raises:
            ExpiredWriteError: (exactly once) the write was rolled back first.
        """
        what = f"write {self._write_id}"
        if self._tx is not None:
            commit_write(self._opts, self._tx, messages, what)
            return
        log.info("rocketmq sink: %s sent %d messages", what, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task failed for good: what the others sent stays stored (at least once), or is
        rolled back (exactly once)."""
        _abort(self._tx, messages, f"write {self._write_id}")


def _stream_ids() -> tuple[str, str]:
    """The streaming query's id and the micro-batch id of the running task.

    Raises:
        RuntimeError: not in a streaming query's task.
    """
    _, tc = _partition()
    # Spark's MicroBatchExecution sets both as local properties of every task.
    query = tc.getLocalProperty("sql.streaming.queryId") if tc is not None else None
    batch = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
    if query is None or batch is None:
        raise RuntimeError(
            "rocketmq sink: idempotentKeys and exactlyOnce need the streaming query and "
            "batch id of the task, which Spark did not give"
        )
    return query, batch


class RocketMQStreamWriter(_StreamBase):
    """``df.writeStream.format("rocketmq")``: each micro-batch's tasks send their partitions;
    ``idempotentKeys`` ids are scoped by the query's id (kept in its checkpoint, so a batch
    replayed after a restart gets the same ids) and the micro-batch id, which also name the
    write in exactly-once mode. (Spark makes a new writer for every micro-batch, and another
    one for its commit.)"""

    def __init__(self, opts: SinkOptions, layout: Layout, tx: TxTarget | None = None) -> None:
        self._opts = opts
        self._layout = layout
        self._tx = tx
        self._run = new_run()

    def write(self, iterator: Iterable[Any]) -> SinkCommit:
        """Send one partition of a micro-batch (as half messages in exactly-once mode).

        Raises:
            SinkInputError, SinkSendError: as `write_partition`.
            RuntimeError: ``idempotentKeys`` or ``exactlyOnce`` outside a streaming query's
                task.
        """
        scope = None
        if self._opts.idempotent_keys or self._tx is not None:
            query, batch = _stream_ids()
            if self._opts.idempotent_keys:
                scope = f"query:{query}:{batch}"
            if self._tx is not None:
                return write_partition_tx(
                    self._opts,
                    self._layout,
                    iterator,
                    scope,
                    self._tx,
                    f"{query}.{batch}",
                    self._run,
                )
        return write_partition(self._opts, self._layout, iterator, scope)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Every task of the micro-batch succeeded: log the count; in exactly-once mode
        commit the micro-batch (once, however often Spark replays it).

        Raises:
            ExpiredWriteError: (exactly once) the micro-batch was rolled back first.
        """
        what = f"micro-batch {batchId}"
        if self._tx is not None:
            commit_write(self._opts, self._tx, messages, what)
            return
        log.info("rocketmq sink: %s sent %d messages", what, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """A task failed for good: what the others sent stays stored (at least once), or is
        rolled back (exactly once)."""
        _abort(self._tx, messages, f"micro-batch {batchId}")


def writer_for(options: Mapping[str, str], schema: StructType, *, streaming: bool) -> Any:
    """The batch or streaming writer of ``format("rocketmq")`` (options and columns checked
    here, on the driver; in exactly-once mode the decision record is made ready and its
    coordinator started).

    Raises:
        ConfigurationError: invalid options or columns.
        RuntimeError: (exactly once) the coordinator did not start.
    """
    opts = SinkOptions.parse(options)
    layout = Layout.of(
        schema,
        opts.topic,
        compat=opts.schema == ROCKETMQ_SPARK,
        transactional=opts.exactly_once,
    )
    tx = TxTarget.prepare(opts, streaming=streaming) if opts.exactly_once else None
    if streaming:
        return RocketMQStreamWriter(opts, layout, tx)
    return RocketMQBatchWriter(opts, layout, tx)
