"""The ``rocketmq`` Spark data source (PySpark Python Data Source API, pyspark >= 4.0);
[`aiorocket.integrations.spark`][aiorocket.integrations.spark] shows how a session registers and
reads it.

Offsets are JSON dicts ``{topic: {"<broker>:<queue id>": offset}}`` (the offset is the next
one to read), kept by Spark in its checkpoint. A micro-batch is the offset range between two
such dicts; `partitions` turns it into one partition per queue (or several with
``maxOffsetsPerPartition``), and executors read each range straight from its broker (a queue
reader whose event loop runs in the executor's thread), decoding pull bodies into Arrow
buffers with the compiled builder of `columns` when it is
built. A range is read by offset, so reading it again (a retried task, a batch replayed after
a restart) gives the same rows.

The first micro-batch of a new streaming query reads nothing: it only pins the starting
offsets (``latest``, ``earliest`` and timestamps move over time) in Spark's offset log, so a
query restarted before its first batch committed replays exactly the same ranges.

Options (names are case-insensitive):

``namesrv``
    name server address(es), ``host:port`` separated by ``;`` or ``,``. Required.
``topic``
    a topic or a comma-separated list. Required.
``tags``
    tag expression applied to every topic (``"A || B"``; default ``*``). Offsets advance over
    filtered messages; rows are only the matching ones.
``startingOffsets``
    ``latest`` (streaming default), ``earliest`` (batch default), a timestamp in epoch ms
    (the first message stored at or after it), or JSON ``{"topic": {"broker-a:0": 42}}`` where
    -2 means earliest and -1 latest, a bare queue id may stand for ``broker:id`` when the topic
    lives on one broker, and queues left out start at earliest.
``endingOffsets``
    batch only: ``latest`` (default), a timestamp in epoch ms (messages stored before it), or
    JSON as above (left-out queues end at latest).
``maxOffsetsPerTrigger``
    streaming: at most this many offsets per micro-batch, shared by queues in proportion to
    their backlog.
``maxOffsetsPerPartition``
    split a queue's range into partitions of at most this many offsets (default: one
    partition per queue and batch).
``failOnDataLoss``
    ``true`` (default): fail when offsets to read are gone (retention, a reset queue);
    ``false``: skip them with a warning.
``group``
    streaming: a consumer group whose broker-side offsets follow the query: after each
    micro-batch commits, its end offsets are stored for the group (UPDATE_CONSUMER_OFFSET), so
    RocketMQ's lag tools see the query's progress. Spark reports a batch as committed when it
    plans the next one, and the next plan starts from the last committed end, so the group
    reaches the end of the last committed micro-batch within a trigger interval. Spark's
    checkpoint stays the source of truth; a failed commit is logged and retried later.
``tls``
    ``true``: connect to name servers and brokers over TLS, verifying their certificates
    (default ``false``).
``tlsCa``
    a PEM file of CAs to trust besides the system's (a private CA); it must exist on the
    driver and on every executor. Implies ``tls``.
``tlsVerify``
    ``false``: TLS without certificate checks (test clusters only). Default ``true``.
``useArrow``
    ``true`` (default): executors yield Arrow record batches; ``false``: plain row tuples
    (slower; kept to compare).
``namespace``, ``accessKey``, ``secretKey``, ``requestTimeout``
    client settings (namespace prefix, ACL credentials, RPC timeout in seconds).
``schema``
    ``aiorocket`` (default: `SCHEMA`) or ``rocketmq-spark`` (Apache rocketmq-spark's
    rows, the default when the job names ``nameServer``). rocketmq-spark's option names
    (``nameServer``, ``subExpression``, ``pullTimeoutMs``, ``pullBatchSize``) and offsets JSON
    are accepted too: `aiorocket.integrations.spark.compat`.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from typing import Any, Final

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import (
    StructType,
)

from aiorocket import MessageQueue, ReceivedMessage, SyncQueueReader
from aiorocket._client.pull import PullStatus
from aiorocket._reader import RawChunk
from aiorocket.errors import (
    BrokerError,
    ConfigurationError,
    RocketError,
    TransportError,
)
from aiorocket.integrations.spark import columns
from aiorocket.integrations.spark.compat import (
    ROCKETMQ_SPARK,
    ROCKETMQ_SPARK_SCHEMA,
    compat_batches,
    compat_rows,
    normalize,
)
from aiorocket.integrations.spark.options import SourceOptions
from aiorocket.integrations.spark.planning import (
    EARLIEST,
    LATEST,
    Offsets,
    QueueRange,
    all_queues,
    from_json,
    ranges,
    resolve,
    share,
    to_json,
)
from aiorocket.integrations.spark.rows import (
    ARROW_SCHEMA,
    SCHEMA,
    arrow_batches,
    arrow_table,
    rows,
)
from aiorocket.integrations.spark.sink import (
    RocketMQBatchWriter,
    RocketMQStreamWriter,
    writer_for,
)
from aiorocket.integrations.spark.worker_python import check_worker_python

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow for Python sources
    from pyspark.sql.streaming import datasource as _streaming
except ImportError:  # pragma: no cover - depends on the installed pyspark
    _streaming = None  # type: ignore[assignment]

_ReadMaxRows: Any = getattr(_streaming, "ReadMaxRows", None)
_ReadAllAvailable: Any = getattr(_streaming, "ReadAllAvailable", None)
_AvailableNow: Any = getattr(_streaming, "SupportsTriggerAvailableNow", object)

__all__ = [
    "ARROW_SCHEMA",
    "SCHEMA",
    "QueueRange",
    "RocketMQBatchReader",
    "RocketMQDataSource",
    "RocketMQStreamReader",
    "arrow_table",
    "register",
]

log = logging.getLogger("aiorocket.spark")

#: Chunks of 32 offsets an executor keeps pulling at once: more answers per wake-up of its
#: loop (16 took 10 % less CPU per row than 8; at most 16 x 256 KiB in flight).
_READ_PIPELINE: Final = 16
#: Attempts of an executor read after transport errors (local mode does not retry tasks).
_READ_ATTEMPTS: Final = 4
#: How long the driver trusts its list of queues before asking the name server again.
_QUEUE_REFRESH: Final = 10.0


def register(spark: Any, *, check_python: bool = True) -> None:
    """Make ``format("rocketmq")`` available in ``spark`` (a ``SparkSession``).

    With a local master it first checks that the Python Spark will start for its workers
    (``spark.pyspark.python``, else ``PYSPARK_PYTHON``, else ``python3`` from PATH) can import
    pyarrow and aiorocket: a job run with a virtualenv's python that was not activated would
    otherwise fail deep in a stage. ``check_python=False`` skips that.

    Raises:
        ConfigurationError: the worker Python cannot import the bridge (the message names it
            and the fix: ``PYSPARK_PYTHON=<this python>``).
        Exception: whatever ``spark.dataSource.register`` raises (e.g. a stopped session).
    """
    if check_python:
        check_worker_python(spark)
    spark.dataSource.register(RocketMQDataSource)


def _chunks(opts: SourceOptions, part: QueueRange) -> Iterator[RawChunk]:
    """The range's pull bodies, one chunk of 32 offsets at a time; transport failures are
    retried from the first chunk not yet handed over (a few times, with a growing pause).

    The reader's event loop runs in this thread (no hop to a loop thread per chunk)."""
    mq = part.queue
    offset = part.start
    attempt = 0
    while True:
        try:
            with opts.open_inline_reader() as reader:
                for chunk in reader.read_range_raw(
                    mq,
                    offset,
                    part.end,
                    expression=opts.tags,
                    tolerate_loss=not opts.fail_on_data_loss,
                    pipeline=_READ_PIPELINE,
                ):
                    yield chunk
                    # The caller took every row of the chunk: a retry starts after it.
                    offset = chunk.hi
                    attempt = 0
            return
        except TransportError as exc:
            attempt += 1
            if attempt >= _READ_ATTEMPTS:
                raise
            delay = 0.25 * 2**attempt
            log.warning("reading %s at %d failed (%s); retrying in %.1f s", mq, offset, exc, delay)
            time.sleep(delay)
        except BrokerError as exc:
            if exc.code in (PullStatus.NO_NEW_MSG, PullStatus.OFFSET_ILLEGAL):
                raise RuntimeError(
                    f"data loss in {mq} (failOnDataLoss is true): {exc.remark}"
                ) from exc
            raise


