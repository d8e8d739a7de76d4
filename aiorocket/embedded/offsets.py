"""Committed consumer offsets (``ConsumerOffsetManager``).

The stored value per (group, topic, queue) is the next offset to consume, stored as received
without checking it against the queue's bounds (docs/protocol.md §6.5). The table is written to
``consumerOffset.json`` as a whole and atomically (``files.py``).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from aiorocket.embedded.files import PersistedTable, write_json_atomically

__all__ = ["ConsumerOffsets"]

log = logging.getLogger("aiorocket.embedded")


class ConsumerOffsets(PersistedTable):
    """The committed offsets of every consumer group, persisted to ``path``.

    ``commit`` only updates memory and marks the table dirty; `flush` writes it (the
    broker calls it periodically, at shutdown, and before acknowledging an offset update when
    it runs with sync flush). Flushes are serialised and a waiter of `flush` is sure the
    table as it was when it called is on disk.

    Args:
        path: the JSON file; ``None`` keeps offsets in memory only.
        fsync: fsync the file and directory on each write.
    """

    _table_key = "offsetTable"

    def __init__(self, path: Path | None, *, fsync: bool = True) -> None:
        self._path = path
        self._fsync = fsync
        self._table: dict[tuple[str, str], dict[int, int]] = {}
        self._version = 0  # bumped by every commit
        self._written = 0  # the version last written to disk
        self._lock = asyncio.Lock()

    def _decode(self, data: dict[str, Any]) -> None:
        for key, queues in data["offsetTable"].items():
            # ConsumerOffsetManager keys its table "topic@group" (TOPIC_GROUP_SEPARATOR).
            topic, sep, group = str(key).rpartition("@")
            if not sep or not isinstance(queues, dict):
                raise ValueError(f"{self._path}: malformed entry {key!r}")
            self._table[(group, topic)] = {int(q): int(o) for q, o in queues.items()}

    def query(self, group: str, topic: str, queue_id: int) -> int | None:
        """The committed offset, or ``None`` when the group never committed one."""
        queues = self._table.get((group, topic))
        if queues is None:
            return None
        return queues.get(queue_id)

    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Record ``offset`` as the next offset ``group`` will consume from the queue."""
        queues = self._table.get((group, topic))
        if queues is None:
            queues = self._table[(group, topic)] = {}
        if queues.get(queue_id) != offset:
            queues[queue_id] = offset
            self._version += 1

    def topics_of(self, group: str) -> list[str]:
        """Topics ``group`` has an offset stored for (``whichTopicByConsumer``)."""
        return sorted(t for (g, t) in self._table if g == group)

    def groups(self) -> list[str]:
        """Every group with a stored offset."""
        return sorted({g for (g, _t) in self._table})

    def remove_group(self, group: str) -> bool:
        """Forget every offset of ``group`` (``removeOffset``); returns whether it had any."""
        keys = [k for k in self._table if k[0] == group]
        for key in keys:
            del self._table[key]
        if keys:
            self._version += 1
        return bool(keys)

    def remove_topic(self, topic: str) -> bool:
        """Forget every group's offsets of ``topic`` (an expired lite topic's queue); returns
        whether there were any."""
        keys = [k for k in self._table if k[1] == topic]
        for key in keys:
            del self._table[key]
        if keys:
            self._version += 1
        return bool(keys)

    def groups_of(self, topic: str) -> list[str]:
        """Groups with an offset stored for ``topic``."""
        return sorted(g for (g, t) in self._table if t == topic)

    @property
    def dirty(self) -> bool:
        """Whether a commit has not been written yet."""
        return self._written != self._version

    def _snapshot(self) -> dict[str, Any]:
        return {
            "offsetTable": {
                f"{topic}@{group}": {str(q): o for q, o in sorted(queues.items())}
                for (group, topic), queues in self._table.items()
            }
        }

    async def flush(self) -> None:
        """Write the table if it changed; returns once the current version is on disk.

        The write itself is shielded: cancelling the caller does not abandon a write in
        progress (it keeps the lock until the file is renamed, so writes never overlap).

        Raises:
            OSError: the file cannot be written.
        """
        await asyncio.shield(self._flush())

    async def _flush(self) -> None:
        if self._path is None:
            self._written = self._version
            return
        target = self._version
        async with self._lock:
            if self._written >= target:
                return  # a flush that started after our commit already wrote it
            version = self._version
            snapshot = self._snapshot()
            await asyncio.to_thread(write_json_atomically, self._path, snapshot, fsync=self._fsync)
            self._written = version
