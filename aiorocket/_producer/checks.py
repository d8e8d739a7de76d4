"""What the producer checks and derives from a send's arguments: timer times, message types,
sharding keys, the properties a message is sent with, how a batch splits (kept apart from
``producer.py``, which sends)."""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping, Sequence
from typing import Final

from aiorocket._protocol.message import BatchItem
from aiorocket._protocol.properties import (
    DELAY,
    KEYS,
    PRIORITY,
    SHARDING_KEY,
    TAGS,
    TIMER_KEYS,
    TRAN_MSG,
    UNIQ_KEY,
    WAIT,
    encode_properties,
)
from aiorocket.errors import ConfigurationError
from aiorocket.models import Message

__all__ = [
    "check_lite",
    "check_sharding_key",
    "deliver_ms",
    "group_key",
    "has_timer",
    "message_properties",
    "msg_type",
    "split_batch",
]

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: per-message overhead Java's ``MessageBatch`` size check adds besides body and properties
_BATCH_ITEM_OVERHEAD: Final = 22
_MS: Final = datetime.timedelta(milliseconds=1)


def deliver_ms(deliver_at: datetime.datetime | None, deliver_after: float | None) -> int | None:
    """The ``TIMER_DELIVER_MS`` of [`Producer.send`][aiorocket.Producer.send]'s timer arguments
    (``None``: neither).

    Raises:
        ConfigurationError: both given, a naive or non-datetime ``deliver_at``, a
            ``deliver_after`` that is negative or not a finite number.
    """
    if deliver_at is None and deliver_after is None:
        return None
    if deliver_at is not None and deliver_after is not None:
        raise ConfigurationError("give deliver_at or deliver_after, not both")
    if deliver_at is not None:
        if not isinstance(deliver_at, datetime.datetime):
            raise ConfigurationError(f"deliver_at must be a datetime, not {deliver_at!r}")
        if deliver_at.utcoffset() is None:
            # A naive time is ambiguous (local? UTC?): a timer off by hours must not be a guess.
            raise ConfigurationError(
                "deliver_at must be timezone-aware (e.g. datetime.now(timezone.utc) + delta)"
            )
        # Exact integer milliseconds, rounded up: never before the asked instant.
        return -((_EPOCH - deliver_at) // _MS)
    assert deliver_after is not None
    if (
        isinstance(deliver_after, bool)
        or not isinstance(deliver_after, int | float)
        or not math.isfinite(deliver_after)
        or deliver_after < 0
    ):
        raise ConfigurationError(f"deliver_after must be >= 0 seconds, not {deliver_after!r}")
    return -(-time.time_ns() // 1_000_000) + math.ceil(deliver_after * 1000)


def check_lite(
    sharding_key: str | None,
    selector: object | None,
    queue: object | None,
    delay_level: int | None,
    deliver: int | None,
) -> None:
    """The arguments a lite message (``Message.lite_topic``) is sent without.

    Raises:
        ConfigurationError: a sharding key (message group), selector, queue, delay level or
            delivery time: the 5.x SDKs refuse them with a lite topic ("liteTopic and
            messageGroup should not be set at same time"), and its queue is the lite
            topic's (docs/protocol.md §12.8).
    """
    if (
        sharding_key is not None
        or selector is not None
        or queue is not None
        or delay_level
        or deliver is not None
    ):
        raise ConfigurationError(
            "a lite message goes to its lite topic's queue, without a sharding key or message "
            "group, selector, queue, delay level or delivery time"
        )


def msg_type(props: Mapping[str, str]) -> str:
    """``"Trans"``, ``"Delay"`` or ``"Normal"``: the message type a send hook sees."""
    # DefaultMQProducerImpl.sendKernelImpl: the MessageType a send hook sees.
    if props.get(TRAN_MSG) == "true":
        return "Trans"
    return "Delay" if DELAY in props else "Normal"


def has_timer(props: Mapping[str, str]) -> bool:
    """Whether the properties ask for a RocketMQ 5 timer delivery."""
    return any(k in props for k in TIMER_KEYS)


def group_key(message_group: str | None, sharding_key: str | None) -> str | None:
    """The key a message is ordered by: its message group, else its sharding key.

    Raises:
        ConfigurationError: both given and different.
    """
    # A message's 5.x message group is its sharding key (RocketMQ 5.x: __SHARDINGKEY).
    if message_group is None:
        return sharding_key
    if sharding_key is not None and sharding_key != message_group:
        raise ConfigurationError(
            f"sharding_key {sharding_key!r} differs from the message's message_group "
            f"{message_group!r}"
        )
    return message_group


def check_sharding_key(key: str | None) -> None:
    """Refuse a sharding key that cannot travel as a property value.

    Raises:
        ConfigurationError: it contains ``\\x01`` or ``\\x02``.
    """
    # It becomes a property value: the separators would corrupt the properties string.
    if key is not None and ("\x01" in key or "\x02" in key):
        raise ConfigurationError("sharding_key must not contain \\x01 or \\x02")


def message_properties(
    msg: Message, uniq: str, delay_level: int | None, sharding_key: str | None
) -> dict[str, str]:
    """The properties ``msg`` is sent with: its own, then its sharding key, tags, keys, delay
    level, priority, ``WAIT`` and ``UNIQ_KEY``."""
    props = dict(msg.properties)
    if sharding_key:
        # The key the message was routed by, for consumers ordering by key (RocketMQ
        # 5.x MessageConst.PROPERTY_SHARDING_KEY, its FIFO message group).
        props[SHARDING_KEY] = sharding_key
    if msg.tags:
        props[TAGS] = msg.tags
    if msg.keys:
        props[KEYS] = " ".join(msg.keys)
    level = delay_level if delay_level is not None else msg.delay_level
    if level:
        props[DELAY] = str(level)
    if msg.priority is not None:
        props[PRIORITY] = str(msg.priority)
    props[WAIT] = "true"
    props[UNIQ_KEY] = uniq
    return props


def split_batch(
    msgs: Sequence[Message], fields: Sequence[dict[str, str]], limit: int
) -> list[list[tuple[BatchItem, str, Message]]]:
    """``msgs`` (with their properties ``fields``) as sub-batches of at most ``limit`` bytes
    as Java's ``MessageBatch`` counts them; each item with its ``UNIQ_KEY`` and message."""
    chunks: list[list[tuple[BatchItem, str, Message]]] = [[]]
    size = 0
    for m, props in zip(msgs, fields, strict=True):
        item = BatchItem(flag=0, body=m.body, properties=encode_properties(props))
        item_size = _BATCH_ITEM_OVERHEAD + len(m.body) + len(item.properties.encode())
        if chunks[-1] and size + item_size > limit:
            chunks.append([])
            size = 0
        chunks[-1].append((item, props[UNIQ_KEY], m))
        size += item_size
    return chunks
