"""Pull bodies straight into Arrow record batches (the executors' Arrow path).

The compiled `ColumnBuilder` walks the stored
records of each pull body and appends their fields to Arrow buffers (offsets, data,
validity), which become arrays with ``pa.Array.from_buffers``: no Python object per row.
Without the extension (no C compiler at install time, or ``AIOROCKET_NO_EXTENSIONS`` set)
the source decodes messages and builds columns from them instead (``rows.record_batch``),
the reference the compiled path is tested against.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any, Final

import pyarrow as pa

from aiorocket._protocol.message import DEFAULT_MAX_BODY_SIZE, _bad, _inflate
from aiorocket._reader import RawChunk

try:
    from aiorocket.integrations.spark._columns import ColumnBuilder
except ImportError:  # pragma: no cover - depends on the build
    ColumnBuilder = None  # type: ignore[assignment,misc]

__all__ = ["AVAILABLE", "arrow_batches", "compiled", "new_builder", "record_batch", "use"]

#: The compiled column builder is built (whether or not it is in use).
AVAILABLE: Final = ColumnBuilder is not None
# In use: built, and not disabled by AIOROCKET_NO_EXTENSIONS (as the compiled codec).
_use = AVAILABLE and os.environ.get("AIOROCKET_NO_EXTENSIONS", "") in ("", "0")


def compiled() -> bool:
    """Whether executors build Arrow columns with the compiled builder."""
    return _use


def use(compiled: bool) -> None:
    """Switch executors between the compiled builder and the message path (for tests and
    benchmarks that compare the two).

    Raises:
        RuntimeError: ``compiled`` is asked for and the extension is not built.
    """
    global _use
    if compiled and not AVAILABLE:
        raise RuntimeError("aiorocket: the compiled Spark column builder is not built")
    _use = compiled


#: Rows per record batch (about: whole pull bodies are added), and the bytes of bodies at
#: which a batch is cut earlier (Arrow's 32-bit offsets cap a column at 2 GiB).
BATCH_ROWS: Final = 4096
BATCH_BYTES: Final = 64 * 1024 * 1024

_TS_MS: Final = pa.timestamp("ms", tz="UTC")


def new_builder() -> Any:
    """A compiled column builder.

    Raises:
        RuntimeError: the extension is not built.
    """
    if ColumnBuilder is None:
        raise RuntimeError("aiorocket: the compiled Spark column builder is not built")
    return ColumnBuilder(_bad, _inflate, DEFAULT_MAX_BODY_SIZE)


def record_batch(
    cols: dict[str, Any], topic: str, broker: str, queue_id: int, schema: pa.Schema
) -> pa.RecordBatch:
    """The record batch of a builder's `take` (one queue: constant topic, broker and
    queue id columns) with ``schema`` (the source's ``ARROW_SCHEMA``)."""
    n = cols["rows"]
    buf = pa.py_buffer

    def strings(off: str, data: str, count: int = n, valid: pa.Buffer | None = None) -> pa.Array:
        return pa.Array.from_buffers(pa.string(), count, [valid, buf(cols[off]), buf(cols[data])])

    def offsets(name: str) -> pa.Array:
        return pa.Array.from_buffers(pa.int32(), n + 1, [None, buf(cols[name])])

    def count(name: str) -> int:
        return len(cols[name]) // 4 - 1

    ts_type = schema.field("born_timestamp").type
    tags_valid = buf(cols["tag_valid"])
    columns = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(broker, pa.string()), n),
        pa.repeat(pa.scalar(queue_id, pa.int32()), n),
        pa.Array.from_buffers(pa.int64(), n, [None, buf(cols["queue_offset"])]),
        strings("id_off", "ids"),
        pa.Array.from_buffers(
            pa.string(), n, [tags_valid, buf(cols["tag_off"]), buf(cols["tags"])]
        ),
        pa.ListArray.from_arrays(
            offsets("key_list_off"),
            strings("key_off", "keys", count("key_off")),
            type=schema.field("keys").type,
        ),
        pa.Array.from_buffers(pa.binary(), n, [None, buf(cols["body_off"]), buf(cols["body"])]),
        pa.Array.from_buffers(_TS_MS, n, [None, buf(cols["born"])]).cast(ts_type),
        pa.Array.from_buffers(_TS_MS, n, [None, buf(cols["store"])]).cast(ts_type),
        pa.Array.from_buffers(pa.int32(), n, [None, buf(cols["reconsume"])]),
        pa.MapArray.from_arrays(
            offsets("prop_off"),
            strings("pk_off", "pks", count("pk_off")),
            strings("pv_off", "pvs", count("pv_off")),
            type=schema.field("properties").type,
        ),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def arrow_batches(
    chunks: Iterable[RawChunk], topic: str, broker: str, queue_id: int, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """The rows of ``chunks`` (one queue) as record batches of about `BATCH_ROWS`.

    Raises:
        RemoteProtocolError: a malformed pull body.
    """
    builder = new_builder()
    for chunk in chunks:
        hi, tags = chunk.hi, chunk.tags
        for body in chunk.bodies:
            builder.add(body, hi, tags)
        if builder.rows >= BATCH_ROWS or builder.nbytes >= BATCH_BYTES:
            yield record_batch(builder.take(), topic, broker, queue_id, schema)
    if builder.rows:
        yield record_batch(builder.take(), topic, broker, queue_id, schema)
