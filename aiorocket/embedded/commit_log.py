"""The commit log: every stored record, appended to segment files (RocketMQ's ``CommitLog``).

On disk, ``<dir>/<20-digit base offset>`` files hold entries back to back. An entry is one
stored record (docs/protocol.md §4.1) followed by a 4-byte CRC-32 of the record's bytes: the
record's own ``bodyCRC`` covers only the body, while recovery must recognise any torn or
corrupt tail. A record's ``commitLogOffset`` is the global position of its first byte.

Unlike RocketMQ, segments are not preallocated or memory-mapped: a segment file is exactly
as long as its data and the next one starts where it ends, so global offsets are contiguous
and resident memory does not grow with the data. A segment rolls when the next entry does not
fit; an entry never spans two segments.

Writes go straight to the kernel with ``os.pwritev`` (no user-space buffer, so a killed process
loses nothing that was written); reads use ``os.pread``. Everything here is synchronous and
meant for one event-loop thread, except `SyncJob.run`, which touches only file
descriptors duplicated for it and is meant for a worker thread.
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import logging
import os
import struct
import zlib
from collections import OrderedDict
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from aiorocket._protocol.message import MAGIC_V1, MAGIC_V2
from aiorocket.errors import MessageTooLargeError

__all__ = [
    "MIN_RECORD_SIZE",
    "RECORD_HEAD",
    "TRAILER",
    "TRAILER_SIZE",
    "CommitLog",
    "FileCache",
    "SegmentInfo",
    "SyncJob",
    "check_entry",
    "segment_name",
]

_log = logging.getLogger(__name__)

#: The per-entry trailer: CRC-32 (zlib polynomial) of the record bytes, unsigned big-endian.
TRAILER: Final = struct.Struct(">I")
TRAILER_SIZE: Final = TRAILER.size
#: The leading fields every record shares whatever its host widths: storeSize, magicCode,
#: bodyCRC, queueId, flag, queueOffset, commitLogOffset.
RECORD_HEAD: Final = struct.Struct(">iIIiiqq")
#: The smallest stored record: the 84-byte IPv4 prefix, bodyLength, topic length, props length.
MIN_RECORD_SIZE: Final = 84 + 4 + 1 + 2
#: Magic codes a stored record may carry (MessageDecoder MESSAGE_MAGIC_CODE / _V2).
_MAGICS: Final = frozenset({MAGIC_V1, MAGIC_V2})

_SCAN_CHUNK: Final = 4 * 1024 * 1024
_FIRST_READ: Final = 4096
_NAME_DIGITS: Final = 20


def segment_name(base: int) -> str:
    """The file name of the segment (or index file) that starts at ``base``: 20 digits.

    Mirrors ``UtilAll.offset2FileName``. Never raises for ``0 <= base < 10**20``.
    """
    return f"{base:020d}"


def _parse_name(name: str) -> int | None:
    if len(name) == _NAME_DIGITS and name.isascii() and name.isdigit():
        return int(name)
    return None


def _pwrite_all(fd: int, parts: list[bytes], offset: int) -> None:
    """Write ``parts`` at ``offset`` completely; one syscall in the usual case."""
    total = sum(len(p) for p in parts)
    written = os.pwritev(fd, parts, offset)
    if written == total:
        return
    # A short write (disk full, signal): finish it piecewise, or raise trying.
    data = b"".join(parts)
    while written < total:
        n = os.pwrite(fd, data[written:], offset + written)
        if n <= 0:
            raise OSError(errno.EIO, "short write")
        written += n


class SyncJob:
    """The files and directories to fsync for one flush, prepared on the event-loop thread.

    Open files are handed over as duplicated descriptors, so the loop may close or evict its
    own descriptors (or delete the files) while `run` works in a thread.
    """

    __slots__ = ("_dirs", "_fds", "_paths")

    def __init__(self) -> None:
        self._fds: list[int] = []
        self._paths: list[str] = []
        self._dirs: list[str] = []

    def add_fd(self, fd: int) -> None:
        """Schedule a data sync of the open file ``fd`` (duplicated; the caller keeps ``fd``).

        Raises:
            OSError: the descriptor cannot be duplicated.
        """
        self._fds.append(os.dup(fd))

    def add_path(self, path: str) -> None:
        """Schedule a data sync of the file at ``path``, opened in `run`."""
        self._paths.append(path)

    def add_dir(self, path: str) -> None:
        """Schedule an fsync of directory ``path`` (new or removed entries)."""
        self._dirs.append(path)

    @property
    def empty(self) -> bool:
        """Whether there is nothing to sync."""
        return not (self._fds or self._paths or self._dirs)

    def discard(self) -> None:
        """Close the duplicated descriptors without syncing (the job will not run)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            os.close(fd)

    def run(self) -> None:
        """Sync everything scheduled; blocking, meant for a worker thread.

        A file or directory deleted in the meantime is skipped: nobody can read it any more.
        Every duplicated descriptor is closed, even on failure.

        Raises:
            OSError: an fsync failed. The data may not be durable; the caller must not
                report it as such.
        """
        fds, self._fds = self._fds, []
        try:
            for fd in fds:
                os.fdatasync(fd)
            for path in self._paths:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                try:
                    os.fdatasync(fd)
                finally:
                    os.close(fd)
            for path in self._dirs:
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
                except FileNotFoundError:
                    continue
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        finally:
            for fd in fds:
                os.close(fd)


