"""Consume offsets (Java ``OffsetStore``): remote on the broker for clustering, a local file for
broadcasting.

Both keep the offsets of assigned queues in memory, where consumption updates them (only
upwards: an older batch finishing late cannot move an offset back), and persist them
periodically, when a queue is dropped and at shutdown. An offset is "the next offset to
consume" (docs/protocol.md §6.5).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import tempfile
import time
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import anyio.to_thread

from aiorocket._client.instance import ClientInstance
from aiorocket.errors import BrokerError, ConfigurationError, TransportError
from aiorocket.models import MessageQueue

__all__ = ["MAX_CLUSTERS", "LocalFileOffsetStore", "OffsetStore", "RemoteOffsetStore"]

#: clusters whose offsets one broadcasting offsets file keeps (the most recently written)
MAX_CLUSTERS = 16

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

    def close(self) -> None:
        """Release what `load` took (the local file's lock); offsets are not written."""


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

    def close(self) -> None:
        return None

    # Both requests go to the master, else (after a route refresh) any broker of the group
    # (RemoteBrokerOffsetStore): a slave answers queries, and what is committed there while
    # the master is down is committed again to the master by the next persist (the table
    # keeps it).

    async def read_stored(self, mq: MessageQueue) -> int | None:
        client, group = self._client, self._group
        offset = await client.call_broker(
            mq.broker_name, mq.topic, lambda addr: client.query_consumer_offset(addr, group, mq)
        )
        if offset is not None:
            self._table[mq] = offset
        return offset

    async def persist(self, mq: MessageQueue, *, sync: bool = False) -> None:
        offset = self._table.get(mq)
        if offset is None:
            return
        client, group = self._client, self._group
        try:
            await client.call_broker(
                mq.broker_name,
                mq.topic,
                lambda addr: client.update_consumer_offset(
                    addr, group, mq, offset, oneway=not sync
                ),
            )
        except (TransportError, BrokerError) as exc:
            log.warning("persisting offset %d of %s failed: %s", offset, mq, exc)
            if isinstance(exc, TransportError):
                # kept in the table for the next persist, to the broker the name server names
                await self._client.refresh_route(mq.topic)

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

    Each consumer needs a file of its own: two consumers writing one file overwrite each
    other's progress. `load` therefore takes an exclusive lock (``flock`` on
    ``<file>.lock``, released by `close` or when the process dies) on the first of
    ``path`` and ``alternatives`` that no live consumer holds; when every one is held it
    raises [`ConfigurationError`][aiorocket.errors.ConfigurationError] naming ``instance_name``.

    Offsets are kept per cluster as well as per queue: a file written by a consumer of
    another cluster whose brokers have the same names must not make this one skip messages.
    ``cluster`` identifies the cluster (the name-server addresses, ``;``-separated); stored
    offsets are used only under the same key, or under a key sharing a name server with it
    (a name server added or removed), and the file keeps the most recently written
    `MAX_CLUSTERS` clusters. Layout:

    ```text
    {"version": 2, "clusters": {"<cluster>": {"updated": <ms>, "offsets": [
        {"topic": "T", "brokerName": "broker-a", "queueId": 0, "offset": 42}, ...]}}}
    ```

    A file in Java's layout (``{"offsetTable": ...}``, no cluster) is not trusted and is
    replaced at the first persist. The file is replaced atomically: written to a temporary
    file in the same directory, flushed to disk, then renamed over the old one, so a crash
    leaves either the old or the new file, never a torn one.
    """

    def __init__(
        self,
        path: Path,
        *,
        alternatives: Sequence[Path] = (),
        cluster: str = "",
        instance_name: str | None = None,
    ) -> None:
        super().__init__()
        #: the file in use (the first of ``path`` and ``alternatives`` not locked by another
        #: consumer, once `load` ran)
        self.path = path
        self._candidates = (path, *alternatives)
        self._cluster = cluster
        self._instance_name = instance_name
        self._lock_fd: int | None = None
        self._stored: dict[MessageQueue, int] = {}
        self._others: dict[str, Any] = {}
        self._write_lock = asyncio.Lock()

    async def load(self) -> None:
        """Claim a file (see the class docs) and read this cluster's offsets from it; a
        missing file means no offsets, an unreadable one is logged and treated as missing
        (it is never overwritten before a successful persist).

        Raises:
            ConfigurationError: every candidate file is locked by another live consumer.
            OSError: the directory or the lock file cannot be created.
        """
        if self._lock_fd is None:
            await anyio.to_thread.run_sync(self._claim)
        self._stored, self._others = await anyio.to_thread.run_sync(self._read)

    def close(self) -> None:
        """Release the file's lock (idempotent); offsets must have been persisted before."""
        fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)  # (closing the descriptor releases the flock)

    def _claim(self) -> None:
        holder = ""
        for path in self._candidates:
            path.parent.mkdir(parents=True, exist_ok=True)
            lock_path = path.with_name(path.name + ".lock")
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                with contextlib.suppress(OSError):
                    holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self._lock_fd = fd
            if path != self._candidates[0]:
                log.info(
                    "offsets file %s is in use; this consumer uses %s", self._candidates[0], path
                )
            self.path = path
            return
        who = f" (pid {holder})" if holder else ""
        if self._instance_name is not None:
            raise ConfigurationError(
                f"the broadcasting offsets file {self._candidates[0]} is in use by another live "
                f"consumer on this host{who}: instance_name {self._instance_name!r} is taken; "
                "give each broadcasting consumer of a group on one host its own instance_name"
            )
        raise ConfigurationError(
            f"all {len(self._candidates)} broadcasting offsets files under "
            f"{self._candidates[0].parent.parent.parent} are in use by live consumers{who}; "
            "set instance_name"
        )

    def _read(self) -> tuple[dict[MessageQueue, int], dict[str, Any]]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return {}, {}
        except OSError as exc:
            log.warning("cannot read offsets file %s: %s", self.path, exc)
            return {}, {}
        try:
            doc = json.loads(data)
            if not isinstance(doc, dict):
                raise ValueError("not an object")
            if "clusters" not in doc:
                if "offsetTable" in doc:
                    log.warning(
                        "offsets file %s names no cluster (an older layout): its offsets are "
                        "not used, and it is replaced at the next persist",
                        self.path,
                    )
                return {}, {}
            clusters = doc["clusters"]
            if not isinstance(clusters, dict):
                raise ValueError("clusters is not an object")
            key = self._matching_cluster(clusters)
            mine = _decode_offsets(clusters[key]) if key is not None else {}
            others = {k: v for k, v in clusters.items() if k != key}
            return mine, others
        except (ValueError, TypeError, KeyError) as exc:
            log.warning("offsets file %s is malformed: %s", self.path, exc)
            return {}, {}

    def _matching_cluster(self, clusters: dict[str, Any]) -> str | None:
        if self._cluster in clusters:
            return self._cluster
        mine = set(self._cluster.split(";"))
        shared = [
            (int(v.get("updated", 0)) if isinstance(v, dict) else 0, k)
            for k, v in clusters.items()
            if mine & set(str(k).split(";"))
        ]
        if not shared:
            if clusters:
                log.info(
                    "offsets file %s holds offsets of other clusters only (%s); this cluster "
                    "(%s) starts without stored offsets",
                    self.path,
                    ", ".join(sorted(clusters)),
                    self._cluster,
                )
            return None
        key = max(shared)[1]
        log.info("offsets stored for name servers %s are used for %s", key, self._cluster)
        return key

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
                await anyio.to_thread.run_sync(self._write_file, self._encode(merged))
            except OSError as exc:
                log.warning("cannot write offsets file %s: %s", self.path, exc)
                return
            self._stored = merged

    def _encode(self, table: dict[MessageQueue, int]) -> bytes:
        now_ms = int(time.time() * 1000)
        clusters = dict(self._others)
        # the most recently written clusters, ours first
        kept = sorted(
            clusters.items(),
            key=lambda kv: int(kv[1].get("updated", 0)) if isinstance(kv[1], dict) else 0,
            reverse=True,
        )[: MAX_CLUSTERS - 1]
        self._others = dict(kept)
        doc = {
            "version": 2,
            "clusters": {
                self._cluster: {
                    "updated": now_ms,
                    "offsets": [
                        {
                            "topic": mq.topic,
                            "brokerName": mq.broker_name,
                            "queueId": mq.queue_id,
                            "offset": off,
                        }
                        for mq, off in sorted(table.items())
                    ],
                },
                **self._others,
            },
        }
        return json.dumps(doc, separators=(",", ":")).encode()

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


def _decode_offsets(entry: Any) -> dict[MessageQueue, int]:
    if not isinstance(entry, dict) or not isinstance(entry.get("offsets"), list):
        raise ValueError("a cluster entry has no offsets list")
    out: dict[MessageQueue, int] = {}
    for row in entry["offsets"]:
        mq = MessageQueue(str(row["topic"]), str(row["brokerName"]), int(row["queueId"]))
        out[mq] = int(row["offset"])
    return out
