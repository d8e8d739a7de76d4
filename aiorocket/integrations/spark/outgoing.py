"""The sink's rows: the columns a DataFrame written to ``rocketmq`` may have, checked on the
driver (`Layout`), and its rows turned into messages on the executors
(`messages`), every row checked before a task sends anything.

Columns (the Kafka sink's shape; other columns are ignored):

``body`` (binary or string, required), ``topic`` (string; a null falls back to the ``topic``
option), ``keys`` (string: space-separated keys, as ``KEYS`` travels; or array of strings),
``tags`` (string), ``properties`` (map<string,string>; RocketMQ's system property names are
dropped, so rows read by the ``rocketmq`` source can be written back), ``sharding_key`` or
``message_group`` (string: the queue is chosen by it and it travels as ``__SHARDINGKEY``),
``delay_level`` (integer, 0-18), ``deliver_at`` (timestamp: a 5.x timer message).
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from aiorocket import Message
from aiorocket._names import SYSTEM_PROPERTIES, validate_name
from aiorocket._protocol import properties as props_
from aiorocket.errors import ConfigurationError, InvalidNameError
from aiorocket.integrations.spark.txlog import TAG_PROPERTY
from aiorocket.models import MAX_DELAY_LEVEL

__all__ = ["COLUMNS", "Layout", "Outgoing", "SinkInputError", "message_id", "messages"]

#: The columns the sink reads, and the Spark types each may have.
COLUMNS: Final[Mapping[str, tuple[type[DataType], ...]]] = {
    "body": (BinaryType, StringType),
    "topic": (StringType,),
    "keys": (StringType, ArrayType),
    "tags": (StringType,),
    "properties": (MapType,),
    "sharding_key": (StringType,),
    "message_group": (StringType,),
    "delay_level": (ByteType, ShortType, IntegerType, LongType),
    "deliver_at": (TimestampType,),
}

#: Properties a row's ``properties`` may carry but the sink drops: the system properties
#: ``Message`` refuses (rows read by the source carry them all; a user value would be
#: overwritten or misread), the transaction bookkeeping a broker adds, and the exactly-once
#: sink's own tag of the half message a row came from (not RocketMQ's).
_SYSTEM_PROPERTIES: Final = SYSTEM_PROPERTIES | {
    props_.TRANSACTION_CHECK_TIMES,
    props_.CHECK_IMMUNITY_TIME_IN_SECONDS,
    TAG_PROPERTY,
}
#: The columns rocketmq-spark's sink reads (``RocketMQWriter``).
_COMPAT_COLUMNS: Final = frozenset({"body", "topic", "tags"})
#: Columns a transactional message cannot have (RocketMQ 5 refuses FIFO and timer
#: transactional messages; Java clears a transactional message's delay level).
_NOT_TRANSACTIONAL: Final = ("sharding_key", "message_group", "delay_level", "deliver_at")
_SEPARATORS: Final = (props_.NAME_VALUE_SEPARATOR, props_.PROPERTY_SEPARATOR)


class SinkInputError(ConfigurationError):
    """A row the sink cannot send (raised before the task sends anything); the message names
    the partition, the row and the column."""


class Outgoing(NamedTuple):
    """One message to send, with what [`Producer.send`][aiorocket.Producer.send] takes besides
    it."""

    message: Message
    deliver_at: datetime.datetime | None
    #: the row's position in its partition (for error messages)
    row: int


@dataclass(frozen=True)
class Layout:
    """Which of `COLUMNS` a written DataFrame has (checked on the driver)."""

    columns: frozenset[str]
    default_topic: str | None
    #: the ``topic`` option wins over the ``topic`` column (rocketmq-spark's rule)
    topic_option_wins: bool = False

    @classmethod
    def of(
        cls,
        schema: StructType,
        default_topic: str | None,
        *,
        compat: bool = False,
        transactional: bool = False,
    ) -> Layout:
        """Check the DataFrame's schema against `COLUMNS` (only ``body``, ``topic`` and
        ``tags`` with ``compat``: rocketmq-spark's sink ignores the others).

        Raises:
            ConfigurationError: no ``body`` column, a column of the wrong type, neither a
                ``topic`` column nor a ``topic`` option, or (``transactional``) a column a
                transactional message cannot have.
        """
        present: set[str] = set()
        for f in schema.fields:
            name = f.name.lower()
            allowed = COLUMNS.get(name)
            if allowed is None or (compat and name not in _COMPAT_COLUMNS):
                continue  # other columns are ignored (as the Kafka sink does)
            dt = f.dataType
            ok = isinstance(dt, allowed)
            if isinstance(dt, ArrayType):
                ok = ok and isinstance(dt.elementType, StringType)
            if isinstance(dt, MapType):
                ok = isinstance(dt.keyType, StringType) and isinstance(dt.valueType, StringType)
            if not ok:
                kinds = " or ".join(_type_name(t) for t in allowed)
                raise ConfigurationError(
                    f"rocketmq sink: column {f.name} is {dt.simpleString()}, it must be {kinds}"
                )
            present.add(name)
        if "body" not in present:
            raise ConfigurationError(
                "rocketmq sink: the DataFrame needs a body column (binary or string)"
            )
        if "topic" not in present and default_topic is None:
            raise ConfigurationError('rocketmq sink: give option("topic", name) or a topic column')
        if transactional:
            bad = [c for c in _NOT_TRANSACTIONAL if c in present]
            if bad:
                raise ConfigurationError(
                    f"rocketmq sink: exactlyOnce sends transactional messages, which cannot "
                    f"have {', '.join(bad)} (RocketMQ has no ordered, delayed or timed "
                    "transactional messages); drop the column(s)"
                )
        return cls(frozenset(present), default_topic, compat and default_topic is not None)


def _type_name(t: type[DataType]) -> str:
    if t is ArrayType:
        return "array<string>"
    if t is MapType:
        return "map<string,string>"
    return t.typeName()


def message_id(scope: str, partition: int, row: int) -> str:
    """The deterministic id of a row (``idempotentKeys``): 32 upper-case hex digits, the
    length and alphabet of a ``UNIQ_KEY``, hashed from the write's scope (a write id, or a
    streaming query id and batch id), the partition and the row's position."""
    digest = hashlib.blake2b(f"{scope}/{partition}/{row}".encode(), digest_size=16)
    return digest.hexdigest().upper()


