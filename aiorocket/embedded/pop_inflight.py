"""POP checkpoints in flight (Java ``PopCheckPoint`` and the revive schedule): what a POP
handed out and nobody acked yet, each due for revive at its pop time plus its invisible time.

Pure state, no I/O: the revive log (``pop_log.py``) makes every change durable before it is
applied here, and the revive service (``pop_revive.py``) drains the due checkpoints.

A checkpoint is found by its key: the group, the topic its messages were popped from (a POP
retry topic for a retried message), the queue, the checkpoint's start offset and the pop
time: what a receipt handle carries, and the fields Apache's ``PopReviveService`` merges an ack
into its checkpoint by. Due checkpoints are ordered with ``sortedcontainers`` (due time, then
log position); the live log positions are kept sorted too, since the smallest one is where a
restart has to start replaying the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sortedcontainers import SortedKeyList, SortedList

__all__ = ["Checkpoint", "CheckpointKey", "InflightTable"]

#: group, popped topic, queue id, start offset, pop time (ms)
CheckpointKey = tuple[str, str, int, int, int]


@dataclass(slots=True, eq=False)
class Checkpoint:
    """The messages one POP took from one queue, or one message whose invisible time was
    changed (a checkpoint of its own, ``ChangeInvisibleTimeProcessor``).

    ``offsets`` are the popped queue offsets in ascending order; bit ``i`` of ``acked`` says
    ``offsets[i]`` was acked (or revived). ``log_offset`` is the position of the checkpoint's
    record in the revive log; ``due`` the wall-clock ms its revive is due at, its visible-at
    time unless a failed revive put it off.
    """

    group: str
    topic: str
    queue_id: int
    start_offset: int
    pop_time: int
    invisible_time: int
    offsets: tuple[int, ...]
    log_offset: int = -1
    acked: int = 0
    due: int = 0

    def __post_init__(self) -> None:
        if not self.due:
            self.due = self.pop_time + self.invisible_time

    @property
    def key(self) -> CheckpointKey:
        """What finds the checkpoint from a receipt handle or an ack record."""
        return (self.group, self.topic, self.queue_id, self.start_offset, self.pop_time)

    @property
    def visible_at(self) -> int:
        """When its unacked messages become visible again (ms): ``popTime + invisibleTime``."""
        return self.pop_time + self.invisible_time

    @property
    def done(self) -> bool:
        """Whether every message is acked (or revived)."""
        return self.acked == (1 << len(self.offsets)) - 1

    def index_of(self, offset: int) -> int:
        """The index of queue offset ``offset`` among the checkpoint's, -1 if absent."""
        try:
            return self.offsets.index(offset)
        except ValueError:
            return -1

    def unacked(self) -> list[int]:
        """The queue offsets not acked yet, ascending."""
        acked = self.acked
        return [o for i, o in enumerate(self.offsets) if not acked >> i & 1]


def _schedule_key(ck: Checkpoint) -> tuple[int, int]:
    return (ck.due, ck.log_offset)


class InflightTable:
    """Every checkpoint in flight, by key, by due time and by log position."""

    def __init__(self) -> None:
        self._by_key: dict[CheckpointKey, Checkpoint] = {}
        self._schedule: Any = SortedKeyList(key=_schedule_key)
        self._log_offsets: Any = SortedList()

    def __len__(self) -> int:
        return len(self._by_key)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def get(self, key: CheckpointKey) -> Checkpoint | None:
        """The checkpoint of ``key``, or ``None`` (never popped, done, or revived)."""
        return self._by_key.get(key)

    def add(self, ck: Checkpoint) -> None:
        """Track ``ck`` (its log position set); a checkpoint already done is ignored.

        Raises:
            ValueError: a checkpoint with the same key is in flight.
        """
        if ck.done:
            return
        if ck.key in self._by_key:
            raise ValueError(f"checkpoint {ck.key} is in flight already")
        self._by_key[ck.key] = ck
        self._schedule.add(ck)
        self._log_offsets.add(ck.log_offset)

    def ack(self, ck: Checkpoint, offsets: list[int]) -> list[int]:
        """Mark ``offsets`` acked in ``ck``; a checkpoint left with nothing unacked leaves the
        table. Returns the offsets that were in flight (the others were not in ``ck`` or
        acked already)."""
        newly: list[int] = []
        for offset in offsets:
            i = ck.index_of(offset)
            if i >= 0 and not ck.acked >> i & 1:
                ck.acked |= 1 << i
                newly.append(offset)
        if ck.done:
            self.remove(ck)
        return newly

    def remove(self, ck: Checkpoint) -> None:
        """Stop tracking ``ck`` (absent: nothing happens)."""
        if self._by_key.get(ck.key) is not ck:
            return
        del self._by_key[ck.key]
        self._schedule.remove(ck)
        self._log_offsets.remove(ck.log_offset)

    def due(self, now_ms: int) -> list[Checkpoint]:
        """The checkpoints due at ``now_ms``, earliest first (they stay in the table)."""
        out: list[Checkpoint] = []
        for ck in self._schedule:
            if ck.due > now_ms:
                break
            out.append(ck)
        return out

    def next_due(self) -> int | None:
        """When the earliest checkpoint is due (ms), ``None`` with nothing in flight."""
        if not self._schedule:
            return None
        first: Checkpoint = self._schedule[0]
        return first.due

    def reschedule(self, ck: Checkpoint, due: int) -> None:
        """Put off the revive of ``ck`` (in the table) to ``due``."""
        self._schedule.remove(ck)
        ck.due = due
        self._schedule.add(ck)

    def oldest_log_offset(self) -> int | None:
        """The smallest log position of a checkpoint in flight, ``None`` with none."""
        if not self._log_offsets:
            return None
        oldest: int = self._log_offsets[0]
        return oldest