class FileCache:
    """A bounded LRU of open file descriptors keyed by path, with dirty tracking.

    Keeps the number of open files bounded however many queues and segments exist. A
    descriptor returned by `fd` is valid until the next call on this cache, so callers
    use it at once and never keep it.
    """

    __slots__ = ("_capacity", "_dirty", "_dirty_dirs", "_fds")

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("a file cache needs room for at least 2 descriptors")
        self._capacity = capacity
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._dirty: set[str] = set()
        self._dirty_dirs: set[str] = set()

    def __len__(self) -> int:
        return len(self._fds)

    def fd(self, path: str, *, create: bool = False) -> int | None:
        """A read-write descriptor for ``path``; ``None`` if it does not exist and not ``create``.

        A newly created file marks its directory dirty, so the next sync makes its name
        durable too.

        Raises:
            OSError: the file cannot be opened or created.
        """
        fds = self._fds
        fd = fds.get(path)
        if fd is not None:
            fds.move_to_end(path)
            return fd
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            if not create:
                return None
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            self._dirty_dirs.add(os.path.dirname(path))
        self.adopt(path, fd)
        return fd

    def adopt(self, path: str, fd: int) -> None:
        """Take ownership of the open descriptor ``fd`` for ``path``, evicting the oldest."""
        fds = self._fds
        old = fds.pop(path, None)
        if old is not None and old != fd:
            os.close(old)
        fds[path] = fd
        while len(fds) > self._capacity:
            _, victim = fds.popitem(last=False)
            os.close(victim)

    def mark_dirty(self, path: str) -> None:
        """Record that ``path`` was written since the last `take_dirty`."""
        self._dirty.add(path)

    def mark_dir_dirty(self, path: str) -> None:
        """Record that directory ``path`` gained or lost an entry."""
        self._dirty_dirs.add(path)

    def forget(self, path: str) -> None:
        """Close the descriptor of ``path`` if open and drop it from the dirty set.

        Used before a file is deleted or truncated away.
        """
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)
        self._dirty.discard(path)

    def take_dirty(self, job: SyncJob) -> None:
        """Move every dirty file and directory into ``job`` and start a new dirty set.

        Raises:
            OSError: a descriptor cannot be duplicated (too many open files).
        """
        dirty, self._dirty = self._dirty, set()
        dirs, self._dirty_dirs = self._dirty_dirs, set()
        fds = self._fds
        for path in dirty:
            fd = fds.get(path)
            if fd is None:
                job.add_path(path)
            else:
                job.add_fd(fd)
        for path in dirs:
            job.add_dir(path)

    def close(self) -> None:
        """Close every descriptor. Dirty marks are dropped: sync first."""
        fds, self._fds = self._fds, OrderedDict()
        for fd in fds.values():
            os.close(fd)
        self._dirty.clear()
        self._dirty_dirs.clear()


