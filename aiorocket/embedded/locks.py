"""Queue locks of orderly consumers (``RebalanceLockManager``, docs/protocol.md §6.8).

A lock is held per (group, queue) by one client id and lasts ``lease`` seconds from its last
renewal (``rocketmq.broker.rebalance.lockMaxLiveTime``, 60 s). Locks survive the holder's
disconnection: a crashed orderly consumer keeps its queues until the lease runs out, so a
queue is never handed to a second consumer while the first may still be processing it.

Pure state: every method takes ``now`` (monotonic seconds) from the caller.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from aiorocket.models import MessageQueue

__all__ = ["LockEntry", "QueueLocks"]


@dataclass(slots=True)
class LockEntry:
    """The holder of one queue lock and when it last renewed it."""

    client_id: str
    last_update: float


class QueueLocks:
    """The broker's lock table: ``(group, queue) -> holder``.

    Args:
        lease: seconds after the last renewal at which another client may take the lock.
    """

    def __init__(self, *, lease: float) -> None:
        self._lease = lease
        self._table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _free_or_ours(self, entry: LockEntry | None, client_id: str, now: float) -> bool:
        return (
            entry is None or entry.client_id == client_id or now - entry.last_update > self._lease
        )

    def try_lock(
        self, group: str, queues: Iterable[MessageQueue], client_id: str, *, now: float
    ) -> list[MessageQueue]:
        """Lock or renew every queue that is free, already ours, or whose lease expired.

        Returns the queues ``client_id`` holds afterwards, in request order; the others stay
        with their holders (``RebalanceLockManager.tryLockBatch``).
        """
        locks = self._table.setdefault(group, {})
        granted: list[MessageQueue] = []
        for mq in queues:
            entry = locks.get(mq)
            if self._free_or_ours(entry, client_id, now):
                if entry is None:
                    locks[mq] = LockEntry(client_id, now)
                else:
                    entry.client_id = client_id
                    entry.last_update = now
                granted.append(mq)
        return granted

    def unlock(self, group: str, queues: Iterable[MessageQueue], client_id: str) -> None:
        """Release the listed queues that ``client_id`` holds; other holders are untouched."""
        locks = self._table.get(group)
        if not locks:
            return
        for mq in queues:
            entry = locks.get(mq)
            if entry is not None and entry.client_id == client_id:
                del locks[mq]
        if not locks:
            del self._table[group]

    def holder(self, group: str, mq: MessageQueue, *, now: float) -> str | None:
        """The client holding a live lock on ``mq`` for ``group``, or ``None``."""
        entry = self._table.get(group, {}).get(mq)
        if entry is None or now - entry.last_update > self._lease:
            return None
        return entry.client_id

    def expire(self, *, now: float) -> int:
        """Forget locks whose lease ran out (housekeeping); returns how many were dropped."""
        dropped = 0
        for group in list(self._table):
            locks = self._table[group]
            for mq in [m for m, e in locks.items() if now - e.last_update > self._lease]:
                del locks[mq]
                dropped += 1
            if not locks:
                del self._table[group]
        return dropped
