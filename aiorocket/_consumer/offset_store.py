"""Consume offsets (Java ``OffsetStore``): remote on the broker for clustering, a local file for
broadcasting.

Both keep the offsets of assigned queues in memory, where consumption updates them (only
upwards: an older batch finishing late cannot move an offset back), and persist them
periodically, when a queue is dropped and at shutdown. An offset is "the next offset to
consume" (REMOTING.md §6.5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Protocol

from aiorocket._client.instance import ClientInstance
from aiorocket._protocol.bodies import ResetOffsetBody
from aiorocket.errors import BrokerError, RemoteProtocolError, TransportError, broker_error
from aiorocket.models import MessageQueue

__all__ = ["LocalFileOffsetStore", "OffsetStore", "RemoteOffsetStore"]

log = logging.getLogger("aiorocket.consumer")


class OffsetStore(Protocol):
    """What the consumer needs from an offset store."""

    async def load(self) -> None:
        """Read persisted state at start (the local file); may be a no-op."""

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        """Set the in-memory offset; with ``increase_only`` it never goes down."""

    def read(self, mq: MessageQueue) -> int:
        """The in-memory offset, -1 if none (Java READ_FROM_MEMORY)."""

    async def read_stored(self, mq: MessageQueue) -> int | None:
        """The persisted offset, ``None`` if there is none (Java READ_FROM_STORE); it also
        becomes the in-memory offset.

        Raises:
            TransportError, BrokerError: the store could not be asked (offset unknown).
        """

    async def persist(self, mq: MessageQueue, *, sync: bool = False) -> None:
        """Persist one queue's offset; errors are logged."""

    async def persist_all(self, mqs: Collection[MessageQueue], *, sync: bool = False) -> None:
        """Persist the offsets of ``mqs`` and forget the others; errors are logged."""

    def remove(self, mq: MessageQueue) -> None:
        """Forget a queue's in-memory offset (it was dropped)."""


class _MemoryTable:
    """The in-memory part both stores share."""

    def __init__(self) -> None:
        self._table: dict[MessageQueue, int] = {}

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        table = self._table
        if increase_only:
            old = table.get(mq)
            if old is not None and old >= offset:
                return
        table[mq] = offset

    def read(self, mq: MessageQueue) -> int:
        return self._table.get(mq, -1)

    def remove(self, mq: MessageQueue) -> None:
        self._table.pop(mq, None)

    def snapshot(self) -> dict[MessageQueue, int]:
        """A copy of the in-memory offsets."""
        return dict(self._table)


class RemoteOffsetStore(_MemoryTable):
    """Offsets kept by the broker (Java ``RemoteBrokerOffsetStore``).

    Persisting sends UPDATE_CONSUMER_OFFSET, oneway as Java does, or awaited with ``sync`` (at
    shutdown and before a re-query, where the broker must have it before we go on).
    """

    def __init__(self, client: ClientInstance, group: str) -> None:
        super().__init__()
        self._client = client
        self._group = group

    async def load(self) -> None:
        return None

    async def _address(self, mq: MessageQueue) -> str:
        addr = self._client.master_address(mq.broker_name)
        if addr is None:
            await self._client.fetch_route(mq.topic)
            addr = self._client.master_address(mq.broker_name)
        if addr is None:
            raise broker_error(14, f"no master address for broker {mq.broker_name}")
        return addr

    async def read_stored(self, mq: MessageQueue) -> int | None:
        addr = await self._address(mq)
        offset = await self._client.query_consumer_offset(addr, self._group, mq)
        if offset is not None:
            self._table[mq] = offset
        return offset

    async def persist(self, mq: MessageQueue, *, sync: bool = False) -> None:
        offset = self._table.get(mq)
        if offset is None:
            return
        try:
            addr = await self._address(mq)
            await self._client.update_consumer_offset(
                addr, self._group, mq, offset, oneway=not sync
            )
        except (TransportError, BrokerError) as exc:
            log.warning("persisting offset %d of %s failed: %s", offset, mq, exc)

    async def persist_all(self, mqs: Collection[MessageQueue], *, sync: bool = False) -> None:
        wanted = set(mqs)
        for mq in list(self._table):
            if mq not in wanted:
                # RemoteBrokerOffsetStore.persistAll: "remove unused mq".
                del self._table[mq]
        if sync:
            await asyncio.gather(*(self.persist(mq, sync=True) for mq in self._table))
        else:
            for mq in list(self._table):
                await self.persist(mq)


class LocalFileOffsetStore(_MemoryTable):
    """Offsets in a local JSON file (Java ``LocalFileOffsetStore``), for broadcasting.

    The file has Java's ``OffsetSerializeWrapper`` layout (``{"offsetTable": {queue:
    offset}}`` with queue objects as keys) and is replaced atomically: written to a temporary
    file in the same directory, flushed to disk, then renamed over the old one, so a crash
    leaves either the old or the new file, never a torn one.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._stored: dict[MessageQueue, int] = {}
        self._write_lock = asyncio.Lock()

    async def load(self) -> None:
        """Read the file; a missing file means no offsets, an unreadable one is logged and
        treated as missing (it is never overwritten before a successful persist)."""
        self._stored = await asyncio.to_thread(self._read)

    def _read(self) -> dict[MessageQueue, int]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("cannot read offsets file %s: %s", self.path, exc)
            return {}
        try:
            return dict(ResetOffsetBody.from_json(data).offset_table)
        except RemoteProtocolError as exc:
            log.warning("offsets file %s is malformed: %s", self.path, exc)
            return {}

    async def read_stored(self, mq: MessageQueue) -> int | None:
        offset = self._stored.get(mq)
        if offset is not None:
            self._table[mq] = offset
        return offset

    async def persist(self, mq: MessageQueue, *, sync: bool = False) -> None:
        await self._write(self._table.items())

    async def persist_all(self, mqs: Collection[MessageQueue], *, sync: bool = False) -> None:
        wanted = set(mqs)
        await self._write((mq, off) for mq, off in self._table.items() if mq in wanted)

    async def _write(self, items: Iterable[tuple[MessageQueue, int]]) -> None:
        table = dict(items)
        if not table:
            return
        # Keep what is stored for queues not held right now (Java writes only held ones, which
        # loses the others' progress when a topic's route shrinks for a moment).
        async with self._write_lock:
            merged = {**self._stored, **table}
            try:
                await asyncio.to_thread(self._write_file, ResetOffsetBody(merged).to_json())
            except OSError as exc:
                log.warning("cannot write offsets file %s: %s", self.path, exc)
                return
            self._stored = merged

    def _write_file(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".offsets-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        try:
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