def _message_lists(chunks: Iterable[RawChunk], part: QueueRange) -> Iterator[list[ReceivedMessage]]:
    """Chunks decoded into messages (the row path, and the Arrow path's reference; both take
    the topic from the partition, not from the messages)."""
    for chunk in chunks:
        yield chunk.messages(part.broker)


def _read(opts: SourceOptions, partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, QueueRange):
        # Spark substitutes a placeholder partition when there are none.
        return iter(())
    chunks = _chunks(opts, partition)
    if opts.schema == ROCKETMQ_SPARK:
        lists = _message_lists(chunks, partition)
        return compat_batches(lists, partition) if opts.use_arrow else compat_rows(lists, partition)
    if opts.use_arrow and columns.compiled():
        return columns.arrow_batches(
            chunks, partition.topic, partition.broker, partition.queue_id, ARROW_SCHEMA
        )
    lists = _message_lists(chunks, partition)
    return arrow_batches(lists, partition) if opts.use_arrow else rows(lists, partition)


# -- the data source -----------------------------------------------------------------------------


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: batch and streaming reads of RocketMQ topics (see the module
    documentation for the options), and writes to them (the sink's options and columns are
    in `sink`).

    Raises:
        ConfigurationError: (from [`reader`][aiorocket.integrations.spark.RocketMQDataSource.reader]
            / [`streamReader`][aiorocket.integrations.spark.RocketMQDataSource.streamReader])
            missing or invalid options, or a schema other than
            `SCHEMA`.
    """

    @classmethod
    def name(cls) -> str:
        """The format name, ``rocketmq``."""
        return "rocketmq"

    def schema(self) -> StructType:
        """The fixed `SCHEMA`, or rocketmq-spark's rows with ``schema=rocketmq-spark``
        (``compat.py``).

        Raises:
            ConfigurationError: an unknown ``schema`` option.
        """
        if normalize(dict(self.options))["schema"] == ROCKETMQ_SPARK:
            return ROCKETMQ_SPARK_SCHEMA
        return SCHEMA

    def _options(self, schema: StructType) -> SourceOptions:
        if schema != self.schema():
            raise ConfigurationError(
                "the rocketmq source has a fixed schema; select or cast columns instead"
            )
        return SourceOptions.parse(dict(self.options))

    def reader(self, schema: StructType) -> RocketMQBatchReader:
        """A batch reader.

        Raises:
            ConfigurationError: invalid options or schema.
        """
        return RocketMQBatchReader(self._options(schema))

    def streamReader(self, schema: StructType) -> RocketMQStreamReader:  # noqa: N802
        """A micro-batch stream reader.

        Raises:
            ConfigurationError: invalid options or schema.
        """
        return RocketMQStreamReader(self._options(schema))

    def writer(self, schema: StructType, overwrite: bool) -> RocketMQBatchWriter:
        """A batch writer (the sink: `sink`).

        Raises:
            ConfigurationError: invalid options or columns, or ``mode("overwrite")`` (a topic
                can only be appended to).
        """
        if overwrite:
            raise ConfigurationError(
                'the rocketmq sink only appends: use mode("append"), not overwrite'
            )
        writer: RocketMQBatchWriter = writer_for(dict(self.options), schema, streaming=False)
        return writer

    def streamWriter(  # noqa: N802
        self, schema: StructType, overwrite: bool
    ) -> RocketMQStreamWriter:
        """A streaming writer (the sink: `sink`).

        Raises:
            ConfigurationError: invalid options or columns.
        """
        writer: RocketMQStreamWriter = writer_for(dict(self.options), schema, streaming=True)
        return writer


class RocketMQBatchReader(DataSourceReader):
    """Reads ``[startingOffsets, endingOffsets)`` of every queue once (one partition per
    queue, or more with ``maxOffsetsPerPartition``)."""

    def __init__(self, opts: SourceOptions) -> None:
        self._opts = opts

    def partitions(self) -> list[QueueRange]:
        """Resolve both offset options on the driver, per queue.

        Raises:
            TopicNotExistError: a topic has no route.
            ConfigurationError: offsets JSON naming unknown queues.
            RocketError: the name server or a broker could not be asked.
        """
        opts = self._opts
        with opts.open_reader() as reader:
            mqs = all_queues(reader, opts.topics, lenient=False)
            start = resolve(
                opts.starting or "earliest", reader, mqs, missing=EARLIEST, what="startingOffsets"
            )
            end = resolve(opts.ending, reader, mqs, missing=LATEST, what="endingOffsets")
        return ranges(start, end, opts.max_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The rows of one range (Arrow record batches, or tuples without ``useArrow``).

        Raises:
            RuntimeError: with ``failOnDataLoss``, part of the range is gone.
            RocketError: the broker could not be read (after retries).
        """
        return _read(self._opts, partition)


