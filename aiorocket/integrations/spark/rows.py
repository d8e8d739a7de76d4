"""The source's rows: [`SCHEMA`][aiorocket.integrations.spark.SCHEMA], and messages as Arrow record
batches or as row tuples (the executors' output, and the forwarder's batches)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from itertools import accumulate, chain
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
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

from aiorocket import ReceivedMessage
from aiorocket.integrations.spark.planning import QueueRange

__all__ = ["ARROW_SCHEMA", "SCHEMA", "arrow_batches", "arrow_table", "record_batch", "rows"]

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
"""The rows of the source (and of `forwarder` batches)."""


def _arrow_schema() -> pa.Schema:
    # Spark compares a yielded batch's schema with its own conversion of SCHEMA, field names
    # of nested types and nullability included, so that conversion is used as is.
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(SCHEMA, timezone="UTC")
    except TypeError:  # pragma: no cover - pyspark < 4.1 has no timezone argument
        return to_arrow_schema(SCHEMA)


ARROW_SCHEMA: Final = _arrow_schema()
"""[`SCHEMA`][aiorocket.integrations.spark.SCHEMA] as Arrow (timestamps in µs, UTC)."""

_TS_MS: Final = pa.timestamp("ms", tz="UTC")
_TS_TYPE: Final = ARROW_SCHEMA.field("born_timestamp").type
_KEYS_TYPE: Final = ARROW_SCHEMA.field("keys").type
_PROPS_TYPE: Final = ARROW_SCHEMA.field("properties").type

#: Rows per Arrow record batch yielded by executors.
_ARROW_ROWS: Final = 4096


def arrow_table(msgs: list[ReceivedMessage]) -> pa.Table:
    """``msgs`` as an Arrow table with `ARROW_SCHEMA`
    (what the forwarder hands to ``spark.createDataFrame``)."""
    return pa.Table.from_batches([record_batch(msgs, None)], schema=ARROW_SCHEMA)


def _offsets_of(lengths: Iterable[int]) -> pa.Array:
    return pa.array(list(accumulate(lengths, initial=0)), pa.int32())


def _keys_column(raw: list[str | None]) -> pa.Array:
    """``KEYS`` split as [`ReceivedMessage.keys`][aiorocket.ReceivedMessage.keys] splits it
    (``str.split()``)."""
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


def record_batch(msgs: list[ReceivedMessage], part: QueueRange | None) -> pa.RecordBatch:
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


def arrow_batches(
    lists: Iterable[list[ReceivedMessage]], part: QueueRange
) -> Iterator[pa.RecordBatch]:
    """The messages of ``part`` as record batches of up to 4096 rows."""
    pending: list[ReceivedMessage] = []
    for msgs in lists:
        pending.extend(msgs)
        if len(pending) >= _ARROW_ROWS:
            yield record_batch(pending, part)
            pending = []
    if pending:
        yield record_batch(pending, part)


def _ms_to_datetime(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def rows(lists: Iterable[list[ReceivedMessage]], part: QueueRange) -> Iterator[tuple[Any, ...]]:
    """The messages of ``part`` as row tuples in [`SCHEMA`][aiorocket.integrations.spark.SCHEMA]
    order (the slower path)."""
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
