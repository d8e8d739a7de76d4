"""RocketMQ 5.5 lite topics on the wire (docs/protocol.md §12.8): lite topic and light message
queue (LMQ) names, the POP_LITE_MESSAGE and NOTIFY_UNSUBSCRIBE_LITE headers, the
LITE_SUBSCRIPTION_CTL body, and the per-record delivery counts of a POP_LITE_MESSAGE answer.

Sans-IO like the rest of this package. Names follow Java's ``LiteUtil``
(``%LMQ%$<parent>$<lite topic>``); the bodies follow the 5.5 beans (``LiteSubscriptionDTO``,
``OffsetOption``), fastjson names included.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final

from aiorocket._names import MAX_LITE_TOPIC_LENGTH, is_valid_lite_topic, is_valid_name
from aiorocket._protocol.schema import (
    OMIT_IF_NONE,
    Body,
    Int64,
    WireKind,
    header_class,
    java_enum,
    member,
)
from aiorocket._protocol.schema import Header as _Header
from aiorocket._protocol.schema import wire as _wire

__all__ = [
    "LITE_ACTIONS",
    "LITE_QUEUE_PREFIX",
    "LMQ_PREFIX",
    "MAX_LITE_TOPIC_LENGTH",
    "OFFSET_TYPES",
    "POLICY_LAST",
    "POLICY_MAX",
    "POLICY_MIN",
    "LiteSubscriptionCtlRequestBody",
    "LiteSubscriptionDTO",
    "NotifyUnsubscribeLiteRequestHeader",
    "OffsetOption",
    "PopLiteMessageRequestHeader",
    "PopLiteMessageResponseHeader",
    "format_lite_order_counts",
    "is_lite_queue",
    "is_valid_lite_topic",
    "lite_queue_name",
    "parse_lite_order_counts",
    "parse_lite_queue",
]

_INT = WireKind.INT
_LONG = WireKind.LONG

#: ``MixAll.LMQ_PREFIX``: the names of light message queues start with it
LMQ_PREFIX: Final = "%LMQ%"
#: ``LiteUtil.LITE_TOPIC_PREFIX``: an LMQ that is a lite topic (``$`` separates the parts)
LITE_QUEUE_PREFIX: Final = LMQ_PREFIX + "$"

#: ``LiteSubscriptionAction`` in ordinal order
LITE_ACTIONS: tuple[str, ...] = ("PARTIAL_ADD", "PARTIAL_REMOVE", "COMPLETE_ADD", "COMPLETE_REMOVE")
#: ``OffsetOption.Type`` in ordinal order
OFFSET_TYPES: tuple[str, ...] = ("POLICY", "OFFSET", "TAIL_N", "TIMESTAMP")
#: ``OffsetOption.POLICY_*_VALUE``: keep the group's offset, start at 0, start at the end
POLICY_LAST, POLICY_MIN, POLICY_MAX = 0, 1, 2


def lite_queue_name(parent: str, lite_topic: str) -> str:
    """``LiteUtil.toLmqName``: the LMQ of ``lite_topic`` under ``parent``."""
    return f"{LITE_QUEUE_PREFIX}{parent}${lite_topic}"


def parse_lite_queue(name: str) -> tuple[str, str] | None:
    """``LiteUtil.getParentAndLiteTopic``: ``(parent, lite topic)`` of an LMQ name, or None
    when ``name`` is not ``%LMQ%$<parent>$<lite topic>`` with two non-empty parts."""
    if not name.startswith(LITE_QUEUE_PREFIX):
        return None
    parent, sep, lite = name[len(LITE_QUEUE_PREFIX) :].partition("$")
    if not sep or not parent or not lite or "$" in lite:
        return None
    return parent, lite


def is_lite_queue(name: str) -> bool:
    """Whether ``name`` is the LMQ of a valid lite topic of a valid parent topic name (the
    queues the embedded broker keeps). Never raises."""
    parts = parse_lite_queue(name)
    return parts is not None and is_valid_name(parts[0]) and is_valid_lite_topic(parts[1])


# --------------------------------------------------------------------------- headers


@header_class
class PopLiteMessageRequestHeader(_Header):
    """POP_LITE_MESSAGE (200070) — Java's ``PopLiteMessageRequestHeader``: pop up to
    ``max_msg_num`` messages of the lite topics subscribed by ``client_id`` under the parent
    ``topic``; ``poll_time`` (ms) holds the request while there is nothing."""

    client_id: str = _wire("clientId", required=True)
    consumer_group: str = _wire("consumerGroup", required=True)
    topic: str = _wire("topic", required=True)
    max_msg_num: int = _wire("maxMsgNum", _INT, required=True)
    invisible_time: int = _wire("invisibleTime", _LONG, required=True)
    poll_time: int = _wire("pollTime", _LONG, required=True)
    born_time: int = _wire("bornTime", _LONG, required=True)
    attempt_id: str | None = _wire("attemptId", default=None)


@header_class
class PopLiteMessageResponseHeader(_Header):
    """The response to POP_LITE_MESSAGE — Java's ``PopLiteMessageResponseHeader``; the
    offset-info strings are not sent (the records carry their LMQ offsets), and
    ``order_count_info`` is one delivery count per record (``parse_lite_order_counts``)."""

    pop_time: int = _wire("popTime", _LONG, required=True)
    invisible_time: int = _wire("invisibleTime", _LONG, required=True)
    revive_qid: int = _wire("reviveQid", _INT, required=True)
    start_offset_info: str | None = _wire("startOffsetInfo", default=None)
    msg_offset_info: str | None = _wire("msgOffsetInfo", default=None)
    order_count_info: str | None = _wire("orderCountInfo", default=None)


@header_class
class NotifyUnsubscribeLiteRequestHeader(_Header):
    """NOTIFY_UNSUBSCRIBE_LITE (200073, broker to client, oneway) — Java's
    ``NotifyUnsubscribeLiteRequestHeader``: the client no longer holds ``lite_topic``."""

    lite_topic: str = _wire("liteTopic", required=True)
    consumer_group: str = _wire("consumerGroup", required=True)
    client_id: str = _wire("clientId", required=True)


# --------------------------------------------------------------------------- bodies


@dataclass(frozen=True, slots=True)
class OffsetOption(Body):
    """Where a subscription starts reading a lite topic (Java ``OffsetOption``): ``type`` one
    of ``OFFSET_TYPES``; for ``POLICY``, ``value`` is ``POLICY_LAST``,
    ``POLICY_MIN`` or ``POLICY_MAX``."""

    type: Annotated[str, java_enum(OFFSET_TYPES)]
    value: Int64 = 0


@dataclass(frozen=True, slots=True)
class LiteSubscriptionDTO(Body):
    """One change of a client's lite subscriptions (Java ``LiteSubscriptionDTO``): ``action``
    one of ``LITE_ACTIONS``, the parent ``topic``, the lite topics concerned."""

    action: Annotated[str, java_enum(LITE_ACTIONS)]
    client_id: str
    group: str
    topic: str
    lite_topic_set: Annotated[tuple[str, ...], member(default=())] = ()
    offset_option: Annotated[OffsetOption | None, OMIT_IF_NONE] = None
    version: Int64 = 0


@dataclass(frozen=True, slots=True)
class LiteSubscriptionCtlRequestBody(Body):
    """The LITE_SUBSCRIPTION_CTL (200071) body (Java ``LiteSubscriptionCtlRequestBody``)."""

    subscription_set: Annotated[tuple[LiteSubscriptionDTO, ...], member(default=())] = ()


# --------------------------------------------------------------------------- delivery counts


def parse_lite_order_counts(text: str | None, records: int) -> list[int] | None:
    """``ExtraInfoUtil.parseLiteOrderCountInfo``: the earlier-delivery count of each of
    ``records`` popped records, or None when ``text`` does not list exactly that many. An
    entry may also be ``<mark> qo<queue>%<offset> <count>``; an unreadable one counts 0.
    Never raises."""
    if not text:
        return None
    parts = text.split(";")
    if len(parts) != records:
        return None
    return [_count(p) for p in parts]


def _count(part: str) -> int:
    fields = part.split(" ")
    value = fields[2] if "qo" in part and len(fields) == 3 else part
    value = value.strip()
    return int(value) if value.isascii() and value.isdigit() else 0


def format_lite_order_counts(counts: list[int]) -> str:
    """The inverse of ``parse_lite_order_counts`` (``transformOrderCountInfo``'s form)."""
    return ";".join(str(c) for c in counts)
