"""Value types shared by every layer: plain, frozen and slotted."""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from aiorocket.errors import ConfigurationError, InvalidNameError

__all__ = [
    "MAX_DELAY_LEVEL",
    "Message",
    "MessageQueue",
    "SendResult",
    "SendStatus",
    "validate_name",
]

#: The broker's ``messageDelayLevel`` has 18 levels (1 s … 2 h); higher values clamp to 18.
MAX_DELAY_LEVEL: Final = 18

_NAME = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")


def validate_name(name: str, what: str = "topic") -> str:
    """Return ``name`` if RocketMQ accepts it as a topic or group name.

    The rule is the broker's ``^[%|a-zA-Z0-9_-]{1,127}$`` (``TopicValidator``).

    Raises:
        InvalidNameError: the name is empty, too long or has other characters.
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidNameError(
            f"invalid {what} name {name!r}: use 1-127 characters from [%|a-zA-Z0-9_-]"
        )
    return name


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker: ``(topic, broker_name, queue_id)``.

    Ordering is by topic, then broker name, then queue id: the order in which the Java client
    sorts ``mqAll`` before allocating queues (AllocateMessageQueueAveragely), so every member
    of a group computes the same allocation.
    """

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@dataclass(frozen=True, slots=True)
class Message:
    """A message to send.

    Args:
        topic: the destination topic.
        body: the payload (``bytes``; ``str`` is encoded as UTF-8).
        tags: one tag, used by consumers' tag expressions (``"created"``).
        keys: business keys, searchable on the broker (sent space-joined in ``KEYS``).
        properties: user properties; keys and values must not contain ``\\x01``/``\\x02``.
        delay_level: 1-18 to deliver after the broker's delay level (1 s … 2 h).

    Raises:
        ConfigurationError: a tag, key or delay level is invalid.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    delay_level: int | None = None

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        *,
        tags: str | None = None,
        keys: Sequence[str] | str = (),
        properties: Mapping[str, str] | None = None,
        delay_level: int | None = None,
    ) -> None:
        if isinstance(body, str):
            body = body.encode("utf-8")
        elif not isinstance(body, bytes):
            body = bytes(body)
        if isinstance(keys, str):
            keys = (keys,)
        keys = tuple(keys)
        for k in keys:
            if not k or " " in k:
                raise ConfigurationError(f"message key {k!r} must be non-empty without spaces")
        if tags is not None and (not tags or "||" in tags):
            raise ConfigurationError(f"tag {tags!r} must be non-empty and contain no '||'")
        if delay_level is not None and not 0 <= delay_level <= MAX_DELAY_LEVEL:
            raise ConfigurationError(f"delay_level must be within 0..{MAX_DELAY_LEVEL}")
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "tags", tags)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "properties", dict(properties or {}))
        object.__setattr__(self, "delay_level", delay_level or None)


class SendStatus(enum.Enum):
    """How the broker stored a sent message (Java ``SendStatus``).

    Anything but ``SEND_OK`` means the message *was stored* but a flush or replication
    step did not complete in time (response codes 10, 11, 12).
    """

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of a successful send.

    Attributes:
        status: see :class:`SendStatus`.
        msg_id: the client message id (``UNIQ_KEY``); for a batch, the ids joined with ``,``.
        offset_msg_id: the broker's offset message id(s), also ``,``-joined for a batch.
        queue: the queue the message went to.
        queue_offset: its offset in that queue (the first one for a batch).
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
