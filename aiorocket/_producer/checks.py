"""What the producer checks and derives from a send's arguments: timer times, message types,
sharding keys, the properties a message is sent with, the broker release it needs, how a batch
splits (kept apart from ``producer.py`` and ``sender.py``, which send)."""

from __future__ import annotations

import datetime
import math
import time
from collections.abc import Mapping, Sequence
from typing import Final

from aiorocket._protocol.codes import VERSION_V5_0_0_SNAPSHOT, VERSION_V5_4_0
from aiorocket._protocol.message import BatchItem
from aiorocket._protocol.properties import (
    DELAY,
    KEYS,
    LITE_TOPIC,
    PRIORITY,
    SHARDING_KEY,
    TAGS,
    TIMER_DELIVER_MS,
    TIMER_KEYS,
    TRAN_MSG,
    UNIQ_KEY,
    WAIT,
    encode_properties,
)
from aiorocket.errors import ConfigurationError, MessageTooLargeError
from aiorocket.models import Message, validate_name

__all__ = [
    "PRIORITY_RELEASE",
    "TIMER_RELEASE",
    "Release",
    "check_batch",
    "check_lite",
    "check_send",
    "check_sharding_key",
    "check_size",
    "deliver_ms",
    "group_key",
    "has_timer",
    "message_properties",
    "msg_type",
    "needed_release",
    "split_batch",
]

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
#: per-message overhead Java's ``MessageBatch`` size check adds besides body and properties
_BATCH_ITEM_OVERHEAD: Final = 22
_MS: Final = datetime.timedelta(milliseconds=1)

#: a broker release a message needs: its MQVersion ordinal, its name, what older ones cannot do
Release = tuple[int, str, str]
#: what a timer message needs (RocketMQ 5.0's timer store)
TIMER_RELEASE: Final[Release] = (
    VERSION_V5_0_0_SNAPSHOT,
    "5.0",
    "deliver a message at a time; it would deliver it at once",
)
#: what a priority message needs (RocketMQ 5.4)
PRIORITY_RELEASE: Final[Release] = (
    VERSION_V5_4_0,
    "5.4",
    "order messages by priority; it would keep the priority as a plain property",
)


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


def check_send(
    msg: Message,
    sharding_key: str | None,
    selector: object | None,
    queue: object | None,
    delay_level: int | None,
    deliver: int | None,
) -> dict[str, str] | None:
    """Check a single send's arguments (``sharding_key`` already resolved by `group_key`);
    returns the properties they add (``LITE_TOPIC``, ``TIMER_DELIVER_MS``), ``None`` for none.

    Raises:
        ConfigurationError: a delay level outside 0..18, or arguments of message types that
            exclude each other (priority, FIFO, delay, timer, lite: 5.x's
            ``TopicMessageType``).
    """
    if delay_level is not None and not 0 <= delay_level <= 18:
        raise ConfigurationError("delay_level must be within 0..18")
    if msg.priority is not None and (
        sharding_key is not None or delay_level or deliver or msg.lite_topic is not None
    ):
        # TopicMessageType: a message is of one kind; a broker would drop its priority
        # (SendMessageProcessor clears it from a FIFO or delay message).
        raise ConfigurationError(
            "a priority message has no sharding key, message group, delay, delivery time or "
            "lite topic"
        )
    extra = None
    if msg.lite_topic is not None:
        check_lite(sharding_key, selector, queue, delay_level, deliver)
        extra = {LITE_TOPIC: msg.lite_topic}
    if deliver is not None:
        if delay_level or (delay_level is None and msg.delay_level):
            raise ConfigurationError("a message has either a delivery time or a delay level")
        if sharding_key is not None:
            # 5.x MessageBuilderImpl: "messageGroup and deliveryTimestamp should not be set
            # at same time" (a FIFO message is not a delay message).
            raise ConfigurationError(
                "a message has either a delivery time or a message group / sharding key"
            )
        if has_timer(msg.properties):
            raise ConfigurationError("the message's properties already set a delivery time")
        extra = {TIMER_DELIVER_MS: str(deliver)}
    return extra


def check_batch(msgs: Sequence[Message], sharding_key: str | None, limit: int) -> str | None:
    """Check [`Producer.send_batch`][aiorocket.Producer.send_batch]'s arguments; returns the
    key the batch is ordered by (its messages' common message group, else ``sharding_key``).

    Raises:
        ConfigurationError: see [`Producer.send_batch`][aiorocket.Producer.send_batch].
        InvalidNameError: a bad topic.
        MessageTooLargeError: a body exceeds ``limit`` bytes.
    """
    if not msgs:
        raise ConfigurationError("send_batch needs at least one message")
    topic = msgs[0].topic
    if any(m.topic != topic for m in msgs):
        raise ConfigurationError("all messages of a batch must have the same topic")
    if any(m.delay_level for m in msgs):
        raise ConfigurationError("delayed messages cannot be sent in a batch")
    if any(has_timer(m.properties) for m in msgs):
        # CommitLog.asyncPutMessages never parks a batch: they would arrive at once.
        raise ConfigurationError("timer messages cannot be sent in a batch")
    if any(m.lite_topic is not None for m in msgs):
        # SendMessageProcessor dispatches single messages only (docs/protocol.md §12.8).
        raise ConfigurationError("lite messages cannot be sent in a batch")
    groups = {m.message_group for m in msgs}
    if len(groups) > 1:
        raise ConfigurationError("all messages of a batch must have the same message_group")
    key = group_key(groups.pop(), sharding_key)
    validate_name(topic)
    check_sharding_key(key)
    for m in msgs:
        check_size(m, limit)
    return key


def check_size(msg: Message, limit: int) -> None:
    """Refuse a body over ``limit`` bytes (``max_message_size``).

    Raises:
        MessageTooLargeError: it is larger.
    """
    # Java's Validators.checkMessage refuses before compressing.
    if len(msg.body) > limit:
        raise MessageTooLargeError(f"message body of {len(msg.body)} bytes exceeds {limit} bytes")


def needed_release(props: Mapping[str, str]) -> Release | None:
    """The broker release a message with these properties needs (``None``: any)."""
    if has_timer(props):
        return TIMER_RELEASE
    if PRIORITY in props:
        return PRIORITY_RELEASE
    return None


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
