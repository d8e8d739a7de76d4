"""Durability of the message store: group-commit fsync rounds and the checkpoint file.

The checkpoint (``<data_dir>/checkpoint``, JSON) only ever names a commit-log position up to
which the log *and* every index entry for it have been fsynced, with each queue's maximum at
that moment; recovery trusts everything before it and re-validates everything after.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from aiorocket.embedded.commit_log import CommitLog, FileCache, SyncJob
from aiorocket.embedded.consume_queue import ConsumeQueue

__all__ = [
    "CHECKPOINT_INTERVAL",
    "Checkpoint",
    "Flusher",
    "read_checkpoint",
]

_log = logging.getLogger("aiorocket.embedded.store")

#: seconds between checkpoints while the log moves (and the background period in sync mode)
CHECKPOINT_INTERVAL: Final = 1.0


@dataclass(slots=True)
class Checkpoint:
    """What the checkpoint file says: a durable log position and the queue maxima then."""

    offset: int
    queues: dict[tuple[str, int], int]


def _payload(offset: int, queues: Mapping[tuple[str, int], ConsumeQueue]) -> bytes:
    table: dict[str, dict[str, int]] = {}
    for (topic, qid), q in queues.items():
        if q.max_offset:
            table.setdefault(topic, {})[str(qid)] = q.max_offset
    return json.dumps({"version": 1, "commit_log": offset, "queues": table}).encode()


def _write_checkpoint(data_dir: Path, payload: bytes) -> None:
    # StoreCheckpoint: temp file + fsync + rename + fsync of the directory, so the file
    # is always either the old or the new complete checkpoint.
    final = data_dir / "checkpoint"
    tmp = data_dir / "checkpoint.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, final)
    dfd = os.open(data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_checkpoint(data_dir: Path) -> Checkpoint | None:
    """The checkpoint of the store in ``data_dir``; ``None`` if there is none or it cannot
    be read (logged: recovery then scans the whole log).

    Raises:
        OSError: the file exists but cannot be read.
    """
    path = data_dir / "checkpoint"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        doc: Any = json.loads(raw)
        offset = doc["commit_log"]
        if not isinstance(offset, int) or offset < 0:
            raise ValueError("bad offset")
        queues: dict[tuple[str, int], int] = {}
        for topic, ids in doc["queues"].items():
            for qid, mx in ids.items():
                if not isinstance(mx, int):
                    raise ValueError("bad queue max")
                queues[(str(topic), int(qid))] = mx
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        _log.warning("message store: ignoring unreadable checkpoint (%s); full scan", exc)
        return None
    return Checkpoint(offset, queues)


class Flusher:
    """The fsync rounds and checkpoints of one store, used from its event loop.

    Args:
        data_dir: where the checkpoint file lives.
        log: the commit log whose dirty pages each round syncs.
        files: the index files' descriptor cache (their dirty pages too).
        queues: the store's live queue table (read for the checkpoint's maxima).
    """

    def __init__(
        self,
        data_dir: Path,
        log: CommitLog,
        files: FileCache,
        queues: Mapping[tuple[str, int], ConsumeQueue],
    ) -> None:
        self._data_dir = data_dir
        self._log = log
        self._files = files
        self._queues = queues
        self._task: asyncio.Task[None] | None = None
        self._cp_time = 0.0
        #: the commit-log position up to which everything is known to be fsynced
        self.durable = 0
        #: the position the last checkpoint names (-1: none written yet)
        self.checkpoint_offset = -1
        #: completed fsync rounds
        self.flushes = 0
        #: the error that made the store refuse writes (a failed fsync or undo), if any
        self.failure: BaseException | None = None

    def sync_now(self) -> None:
        """Fsync everything and write a checkpoint at the log's end, blocking (recovery's
        last step, in its worker thread).

        Raises:
            OSError: an fsync or the checkpoint write failed.
        """
        job = SyncJob()
        self._log.take_dirty(job)
        self._files.take_dirty(job)
        job.run()
        end = self._log.end
        self.durable = end
        _write_checkpoint(self._data_dir, _payload(end, self._queues))
        self.checkpoint_offset = end

    def started(self) -> None:
        """The store opened: checkpoint age counts from now."""
        self._cp_time = time.monotonic()

    async def wait_durable(self, commit_log_end: int) -> None:
        """Return once the log up to ``commit_log_end`` (clamped to its end) is fsynced,
        sharing rounds with concurrent callers (see ``MessageStore.wait_durable``).

        Raises:
            OSError: the fsync failed (now or in an earlier round).
        """
        target = min(commit_log_end, self._log.end)
        while self.durable < target:
            if self.failure is not None:
                raise OSError(f"the message store failed to flush: {self.failure}")
            await asyncio.shield(self.start())

    def start(self) -> asyncio.Task[None]:
        """The fsync round running now, or a new one."""
        task = self._task
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self.flush_once())
            # A waiter may be cancelled; retrieve the outcome so it is never reported as lost.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._task = task
        return task

    def due(self) -> bool:
        """Whether the background task should start a round: unsynced data, or a durable
        position the checkpoint lags behind for `CHECKPOINT_INTERVAL`."""
        stale = self.durable != self.checkpoint_offset and (
            time.monotonic() - self._cp_time >= CHECKPOINT_INTERVAL
        )
        return self.failure is None and (self._log.end > self.durable or stale)

    async def finish(self) -> None:
        """The last round at close: wait for one in progress, then sync everything and
        write a final checkpoint (unless a round already failed).

        Raises:
            OSError: the final round failed.
        """
        task = self._task
        if task is not None and not task.done():
            with contextlib.suppress(Exception):  # its own waiters got the error
                await asyncio.shield(task)
        if self.failure is None:
            await self.flush_once(force_checkpoint=True)

    async def flush_once(self, *, force_checkpoint: bool = False) -> None:
        """One fsync round of everything written so far; with a checkpoint when forced or
        due.

        Raises:
            OSError: the fsync failed; `failure` is set.
        """
        # Everything below runs synchronously on the loop until the await, so ``target`` and
        # the dirty set describe the same instant: every entry before ``target`` is in them.
        target = self._log.end
        job = SyncJob()
        try:
            self._log.take_dirty(job)
            self._files.take_dirty(job)
        except BaseException:
            job.discard()
            raise
        payload: bytes | None = None
        now = time.monotonic()
        if force_checkpoint or (
            target != self.checkpoint_offset and now - self._cp_time >= CHECKPOINT_INTERVAL
        ):
            payload = _payload(target, self._queues)
        try:
            await asyncio.to_thread(self._sync, job, payload)
        except OSError as exc:
            self.failure = exc
            _log.error("message store: fsync failed, refusing further writes: %s", exc)
            raise
        self.flushes += 1
        if target > self.durable:
            self.durable = target
        if payload is not None:
            self.checkpoint_offset = target
            self._cp_time = now

    def _sync(self, job: SyncJob, checkpoint: bytes | None) -> None:
        job.run()
        if checkpoint is not None:
            _write_checkpoint(self._data_dir, checkpoint)
