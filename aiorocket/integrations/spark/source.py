"""The ``rocketmq`` Spark data source (PySpark Python Data Source API, pyspark >= 4.0).

::

    from aiorocket.integrations.spark import register

    register(spark)
    df = (
        spark.readStream.format("rocketmq")
        .option("namesrv", "127.0.0.1:9876")
        .option("topic", "orders")
        .load()
    )

Offsets are JSON dicts ``{topic: {"<broker>:<queue id>": offset}}`` (the offset is the next
one to read), kept by Spark in its checkpoint. A micro-batch is the offset range between two
such dicts; :meth:`partitions` turns it into one partition per queue (or several with
``maxOffsetsPerPartition``), and executors read each range straight from its broker (a queue
reader whose event loop runs in the executor's thread), decoding pull bodies into Arrow
buffers with the compiled builder of :mod:`~aiorocket.integrations.spark.columns` when it is
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
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import accumulate, chain
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiorocket import MessageQueue, ReceivedMessage, SyncQueueReader
from aiorocket._reader import InlineReader, RawChunk
from aiorocket.errors import (
    BrokerError,
    ConfigurationError,
    RocketError,
    TopicNotExistError,
    TransportError,
)
from aiorocket.integrations.spark import columns
from aiorocket.integrations.spark.worker_python import check_worker_python
from aiorocket.models import validate_name

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

#: The rows of the source (and of :mod:`~aiorocket.integrations.spark.forwarder` batches).
SCHEMA: Final = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("broker", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("msg_id", StringType(), False),
        StructField("tags", StringType(), True),
        StructField("keys", ArrayType(StringType(), False), False),
        StructField("body", BinaryType(), False),
        StructField("born_timestamp", TimestampType(), False),
        StructField("store_timestamp", TimestampType(), False),
        StructField("reconsume_times", IntegerType(), False),
        StructField("properties", MapType(StringType(), StringType(), False), False),
    ]
)


def _arrow_schema() -> pa.Schema:
    # Spark compares a yielded batch's schema with its own conversion of SCHEMA, field names
    # of nested types and nullability included, so that conversion is used as is.
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(SCHEMA, timezone="UTC")
    except TypeError:  # pragma: no cover - pyspark < 4.1 has no timezone argument
        return to_arrow_schema(SCHEMA)


#: :data:`SCHEMA` as Arrow (timestamps in µs, UTC).
ARROW_SCHEMA: Final = _arrow_schema()

_TS_MS: Final = pa.timestamp("ms", tz="UTC")
_TS_TYPE: Final = ARROW_SCHEMA.field("born_timestamp").type
_KEYS_TYPE: Final = ARROW_SCHEMA.field("keys").type
_PROPS_TYPE: Final = ARROW_SCHEMA.field("properties").type

#: Rows per Arrow record batch yielded by executors.
_ARROW_ROWS: Final = 4096
#: Chunks of 32 offsets an executor keeps pulling at once: more answers per wake-up of its
#: loop (16 took 10 % less CPU per row than 8; at most 16 x 256 KiB in flight).
_READ_PIPELINE: Final = 16
#: Attempts of an executor read after transport errors (local mode does not retry tasks).
_READ_ATTEMPTS: Final = 4
#: How long the driver trusts its list of queues before asking the name server again.
_QUEUE_REFRESH: Final = 10.0

_EARLIEST: Final = -2
_LATEST: Final = -1

Offsets = dict[MessageQueue, int]


def register(spark: Any, *, check_python: bool = True) -> None:
    """Make ``format("rocketmq")`` available in ``spark`` (a ``SparkSession``).

    With a local master it first checks that the Python Spark will start for its workers
    (``spark.pyspark.python``, else ``PYSPARK_PYTHON``, else ``python3`` from PATH) can import
    pyarrow and aiorocket: a job run with a virtualenv's python that was not activated would
    otherwise fail deep in a stage. ``check_python=False`` skips that.

    Raises:
        ConfigurationError: the worker Python cannot import the bridge (the message names it
            and the fix: ``PYSPARK_PYTHON=<this python>``).
        Whatever ``spark.dataSource.register`` raises (e.g. a stopped session).
    """
    if check_python:
        check_worker_python(spark)
    spark.dataSource.register(RocketMQDataSource)


# -- options -----------------------------------------------------------------------------------


def _flag(raw: str | None, name: str, default: bool) -> bool:
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigurationError(f"option {name} must be true or false, not {raw!r}")
    return value == "true"


def _positive(raw: str | None, name: str) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"option {name} must be an integer, not {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"option {name} must be positive")
    return value


@dataclass(frozen=True)
class _Options:
    """Validated options; plain values, so readers stay picklable."""

    namesrv: str
    topics: tuple[str, ...]
    tags: str
    starting: str | None
    ending: str
    max_per_trigger: int | None
    max_per_partition: int | None
    fail_on_data_loss: bool
    group: str | None
    use_arrow: bool
    client: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> _Options:
        """Validate the source options (keys are lower-case in Spark's option map).

        Raises:
            ConfigurationError: a missing or invalid option.
        """
        opts = {k.lower(): v for k, v in options.items()}
        namesrv = opts.get("namesrv", "").strip()
        if not namesrv:
            raise ConfigurationError('the rocketmq source needs option("namesrv", "host:port")')
        topics = tuple(t.strip() for t in opts.get("topic", "").split(",") if t.strip())
        if not topics:
            raise ConfigurationError('the rocketmq source needs option("topic", "name[,name]")')
        for topic in topics:
            validate_name(topic)
        starting = opts.get("startingoffsets")
        if starting is not None:
            _check_spec(starting, "startingOffsets")
        ending = opts.get("endingoffsets", "latest")
        _check_spec(ending, "endingOffsets")
        if ending.strip().lower() == "earliest":
            raise ConfigurationError("endingOffsets cannot be earliest")
        client: dict[str, Any] = {}
        if "namespace" in opts:
            client["namespace"] = opts["namespace"]
        if "accesskey" in opts or "secretkey" in opts:
            client["access_key"] = opts.get("accesskey")
            client["secret_key"] = opts.get("secretkey")
        if "requesttimeout" in opts:
            try:
                client["request_timeout"] = float(opts["requesttimeout"])
            except ValueError:
                raise ConfigurationError("option requestTimeout must be a number") from None
        tls_ca = opts.get("tlsca", "").strip() or None
        if _flag(opts.get("tls"), "tls", False) or tls_ca is not None:
            # plain values only: an ssl.SSLContext cannot be pickled to the executors
            client["tls"] = True
            client["tls_ca"] = tls_ca
            client["tls_verify"] = _flag(opts.get("tlsverify"), "tlsVerify", True)
        group = opts.get("group", "").strip() or None
        if group is not None:
            validate_name(group, "consumer group")
        parsed = cls(
            namesrv=namesrv,
            topics=topics,
            tags=opts.get("tags", "*").strip() or "*",
            starting=starting,
            ending=ending,
            max_per_trigger=_positive(opts.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger"),
            max_per_partition=_positive(
                opts.get("maxoffsetsperpartition"), "maxOffsetsPerPartition"
            ),
            fail_on_data_loss=_flag(opts.get("failondataloss"), "failOnDataLoss", True),
            group=group,
            use_arrow=_flag(opts.get("usearrow"), "useArrow", True),
            client=client,
        )
        # Settings and names are checked here, on the driver, before any task runs.
        SyncQueueReader(namesrv=namesrv, **client)
        return parsed

    def open_inline_reader(self) -> InlineReader:
        """A started reader whose loop runs in the calling thread (executors).

        Raises:
            ConfigurationError: invalid client settings.
        """
        reader = InlineReader(namesrv=self.namesrv, **self.client)
        reader.start()
        return reader

    def open_reader(self) -> SyncQueueReader:
        """A started reader for these options.

        Raises:
            ConfigurationError: invalid client settings.
        """
        reader = SyncQueueReader(namesrv=self.namesrv, **self.client)
        reader.start()
        return reader


def _check_spec(spec: str, name: str) -> None:
    s = spec.strip()
    if s.lower() in ("earliest", "latest") or s.isdigit():
        return
    if s.startswith("{"):
        try:
            parsed = json.loads(s)
        except ValueError as exc:
            raise ConfigurationError(f"{name} is not valid JSON: {exc}") from None
        ok = isinstance(parsed, dict) and all(
            isinstance(v, dict)
            and all(
                isinstance(k, str) and k.rpartition(":")[2].isdigit() and type(o) is int and o >= -2
                for k, o in v.items()
            )
            for v in parsed.values()
        )
        if not ok:
            raise ConfigurationError(
                f'{name} JSON must look like {{"topic": {{"broker-a:0": 42}}}} '
                "(queue keys broker:id or id; offsets >= 0, -2 earliest, -1 latest)"
            )
        return
    raise ConfigurationError(
        f"{name} must be earliest, latest, a timestamp in ms or JSON, not {spec!r}"
    )


# -- offsets as JSON ---------------------------------------------------------------------------


def _queue_key(mq: MessageQueue) -> str:
    return f"{mq.broker_name}:{mq.queue_id}"


def _to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for mq in sorted(offsets):
        out.setdefault(mq.topic, {})[_queue_key(mq)] = offsets[mq]
    return out


def _from_json(data: Mapping[str, Any]) -> Offsets:
    out: Offsets = {}
    for topic, queues in data.items():
        for key, offset in queues.items():
            broker, _, qid = key.rpartition(":")
            out[MessageQueue(topic, broker, int(qid))] = int(offset)
    return out


def _resolve(
    spec: str, reader: SyncQueueReader, mqs: list[MessageQueue], *, missing: int, what: str
) -> Offsets:
    """Concrete offsets of ``mqs`` for an offsets option (earliest/latest/timestamp/JSON).

    Raises:
        ConfigurationError: JSON naming a queue that does not exist.
        RocketError: a broker could not be asked.
    """
    s = spec.strip()
    if s.lower() == "earliest":
        return reader.min_offsets(mqs)
    if s.lower() == "latest":
        return reader.max_offsets(mqs)
    if s.isdigit():
        ts = int(s)
        return {mq: reader.offset_for_timestamp(mq, ts) for mq in mqs}
    wanted: dict[MessageQueue, int] = {}
    known = set(mqs)
    for topic, queues in json.loads(s).items():
        brokers = {mq.broker_name for mq in mqs if mq.topic == topic}
        for key, offset in queues.items():
            broker, _, qid = key.rpartition(":")
            if not broker and len(brokers) == 1:
                broker = next(iter(brokers))
            mq = MessageQueue(topic, broker, int(qid))
            if mq not in known:
                raise ConfigurationError(f"{what} names {topic} {key}, which is not a queue")
            wanted[mq] = offset
    specials = {mq: wanted.get(mq, missing) for mq in mqs}
    need_min = [mq for mq, o in specials.items() if o == _EARLIEST]
    need_max = [mq for mq, o in specials.items() if o == _LATEST]
    out = {mq: o for mq, o in specials.items() if o >= 0}
    out.update(reader.min_offsets(need_min) if need_min else {})
    out.update(reader.max_offsets(need_max) if need_max else {})
    return out


def _all_queues(
    reader: SyncQueueReader, topics: Iterable[str], *, lenient: bool
) -> list[MessageQueue]:
    """Every readable queue of ``topics``; with ``lenient`` a topic without a route has none
    (yet) instead of failing.

    Raises:
        TopicNotExistError: (not lenient) a topic has no route.
        RocketError: the name server could not be asked.
    """
    out: list[MessageQueue] = []
    for topic in topics:
        try:
            out.extend(reader.queues(topic))
        except TopicNotExistError:
            if not lenient:
                raise
            log.info("topic %s has no route yet", topic)
    return out


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One partition: the offsets ``[start, end)`` of one queue."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int

    @property
    def queue(self) -> MessageQueue:
        """The queue read."""
        return MessageQueue(self.topic, self.broker, self.queue_id)


def _ranges(start: Offsets, end: Offsets, split: int | None) -> list[QueueRange]:
    out: list[QueueRange] = []
    for mq in sorted(end):
        lo = start.get(mq)
        hi = end[mq]
        if lo is None or hi <= lo:
            continue
        step = split or hi - lo
        out.extend(
            QueueRange(mq.topic, mq.broker_name, mq.queue_id, s, min(s + step, hi))
            for s in range(lo, hi, step)
        )
    return out


# -- executors: reading a range ----------------------------------------------------------------


def _chunks(opts: _Options, part: QueueRange) -> Iterator[RawChunk]:
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
            if exc.code in (19, 21):
                raise RuntimeError(
                    f"data loss in {mq} (failOnDataLoss is true): {exc.remark}"
                ) from exc
            raise


def _message_lists(chunks: Iterable[RawChunk], part: QueueRange) -> Iterator[list[ReceivedMessage]]:
    """Chunks decoded into messages (the row path, and the Arrow path's reference; both take
    the topic from the partition, not from the messages)."""
    for chunk in chunks:
        yield chunk.messages(part.broker)


def arrow_table(msgs: list[ReceivedMessage]) -> pa.Table:
    """``msgs`` as an Arrow table with :data:`ARROW_SCHEMA` (what the forwarder hands to
    ``spark.createDataFrame``).

    Raises:
        Nothing expected.
    """
    return pa.Table.from_batches([_record_batch(msgs, None)], schema=ARROW_SCHEMA)


def _offsets_of(lengths: Iterable[int]) -> pa.Array:
    return pa.array(list(accumulate(lengths, initial=0)), pa.int32())


def _keys_column(raw: list[str | None]) -> pa.Array:
    """``KEYS`` split as :attr:`ReceivedMessage.keys` splits it (``str.split()``)."""
    arr = pa.array(raw, pa.string())
    # Arrow splits in C++; its whitespace differs from Python's only for empty pieces
    # (leading, trailing or repeated blanks) and the separators \x1c-\x1f, rare in keys:
    # those batches take the Python path.
    split = pc.utf8_split_whitespace(arr)
    odd = (
        pc.any(pc.equal(pc.list_flatten(split), "")).as_py()
        or pc.any(pc.match_substring_regex(arr, "[\x1c-\x1f]")).as_py()
    )
    if not odd:
        return pc.fill_null(split, pa.scalar([], split.type)).cast(_KEYS_TYPE)
    keys = [k.split() if k else [] for k in raw]
    return pa.ListArray.from_arrays(
        _offsets_of(map(len, keys)),
        pa.array(list(chain.from_iterable(keys)), pa.string()),
        type=_KEYS_TYPE,
    )


def _record_batch(msgs: list[ReceivedMessage], part: QueueRange | None) -> pa.RecordBatch:
    """Build each column with one comprehension (or C-level iteration) over the messages and
    hand whole lists to Arrow: per-row Python work is what the Arrow path saves."""
    n = len(msgs)
    # The stored records behind the messages (``m._r``): their fields are plain slots, read
    # without a property call per row and column.
    recs = [m._r for m in msgs]
    props = [r.properties for r in recs]
    # msg_id is UNIQ_KEY when the producer set one (ReceivedMessage.msg_id), read from the
    # properties in bulk; the rare message without one falls back to the property.
    ids = [p.get("UNIQ_KEY") for p in props]
    if None in ids:
        ids = [i if i is not None else m.msg_id for i, m in zip(ids, msgs, strict=True)]
    if part is not None:
        # One queue per partition: constant columns need no per-row Python objects.
        topic = pa.repeat(pa.scalar(part.topic, pa.string()), n)
        broker = pa.repeat(pa.scalar(part.broker, pa.string()), n)
        queue_id = pa.repeat(pa.scalar(part.queue_id, pa.int32()), n)
    else:
        topic = pa.array([m.topic for m in msgs], pa.string())
        broker = pa.array([m.broker_name for m in msgs], pa.string())
        queue_id = pa.array([r.queue_id for r in recs], pa.int32())
    columns = [
        topic,
        broker,
        queue_id,
        pa.array([r.queue_offset for r in recs], pa.int64()),
        pa.array(ids, pa.string()),
        pa.array([p.get("TAGS") for p in props], pa.string()),
        _keys_column([p.get("KEYS") for p in props]),
        pa.array([r.body for r in recs], pa.binary()),
        pa.array([r.born_timestamp for r in recs], _TS_MS).cast(_TS_TYPE),
        pa.array([r.store_timestamp for r in recs], _TS_MS).cast(_TS_TYPE),
        # (a local retry counts on the message, not on its record)
        pa.array([m.reconsume_times for m in msgs], pa.int32()),
        pa.MapArray.from_arrays(
            _offsets_of(map(len, props)),
            pa.array(list(chain.from_iterable(props)), pa.string()),
            pa.array(list(chain.from_iterable(map(dict.values, props))), pa.string()),
            type=_PROPS_TYPE,
        ),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _arrow_batches(
    lists: Iterable[list[ReceivedMessage]], part: QueueRange
) -> Iterator[pa.RecordBatch]:
    pending: list[ReceivedMessage] = []
    for msgs in lists:
        pending.extend(msgs)
        if len(pending) >= _ARROW_ROWS:
            yield _record_batch(pending, part)
            pending = []
    if pending:
        yield _record_batch(pending, part)


def _ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _rows(lists: Iterable[list[ReceivedMessage]], part: QueueRange) -> Iterator[tuple[Any, ...]]:
    topic, broker, qid = part.topic, part.broker, part.queue_id
    for msgs in lists:
        for m in msgs:
            r = m._r  # the stored record: plain slots, as the Arrow path reads them
            yield (
                topic,
                broker,
                qid,
                r.queue_offset,
                m.msg_id,
                m.tags,
                m.keys,
                r.body,
                _ms_to_datetime(r.born_timestamp),
                _ms_to_datetime(r.store_timestamp),
                m.reconsume_times,
                r.properties,
            )


def _read(opts: _Options, partition: InputPartition) -> Iterator[Any]:
    if not isinstance(partition, QueueRange):
        # Spark substitutes a placeholder partition when there are none.
        return iter(())
    chunks = _chunks(opts, partition)
    if opts.use_arrow and columns.compiled():
        return columns.arrow_batches(
            chunks, partition.topic, partition.broker, partition.queue_id, ARROW_SCHEMA
        )
    lists = _message_lists(chunks, partition)
    return _arrow_batches(lists, partition) if opts.use_arrow else _rows(lists, partition)


# -- the data source -----------------------------------------------------------------------------


class RocketMQDataSource(DataSource):
    """``format("rocketmq")``: batch and streaming reads of RocketMQ topics (see the module
    documentation for the options).

    Raises:
        ConfigurationError: (from :meth:`reader` / :meth:`streamReader`) missing or invalid
            options, or a schema other than :data:`SCHEMA`.
    """

    @classmethod
    def name(cls) -> str:
        """The format name, ``rocketmq``."""
        return "rocketmq"

    def schema(self) -> StructType:
        """The fixed :data:`SCHEMA`."""
        return SCHEMA

    def _options(self, schema: StructType) -> _Options:
        if schema != SCHEMA:
            raise ConfigurationError(
                "the rocketmq source has a fixed schema; select or cast columns instead"
            )
        return _Options.parse(dict(self.options))

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


class RocketMQBatchReader(DataSourceReader):
    """Reads ``[startingOffsets, endingOffsets)`` of every queue once (one partition per
    queue, or more with ``maxOffsetsPerPartition``)."""

    def __init__(self, opts: _Options) -> None:
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
            mqs = _all_queues(reader, opts.topics, lenient=False)
            start = _resolve(
                opts.starting or "earliest", reader, mqs, missing=_EARLIEST, what="startingOffsets"
            )
            end = _resolve(opts.ending, reader, mqs, missing=_LATEST, what="endingOffsets")
        return _ranges(start, end, opts.max_per_partition)

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

    def __init__(self, opts: _Options) -> None:
        self._setup(opts)

    def _setup(self, opts: _Options) -> None:
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
            self._queues = _all_queues(self._client(), self._opts.topics, lenient=True)
            self._queues_at = now
        return self._queues

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        """``{}``: no queue pinned yet; the first :meth:`latestOffset` resolves
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
            begin = _from_json(start)
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
                _resolve(
                    opts.starting or "latest",
                    reader,
                    mqs,
                    missing=_EARLIEST,
                    what="startingOffsets",
                )
            )
            self._latest = dict(end)
            self._last_end = end
            return _to_json(end)
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
        for mq, n in _share(backlog, max_rows).items():
            end[mq] = begin[mq] + n
        self._last_end = end
        return _to_json(end)

    def getDefaultReadLimit(self) -> Any:  # noqa: N802
        """``ReadMaxRows(maxOffsetsPerTrigger)`` when the option is set, else read all."""
        n = self._opts.max_per_trigger
        if _ReadMaxRows is None:  # pragma: no cover - pyspark < 4.2 never calls this
            return None
        return _ReadMaxRows(n) if n is not None else _ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        """The queues' ends seen by the last :meth:`latestOffset` (for progress reports)."""
        return _to_json(self._latest) if self._latest else None

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        """Remember every queue's current end; later batches stop there.

        Raises:
            RocketError: the name server or a broker could not be asked.
        """
        mqs = self._current_queues()
        self._target = self._client().max_offsets(mqs) if mqs else {}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[QueueRange]:
        """One range per queue that moved (split by ``maxOffsetsPerPartition``)."""
        return _ranges(_from_json(start), _from_json(end), self._opts.max_per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The rows of one range (Arrow record batches, or tuples without ``useArrow``).

        Raises:
            RuntimeError: with ``failOnDataLoss``, part of the range is gone.
            RocketError: the broker could not be read (after retries).
        """
        return _read(self._opts, partition)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything up to ``end``: store it for ``group`` (if set)."""
        self._commit_group(_from_json(end))

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


def _share(backlog: Mapping[MessageQueue, int], limit: int | None) -> dict[MessageQueue, int]:
    """How many offsets each queue may advance: everything, or ``limit`` split in proportion
    to the backlogs (largest remainders first, ties by queue order), as Kafka's source does."""
    total = sum(backlog.values())
    if limit is None or total <= limit:
        return dict(backlog)
    shares = {mq: n * limit // total for mq, n in backlog.items()}
    left = limit - sum(shares.values())
    for mq in sorted(backlog, key=lambda q: (-(backlog[q] * limit % total), q)):
        if left <= 0:
            break
        if shares[mq] < backlog[mq]:
            shares[mq] += 1
            left -= 1
    return shares
