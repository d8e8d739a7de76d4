"""The consume queue: a per-(topic, queue id) index into the commit log (``ConsumeQueue``).

Entry ``n`` of a queue is the message with queue offset ``n``: 28 bytes holding its
commit-log offset (int64), stored size without the trailer (int32), tags code (int64) and
store timestamp (int64), big-endian. RocketMQ's entry is 20 bytes and reads the store time
from the commit log when it searches by time; keeping it here makes
`ConsumeQueue.search_by_timestamp` touch only the index.

Files live under ``<consumequeue>/<topic>/<queue id>/``, each holding ``entries_per_segment``
entries and named by the queue offset of its first entry (20 digits). ``max_offset`` (the next
offset to assign) follows from the newest file's length, so that file is never deleted;
``min_offset`` is recomputed at start-up from the commit log's minimum, as
``ConsumeQueue.correctMinOffset`` does.

Synchronous and not thread-safe, like the commit log.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
from pathlib import Path
from typing import Final, NamedTuple

from aiorocket.embedded.commit_log import FileCache, segment_name

__all__ = ["ENTRY", "ENTRY_SIZE", "MAX_QUEUE_ID", "ConsumeQueue", "QueueEntry"]

_log = logging.getLogger(__name__)

#: commitLogOffset, size, tagsCode, storeTimestamp.
ENTRY: Final = struct.Struct(">qiqq")
ENTRY_SIZE: Final = ENTRY.size
#: the largest queue id (an int32 on the wire and in every record)
MAX_QUEUE_ID: Final = 0x7FFFFFFF
_TAIL_CHUNK: Final = 1024


class QueueEntry(NamedTuple):
    """One decoded consume-queue entry."""

    commit_log_offset: int
    size: int
    tags_code: int
    store_timestamp: int


def _list_bases(directory: str) -> dict[int, str]:
    out: dict[int, str] = {}
    try:
        with os.scandir(directory) as it:
            for entry in it:
                name = entry.name
                if len(name) == 20 and name.isascii() and name.isdigit():
                    out[int(name)] = entry.path
    except FileNotFoundError:
        pass
    return out


class ConsumeQueue:
    """The index of one message queue.

    ``min_offset`` is the first offset still readable, ``max_offset`` the next offset to be
    assigned (RocketMQ's ``getMinOffsetInQueue`` / ``getMaxOffsetInQueue``).
    """

    __slots__ = (
        "_dir",
        "_dir_ready",
        "_eps",
        "_files",
        "_r_base",
        "_r_path",
        "_seg_bytes",
        "_w_base",
        "_w_path",
        "max_offset",
        "min_offset",
        "queue_id",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        queue_id: int,
        directory: Path,
        *,
        entries_per_segment: int,
        files: FileCache,
    ) -> None:
        if entries_per_segment < 1:
            raise ValueError("entries_per_segment must be at least 1")
        self.topic = topic
        self.queue_id = queue_id
        self._dir = os.fspath(directory)
        self._eps = entries_per_segment
        self._seg_bytes = entries_per_segment * ENTRY_SIZE
        self._files = files
        self.min_offset = 0
        self.max_offset = 0
        self._w_base = -1
        self._w_path = ""
        self._r_base = -1
        self._r_path = ""
        self._dir_ready = False

    def __repr__(self) -> str:
        return (
            f"ConsumeQueue({self.topic!r}, {self.queue_id}, "
            f"min={self.min_offset}, max={self.max_offset})"
        )

    def _path(self, base: int) -> str:
        return os.path.join(self._dir, segment_name(base))

    def _ensure_dir(self) -> None:
        if self._dir_ready:
            return
        # Create <root>/<topic>/<qid>, marking each parent dirty so the new names get fsynced.
        topic_dir = os.path.dirname(self._dir)
        root = os.path.dirname(topic_dir)
        for path, parent in (
            (root, os.path.dirname(root)),
            (topic_dir, root),
            (self._dir, topic_dir),
        ):
            try:
                os.mkdir(path)
            except FileExistsError:
                continue
            self._files.mark_dir_dirty(parent)
        self._dir_ready = True

    @property
    def segment_count(self) -> int:
        """How many index files the queue spans (from its offsets; no I/O)."""
        if self.max_offset == 0:
            return 0
        last = (self.max_offset - 1) // self._eps
        first = min(self.min_offset, self.max_offset - 1) // self._eps
        return last - first + 1

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> bool:
        """Read the queue's extent from its files.

        A trailing partial entry (a torn write) is cut. Returns ``False`` when the files are
        not a consistent sequence (a file missing in the middle, a short or oversized
        non-final file, a misaligned name): the queue must then be rebuilt from the log.

        Raises:
            OSError: the directory cannot be read or a file cannot be shortened.
        """
        bases = _list_bases(self._dir)
        self._dir_ready = os.path.isdir(self._dir)
        self._w_base = self._r_base = -1
        if not bases:
            self.min_offset = self.max_offset = 0
            return True
        ordered = sorted(bases)
        eps = self._eps
        sizes = [os.stat(bases[b]).st_size for b in ordered]
        ok = all(b % eps == 0 for b in ordered)
        ok = ok and all(b2 - b1 == eps for b1, b2 in itertools.pairwise(ordered))
        ok = ok and all(s == self._seg_bytes for s in sizes[:-1]) and sizes[-1] <= self._seg_bytes
        if not ok:
            _log.warning(
                "consume queue %s/%d: inconsistent files, rebuilding", self.topic, self.queue_id
            )
            return False
        last_base, last_size = ordered[-1], sizes[-1]
        if last_size % ENTRY_SIZE:
            _log.warning(
                "consume queue %s/%d: cutting a partial entry (%d bytes)",
                self.topic,
                self.queue_id,
                last_size % ENTRY_SIZE,
            )
            last_size -= last_size % ENTRY_SIZE
            os.truncate(bases[last_base], last_size)
            self._files.mark_dirty(bases[last_base])
        self.min_offset = ordered[0]
        self.max_offset = last_base + last_size // ENTRY_SIZE
        return True

    # -- writing -----------------------------------------------------------------------------

    def append(
        self, commit_log_offset: int, size: int, tags_code: int, store_timestamp: int
    ) -> int:
        """Index a new message at `max_offset`; return its queue offset.

        Raises:
            OSError: the entry could not be written; nothing changed.
        """
        offset = self.max_offset
        base = offset - offset % self._eps
        if base != self._w_base:
            self._ensure_dir()
            self._w_base = base
            self._w_path = self._path(base)
        path = self._w_path
        self._put(
            path, (offset - base) * ENTRY_SIZE, commit_log_offset, size, tags_code, store_timestamp
        )
        self.max_offset = offset + 1
        return offset

    def _put(
        self, path: str, pos: int, commit_log_offset: int, size: int, tags: int, stored: int
    ) -> None:
        fd = self._files.fd(path, create=True)
        assert fd is not None
        data = ENTRY.pack(commit_log_offset, size, tags, stored)
        if os.pwrite(fd, data, pos) != ENTRY_SIZE:
            raise OSError(f"short write to {path}")
        self._files.mark_dirty(path)

    def write_at(
        self, offset: int, commit_log_offset: int, size: int, tags_code: int, store_timestamp: int
    ) -> None:
        """Write the entry for queue offset ``offset`` (recovery re-indexing; idempotent).

        Raises `max_offset` to ``offset + 1`` if needed; a gap below stays a hole of
        zeros, which readers treat as a removed message.

        Raises:
            OSError: the entry could not be written.
        """
        self._ensure_dir()
        base = offset - offset % self._eps
        path = self._path(base)
        self._put(
            path, (offset - base) * ENTRY_SIZE, commit_log_offset, size, tags_code, store_timestamp
        )
        if offset >= self.max_offset:
            self.max_offset = offset + 1

    def truncate(self, new_max: int) -> int:
        """Drop the entries at and after ``new_max``; return how many were dropped.

        Raises:
            OSError: a file could not be shortened or deleted.
        """
        if new_max >= self.max_offset:
            return 0
        new_max = max(new_max, 0)
        dropped = self.max_offset - new_max
        eps = self._eps
        for base, path in _list_bases(self._dir).items():
            if base >= new_max:
                self._files.forget(path)
                os.unlink(path)
                self._files.mark_dir_dirty(self._dir)
        if new_max:
            base = (new_max - 1) - (new_max - 1) % eps
            path = self._path(base)
            if os.path.exists(path):
                os.truncate(path, (new_max - base) * ENTRY_SIZE)
                self._files.mark_dirty(path)
        self.max_offset = new_max
        self.min_offset = min(self.min_offset, new_max)
        self._w_base = self._r_base = -1
        return dropped

    def trim_tail(self, cutoff: int, floor: int = 0) -> int:
        """Drop trailing entries that point at or past commit-log offset ``cutoff``, or are
        holes, but none below offset ``floor``; return how many were dropped.

        Recovery calls this for queues with no valid record after the checkpoint: any such
        entry was written for a record that did not survive.

        Raises:
            OSError: a read failed or a file could not be shortened.
        """
        new_max = self.max_offset
        eps = self._eps
        while new_max > floor:
            last = new_max - 1
            lo = max(last - last % eps, new_max - _TAIL_CHUNK, floor)
            data = self.read(lo, new_max - lo)
            if not data:
                break
            entries = list(ENTRY.iter_unpack(data))
            k = len(entries)
            while k and (entries[k - 1][1] <= 0 or entries[k - 1][0] >= cutoff):
                k -= 1
            if k:
                new_max = lo + k
                break
            new_max = lo
        return self.truncate(new_max)

    def destroy(self) -> None:
        """Delete every index file of the queue and reset it to empty (before a rebuild).

        Raises:
            OSError: a file could not be deleted.
        """
        for path in _list_bases(self._dir).values():
            self._files.forget(path)
            os.unlink(path)
            self._files.mark_dir_dirty(self._dir)
        self.min_offset = self.max_offset = 0
        self._w_base = self._r_base = -1

    # -- retention ---------------------------------------------------------------------------

    def advance_min(self, log_min: int) -> int:
        """Move `min_offset` to the first entry whose message is still in the log
        (commit-log offset ``>= log_min``), deleting index files that are wholly below it,
        except the one holding ``max_offset - 1``. Returns the new minimum.

        Mirrors ``ConsumeQueue.correctMinOffset`` + ``deleteExpiredFile``; entries are
        ordered by commit-log offset, so a binary search per file finds the boundary.

        Raises:
            OSError: a read failed or a file could not be deleted.
        """
        eps = self._eps
        lo = self.min_offset
        mx = self.max_offset
        files = self._files
        listing: dict[int, str] | None = None
        while lo < mx:
            base = lo - lo % eps
            seg_end = min(base + eps, mx)
            path = self._path(base)
            fd = files.fd(path)
            if fd is None:
                # A missing file below the newest one (a rebuilt queue's holes): skip ahead.
                if listing is None:
                    listing = _list_bases(self._dir)
                later = [b for b in listing if b > base]
                lo = max(min(later), lo) if later else mx
                continue
            first = self._first_live(fd, base, lo, seg_end, log_min)
            if first < seg_end:
                lo = first
                break
            if seg_end < mx:
                files.forget(path)
                os.unlink(path)
                files.mark_dir_dirty(self._dir)
            lo = seg_end
        self.min_offset = min(lo, mx)
        return self.min_offset

    @staticmethod
    def _first_live(fd: int, base: int, lo: int, hi: int, log_min: int) -> int:
        # Live = a real entry (size > 0) whose record is still in the log. Holes (zeros) come
        # only before real entries, which are ordered by commit-log offset: a monotone test.
        while lo < hi:
            mid = (lo + hi) // 2
            raw = os.pread(fd, ENTRY_SIZE, (mid - base) * ENTRY_SIZE)
            if len(raw) < ENTRY_SIZE:
                hi = mid
                continue
            clo, size, _, _ = ENTRY.unpack(raw)
            if size > 0 and clo >= log_min:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # -- reading -----------------------------------------------------------------------------

    def read(self, offset: int, count: int) -> bytes | None:
        """Up to ``count`` raw entries from ``offset``, never crossing an index file.

        Returns ``b""`` when ``offset`` is outside ``[0, max_offset)`` and ``None`` when the
        file that should hold it is missing (RocketMQ's OFFSET_FOUND_NULL case).

        Raises:
            OSError: a read failed.
        """
        eps = self._eps
        base = offset - offset % eps
        n = min(count, self.max_offset - offset, base + eps - offset)
        if n <= 0 or offset < 0:
            return b""
        if base == self._r_base:
            path = self._r_path
        else:
            path = self._path(base)
            self._r_base = base
            self._r_path = path
        fd = self._files.fd(path)
        if fd is None:
            return None
        data = os.pread(fd, n * ENTRY_SIZE, (offset - base) * ENTRY_SIZE)
        extra = len(data) % ENTRY_SIZE
        return data[: len(data) - extra] if extra else data

    def entry(self, offset: int) -> QueueEntry | None:
        """The entry at ``offset``, or ``None`` if it is outside the queue or unreadable.

        Raises:
            OSError: a read failed.
        """
        data = self.read(offset, 1)
        if not data:
            return None
        return QueueEntry._make(ENTRY.unpack(data))

    def next_segment_start(self, offset: int) -> int:
        """The first queue offset of the index file after the one holding ``offset``."""
        return offset - offset % self._eps + self._eps

    def search_by_timestamp(self, timestamp: int) -> int:
        """The queue offset whose store time is closest to ``timestamp`` (docs/protocol.md §6.5).

        Of several messages with the chosen time, the first. Before the first message: the
        first offset; after the last: the last message's offset (not ``max_offset``); an
        equal distance goes to the earlier time, like ``ConsumeQueue.getOffsetInQueueByTime``.
        Returns 0 for an empty queue.

        Raises:
            OSError: a read failed.
        """
        lo, hi = self.min_offset, self.max_offset
        if lo >= hi:
            return 0
        first, last = lo, hi - 1
        lo = self._first_at_or_after(timestamp, first, hi)
        if lo > last:
            return last
        if lo == first:
            return first
        right = self.entry(lo)
        left = self.entry(lo - 1)
        if right is None or left is None:
            return lo
        if right.store_timestamp == timestamp:
            return lo
        if timestamp - left.store_timestamp > right.store_timestamp - timestamp:
            return lo
        # The earlier neighbour wins; start at the first message stored in that millisecond.
        return self._first_at_or_after(left.store_timestamp, first, lo - 1)

    def _first_at_or_after(self, timestamp: int, lo: int, hi: int) -> int:
        # First offset in [lo, hi) with store time >= timestamp (times grow with offsets).
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e.store_timestamp < timestamp:
                lo = mid + 1
            else:
                hi = mid
        return lo