class RocketMQStreamReader(DataSourceStreamReader, _AvailableNow):  # type: ignore[misc]
    """Micro-batches over queue offsets, with admission control (``maxOffsetsPerTrigger``),
    ``Trigger.AvailableNow`` and optional consumer-group commits (see the module docs)."""

    def __init__(self, opts: SourceOptions) -> None:
        self._setup(opts)

    def _setup(self, opts: SourceOptions) -> None:
        self._opts = opts
        self._reader: SyncQueueReader | None = None
        self._queues: list[MessageQueue] = []
        self._queues_at = float("-inf")
        self._latest: Offsets = {}
        self._target: Offsets | None = None
        self._last_end: Offsets | None = None
        self._committed: Offsets = {}

    def __getstate__(self) -> dict[str, Any]:
        # Executors get a pickled copy for read(); only the options travel.
        return {"_opts": self._opts}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._setup(state["_opts"])

    def _client(self) -> SyncQueueReader:
        if self._reader is None:
            self._reader = self._opts.open_reader()
        return self._reader

    def _current_queues(self) -> list[MessageQueue]:
        now = time.monotonic()
        if now - self._queues_at >= _QUEUE_REFRESH:
            self._queues = all_queues(self._client(), self._opts.topics, lenient=True)
            self._queues_at = now
        return self._queues

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        """``{}``: no queue pinned yet; the first `latestOffset` resolves
        ``startingOffsets`` (and that first batch reads nothing)."""
        return {}

    def latestOffset(  # noqa: N802
        self, start: dict[str, Any] | None = None, limit: Any = None
    ) -> dict[str, Any]:
        """The end of the next micro-batch: every queue's end, capped by the read limit (and
        by the AvailableNow target). Also commits ``start`` (the end of the last committed
        batch) to ``group``.

        pyspark < 4.2 calls this without arguments: the start is then the previous end, and
        ``maxOffsetsPerTrigger`` is applied here.

        Raises:
            RuntimeError: with ``failOnDataLoss``, a queue's end moved below what was read.
            RocketError: the name server or a broker could not be asked.
        """
        opts = self._opts
        if start is None:
            begin = dict(self._last_end) if self._last_end is not None else {}
            max_rows = opts.max_per_trigger
        else:
            begin = from_json(start)
            if _ReadMaxRows is not None and isinstance(limit, _ReadMaxRows):
                max_rows = limit.max_rows
            elif limit is None:
                max_rows = opts.max_per_trigger
            else:
                max_rows = None  # ReadAllAvailable, or limits by bytes/files we cannot honour
            if begin:
                self._commit_group(begin)
        reader = self._client()
        mqs = self._current_queues()
        end = dict(begin)
        if not begin:
            # The first batch: pin the starting offsets; nothing is read in this batch.
            end.update(
                resolve(
                    opts.starting or "latest",
                    reader,
                    mqs,
                    missing=EARLIEST,
                    what="startingOffsets",
                )
            )
            self._latest = dict(end)
            self._last_end = end
            return to_json(end)
        new = [mq for mq in mqs if mq not in begin]
        if new:
            # Queues that appeared since: they join at their earliest offset, read from the
            # next batch on (so every range read lies between checkpointed offsets).
            end.update(reader.min_offsets(new))
        known = [mq for mq in mqs if mq in begin]
        latest = reader.max_offsets(known) if known else {}
        self._latest = dict(latest)
        target = self._target
        backlog: dict[MessageQueue, int] = {}
        for mq, top in latest.items():
            here = begin[mq]
            if top < here:
                what = f"{mq} now ends at offset {top}, below the {here} already read"
                if opts.fail_on_data_loss:
                    raise RuntimeError(f"data loss: {what} (failOnDataLoss is true)")
                log.warning("%s; continuing from %d", what, top)
                end[mq] = top
                continue
            if target is not None:
                # AvailableNow: stop at the ends seen when the query started (queues that
                # appeared since stay where they joined).
                top = max(here, min(top, target.get(mq, here)))
            backlog[mq] = top - here
        for mq, n in share(backlog, max_rows).items():
            end[mq] = begin[mq] + n
        self._last_end = end
        return to_json(end)

    def getDefaultReadLimit(self) -> Any:  # noqa: N802
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when the option is set, else read all."""
        n = self._opts.max_per_trigger
        if _ReadMaxRows is None:  # pragma: no cover - pyspark < 4.2 never calls this
            return None
        return _ReadMaxRows(n) if n is not None else _ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        """The queues' ends seen by the last `latestOffset` (for progress reports)."""
        return to_json(self._latest) if self._latest else None

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Remember every queue's current end; later batches stop there.

        Raises:
            RocketError: the name server or a broker could not be asked.
        """
        mqs = self._current_queues()
        self._target = self._client().max_offsets(mqs) if mqs else {}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[QueueRange]:
        """One range per queue that moved (split by ``maxOffsetsPerPartition``)."""
        return ranges(from_json(start), from_json(end), self._opts.max_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The rows of one range (Arrow record batches, or tuples without ``useArrow``).

        Raises:
            RuntimeError: with ``failOnDataLoss``, part of the range is gone.
            RocketError: the broker could not be read (after retries).
        """
        return _read(self._opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: store it for ``group`` (if set)."""
        self._commit_group(from_json(end))

    def _commit_group(self, offsets: Offsets) -> None:
        group = self._opts.group
        if group is None:
            return
        changed = {mq: o for mq, o in offsets.items() if self._committed.get(mq) != o}
        if not changed:
            return
        try:
            self._client().commit_many(group, changed)
        except RocketError as exc:
            # The checkpoint is the truth; the group's copy is retried on the next call.
            log.warning("committing offsets of group %s failed: %s", group, exc)
            return
        self._committed.update(changed)

    def stop(self) -> None:
        """Close the driver-side client."""
        reader, self._reader = self._reader, None
        if reader is not None:
            with contextlib.suppress(Exception):
                reader.close()