@dataclass(slots=True)
class _Segment:
    base: int
    path: str
    size: int
    mtime_ms: int


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One commit-log segment: global base offset, bytes held, last write time (ms)."""

    base: int
    size: int
    last_write_ms: int


@dataclass(slots=True)
class _ScanState:
    end: int = 0
    error: str | None = None


class CommitLog:
    """The segmented, append-only log of stored records.

    Call `load` once before anything else. All methods are synchronous and not
    thread-safe: use them from one thread (the store's event loop, or its recovery thread
    before the loop takes over).
    """

    def __init__(self, directory: Path, *, segment_size: int, files: FileCache) -> None:
        if segment_size < MIN_RECORD_SIZE + TRAILER_SIZE:
            raise ValueError(f"segment_size {segment_size} cannot hold a single record")
        self._dir = directory
        self._dir_str = os.fspath(directory)
        self._segment_size = segment_size
        self._files = files
        self._segments: list[_Segment] = []
        self._bases: list[int] = []
        self._active_fd: int | None = None
        self._active_dirty = False
        self._end = 0
        self._total = 0
        self._scan = _ScanState()

    # -- state -------------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """The global offset of the oldest byte still stored (the first segment's base)."""
        return self._segments[0].base if self._segments else self._end

    @property
    def end(self) -> int:
        """The global offset where the next entry will be written (RocketMQ's max offset)."""
        return self._end

    @property
    def total_bytes(self) -> int:
        """Bytes held by all segments."""
        return self._total

    @property
    def segment_size(self) -> int:
        """The configured maximum segment length in bytes."""
        return self._segment_size

    @property
    def open_files(self) -> int:
        """Descriptors held outside the shared file cache (the active segment's)."""
        return 0 if self._active_fd is None else 1

    def segments(self) -> list[SegmentInfo]:
        """A snapshot of the segments, oldest first."""
        return [SegmentInfo(s.base, s.size, s.mtime_ms) for s in self._segments]

    # -- loading -----------------------------------------------------------------------------

    def load(self) -> int:
        """Find the segments on disk and open the newest for appending.

        Segments must be contiguous (each starts where the previous ends). After a gap, which
        only damage can cause, the later segments cannot be trusted and are deleted, as
        RocketMQ's recovery deletes files past the last valid offset.

        Returns:
            The number of bytes deleted because of a gap.

        Raises:
            OSError: the directory cannot be read or a file cannot be opened.
        """
        self._dir.mkdir(parents=True, exist_ok=True)
        found: list[_Segment] = []
        with os.scandir(self._dir_str) as it:
            for entry in it:
                base = _parse_name(entry.name)
                if base is None or not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
                found.append(_Segment(base, entry.path, st.st_size, st.st_mtime_ns // 1_000_000))
        found.sort(key=lambda s: s.base)
        cut = 0
        for i in range(1, len(found)):
            prev = found[i - 1]
            if found[i].base != prev.base + prev.size:
                for seg in found[i:]:
                    _log.warning(
                        "commit log: deleting segment %s (%d bytes) after a gap at offset %d",
                        seg.path,
                        seg.size,
                        prev.base + prev.size,
                    )
                    cut += seg.size
                    os.unlink(seg.path)
                self._files.mark_dir_dirty(self._dir_str)
                del found[i:]
                break
        self._segments = found
        self._bases = [s.base for s in found]
        self._total = sum(s.size for s in found)
        if found:
            last = found[-1]
            self._end = last.base + last.size
            self._active_fd = os.open(last.path, os.O_RDWR | os.O_CLOEXEC)
        return cut

    def start_at(self, offset: int) -> None:
        """Make an empty log start at ``offset`` instead of 0 (after all data was lost).

        Keeps offsets from going backwards when the checkpoint knows a later position.
        """
        if not self._segments and offset > self._end:
            self._end = offset

    # -- appending ---------------------------------------------------------------------------

    def _roll(self, now_ms: int) -> _Segment:
        # The new segment starts exactly at the current end, so offsets handed out before the
        # roll remain valid whichever file the entry lands in.
        old = self._segments[-1] if self._segments else None
        if old is not None and self._active_fd is not None:
            self._files.adopt(old.path, self._active_fd)
            if self._active_dirty:
                # Still to be synced: the file cache now tracks it like any other file.
                self._files.mark_dirty(old.path)
        self._active_fd = None
        self._active_dirty = False
        path = os.path.join(self._dir_str, segment_name(self._end))
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        self._files.mark_dir_dirty(self._dir_str)
        seg = _Segment(self._end, path, 0, now_ms)
        self._segments.append(seg)
        self._bases.append(seg.base)
        self._active_fd = fd
        return seg

    def append(self, record: bytes, now_ms: int) -> int:
        """Append ``record`` and its CRC trailer; return the record's global offset.

        The offset always equals `end` before the call (a roll does not change it), so
        callers can write it into the record before encoding.

        Raises:
            MessageTooLargeError: the entry is larger than a segment.
            OSError: the write failed; nothing was appended.
        """
        n = len(record) + TRAILER_SIZE
        if n > self._segment_size:
            raise MessageTooLargeError(
                f"stored record of {len(record)} bytes does not fit a commit-log segment of "
                f"{self._segment_size} bytes"
            )
        offset = self._end
        if not self._segments:
            seg = self._roll(now_ms)
        else:
            seg = self._segments[-1]
            if offset - seg.base + n > self._segment_size and seg.size:
                seg = self._roll(now_ms)
        fd = self._active_fd
        assert fd is not None
        pos = offset - seg.base
        try:
            _pwrite_all(fd, [record, TRAILER.pack(zlib.crc32(record))], pos)
        except OSError:
            # Leave no partial entry behind for the next append to interleave with.
            try:
                os.ftruncate(fd, pos)
            except OSError:
                _log.exception("commit log: cannot cut a failed write at %d", offset)
            raise
        self._end = offset + n
        seg.size += n
        seg.mtime_ms = now_ms
        self._total += n
        self._active_dirty = True
        return offset

    # -- reading -----------------------------------------------------------------------------

    def _fd_for(self, index: int) -> int | None:
        if index == len(self._segments) - 1 and self._active_fd is not None:
            return self._active_fd
        return self._files.fd(self._segments[index].path)

    def read_span(self, offset: int, length: int) -> bytes | None:
        """The ``length`` bytes starting at global ``offset``, or ``None`` if any are gone.

        The span may cross segment boundaries. Nothing is validated here.

        Raises:
            OSError: a read failed.
        """
        if length <= 0 or offset < self.min_offset or offset + length > self._end:
            return None
        i = bisect.bisect_right(self._bases, offset) - 1
        seg = self._segments[i]
        pos = offset - seg.base
        if pos + length <= seg.size:
            fd = self._fd_for(i)
            if fd is None:
                return None
            data = os.pread(fd, length, pos)
            return data if len(data) == length else None
        parts: list[bytes] = []
        remaining = length
        while remaining:
            if i >= len(self._segments):
                return None
            seg = self._segments[i]
            n = min(remaining, seg.size - pos)
            fd = self._fd_for(i)
            if fd is None or n <= 0:
                return None
            part = os.pread(fd, n, pos)
            if len(part) != n:
                return None
            parts.append(part)
            remaining -= n
            i += 1
            pos = 0
        return b"".join(parts)

    def read_record(self, offset: int) -> bytes | None:
        """The validated record (trailer stripped) that starts at ``offset``, else ``None``.

        ``None`` when the offset is outside the log, does not start an entry, or the entry
        fails its checks (size, magic, stored offset, trailer CRC).

        Raises:
            OSError: a read failed.
        """
        if offset < self.min_offset or offset + MIN_RECORD_SIZE + TRAILER_SIZE > self._end:
            return None
        i = bisect.bisect_right(self._bases, offset) - 1
        seg = self._segments[i]
        pos = offset - seg.base
        avail = seg.size - pos
        fd = self._fd_for(i)
        if fd is None or avail < MIN_RECORD_SIZE + TRAILER_SIZE:
            return None
        buf = os.pread(fd, min(avail, _FIRST_READ), pos)
        if len(buf) < RECORD_HEAD.size:
            return None
        size = RECORD_HEAD.unpack_from(buf)[0]
        if size < MIN_RECORD_SIZE or size + TRAILER_SIZE > avail:
            return None
        if size + TRAILER_SIZE > len(buf):
            buf += os.pread(fd, size + TRAILER_SIZE - len(buf), pos + len(buf))
        return check_entry(buf, 0, offset)

    # -- recovery ----------------------------------------------------------------------------

    def scan(self, start: int) -> Generator[tuple[int, bytes], None, None]:
        """Yield ``(offset, record)`` for each valid entry from ``start`` to the first bad one.

        ``start`` must be an entry boundary. When the iterator is exhausted,
        `scan_end` is where valid data stops and `scan_error` says why (``None``
        at the true end). Reads 4 MiB at a time; nothing is held per record.

        Raises:
            OSError: a read failed.
        """
        self._scan = state = _ScanState(end=start)
        if start >= self._end:
            state.end = self._end
            return
        i = max(bisect.bisect_right(self._bases, start) - 1, 0)
        offset = max(start, self.min_offset)
        state.end = offset
        while i < len(self._segments):
            seg = self._segments[i]
            fd = self._fd_for(i)
            if fd is None:
                state.error = f"segment {seg.path} vanished"
                return
            pos = offset - seg.base
            buf = b""
            buf_pos = pos
            while pos < seg.size:
                avail = seg.size - pos
                if avail < MIN_RECORD_SIZE + TRAILER_SIZE:
                    state.error = f"{avail} trailing bytes cannot hold an entry"
                    return
                rel = pos - buf_pos
                if len(buf) - rel < RECORD_HEAD.size:
                    buf = os.pread(fd, min(_SCAN_CHUNK, avail), pos)
                    buf_pos, rel = pos, 0
                size, magic = struct.unpack_from(">iI", buf, rel)
                if size < MIN_RECORD_SIZE or size + TRAILER_SIZE > avail:
                    state.error = f"storeSize {size} with {avail} bytes left in the segment"
                    return
                if magic not in _MAGICS:
                    state.error = f"unknown magic 0x{magic:08X}"
                    return
                if len(buf) - rel < size + TRAILER_SIZE:
                    buf = os.pread(fd, max(min(_SCAN_CHUNK, avail), size + TRAILER_SIZE), pos)
                    buf_pos, rel = pos, 0
                    if len(buf) < size + TRAILER_SIZE:
                        state.error = "short read"
                        return
                record = check_entry(buf, rel, offset)
                if record is None:
                    state.error = "trailer CRC or stored offset mismatch"
                    return
                yield offset, record
                pos += size + TRAILER_SIZE
                offset += size + TRAILER_SIZE
                state.end = offset
            i += 1
            if i < len(self._segments):
                offset = self._segments[i].base
                state.end = offset

    @property
    def scan_end(self) -> int:
        """After `scan`: the offset just past the last valid entry."""
        return self._scan.end

    @property
    def scan_error(self) -> str | None:
        """After `scan`: why scanning stopped early, or ``None`` if it reached the end."""
        return self._scan.error

    def truncate(self, offset: int) -> int:
        """Cut the log at ``offset``: shorten its segment, delete every later one.

        Used by recovery to drop a torn or corrupt tail, and to undo an append whose index
        write failed. Returns the number of bytes removed.

        Raises:
            OSError: a file could not be shortened or deleted.
        """
        if offset >= self._end or not self._segments:
            return 0
        offset = max(offset, self.min_offset)
        i = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        removed = self._end - offset
        # Drop whole later segments first (newest first), then shorten the one holding offset.
        while len(self._segments) > i + 1:
            seg = self._segments.pop()
            self._bases.pop()
            if self._active_fd is not None:
                os.close(self._active_fd)
                self._active_fd = None
            self._files.forget(seg.path)
            os.unlink(seg.path)
            self._files.mark_dir_dirty(self._dir_str)
            self._total -= seg.size
        seg = self._segments[i]
        if self._active_fd is None:
            fd = self._files.fd(seg.path)
            assert fd is not None
            self._active_fd = os.dup(fd)
            self._files.forget(seg.path)
        keep = offset - seg.base
        os.ftruncate(self._active_fd, keep)
        self._total -= seg.size - keep
        seg.size = keep
        self._end = offset
        self._active_dirty = True
        return removed

    # -- retention ---------------------------------------------------------------------------

    def delete_expired(self, now_ms: int, max_age_ms: int, max_bytes: int | None) -> int:
        """Delete the oldest segments that are older than ``max_age_ms`` (by last write) or
        beyond ``max_bytes`` in total; never the active (newest) segment.

        Mirrors ``CommitLog.deleteExpiredFile``: whole files only, oldest first, stopping at
        the first one that must stay. Returns how many segments were deleted.

        Raises:
            OSError: a file could not be deleted.
        """
        deleted = 0
        while len(self._segments) > 1:
            seg = self._segments[0]
            expired = now_ms - seg.mtime_ms >= max_age_ms
            over = max_bytes is not None and self._total > max_bytes
            if not (expired or over):
                break
            _log.info(
                "commit log: deleting segment %s (%d bytes, %s)",
                seg.path,
                seg.size,
                "expired" if expired else "over the size limit",
            )
            self._files.forget(seg.path)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(seg.path)
            self._segments.pop(0)
            self._bases.pop(0)
            self._total -= seg.size
            self._files.mark_dir_dirty(self._dir_str)
            deleted += 1
        return deleted

    # -- durability --------------------------------------------------------------------------

    def take_dirty(self, job: SyncJob) -> None:
        """Move the active segment into ``job`` if it was written since the last call.

        Rolled segments are tracked by the shared `FileCache`.

        Raises:
            OSError: the descriptor cannot be duplicated.
        """
        if self._active_dirty and self._active_fd is not None:
            job.add_fd(self._active_fd)
            self._active_dirty = False

    def close(self) -> None:
        """Close the active segment's descriptor (the file cache owns the others)."""
        if self._active_fd is not None:
            os.close(self._active_fd)
            self._active_fd = None


def check_entry(buf: bytes, pos: int, offset: int) -> bytes | None:
    """Validate the entry at ``buf[pos:]`` that should sit at global ``offset``.

    Returns the record bytes (trailer stripped), or ``None`` if the size is insane, the magic
    unknown, the record's stored ``commitLogOffset`` differs from ``offset``, or the trailer
    CRC does not match. Never raises.
    """
    if len(buf) - pos < RECORD_HEAD.size:
        return None
    size, magic, _crc, _qid, _flag, _qo, stored = RECORD_HEAD.unpack_from(buf, pos)
    end = pos + size
    if size < MIN_RECORD_SIZE or end + TRAILER_SIZE > len(buf) or magic not in _MAGICS:
        return None
    if stored != offset:
        return None
    record = buf[pos:end]
    if zlib.crc32(record) != TRAILER.unpack_from(buf, end)[0]:
        return None
    return record
