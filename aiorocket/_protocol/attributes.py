"""RocketMQ 5 topic and subscription-group attributes as UPDATE_AND_CREATE_TOPIC carries them.

Java's ``AttributeParser``: ``+name=value`` sets, ``-name`` removes, entries joined by ``,``
(``+message.type=FIFO,-reserve.time``). Values are plain strings; the broker checks them
against ``TopicAttributes`` (docs/protocol.md §12.5).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from aiorocket.errors import RemoteProtocolError

__all__ = [
    "MESSAGE_TYPE_ATTRIBUTE",
    "PRIORITY_FACTOR_ATTRIBUTE",
    "encode_attributes",
    "parse_attributes",
]

#: ``TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE``: the kinds of messages a topic takes.
MESSAGE_TYPE_ATTRIBUTE: Final = "message.type"
#: ``SubscriptionGroupAttributes.PRIORITY_FACTOR_ATTRIBUTE`` (5.4+): how often, in percent, a
#: POP of the group honours priorities (100 by default).
PRIORITY_FACTOR_ATTRIBUTE: Final = "priority.factor"


def encode_attributes(values: Mapping[str, str | None]) -> str:
    """``{"message.type": "FIFO", "reserve.time": None}`` is
    ``+message.type=FIFO,-reserve.time``."""
    return ",".join(f"+{k}={v}" if v is not None else f"-{k}" for k, v in values.items())


def parse_attributes(text: str | None) -> dict[str, str | None]:
    """The inverse of `encode_attributes`: a value of ``None`` removes the attribute.

    Raises:
        RemoteProtocolError: an entry is neither ``+name=value`` nor ``-name``.
    """
    out: dict[str, str | None] = {}
    for entry in (text or "").split(","):
        if not entry:
            continue
        if entry.startswith("+") and "=" in entry:
            name, _, value = entry[1:].partition("=")
            out[name] = value
        elif entry.startswith("-") and "=" not in entry:
            out[entry[1:]] = None
        else:
            raise RemoteProtocolError(f"attribute {entry!r} is neither +name=value nor -name")
    return out