def _columns(batch: Any, names: Iterable[str]) -> dict[str, list[Any]]:
    """The wanted columns of an Arrow record batch as Python lists (names matched case-
    insensitively, as Spark matches columns)."""
    index = {n.lower(): i for i, n in enumerate(batch.schema.names)}
    out: dict[str, list[Any]] = {}
    for name in names:
        col = batch.column(index[name])
        if pa.types.is_map(col.type):
            out[name] = [None if v is None else dict(v) for v in col.to_pylist()]
        else:
            out[name] = col.to_pylist()
    return out


def _row_columns(rows: Sequence[Any], names: Iterable[str]) -> dict[str, list[Any]]:
    """The wanted columns of Spark Rows (the row path of pyspark < 4.1 streaming writes)."""
    dicts = [{k.lower(): v for k, v in r.asDict().items()} for r in rows]
    return {name: [d.get(name) for d in dicts] for name in names}


def _chunks(items: Iterable[Any], names: Iterable[str]) -> Iterator[dict[str, list[Any]]]:
    """Column lists of each Arrow record batch, or of up to 4096 Rows at a time."""
    names = list(names)
    rows: list[Any] = []
    for item in items:
        if isinstance(item, pa.RecordBatch):
            if item.num_rows:
                yield _columns(item, names)
            continue
        rows.append(item)
        if len(rows) >= 4096:
            yield _row_columns(rows, names)
            rows = []
    if rows:
        yield _row_columns(rows, names)


