"""Delay levels: which level a message asks for, and when a parked message is due
(``ScheduleMessageService``, docs/protocol.md §6.6).

A delayed message is parked in ``SCHEDULE_TOPIC_XXXX`` with its delivery time as its
consume-queue tags code. The send path computes that code when it parks a message and the
store's recovery computes it again when it re-indexes one; both use :func:`deliver_at`, so the
two always agree.
"""

from __future__ import annotations

from aiorocket._names import SCHEDULE_TOPIC
from aiorocket._protocol import properties as mp
from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.tags import tags_code

__all__ = ["deliver_at", "indexed_tags_code", "requested_level"]


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


def indexed_tags_code(record: MessageRecord, levels: tuple[float, ...]) -> int:
    """The consume-queue tags code of a stored ``record``, as the send path wrote it.

    The Java hash of its ``TAGS`` property (0 without one, docs/protocol.md §6.3); for
    ``SCHEDULE_TOPIC_XXXX`` the delivery time instead: store time plus the delay of its
    ``DELAY`` level (clamped to the table, 1 when malformed). Never raises.
    """
    props = record.properties
    if record.topic == SCHEDULE_TOPIC:
        try:
            level = min(max(int(props.get(mp.DELAY, "1")), 1), len(levels))
        except ValueError:
            level = 1
        return deliver_at(record.store_timestamp, level, levels)
    return tags_code(props.get(mp.TAGS))
