"""Ordered (FIFO) POP: one batch in flight per queue and group (Java
``ConsumerOrderInfoManager``, docs/protocol.md §12.3).

An ordered POP of a queue records the batch it handed out (`OrderInfo`). While one of
its messages is neither acked nor past its invisible time the queue is *blocked* for the group
(``checkBlock``): further ordered POPs get nothing from it. The group's offset of the queue
does not move at pop; acks (``commitAndNext``) move it to the first message not acked yet.
Nothing goes to a retry topic: once the invisible time passes, the next POP reads the same
messages again from the offset, and each carries how many times it was handed out before
(``orderCountInfo``, the reconsume count the client reports). A request repeated with the
same ``attemptId`` is not blocked by its own batch and does not count as a new delivery.

The table is written to ``consumerOrderInfo.json`` (Apache's file, Apache's field names)
with the consumer offsets; entries unused for a day are dropped then.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiorocket.embedded.files import PersistedTable, write_json_atomically

__all__ = ["ConsumerOrderInfo", "OrderCount", "OrderInfo"]

log = logging.getLogger("aiorocket.embedded")

#: ``CLEAN_SPAN_FROM_LAST``: an entry not used for this long is dropped when the table is saved
_CLEAN_SPAN_MS: Final = 24 * 3600 * 1000

#: one entry of ``orderCountInfo``: (popped topic, key, [count])
OrderCount = tuple[str, str, list[int]]


@dataclass(slots=True)
class OrderInfo:
    """The batch last handed out from one queue to one group (Java ``OrderInfo``)."""

    pop_time: int
    invisible_time: int
    #: the popped queue offsets, ascending
    offsets: list[int]
    attempt_id: str | None = None
    #: bit ``i``: ``offsets[i]`` was acked (``cm``)
    commit_bits: int = 0
    #: offset -> when it becomes visible again, after CHANGE_MESSAGE_INVISIBLETIME (``ot``)
    next_visible: dict[int, int] = field(default_factory=dict)
    #: offset -> how many times it was handed out before this batch (``oc``)
    consumed: dict[int, int] = field(default_factory=dict)
    #: when the entry was last used (``l``)
    last_used: int = 0

    def _visible_at(self, i: int) -> int:
        return self.next_visible.get(self.offsets[i], self.pop_time + self.invisible_time)

    def blocked_until(self, attempt_id: str | None, now_ms: int) -> int | None:
        """``needBlock``: when the batch stops blocking the queue (the last visible-at time of
        a message not acked), ``None`` if it does not block (all acked or visible again, or
        asked again by the same attempt)."""
        if attempt_id is not None and attempt_id == self.attempt_id:
            return None
        until = None
        for i in range(len(self.offsets)):
            if not self.commit_bits >> i & 1:
                visible = self._visible_at(i)
                if now_ms < visible and (until is None or visible > until):
                    until = visible
        return until

    def next_offset(self) -> int:
        """``getNextOffset``: the first offset not acked, or the one after the batch."""
        for i, offset in enumerate(self.offsets):
            if not self.commit_bits >> i & 1:
                return offset
        return self.offsets[-1] + 1

    def to_dict(self) -> dict[str, Any]:
        """The entry as Apache writes it (offsets as the first and the distances to it)."""
        first = self.offsets[0]
        out: dict[str, Any] = {
            "popTime": self.pop_time,
            "i": self.invisible_time,
            "o": [first, *(o - first for o in self.offsets[1:])],
            "l": self.last_used,
            "cm": self.commit_bits,
        }
        if self.next_visible:
            out["ot"] = {str(k): v for k, v in self.next_visible.items()}
        if self.consumed:
            out["oc"] = {str(k): v for k, v in self.consumed.items()}
        if self.attempt_id is not None:
            out["a"] = self.attempt_id
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> OrderInfo:
        """Read an entry written by `to_dict` (or by Apache).

        Raises:
            ValueError, KeyError, TypeError: malformed.
        """
        listed = [int(v) for v in raw["o"]]
        if not listed:
            raise ValueError("an order info without offsets")
        first = listed[0]
        offsets = [first, *(first + d for d in listed[1:])]
        attempt = raw.get("a")
        return cls(
            pop_time=int(raw["popTime"]),
            invisible_time=int(raw.get("i") or 0),
            offsets=offsets,
            attempt_id=None if attempt is None else str(attempt),
            commit_bits=int(raw.get("cm", 0)),
            next_visible={int(k): int(v) for k, v in (raw.get("ot") or {}).items()},
            consumed={int(k): int(v) for k, v in (raw.get("oc") or {}).items()},
            last_used=int(raw.get("l", 0)),
        )


class ConsumerOrderInfo(PersistedTable):
    """The ordered-POP batches of every (topic, group, queue), persisted to ``path``.

    Args:
        path: ``consumerOrderInfo.json``; ``None`` keeps the table in memory only.
    """

    _table_key = "table"

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._table: dict[tuple[str, str], dict[int, OrderInfo]] = {}
        self._version = 0
        self._written = 0
        self._lock = asyncio.Lock()

    def _decode(self, data: dict[str, Any]) -> None:
        for key, queues in data["table"].items():
            topic, sep, group = str(key).partition("@")
            if not sep or not isinstance(queues, dict):
                raise ValueError(f"{self._path}: malformed entry {key!r}")
            try:
                self._table[(topic, group)] = {
                    int(q): OrderInfo.from_dict(raw) for q, raw in queues.items()
                }
            except (KeyError, TypeError) as exc:
                raise ValueError(f"{self._path}: malformed entry {key!r}: {exc}") from None

    def get(self, topic: str, group: str, queue_id: int) -> OrderInfo | None:
        """The queue's last batch for ``group``, or ``None``."""
        queues = self._table.get((topic, group))
        return None if queues is None else queues.get(queue_id)

    def blocked_until(
        self, attempt_id: str | None, topic: str, group: str, queue_id: int, now_ms: int
    ) -> int | None:
        """``checkBlock``: when the queue stops being blocked for ``group`` (ms), ``None`` when
        an ordered POP may read it now."""
        info = self.get(topic, group, queue_id)
        return None if info is None else info.blocked_until(attempt_id, now_ms)

    def update(
        self,
        attempt_id: str | None,
        topic: str,
        group: str,
        queue_id: int,
        pop_time: int,
        invisible_time: int,
        offsets: list[int],
        now_ms: int,
    ) -> list[OrderCount]:
        """Record a batch just handed out; returns its ``orderCountInfo`` entries: one per
        message handed out before (``qo<queue>%<offset>``, its count) and the queue's
        smallest count (``<queue>``, for clients before per-message counts)."""
        info = OrderInfo(pop_time, invisible_time, list(offsets), attempt_id, last_used=now_ms)
        queues = self._table.setdefault((topic, group), {})
        previous = queues.get(queue_id)
        if previous is not None:
            if previous.attempt_id is not None and previous.attempt_id == attempt_id:
                info.consumed = dict(previous.consumed)  # the same attempt: not a new delivery
            else:
                before = set(previous.offsets)
                info.consumed = {
                    o: previous.consumed.get(o, 0) + 1 for o in info.offsets if o in before
                }
        queues[queue_id] = info
        self._version += 1
        counts: list[OrderCount] = [
            (topic, f"qo{queue_id}%{o}", [n]) for o, n in sorted(info.consumed.items())
        ]
        # offsets not handed out before count 0, so the minimum is 0 unless all were
        least = min(info.consumed.values()) if len(info.consumed) == len(info.offsets) else 0
        counts.append((topic, str(queue_id), [least]))
        return counts

    def commit_and_next(
        self, topic: str, group: str, queue_id: int, offset: int, pop_time: int, now_ms: int
    ) -> int:
        """``commitAndNext``: mark ``offset`` of the batch popped at ``pop_time`` acked;
        returns the offset the group's offset moves to, -1 when ``offset`` is not in the
        batch (illegal), -2 when the batch was popped at another time (nothing to commit)."""
        info = self.get(topic, group, queue_id)
        if info is None:
            return offset + 1
        if pop_time != info.pop_time:
            return -2
        try:
            i = info.offsets.index(offset)
        except ValueError:
            return -1
        info.commit_bits |= 1 << i
        info.last_used = now_ms
        self._version += 1
        return info.next_offset()

    def update_next_visible(
        self, topic: str, group: str, queue_id: int, offset: int, pop_time: int, visible_at: int
    ) -> bool:
        """``updateNextVisibleTime``: ``offset`` of the batch popped at ``pop_time`` becomes
        visible at ``visible_at``; False when there is no such batch."""
        info = self.get(topic, group, queue_id)
        if info is None or info.pop_time != pop_time:
            return False
        info.next_visible[offset] = visible_at
        self._version += 1
        return True

    def forget(self, topic: str, group: str) -> None:
        """Drop the batches of ``group`` on ``topic`` (its offset was reset, or the topic is
        gone)."""
        if self._table.pop((topic, group), None) is not None:
            self._version += 1

    @property
    def dirty(self) -> bool:
        """Whether a change has not been written yet."""
        return self._written != self._version

    def _snapshot(self, now_ms: int) -> dict[str, Any]:
        table: dict[str, Any] = {}
        for (topic, group), queues in list(self._table.items()):
            for q in [q for q, info in queues.items() if now_ms - info.last_used > _CLEAN_SPAN_MS]:
                del queues[q]  # autoClean: not consumed for a day
            if not queues:
                del self._table[(topic, group)]
                continue
            table[f"{topic}@{group}"] = {str(q): i.to_dict() for q, i in sorted(queues.items())}
        return {"table": table}

    async def flush(self, now_ms: int) -> None:
        """Write the table if it changed (shielded, like `ConsumerOffsets.flush`).

        Raises:
            OSError: the file cannot be written.
        """
        await asyncio.shield(self._flush(now_ms))

    async def _flush(self, now_ms: int) -> None:
        if self._path is None:
            self._written = self._version
            return
        target = self._version
        async with self._lock:
            if self._written >= target:
                return
            version = self._version
            snapshot = self._snapshot(now_ms)
            await asyncio.to_thread(write_json_atomically, self._path, snapshot)
            self._written = version