def messages(
    items: Iterable[Any],
    layout: Layout,
    *,
    partition: int,
    max_size: int,
    scope: str | None,
    extra: Mapping[str, str] | None = None,
) -> list[Outgoing]:
    """Every row of a partition (Arrow record batches or Rows) as a message, all checked
    before the caller sends any. With ``scope`` (``idempotentKeys``) each message carries
    `message_id` as its ``UNIQ_KEY`` and as one more key; ``extra`` properties are set on
    every message.

    Raises:
        SinkInputError: a row that cannot be sent (the message names partition, row and
            column): a null body, a body over ``max_size`` bytes, an invalid or missing
            topic, an empty key or one with spaces, a bad tag, delay level, sharding key or
            property, or a delivery time with a delay level or a sharding key.
    """
    cols = layout.columns
    checked_topics: set[str] = set()
    out: list[Outgoing] = []
    row = 0

    def bad(column: str, problem: str) -> SinkInputError:
        return SinkInputError(
            f"rocketmq sink: partition {partition}, row {row}: column {column}: {problem}"
        )

    for chunk in _chunks(items, cols):
        n = len(chunk["body"])
        nones = [None] * n
        topics = chunk.get("topic", nones)
        all_keys = chunk.get("keys", nones)
        all_tags = chunk.get("tags", nones)
        all_props = chunk.get("properties", nones)
        shardings = chunk.get("sharding_key", nones)
        groups = chunk.get("message_group", nones)
        levels = chunk.get("delay_level", nones)
        times = chunk.get("deliver_at", nones)
        for i, body in enumerate(chunk["body"]):
            body = _body(body, max_size, bad)
            topic = (
                layout.default_topic
                if layout.topic_option_wins
                else topics[i] or layout.default_topic
            )
            if topic is None:
                raise bad("topic", 'null, and there is no option("topic", ...)')
            if topic not in checked_topics:
                try:
                    validate_name(topic)
                except InvalidNameError as exc:
                    raise bad("topic", str(exc)) from None
                checked_topics.add(topic)
            keys = _keys(all_keys[i], bad)
            tags = all_tags[i]
            if tags is not None and (not tags or "||" in tags):
                raise bad("tags", f"{tags!r} must be non-empty and contain no '||'")
            group = _group(shardings[i], groups[i], bad)
            level = levels[i]
            if level is not None and not 0 <= level <= MAX_DELAY_LEVEL:
                raise bad("delay_level", f"{level} is not within 0..{MAX_DELAY_LEVEL}")
            when = _deliver_at(times[i], level, group, bad)
            user = _properties(all_props[i], bad)
            if extra:
                user.update(extra)
            if scope is not None:
                uid = message_id(scope, partition, row)
                user[props_.UNIQ_KEY] = uid
                keys = [*keys, uid]
            out.append(
                Outgoing(
                    Message.with_properties(
                        topic,
                        body,
                        user,
                        tags=tags,
                        keys=keys,
                        delay_level=level or None,
                        message_group=group,
                    ),
                    when,
                    row,
                )
            )
            row += 1
    return out


_Bad = Callable[[str, str], SinkInputError]


def _body(body: Any, max_size: int, bad: _Bad) -> bytes:
    if body is None:
        raise bad("body", "null (every message needs a body)")
    if isinstance(body, bytes):
        data = body
    elif isinstance(body, str):
        data = body.encode("utf-8")
    else:
        data = bytes(body)
    if len(data) > max_size:
        raise bad("body", f"{len(data)} bytes, over max_message_size ({max_size} bytes)")
    return data


def _keys(keys: Any, bad: _Bad) -> list[str]:
    if keys is None:
        return []
    if isinstance(keys, str):
        return keys.split()
    for k in keys:
        if not k or k.split() != [k]:
            raise bad("keys", f"key {k!r} must be non-empty without spaces")
    return list(keys)


def _group(sharding_key: str | None, message_group: str | None, bad: _Bad) -> str | None:
    group = sharding_key
    if message_group is not None:
        if group is not None and group != message_group:
            raise bad("message_group", f"{message_group!r} differs from sharding_key {group!r}")
        group = message_group
    if group is not None and (not group.strip() or any(s in group for s in _SEPARATORS)):
        raise bad("sharding_key", f"{group!r} must be non-blank without \\x01 or \\x02")
    return group


def _deliver_at(when: Any, level: int | None, group: str | None, bad: _Bad) -> Any:
    if when is None:
        return None
    if level:
        raise bad("deliver_at", "a delivery time and a delay level exclude each other")
    if group is not None:
        # 5.x: a FIFO message (message group) is not a timer message.
        raise bad("deliver_at", "a delivery time and a sharding key exclude each other")
    if when.tzinfo is None:
        # Spark's Rows carry local wall-clock times; Arrow batches carry UTC.
        when = when.astimezone()
    return when


def _properties(props: Mapping[str, Any] | None, bad: _Bad) -> dict[str, str]:
    user: dict[str, str] = {}
    if props:
        for k, v in props.items():
            if k in _SYSTEM_PROPERTIES or v is None:
                continue
            if not k or not v or any(s in k or s in v for s in _SEPARATORS):
                raise bad(
                    "properties",
                    f"{k!r}={v!r}: names and values must be non-empty without \\x01 or \\x02",
                )
            user[k] = v
    return user
