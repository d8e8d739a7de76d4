"""Compatibility with Apache rocketmq-spark (``rocketmq-externals/rocketmq-spark``, the
``org.apache.spark.sql.rocketmq`` source and sink of Spark 2): its option names, its offsets
JSON, its row schema.

* Options: ``nameServer`` stands for ``namesrv``, ``subExpression`` for ``tags``,
  ``pullTimeoutMs`` (milliseconds) for ``requestTimeout`` (seconds); ``pullBatchSize`` is
  accepted and checked (aiorocket always pulls what a broker serves at most, 32 messages,
  several pulls in flight). ``topic``, ``startingOffsets``, ``endingOffsets`` and
  ``failOnDataLoss`` have the same names already.
* Offsets JSON ``{"topicA": {"broker1": {"0": 23, "1": -1}}}`` (queue ids per broker) is read
  as aiorocket's ``{"topicA": {"broker1:0": 23, "broker1:1": -1}}``.
* ``schema=rocketmq-spark``: the source's rows are rocketmq-spark's
  (`ROCKETMQ_SPARK_SCHEMA`: ``topic``, ``flag``, ``body``, ``properties`` as a JSON
  string of every property, ``brokerName``, ``queueId``, ``queueOffset``, ``bornTimestamp``,
  ``storeTimestamp``), and the sink reads only the columns rocketmq-spark's does (``body``,
  ``topic``, ``tags``), the ``topic`` option winning over a ``topic`` column as it does there.

A job written for rocketmq-spark names the server ``nameServer``: that spelling without a
``schema`` option means ``schema=rocketmq-spark``, so such a job runs with only its format
name changed to ``rocketmq``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiorocket import ReceivedMessage
from aiorocket.errors import ConfigurationError
from aiorocket.integrations.spark.planning import QueueRange

__all__ = [
    "ROCKETMQ_SPARK_SCHEMA",
    "NATIVE",
    "ROCKETMQ_SPARK",
    "compat_batches",
    "compat_rows",
    "flat_offsets",
    "normalize",
]

#: the values of the ``schema`` option
NATIVE: Final = "aiorocket"
ROCKETMQ_SPARK: Final = "rocketmq-spark"

#: rocketmq-spark's option names (lower case, as Spark hands options over) and ours
_ALIASES: Final = {"nameserver": "namesrv", "subexpression": "tags"}

ROCKETMQ_SPARK_SCHEMA: Final = StructType(
    [
        StructField("topic", StringType()),
        StructField("flag", IntegerType()),
        StructField("body", BinaryType()),
        StructField("properties", StringType()),
        StructField("brokerName", StringType()),
        StructField("queueId", IntegerType()),
        StructField("queueOffset", LongType()),
        StructField("bornTimestamp", TimestampType()),
        StructField("storeTimestamp", TimestampType()),
    ]
)
"""rocketmq-spark's source rows (its ``RocketMQSource.schema``; every column nullable): what
``option("schema", "rocketmq-spark")`` reads, instead of
[`SCHEMA`][aiorocket.integrations.spark.SCHEMA]."""


def _arrow_schema() -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(ROCKETMQ_SPARK_SCHEMA, timezone="UTC")
    except TypeError:  # pragma: no cover - pyspark < 4.1 has no timezone argument
        return to_arrow_schema(ROCKETMQ_SPARK_SCHEMA)


_ARROW: Final = _arrow_schema()
_TS_MS: Final = pa.timestamp("ms", tz="UTC")
_TS: Final = _ARROW.field("bornTimestamp").type


def normalize(options: Mapping[str, str]) -> dict[str, str]:
    """Options with lower-case names, rocketmq-spark's names replaced by ours, and
    ``schema`` resolved (``rocketmq-spark`` when the job names ``nameServer`` and no schema).

    Raises:
        ConfigurationError: an alias and its name both given with different values, an
            unknown ``schema``, or a bad ``pullTimeoutMs`` / ``pullBatchSize``.
    """
    opts = {k.lower(): v for k, v in options.items()}
    schema = opts.get("schema", "").strip().lower()
    if not schema:
        schema = ROCKETMQ_SPARK if "nameserver" in opts else NATIVE
    if schema not in (NATIVE, ROCKETMQ_SPARK):
        raise ConfigurationError(
            f"option schema must be {NATIVE} or {ROCKETMQ_SPARK}, not {opts['schema']!r}"
        )
    opts["schema"] = schema
    for alias, name in _ALIASES.items():
        if alias in opts:
            value = opts.pop(alias)
            if name in opts and opts[name].strip() != value.strip():
                raise ConfigurationError(f"options {alias} and {name} differ; give one")
            opts[name] = value
    # (options.py reads the normalized options, so it imports this module, not the reverse)
    from aiorocket.integrations.spark.options import positive_int

    if "pulltimeoutms" in opts:
        ms = positive_int(opts.pop("pulltimeoutms"), "pullTimeoutMs")
        opts.setdefault("requesttimeout", str(ms / 1000))
    if "pullbatchsize" in opts:
        positive_int(opts.pop("pullbatchsize"), "pullBatchSize")
    return opts


def flat_offsets(spec: str) -> str:
    """``spec`` with rocketmq-spark's offsets JSON (queue ids per broker) rewritten in
    aiorocket's form (``broker:id`` keys); any other spec unchanged.

    Raises:
        ConfigurationError: JSON that is not an object.
    """
    s = spec.strip()
    if not s.startswith("{"):
        return spec
    try:
        data = json.loads(s)
    except ValueError as exc:
        raise ConfigurationError(f"offsets are not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigurationError("offsets JSON must be an object")
    out: dict[str, Any] = {}
    nested = False
    for topic, queues in data.items():
        if not isinstance(queues, dict):
            return spec  # (reported by the offsets check)
        flat: dict[str, Any] = {}
        for key, value in queues.items():
            if isinstance(value, dict):
                nested = True
                flat.update({f"{key}:{qid}": offset for qid, offset in value.items()})
            else:
                flat[key] = value
        out[topic] = flat
    return json.dumps(out) if nested else spec


def _properties_json(props: Mapping[str, str]) -> str:
    # json4s Serialization.write of the property map, as rocketmq-spark renders it
    return json.dumps(props, separators=(",", ":"), ensure_ascii=False)


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def compat_rows(
    lists: Iterable[list[ReceivedMessage]], part: QueueRange
) -> Iterator[tuple[Any, ...]]:
    """The messages of ``part`` as `ROCKETMQ_SPARK_SCHEMA` row tuples."""
    for msgs in lists:
        for m in msgs:
            yield (
                part.topic,
                m.flag,
                m.body,
                _properties_json(m.properties),
                part.broker,
                part.queue_id,
                m.queue_offset,
                _ts(m.born_timestamp),
                _ts(m.store_timestamp),
            )


def compat_batches(
    lists: Iterable[list[ReceivedMessage]], part: QueueRange, rows: int = 4096
) -> Iterator[pa.RecordBatch]:
    """The messages of ``part`` as `ROCKETMQ_SPARK_SCHEMA` Arrow record batches of about
    ``rows`` rows."""
    pending: list[ReceivedMessage] = []
    for msgs in lists:
        pending.extend(msgs)
        if len(pending) >= rows:
            yield _batch(pending, part)
            pending = []
    if pending:
        yield _batch(pending, part)


def _batch(msgs: list[ReceivedMessage], part: QueueRange) -> pa.RecordBatch:
    n = len(msgs)
    columns = [
        pa.repeat(pa.scalar(part.topic, pa.string()), n),
        pa.array([m.flag for m in msgs], pa.int32()),
        pa.array([m.body for m in msgs], pa.binary()),
        pa.array([_properties_json(m.properties) for m in msgs], pa.string()),
        pa.repeat(pa.scalar(part.broker, pa.string()), n),
        pa.repeat(pa.scalar(part.queue_id, pa.int32()), n),
        pa.array([m.queue_offset for m in msgs], pa.int64()),
        pa.array([m.born_timestamp for m in msgs], _TS_MS).cast(_TS),
        pa.array([m.store_timestamp for m in msgs], _TS_MS).cast(_TS),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=_ARROW)
