"""The embedded broker's durable message store (RocketMQ's ``DefaultMessageStore``).

Layout under ``data_dir``::

    lock                                   held (flock) while a store has the directory open
    checkpoint                             JSON: a durable commit-log position + queue maxima
    commitlog/<20-digit base offset>       record + CRC-32 trailer, back to back
    consumequeue/<topic>/<queue id>/<20-digit first queue offset>   28-byte entries

Rules that make crash recovery simple:

* :meth:`MessageStore.put` is synchronous: it assigns the offsets, writes the record to the log
  and its index entry, with no await in between, so entries appear in log order.
* The checkpoint only ever names a position up to which the log *and* every index entry for
  it have been fsynced. Recovery trusts everything before it and re-validates everything after.
* Nothing per message is kept in memory: offsets live in the index files, records in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import json
import logging
import os
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Self

from aiorocket._protocol import accel
from aiorocket._protocol.message import (
    MAGIC_V1,
    MAGIC_V2,
    MessageRecord,
    decode_message,
    encode_message,
)
from aiorocket._protocol.properties import DELAY, TAGS
from aiorocket._protocol.tags import tags_code as _hash_tag
from aiorocket.embedded.commit_log import (
    RECORD_HEAD,
    TRAILER,
    TRAILER_SIZE,
    CommitLog,
    FileCache,
    SyncJob,
)
from aiorocket.embedded.consume_queue import ENTRY, ConsumeQueue, QueueEntry
from aiorocket.errors import (
    ClientClosedError,
    ConfigurationError,
    InvalidNameError,
    RemoteProtocolError,
)

__all__ = [
    "DEFAULT_MAX_BYTES",
    "SCHEDULE_TOPIC",
    "GetResult",
    "GetStatus",
    "MessageStore",
    "PutResult",
    "StoreStatistics",
    "default_tags_code",
    "use_compiled",
]

_log = logging.getLogger(__name__)

#: ``TopicValidator.RMQ_SYS_SCHEDULE_TOPIC``: where delayed messages wait (REMOTING.md §6.6).
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
#: ``maxTransferBytesOnMessageInMemory``: the default byte budget of one :meth:`get`.
DEFAULT_MAX_BYTES: Final = 256 * 1024

# The default ``messageDelayLevel`` table, levels 1..18 (REMOTING.md §6.6).
_DELAY_LEVELS_MS: Final = tuple(
    s * 1000
    for s in (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800, 3600, 7200)
)
# TopicValidator: the name rule, checked before a topic becomes a directory name.
_TOPIC_RE: Final = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")
_MAX_QUEUE_ID: Final = 0x7FFFFFFF
# DefaultMessageStore.getMessage scans at most max(16000 bytes of 20-byte units, maxMsgNums)
# entries per call when filtering, so a sparse tag never makes one pull read the whole queue.
_MAX_FILTER_SCAN: Final = 800
# get() reads neighbouring records with one pread when at most this many foreign bytes lie
# between them, up to this much in one read.
_MAX_READ_GAP: Final = 16 * 1024
_MAX_READ_SPAN: Final = 1024 * 1024
_CHECKPOINT_INTERVAL: Final = 1.0
_CLEAN_INTERVAL: Final = 10.0
_MAGICS: Final = frozenset({MAGIC_V1, MAGIC_V2})
_DEFAULT_SEGMENT_SIZE: Final = 256 * 1024 * 1024
# MessageStoreConfig.mappedFileSizeConsumeQueue is 300 000 entries.
_DEFAULT_CQ_ENTRIES: Final = 300_000


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def default_tags_code(record: MessageRecord) -> int:
    """The consume-queue tags code the store derives for a record when re-indexing it.

    The Java hash of its ``TAGS`` property (0 without one, REMOTING.md §6.3); for
    ``SCHEDULE_TOPIC_XXXX`` the delivery time instead: store time plus the delay of the
    ``DELAY`` level (clamped to 1..18), as ``ScheduleMessageService.computeDeliverTimestamp``
    does with the default levels. Never raises.
    """
    props = record.properties
    if record.topic == SCHEDULE_TOPIC:
        try:
            level = int(props.get(DELAY, "1"))
        except ValueError:
            level = 1
        level = min(max(level, 1), len(_DELAY_LEVELS_MS))
        return record.store_timestamp + _DELAY_LEVELS_MS[level - 1]
    return _hash_tag(props.get(TAGS))


class GetStatus(enum.Enum):
    """The outcome of :meth:`MessageStore.get`: Java's ``GetMessageStatus``.

    The value is the Java name, which a broker sends as the pull response's remark.
    REMOTING.md §3.3 maps each one to a wire code.
    """

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(frozen=True, slots=True)
class PutResult:
    """Where :meth:`MessageStore.put` stored a record.

    ``commit_log_end`` is the log position just after the record's entry: pass it to
    :meth:`MessageStore.wait_durable`.
    """

    queue_offset: int
    commit_log_offset: int
    store_timestamp: int
    store_size: int
    commit_log_end: int


@dataclass(frozen=True, slots=True)
class GetResult:
    """The answer of :meth:`MessageStore.get` (Java's ``GetMessageResult``).

    ``messages`` are raw stored records (REMOTING.md §4.1), ready to be concatenated into a
    pull response body; ``tags_codes`` and ``queue_offsets`` run parallel to them.
    ``scanned`` counts the index entries examined, matched or not.
    """

    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[bytes] = field(default_factory=list)
    scanned: int = 0
    tags_codes: list[int] = field(default_factory=list)
    queue_offsets: list[int] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        """The summed size of :attr:`messages`."""
        return sum(len(m) for m in self.messages)


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """A snapshot of a :class:`MessageStore`.

    Counters ending in ``_put`` and ``flushes`` (fsync rounds) count since
    :meth:`MessageStore.open`; ``recovered_*`` describe what the last recovery did.
    """

    messages_put: int
    bytes_put: int
    commit_log_min_offset: int
    commit_log_max_offset: int
    durable_offset: int
    flushes: int
    checkpoint_offset: int
    commit_log_bytes: int
    commit_log_segments: int
    queues: int
    consume_queue_segments: int
    open_files: int
    segments_deleted: int
    recovered_truncated_bytes: int
    recovered_reindexed: int
    recovered_rebuilt_queues: int
    recovery_seconds: float


@dataclass(slots=True)
class _Checkpoint:
    offset: int
    queues: dict[tuple[str, int], int]


class _State(enum.Enum):
    NEW = 0
    OPEN = 1
    CLOSED = 2


class MessageStore:
    """A durable, segmented message store for one broker, used from one event loop.

    Args:
        data_dir: the store's directory; created if missing.
        flush: ``"async"``: a background task fsyncs every ``flush_interval`` seconds, so a
            power loss may lose that window (a killed process loses nothing). ``"sync"``: the
            broker awaits :meth:`wait_durable` before acknowledging; the background task then
            only writes checkpoints.
        flush_interval: seconds between background flushes, in (0, 0.5].
        segment_size: the commit-log segment size in bytes; a record larger than that (minus
            its 4-byte trailer) is refused.
        cq_entries_per_segment: entries per consume-queue file.
        retention_hours: commit-log segments whose last write is older are deleted.
        retention_bytes: if set, the oldest segments are deleted while the log is larger.
        clock: the store-time source, in ms since the epoch.
        tags_code_of: how recovery computes a tags code when it re-indexes a record;
            :func:`default_tags_code` unless the broker computes codes differently.
        max_open_files: bound on the descriptors held for index and old log files.

    Raises:
        ConfigurationError: an option is out of range.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        flush: Literal["async", "sync"] = "async",
        flush_interval: float = 0.2,
        segment_size: int = _DEFAULT_SEGMENT_SIZE,
        cq_entries_per_segment: int = _DEFAULT_CQ_ENTRIES,
        retention_hours: float = 72.0,
        retention_bytes: int | None = None,
        clock: Callable[[], int] = _wall_clock_ms,
        tags_code_of: Callable[[MessageRecord], int] = default_tags_code,
        max_open_files: int = 256,
    ) -> None:
        if flush not in ("async", "sync"):
            raise ConfigurationError(f"flush must be 'async' or 'sync', not {flush!r}")
        if not 0 < flush_interval <= 0.5:
            raise ConfigurationError("flush_interval must be in (0, 0.5] seconds")
        if segment_size < 4096:
            raise ConfigurationError("segment_size must be at least 4096 bytes")
        if cq_entries_per_segment < 1:
            raise ConfigurationError("cq_entries_per_segment must be at least 1")
        if retention_hours <= 0:
            raise ConfigurationError("retention_hours must be positive")
        if retention_bytes is not None and retention_bytes < 0:
            raise ConfigurationError("retention_bytes must not be negative")
        if max_open_files < 8:
            raise ConfigurationError("max_open_files must be at least 8")
        self._data_dir = Path(data_dir)
        self._flush_mode = flush
        self._flush_interval = flush_interval
        self._segment_size = segment_size
        self._cq_eps = cq_entries_per_segment
        self._retention_ms = int(retention_hours * 3_600_000)
        self._retention_bytes = retention_bytes
        self._clock = clock
        self._tags_code_of = tags_code_of
        self._files = FileCache(max_open_files)
        self._cq_root = self._data_dir / "consumequeue"
        self._log = CommitLog(
            self._data_dir / "commitlog", segment_size=segment_size, files=self._files
        )
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._state = _State.NEW
        self._lock_fd: int | None = None
        self._durable = 0
        self._cp_offset = -1
        self._cp_time = 0.0
        self._flush_task: asyncio.Task[None] | None = None
        self._bg_task: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._puts = 0
        self._put_bytes = 0
        self._flushes = 0
        self._segments_deleted = 0
        self._rec_truncated = 0
        self._rec_reindexed = 0
        self._rec_rebuilt = 0
        self._rec_seconds = 0.0

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The store's directory."""
        return self._data_dir

    @property
    def flush_mode(self) -> Literal["async", "sync"]:
        """``"sync"`` if acknowledgements must wait for :meth:`wait_durable`."""
        return self._flush_mode

    @property
    def is_open(self) -> bool:
        """Whether :meth:`open` completed and :meth:`close` was not called."""
        return self._state is _State.OPEN

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Recover the store from disk and start the background flush and retention task.

        Recovery runs in a worker thread; see :meth:`_recover` for the algorithm.

        Raises:
            ConfigurationError: the store was already opened, or another process holds the
                data directory.
            OSError: the files cannot be read or repaired.
        """
        if self._state is not _State.NEW:
            raise ConfigurationError("a MessageStore can be opened only once")
        started = time.monotonic()
        recovery = asyncio.ensure_future(asyncio.to_thread(self._recover))
        try:
            await asyncio.shield(recovery)
        except BaseException:
            # A thread cannot be interrupted: release its files only once it has finished.
            if recovery.done():
                self._release()
            else:
                recovery.add_done_callback(self._release_after)
            raise
        self._rec_seconds = time.monotonic() - started
        self._cp_time = time.monotonic()
        self._state = _State.OPEN
        self._bg_task = asyncio.get_running_loop().create_task(
            self._background(), name="aiorocket-store-flush"
        )

    async def close(self) -> None:
        """Flush and fsync everything, write a final checkpoint and close every file.

        Idempotent. A store cannot be reopened; create a new one on the same directory.

        Raises:
            OSError: the final flush failed (the files are closed anyway).
        """
        if self._state is not _State.OPEN:
            self._state = _State.CLOSED
            self._release()
            return
        self._state = _State.CLOSED
        bg, self._bg_task = self._bg_task, None
        if bg is not None:
            bg.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bg
        try:
            task = self._flush_task
            if task is not None and not task.done():
                with contextlib.suppress(Exception):
                    await asyncio.shield(task)
            if self._failure is None:
                await self._flush_once(force_checkpoint=True)
        finally:
            self._release()

    def _release_after(self, recovery: asyncio.Future[None]) -> None:
        if not recovery.cancelled():
            recovery.exception()  # retrieved: it was already reported to open()'s caller
        self._release()

    def _release(self) -> None:
        self._log.close()
        self._files.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _check_open(self) -> None:
        if self._state is not _State.OPEN:
            raise ClientClosedError("the message store is not open")

    # -- writing -----------------------------------------------------------------------------

    def put(self, record: MessageRecord, *, tags_code: int) -> PutResult:
        """Store ``record`` in its topic's queue ``record.queue_id``; synchronous.

        Assigns ``queue_offset`` (the queue's next), ``commit_log_offset``,
        ``store_timestamp`` (from the clock), ``store_size`` and ``body_crc`` in ``record``,
        appends it to the log and indexes it with ``tags_code``. The record is in the page
        cache when this returns: a killed process loses nothing, a power loss may lose what
        :meth:`wait_durable` has not covered.

        Raises:
            ClientClosedError: the store is not open.
            InvalidNameError: the topic breaks RocketMQ's name rule.
            ConfigurationError: the queue id is negative or above int32.
            MessageTooLargeError: the record does not fit a commit-log segment.
            LocalProtocolError: the record cannot be encoded (bad host, field out of range).
            OSError: the disk write failed (nothing was stored), or an earlier fsync failed
                and the store no longer accepts writes.
        """
        if self._state is not _State.OPEN:
            raise ClientClosedError("the message store is not open")
        if self._failure is not None:
            raise OSError(f"the message store failed to flush: {self._failure}")
        key = (record.topic, record.queue_id)
        queue = self._queues.get(key)
        new = queue is None
        if queue is None:
            queue = self._make_queue(record.topic, record.queue_id)
        now = self._clock()
        log = self._log
        offset = log.end
        record.queue_offset = queue.max_offset
        record.commit_log_offset = offset
        record.store_timestamp = now
        data = encode_message(record)
        size = len(data)
        log.append(data, now)
        try:
            queue_offset = queue.append(offset, size, tags_code, now)
        except BaseException:
            self._undo_append(offset)
            raise
        if new:
            self._queues[key] = queue
        record.store_size = size
        record.body_crc = int.from_bytes(data[8:12], "big")
        self._puts += 1
        self._put_bytes += size
        return PutResult(queue_offset, offset, now, size, log.end)

    def _undo_append(self, offset: int) -> None:
        try:
            self._log.truncate(offset)
        except OSError as exc:
            # The log now holds a record no index knows; recovery will index it at restart.
            _log.exception("message store: cannot undo an append at %d", offset)
            self._failure = exc

    def _make_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        if not _TOPIC_RE.fullmatch(topic):
            raise InvalidNameError(f"invalid topic name {topic!r}")
        if not 0 <= queue_id <= _MAX_QUEUE_ID:
            raise ConfigurationError(f"queue id {queue_id} out of range")
        return ConsumeQueue(
            topic,
            queue_id,
            self._cq_root / topic / str(queue_id),
            entries_per_segment=self._cq_eps,
            files=self._files,
        )

    # -- durability --------------------------------------------------------------------------

    async def wait_durable(self, commit_log_end: int) -> None:
        """Return once the log up to ``commit_log_end`` and its index entries are fsynced.

        Group commit: concurrent callers share one fsync round, and a round that is already
        running is joined rather than repeated. Cancelling a waiter does not cancel the
        round. Positions past the current end are clamped to it.

        Raises:
            ClientClosedError: the store is not open.
            OSError: the fsync failed; the data may not be durable. The store then refuses
                further writes, since a failed fsync can silently drop dirty pages.
        """
        self._check_open()
        target = min(commit_log_end, self._log.end)
        while self._durable < target:
            if self._failure is not None:
                raise OSError(f"the message store failed to flush: {self._failure}")
            await asyncio.shield(self._start_flush())

    @property
    def durable_offset(self) -> int:
        """The commit-log position up to which everything is known to be fsynced."""
        return self._durable

    def _start_flush(self) -> asyncio.Task[None]:
        task = self._flush_task
        if task is None or task.done():
            task = asyncio.get_running_loop().create_task(self._flush_once())
            # A waiter may be cancelled; retrieve the outcome so it is never reported as lost.
            task.add_done_callback(lambda t: t.cancelled() or t.exception())
            self._flush_task = task
        return task

    async def _flush_once(self, *, force_checkpoint: bool = False) -> None:
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
            target != self._cp_offset and now - self._cp_time >= _CHECKPOINT_INTERVAL
        ):
            payload = self._checkpoint_payload(target)
        try:
            await asyncio.to_thread(self._sync, job, payload)
        except OSError as exc:
            self._failure = exc
            _log.error("message store: fsync failed, refusing further writes: %s", exc)
            raise
        self._flushes += 1
        if target > self._durable:
            self._durable = target
        if payload is not None:
            self._cp_offset = target
            self._cp_time = now

    def _sync(self, job: SyncJob, checkpoint: bytes | None) -> None:
        job.run()
        if checkpoint is not None:
            self._write_checkpoint(checkpoint)

    def _checkpoint_payload(self, offset: int) -> bytes:
        queues: dict[str, dict[str, int]] = {}
        for (topic, qid), q in self._queues.items():
            if q.max_offset:
                queues.setdefault(topic, {})[str(qid)] = q.max_offset
        return json.dumps({"version": 1, "commit_log": offset, "queues": queues}).encode()

    def _write_checkpoint(self, payload: bytes) -> None:
        # StoreCheckpoint: temp file + fsync + rename + fsync of the directory, so the file
        # is always either the old or the new complete checkpoint.
        final = self._data_dir / "checkpoint"
        tmp = self._data_dir / "checkpoint.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(payload)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        dfd = os.open(self._data_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def _read_checkpoint(self) -> _Checkpoint | None:
        path = self._data_dir / "checkpoint"
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
        return _Checkpoint(offset, queues)

    async def _background(self) -> None:
        interval = self._flush_interval if self._flush_mode == "async" else _CHECKPOINT_INTERVAL
        next_clean = time.monotonic() + _CLEAN_INTERVAL
        while True:
            await asyncio.sleep(interval)
            try:
                stale = self._durable != self._cp_offset and (
                    time.monotonic() - self._cp_time >= _CHECKPOINT_INTERVAL
                )
                if self._failure is None and (self._log.end > self._durable or stale):
                    await asyncio.shield(self._start_flush())
                if time.monotonic() >= next_clean:
                    next_clean = time.monotonic() + _CLEAN_INTERVAL
                    self.clean_expired()
            except Exception:
                # Keep flushing and cleaning; a failed fsync already refuses further writes.
                _log.exception("message store: background flush or retention failed")

    # -- reading -----------------------------------------------------------------------------

    def get(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        max_msgs: int,
        max_bytes: int = DEFAULT_MAX_BYTES,
        matches: Callable[[int], bool] | None = None,
    ) -> GetResult:
        """Read up to ``max_msgs`` messages of a queue from ``offset`` (``getMessage``).

        Statuses and ``next_begin_offset`` follow REMOTING.md §3.3. At least one message is
        returned if any matches; the scan stops before the message that would exceed
        ``max_msgs`` or ``max_bytes`` (the first one always fits). ``matches`` gets each
        entry's tags code; with a filter at most ``max(800, max_msgs)`` entries are examined
        per call. A read never crosses an index file, as in RocketMQ. Records whose log data
        fails validation are skipped (and logged), never returned.

        Raises:
            ClientClosedError: the store is not open.
            OSError: a read failed.
        """
        if self._state is not _State.OPEN:
            raise ClientClosedError("the message store is not open")
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        mn = queue.min_offset
        mx = queue.max_offset
        if mx == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, mn, mx)
        if offset < mn:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, mn, mn, mx)
        if offset == mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, mn, mx)
        if offset > mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, mx, mn, mx)
        if max_msgs < 1:
            max_msgs = 1
        raw = queue.read(offset, max_msgs if matches is None else max(max_msgs, _MAX_FILTER_SCAN))
        if not raw:
            return GetResult(GetStatus.OFFSET_FOUND_NULL, queue.next_segment_start(offset), mn, mx)

        messages: list[bytes] = []
        codes: list[int] = []
        offsets: list[int] = []
        faults: list[tuple[int, int, int]] = []
        scanned, outcome = _collect(
            raw,
            offset,
            max_msgs,
            max_bytes,
            self._log.min_offset,
            matches,
            queue_id,
            self._log.read_span,
            messages,
            codes,
            offsets,
            faults,
        )
        for what, a, b in faults:
            if what == _UNREADABLE:
                _log.error("message store: log span %d+%d is unreadable", a, b)
            else:
                _log.error(
                    "message store: record at %d (queue offset %d) fails validation; skipped",
                    a,
                    b,
                )
        if outcome == _PLANNED:
            status = GetStatus.FOUND if messages else GetStatus.MESSAGE_WAS_REMOVING
        elif outcome == _REMOVING:
            status = GetStatus.MESSAGE_WAS_REMOVING
        else:
            status = GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, offset + scanned, mn, mx, messages, scanned, codes, offsets)

    def read_at(self, commit_log_offset: int) -> bytes | None:
        """The validated record (trailer stripped) stored at ``commit_log_offset``.

        ``None`` if the offset is outside the log, was removed by retention, does not start
        a record, or the record fails validation. Used for send-back and view-by-id.

        Raises:
            ClientClosedError: the store is not open.
            OSError: a read failed.
        """
        self._check_open()
        return self._log.read_record(commit_log_offset)

    def max_offset(self, topic: str, queue_id: int) -> int:
        """The queue's next offset to be written; 0 for an unknown queue (GET_MAX_OFFSET).

        Raises:
            ClientClosedError: the store is not open.
        """
        self._check_open()
        queue = self._queues.get((topic, queue_id))
        return 0 if queue is None else queue.max_offset

    def min_offset(self, topic: str, queue_id: int) -> int:
        """The queue's smallest offset still stored; 0 for an unknown queue (GET_MIN_OFFSET).

        Raises:
            ClientClosedError: the store is not open.
        """
        self._check_open()
        queue = self._queues.get((topic, queue_id))
        return 0 if queue is None else queue.min_offset

    def drop_below(self, topic: str, queue_id: int, offset: int) -> int:
        """Raise the queue's minimum to ``offset`` (at most its maximum) as if retention had
        removed the messages below it; returns the new minimum, -1 for an empty or unknown
        queue. A fault for tests: the index files stay, so a reopened store reads them again.

        Raises:
            ClientClosedError: the store is not open.
        """
        self._check_open()
        queue = self._queues.get((topic, queue_id))
        if queue is None or queue.max_offset == 0:
            return -1
        queue.min_offset = max(queue.min_offset, min(offset, queue.max_offset))
        return queue.min_offset

    def search_offset_by_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The offset whose store time is closest to ``timestamp_ms`` (REMOTING.md §6.5).

        Before the first message: the first offset; after the last: the last message's
        offset; 0 for an empty or unknown queue.

        Raises:
            ClientClosedError: the store is not open.
            OSError: a read failed.
        """
        self._check_open()
        queue = self._queues.get((topic, queue_id))
        return 0 if queue is None else queue.search_by_timestamp(timestamp_ms)

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        """The store time (ms) of the queue's oldest stored message, or -1 if there is none.

        -1 is what Java's ``getEarliestMessageTime`` answers in that case.

        Raises:
            ClientClosedError: the store is not open.
            OSError: a read failed.
        """
        self._check_open()
        queue = self._queues.get((topic, queue_id))
        if queue is None or queue.min_offset >= queue.max_offset:
            return -1
        entry = queue.entry(queue.min_offset)
        return -1 if entry is None else entry.store_timestamp

    def store_timestamp(self, topic: str, queue_id: int, offset: int) -> int:
        """The store time (ms) of the message at ``offset``, or -1 if there is none
        (``getMessageStoreTimeStamp``; read from the index, no log access).

        Raises:
            ClientClosedError: the store is not open.
            OSError: a read failed.
        """
        self._check_open()
        queue = self._queues.get((topic, queue_id))
        if queue is None or not queue.min_offset <= offset < queue.max_offset:
            return -1
        entry = queue.entry(offset)
        return -1 if entry is None else entry.store_timestamp

    def index_entries(
        self, topic: str, queue_id: int, offset: int, count: int
    ) -> list[tuple[int, QueueEntry]]:
        """Up to ``count`` index entries from ``offset`` as ``(queue offset, entry)`` pairs,
        never crossing an index file (admin dumps and searches; ``[]`` outside the queue).

        Raises:
            ClientClosedError: the store is not open.
            OSError: a read failed.
        """
        self._check_open()
        queue = self._queues.get((topic, queue_id))
        if queue is None or count < 1 or not queue.min_offset <= offset < queue.max_offset:
            return []
        raw = queue.read(offset, count)
        if not raw:
            return []
        return [(offset + i, QueueEntry._make(e)) for i, e in enumerate(ENTRY.iter_unpack(raw))]

    def delete_topic(self, topic: str) -> int:
        """Forget every queue of ``topic`` and delete its index files (``cleanUnusedTopic``);
        returns how many queues went. The records stay in the commit log until retention
        removes their segments; reads of the topic then find no queue.

        Raises:
            ClientClosedError: the store is not open.
            OSError: a file could not be deleted.
        """
        self._check_open()
        gone = [key for key in self._queues if key[0] == topic]
        for key in gone:
            self._queues.pop(key).destroy()
        with contextlib.suppress(FileNotFoundError):
            for child in (self._cq_root / topic).iterdir():
                with contextlib.suppress(OSError):
                    child.rmdir()
            (self._cq_root / topic).rmdir()
        return len(gone)

    def queues(self) -> dict[str, list[int]]:
        """Every topic with stored queues, and its queue ids in order.

        Raises:
            ClientClosedError: the store is not open.
        """
        self._check_open()
        out: dict[str, list[int]] = {}
        for topic, qid in sorted(self._queues):
            out.setdefault(topic, []).append(qid)
        return out

    def statistics(self) -> StoreStatistics:
        """Counters and sizes; cheap (no I/O). Works on a closed store too."""
        log = self._log
        return StoreStatistics(
            messages_put=self._puts,
            bytes_put=self._put_bytes,
            commit_log_min_offset=log.min_offset,
            commit_log_max_offset=log.end,
            durable_offset=self._durable,
            flushes=self._flushes,
            checkpoint_offset=max(self._cp_offset, 0),
            commit_log_bytes=log.total_bytes,
            commit_log_segments=len(log.segments()),
            queues=len(self._queues),
            consume_queue_segments=sum(q.segment_count for q in self._queues.values()),
            open_files=len(self._files) + log.open_files,
            segments_deleted=self._segments_deleted,
            recovered_truncated_bytes=self._rec_truncated,
            recovered_reindexed=self._rec_reindexed,
            recovered_rebuilt_queues=self._rec_rebuilt,
            recovery_seconds=self._rec_seconds,
        )

    # -- retention ---------------------------------------------------------------------------

    def clean_expired(self, now_ms: int | None = None) -> int:
        """Apply retention now; return how many commit-log segments were deleted.

        Deletes the oldest segments last written more than ``retention_hours`` before
        ``now_ms`` (default: the store clock), or while the log exceeds ``retention_bytes``;
        never the active one. Then moves each queue's minimum past entries whose data is gone
        and deletes wholly expired index files. Reads below the new minimum then get
        OFFSET_TOO_SMALL. The background task calls this every 10 s.

        Raises:
            ClientClosedError: the store is not open.
            OSError: a file could not be deleted or read.
        """
        self._check_open()
        now = self._clock() if now_ms is None else now_ms
        deleted = self._log.delete_expired(now, self._retention_ms, self._retention_bytes)
        if deleted:
            self._segments_deleted += deleted
            log_min = self._log.min_offset
            for queue in self._queues.values():
                queue.advance_min(log_min)
        return deleted

    # -- recovery ----------------------------------------------------------------------------

    def _recover(self) -> None:
        """Bring the log and the indexes back to a consistent state (worker thread).

        1. Load the log segments; find the checkpoint position C (0 without checkpoint).
        2. Load every index; an index whose files are inconsistent, or that is shorter than
           the checkpoint says it was, is "damaged" and will be rebuilt from scratch.
        3. Scan the log from C (from the oldest segment if anything is damaged), checking
           each entry's size, magic, stored offset, trailer CRC and full decode; stop at the
           first bad one and truncate the log there.
        4. Each valid record's entry is (re)written at its own queue offset if missing or
           different; each queue seen is truncated after its last scanned record, others
           lose trailing entries pointing at or past min(C, valid end).
        5. Queue minima are recomputed from the log's oldest offset; everything is fsynced
           and a new checkpoint at the log end is written.
        """
        root = self._data_dir
        root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigurationError(f"{root} is in use by another message store") from None
        self._cq_root.mkdir(exist_ok=True)
        log = self._log
        self._rec_truncated += log.load()
        checkpoint = self._read_checkpoint()
        if checkpoint is not None and not log.segments():
            # Every segment is gone: at least keep new offsets from reusing old positions.
            log.start_at(checkpoint.offset)
        start = log.min_offset
        if checkpoint is not None:
            start = min(max(checkpoint.offset, log.min_offset), log.end)

        damaged = self._load_queues()
        if checkpoint is not None:
            for (topic, qid), mx in checkpoint.queues.items():
                queue = self._queues.get((topic, qid))
                if queue is None:
                    if not _TOPIC_RE.fullmatch(topic) or not 0 <= qid <= _MAX_QUEUE_ID:
                        continue
                    queue = self._queues[(topic, qid)] = self._make_queue(topic, qid)
                if queue.max_offset < mx:
                    _log.warning(
                        "message store: index %s/%d holds %d entries, checkpoint says %d; "
                        "rebuilding",
                        topic,
                        qid,
                        queue.max_offset,
                        mx,
                    )
                    damaged.add((topic, qid))

        floors = {} if checkpoint is None else checkpoint.queues
        gaps = self._reindex(start, damaged, floors)
        if gaps:
            damaged |= gaps
            self._reindex(start, damaged, floors)
        self._rec_rebuilt = len(damaged)
        if checkpoint is not None:
            # A rebuilt queue whose old messages all expired keeps its offsets from going
            # backwards: a hole entry at max - 1 pins max_offset (nothing below min is read).
            for key in damaged:
                queue = self._queues[key]
                mx = checkpoint.queues.get(key, 0)
                if queue.max_offset < mx:
                    queue.write_at(mx - 1, 0, 0, 0, 0)
        log_min = log.min_offset
        for queue in self._queues.values():
            queue.advance_min(log_min)

        job = SyncJob()
        log.take_dirty(job)
        self._files.take_dirty(job)
        job.run()
        self._durable = log.end
        self._write_checkpoint(self._checkpoint_payload(log.end))
        self._cp_offset = log.end
        _log.info(
            "message store: recovered %s: log [%d, %d), %d queues, %d bytes cut, "
            "%d entries re-indexed, %d queues rebuilt",
            root,
            log.min_offset,
            log.end,
            len(self._queues),
            self._rec_truncated,
            self._rec_reindexed,
            self._rec_rebuilt,
        )

    def _load_queues(self) -> set[tuple[str, int]]:
        damaged: set[tuple[str, int]] = set()
        with os.scandir(self._cq_root) as topics:
            for topic_entry in topics:
                topic = topic_entry.name
                if not topic_entry.is_dir(follow_symlinks=False) or not _TOPIC_RE.fullmatch(topic):
                    continue
                with os.scandir(topic_entry.path) as ids:
                    for id_entry in ids:
                        name = id_entry.name
                        if not (name.isascii() and name.isdigit() and len(name) <= 10):
                            continue
                        qid = int(name)
                        if qid > _MAX_QUEUE_ID or not id_entry.is_dir(follow_symlinks=False):
                            continue
                        queue = self._make_queue(topic, qid)
                        self._queues[(topic, qid)] = queue
                        if not queue.load():
                            damaged.add((topic, qid))
        return damaged

    def _reindex(
        self,
        start: int,
        damaged: set[tuple[str, int]],
        floors: dict[tuple[str, int], int],
    ) -> set[tuple[str, int]]:
        """Scan the log and re-index; return queues found to have a gap before ``start``.

        ``floors`` are the checkpoint's queue maxima: entries below them were durable.
        """
        log = self._log
        for key in damaged:
            self._queues[key].destroy()
        scan_from = log.min_offset if damaged else start
        last_seen: dict[tuple[str, int], int] = {}
        gaps: set[tuple[str, int]] = set()
        stop_reason: str | None = None
        scanner = log.scan(scan_from)
        for clo, data in scanner:
            try:
                record, _ = decode_message(data, decompress=False)
            except RemoteProtocolError as exc:
                stop_reason = str(exc)
                break
            key = (record.topic, record.queue_id)
            rebuild = key in damaged
            if clo < start and not rebuild:
                continue
            queue = self._queues.get(key)
            if queue is None:
                try:
                    queue = self._make_queue(record.topic, record.queue_id)
                except (InvalidNameError, ConfigurationError) as exc:
                    stop_reason = str(exc)
                    break
                self._queues[key] = queue
            qo = record.queue_offset
            if not rebuild and key not in last_seen and qo > queue.max_offset:
                # The index lost entries the checkpoint did not know about.
                gaps.add(key)
                continue
            if key in gaps:
                continue
            size = len(data)
            existing = queue.entry(qo) if qo < queue.max_offset else None
            if (
                existing is None
                or existing.commit_log_offset != clo
                or existing.size != size
                or existing.store_timestamp != record.store_timestamp
            ):
                queue.write_at(qo, clo, size, self._tags_code_of(record), record.store_timestamp)
                self._rec_reindexed += 1
            last_seen[key] = qo
        # On an early break the scanner is parked at the bad record: scan_end is its start.
        scanner.close()
        end = log.scan_end
        if stop_reason is None and log.scan_error is not None:
            stop_reason = log.scan_error
        if stop_reason is not None:
            cut = log.truncate(end)
            self._rec_truncated += cut
            _log.warning(
                "message store: commit log cut at %d (%d bytes removed): %s",
                end,
                cut,
                stop_reason,
            )
        cutoff = min(start, end)
        for key, queue in self._queues.items():
            if key in gaps:
                continue
            if key in last_seen:
                dropped = queue.truncate(last_seen[key] + 1)
            else:
                # Entries below the checkpoint's maximum were fsynced with it: keep them,
                # unless the log itself lost data before the checkpoint.
                floor = floors.get(key, 0) if end >= start else 0
                dropped = queue.trim_tail(cutoff, floor)
            if dropped:
                _log.warning(
                    "message store: index %s/%d: dropped %d entries past the valid log",
                    key[0],
                    key[1],
                    dropped,
                )
        return gaps


# What _collect reports: nothing matched / the first candidate was removed / records were
# planned (and read, unless they failed validation); and the faults it met.
_NO_MATCH: Final = 0
_REMOVING: Final = 1
_PLANNED: Final = 2
_UNREADABLE: Final = 0
_INVALID: Final = 1


def _collect_py(
    raw: bytes,
    offset: int,
    max_msgs: int,
    max_bytes: int,
    log_min: int,
    matches: Callable[[int], bool] | None,
    queue_id: int,
    read_span: Callable[[int, int], bytes | None],
    messages: list[bytes],
    codes: list[int],
    offsets: list[int],
    faults: list[tuple[int, int, int]],
) -> tuple[int, int]:
    """The body of :meth:`MessageStore.get` after the index read: pick the entries of ``raw``
    (consume-queue entries from queue offset ``offset``) to return, read their records from
    the log and append the valid ones to ``messages``/``codes``/``offsets``.

    Returns ``(entries scanned, outcome)``, outcome being ``_NO_MATCH``, ``_REMOVING`` or
    ``_PLANNED``. Unreadable spans (``(_UNREADABLE, start, length)``) and records failing
    validation (``(_INVALID, commit-log offset, queue offset)``) go to ``faults``.
    ``_store_speedups.collect`` is the compiled twin: same results, same faults.
    """
    outcome = _NO_MATCH
    scanned = count = total = 0
    plan: list[tuple[int, int, int, int]] = []
    for clo, size, code, _ts in ENTRY.iter_unpack(raw):
        # DefaultMessageStore.isTheBatchFull runs before the filter, as here.
        if count and (count >= max_msgs or total + size > max_bytes):
            break
        scanned += 1
        if matches is not None and not matches(code):
            if not count:
                outcome = _NO_MATCH
            continue
        if size <= 0 or clo < log_min:
            if not count:
                outcome = _REMOVING
            continue
        plan.append((clo, size, code, offset + scanned - 1))
        count += 1
        total += size
    if not plan:
        return scanned, outcome
    # Entries written in a burst sit back to back in the log, and a queue fed round-robin
    # has its records a few others apart: read each such run with one pread (a pread costs
    # about as much as copying 16 KiB), then validate every record (size, magic, its own
    # offsets, trailer CRC).
    head = RECORD_HEAD.unpack_from
    trailer = TRAILER.unpack_from
    crc32 = zlib.crc32
    magics = _MAGICS
    n = len(plan)
    i = 0
    while i < n:
        start = plan[i][0]
        end = start + plan[i][1] + TRAILER_SIZE
        j = i + 1
        while j < n:
            clo = plan[j][0]
            nxt = clo + plan[j][1] + TRAILER_SIZE
            if clo < end or clo - end > _MAX_READ_GAP or nxt - start > _MAX_READ_SPAN:
                break
            end = nxt
            j += 1
        buf = read_span(start, end - start)
        if buf is None:
            faults.append((_UNREADABLE, start, end - start))
            i = j
            continue
        for k in range(i, j):
            clo, size, code, qo = plan[k]
            p = clo - start
            rsize, magic, _crc, rqid, _flag, rqo, rclo = head(buf, p)
            record = buf[p : p + size]
            if (
                rsize != size
                or rclo != clo
                or rqo != qo
                or rqid != queue_id
                or magic not in magics
                or crc32(record) != trailer(buf, p + size)[0]
            ):
                faults.append((_INVALID, clo, qo))
                continue
            messages.append(record)
            codes.append(code)
            offsets.append(qo)
        i = j
    return scanned, _PLANNED


_collect = _collect_py


def use_compiled(compiled: bool) -> None:
    """Read pulls with the compiled ``_store_speedups.collect`` or with :func:`_collect_py`.

    For tests and benchmarks that compare the two; the choice made at import follows the
    codec's (``AIOROCKET_NO_EXTENSIONS``).

    Raises:
        RuntimeError: ``compiled`` is asked for and the extension is not built.
    """
    global _collect
    if not compiled:
        _collect = _collect_py
        return
    try:
        from aiorocket.embedded import _store_speedups
    except ImportError as exc:
        raise RuntimeError(f"aiorocket: compiled store helpers not built ({exc})") from None
    _store_speedups.configure(
        ENTRY.size,
        RECORD_HEAD.size,
        TRAILER_SIZE,
        MAGIC_V1,
        MAGIC_V2,
        _MAX_READ_GAP,
        _MAX_READ_SPAN,
    )
    _collect = _store_speedups.collect


with contextlib.suppress(RuntimeError):
    use_compiled(accel.ACTIVE)
