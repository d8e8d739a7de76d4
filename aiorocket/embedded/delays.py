"""When a parked message is due: delay levels (``ScheduleMessageService``, docs/protocol.md
§6.6) and 5.x timer messages (``HookUtils.transformTimerMessage``, §12.4).

A delayed message is parked in ``SCHEDULE_TOPIC_XXXX`` and a timer message in
``rmq_sys_wheel_timer``, each with its delivery time as its consume-queue tags code. The send
path computes that code when it parks a message and the store's recovery computes it again when
it re-indexes one; both use this module, so the two always agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from aiorocket._names import SCHEDULE_TOPIC, TIMER_TOPIC
from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import ResponseCode
from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.tags import tags_code

__all__ = [
    "TimerRefusal",
    "deliver_at",
    "indexed_tags_code",
    "is_timer_message",
    "parked_timer_due",
    "requested_level",
    "timer_due",
    "timer_not_enabled",
]

# Long.parseLong: an optional sign and decimal digits, nothing else (no spaces, no "_").
_JAVA_LONG: Final = re.compile(r"[+-]?[0-9]+")
_LONG_MAX: Final = (1 << 63) - 1


def requested_level(props: dict[str, str], levels: int) -> int:
    """The ``DELAY`` level a message asks for, clamped to the ``levels`` of the table
    (0: not delayed).

    ``ScheduleMessageService``: a level above the table's length means the last level; a
    malformed or non-positive level means no delay. Never raises.
    """
    raw = props.get(mp.DELAY)
    if raw is None:
        return 0
    try:
        level = int(raw)
    except ValueError:
        return 0
    if level <= 0:
        return 0
    return min(level, levels)


def deliver_at(base_ms: int, level: int, levels: tuple[float, ...]) -> int:
    """When a message parked at ``base_ms`` (ms since the epoch) with ``level`` (1-based) is
    due: ``ScheduleMessageService.computeDeliverTimestamp`` with the table ``levels`` (in
    seconds).

    Raises:
        IndexError: ``level`` is outside the table.
    """
    return base_ms + int(levels[level - 1] * 1000)


@dataclass(frozen=True, slots=True)
class TimerRefusal:
    """Why a timer message is refused: the response code and remark 5.3.3 answers with."""

    code: int
    remark: str


def timer_not_enabled() -> TimerRefusal:
    """The answer of a 5.x broker with ``timerWheelEnable=false`` (``WHEEL_TIMER_NOT_ENABLE``)."""
    return TimerRefusal(
        ResponseCode.SYSTEM_ERROR,
        "accurate timer message is not enabled, timerWheelEnable is false",
    )


def is_timer_message(props: dict[str, str]) -> bool:
    """``HookUtils.checkIfTimerMessage`` for a message without a delay level: it carries one of
    the three timer properties and no ``TIMER_OUT_MS`` (one the broker already delivered from
    the timer, sent again by a client, is not parked twice). Never raises."""
    return mp.TIMER_OUT_MS not in props and any(k in props for k in mp.TIMER_KEYS)


def _parse_long(text: str) -> int | None:
    if _JAVA_LONG.fullmatch(text) is None:
        return None
    value = int(text)
    return value if -_LONG_MAX - 1 <= value <= _LONG_MAX else None


def timer_due(
    props: dict[str, str], now_ms: int, *, max_delay_ms: int, precision_ms: int
) -> int | TimerRefusal | None:
    """When a timer message (`is_timer_message`) stored at ``now_ms`` is due:
    ``HookUtils.transformTimerMessage``.

    ``TIMER_DELAY_SEC`` wins over ``TIMER_DELAY_MS``, which wins over ``TIMER_DELIVER_MS``. The
    time is rounded up to a multiple of ``precision_ms`` (Java floors it to the wheel slot and
    reads the slot once the slot has passed, which is the same instant). Returns ``None`` for a
    time not in the future: the message is stored as it is, at once. Refused (13) when a value
    is not a Java long, when the time is more than ``max_delay_ms`` away, or when a past time
    comes with ``TIMER_DEL_UNIQKEY`` (a cancellation must precede what it cancels). Never raises.
    """
    if (raw := props.get(mp.TIMER_DELAY_SEC)) is not None:
        value = _parse_long(raw)
        deliver = None if value is None else now_ms + value * 1000
    elif (raw := props.get(mp.TIMER_DELAY_MS)) is not None:
        value = _parse_long(raw)
        deliver = None if value is None else now_ms + value
    else:
        deliver = _parse_long(props.get(mp.TIMER_DELIVER_MS, ""))
    refusal = TimerRefusal(
        ResponseCode.MESSAGE_ILLEGAL,
        "timer message illegal, the delay time should not be bigger than the max delay "
        f"{max_delay_ms}ms; or if set del msg, the delay time should be bigger than the "
        "current time",
    )
    if deliver is None:
        return refusal
    if deliver <= now_ms:
        return refusal if mp.TIMER_DEL_UNIQKEY in props else None
    if deliver - now_ms > max_delay_ms:
        return refusal
    return -(-deliver // precision_ms) * precision_ms


def parked_timer_due(record: MessageRecord, precision_ms: int) -> int:
    """The due time of a record parked in ``rmq_sys_wheel_timer``: its ``TIMER_OUT_MS`` (the
    slot the send path wrote, one precision step before the due time) plus ``precision_ms``;
    its store time when that is missing or malformed (due at once). Never raises."""
    out = _parse_long(record.properties.get(mp.TIMER_OUT_MS, ""))
    return record.store_timestamp if out is None else out + precision_ms


def indexed_tags_code(
    record: MessageRecord, levels: tuple[float, ...], timer_precision_ms: int = 1
) -> int:
    """The consume-queue tags code of a stored ``record``, as the send path wrote it.

    The Java hash of its ``TAGS`` property (0 without one, docs/protocol.md §6.3); for
    ``SCHEDULE_TOPIC_XXXX`` the delivery time instead: store time plus the delay of its
    ``DELAY`` level (clamped to the table, 1 when malformed); for ``rmq_sys_wheel_timer``
    `parked_timer_due`. Never raises.
    """
    props = record.properties
    if record.topic == SCHEDULE_TOPIC:
        try:
            level = min(max(int(props.get(mp.DELAY, "1")), 1), len(levels))
        except ValueError:
            level = 1
        return deliver_at(record.store_timestamp, level, levels)
    if record.topic == TIMER_TOPIC:
        return parked_timer_due(record, timer_precision_ms)
    return tags_code(props.get(mp.TAGS))
