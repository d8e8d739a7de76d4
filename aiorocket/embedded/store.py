"""The embedded broker's durable message store (RocketMQ's ``DefaultMessageStore``).

Layout under ``data_dir``:

```text
lock                                   held (flock) while a store has the directory open
checkpoint                             JSON: a durable commit-log position + queue maxima
commitlog/<20-digit base offset>       record + CRC-32 trailer, back to back
consumequeue/<topic>/<queue id>/<20-digit first queue offset>   28-byte entries
```

Rules that make crash recovery simple:

* `MessageStore.put` is synchronous: it assigns the offsets, writes the record to the log
  and its index entry, with no await in between, so entries appear in log order.
* The checkpoint only ever names a position up to which the log *and* every index entry for
  it have been fsynced. Recovery trusts everything before it and re-validates everything after.
* Nothing per message is kept in memory: offsets live in the index files, records in the log.

Its parts: ``flush.py`` (fsync rounds, the checkpoint), ``recovery.py`` (repair at open),
``read_plan.py`` (which records a read returns, read with few syscalls), ``commit_log.py`` and
``consume_queue.py`` (the files); what it answers is in ``store_results.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fcntl
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal

from aiorocket._concurrency import Service, ServiceOwner
from aiorocket._names import SCHEDULE_TOPIC, now_ms
from aiorocket._protocol import properties as mp
from aiorocket._protocol.lite import LITE_QUEUE_PREFIX
from aiorocket._protocol.message import MessageRecord, encode_message
from aiorocket.embedded import read_plan
from aiorocket.embedded.commit_log import CommitLog, FileCache
from aiorocket.embedded.config import DEFAULT_DELAY_LEVELS
from aiorocket.embedded.consume_queue import ENTRY, MAX_QUEUE_ID, ConsumeQueue, QueueEntry
from aiorocket.embedded.delays import indexed_tags_code
from aiorocket.embedded.flush import CHECKPOINT_INTERVAL, Flusher
from aiorocket.embedded.recovery import RecoveryReport, dispatch_queues, is_queue_name, recover
from aiorocket.embedded.store_results import GetResult, GetStatus, PutResult, StoreStatistics
from aiorocket.errors import ClientClosedError, ConfigurationError, InvalidNameError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "SCHEDULE_TOPIC",
    "MessageStore",
    "default_tags_code",
]

_log = logging.getLogger(__name__)

#: ``maxTransferBytesOnMessageInMemory``: the default byte budget of one `get`.
DEFAULT_MAX_BYTES: Final = 256 * 1024

# DefaultMessageStore.getMessage scans at most max(16000 bytes of 20-byte units, maxMsgNums)
# entries per call when filtering, so a sparse tag never makes one pull read the whole queue.
_MAX_FILTER_SCAN: Final = 800
_CLEAN_INTERVAL: Final = 10.0
_DEFAULT_SEGMENT_SIZE: Final = 256 * 1024 * 1024
# MessageStoreConfig.mappedFileSizeConsumeQueue is 300 000 entries.
_DEFAULT_CQ_ENTRIES: Final = 300_000


def default_tags_code(record: MessageRecord) -> int:
    """The consume-queue tags code the store derives for a record when re-indexing it.

    The Java hash of its ``TAGS`` property (0 without one, docs/protocol.md §6.3); for
    ``SCHEDULE_TOPIC_XXXX`` the delivery time instead: store time plus the delay of the
    ``DELAY`` level (clamped to 1..18), as ``ScheduleMessageService.computeDeliverTimestamp``
    does with the default levels. Never raises.
    """
    return indexed_tags_code(record, DEFAULT_DELAY_LEVELS)


class _State(enum.Enum):
    NEW = 0
    OPEN = 1
    CLOSED = 2


class MessageStore(ServiceOwner):
    """A durable, segmented message store for one broker, used from one event loop.

    Args:
        data_dir: the store's directory; created if missing.
        flush: ``"async"``: a background task fsyncs every ``flush_interval`` seconds, so a
            power loss may lose that window (a killed process loses nothing). ``"sync"``: the
            broker awaits `wait_durable` before acknowledging; the background task then
            only writes checkpoints.
        flush_interval: seconds between background flushes, in (0, 0.5].
        segment_size: the commit-log segment size in bytes; a record larger than that (minus
            its 4-byte trailer) is refused.
        cq_entries_per_segment: entries per consume-queue file.
        retention_hours: commit-log segments whose last write is older are deleted.
        retention_bytes: if set, the oldest segments are deleted while the log is larger.
        clock: the store-time source, in ms since the epoch.
        tags_code_of: how recovery computes a tags code when it re-indexes a record;
            `default_tags_code` unless the broker computes codes differently.
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
        clock: Callable[[], int] = now_ms,
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
        self._flusher = Flusher(self._data_dir, self._log, self._files, self._queues)
        self._bg_task: asyncio.Task[Any] | None = None
        self._lifecycle = Service(
            "aiorocket-store",
            startup=self._startup,
            shutdown=self._shutdown,
            abort=self._abort,
            logger=_log,
        )
        self._puts = 0
        self._put_bytes = 0
        self._segments_deleted = 0
        self._recovered = RecoveryReport(0, 0, 0)
        self._rec_seconds = 0.0

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        """The store's directory."""
        return self._data_dir

    @property
    def flush_mode(self) -> Literal["async", "sync"]:
        """``"sync"`` if acknowledgements must wait for `wait_durable`."""
        return self._flush_mode

    @property
    def is_open(self) -> bool:
        """Whether `open` completed and `close` was not called."""
        return self._state is _State.OPEN

    async def start(self) -> None:
        """Same as `open`."""
        await self.open()

    async def open(self) -> None:
        """Recover the store from disk and start the background flush and retention task.

        Recovery runs in a worker thread; see ``recovery.py`` for the algorithm.

        Raises:
            ConfigurationError: the store was already opened, or another process holds the
                data directory.
            OSError: the files cannot be read or repaired.
        """
        if self._state is not _State.NEW:
            raise ConfigurationError("a MessageStore can be opened only once")
        await self._lifecycle.start()

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
        await self._lifecycle.close()  # (raises the final flush's error)

    async def _startup(self) -> None:
        # In the service's supervisor task: recover, then run the background loop.
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
        self._flusher.started()
        self._state = _State.OPEN
        self._bg_task = self._lifecycle.spawn(self._background(), name="aiorocket-store-flush")

    async def _shutdown(self) -> None:
        # The background loop stops first: no flush round of its own may outlive the last.
        self._state = _State.CLOSED
        bg, self._bg_task = self._bg_task, None
        if bg is not None:
            bg.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bg
        try:
            await self._flusher.finish()  # an error is raised by close()
        finally:
            self._release()  # the files are released anyway

    async def _abort(self, started: bool) -> None:
        # A failed start-up released what it held (once its thread ended); after a crash of
        # the background loop (a bug), the store closes without a final flush.
        if started:
            self._state = _State.CLOSED
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
        appends it to the log and indexes it with ``tags_code``. A record whose
        ``INNER_MULTI_DISPATCH`` names lite topics' queues (and whose topic allows them) is
        indexed in each of those too, queue 0, its offsets there written to
        ``INNER_MULTI_QUEUE_OFFSET`` first (``LmqDispatch``, docs/protocol.md §12.8). The record
        is in the page cache when this returns: a killed process loses nothing, a power loss
        may lose what `wait_durable` has not covered.

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
        failure = self._flusher.failure
        if failure is not None:
            raise OSError(f"the message store failed to flush: {failure}")
        keys = [(record.topic, record.queue_id)]
        keys += [(name, 0) for name in dispatch_queues(record)]
        queues = [self._queue_for_put(*k) for k in keys]
        if len(queues) > 1:
            # LmqDispatch.wrapLmqDispatch: the record carries its offset in each LMQ.
            record.properties[mp.INNER_MULTI_QUEUE_OFFSET] = mp.LMQ_SEPARATOR.join(
                str(q.max_offset) for q in queues[1:]
            )
        now = self._clock()
        log = self._log
        offset = log.end
        record.queue_offset = queues[0].max_offset
        record.commit_log_offset = offset
        record.store_timestamp = now
        data = encode_message(record)
        size = len(data)
        log.append(data, now)
        appended: list[tuple[ConsumeQueue, int]] = []
        try:
            for queue in queues:
                appended.append((queue, queue.max_offset))
                queue.append(offset, size, tags_code, now)
        except BaseException:
            self._undo_append(offset, appended)
            raise
        for key, queue in zip(keys, queues, strict=True):
            self._queues.setdefault(key, queue)
        record.store_size = size
        record.body_crc = int.from_bytes(data[8:12], "big")
        self._puts += 1
        self._put_bytes += size
        lmqs = zip(keys[1:], appended[1:], strict=True)
        dispatched = tuple((key[0], start) for key, (_, start) in lmqs)
        return PutResult(appended[0][1], offset, now, size, log.end, dispatched)

    def _undo_append(self, offset: int, appended: list[tuple[ConsumeQueue, int]]) -> None:
        try:
            for queue, before in appended:
                if queue.max_offset > before:
                    queue.truncate(before)
            self._log.truncate(offset)
        except OSError as exc:
            # The log now holds a record no index knows; recovery will index it at restart.
            _log.exception("message store: cannot undo an append at %d", offset)
            self._flusher.failure = exc

    def _queue_for_put(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self._queues.get((topic, queue_id))
        return self._make_queue(topic, queue_id) if queue is None else queue

    def _make_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        if not is_queue_name(topic):
            raise InvalidNameError(f"invalid topic name {topic!r}")
        if not 0 <= queue_id <= MAX_QUEUE_ID:
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
        await self._flusher.wait_durable(commit_log_end)

    @property
    def durable_offset(self) -> int:
        """The commit-log position up to which everything is known to be fsynced."""
        return self._flusher.durable

    async def _background(self) -> None:
        interval = self._flush_interval if self._flush_mode == "async" else CHECKPOINT_INTERVAL
        next_clean = time.monotonic() + _CLEAN_INTERVAL
        flusher = self._flusher
        while True:
            await asyncio.sleep(interval)
            try:
                if flusher.due():
                    await asyncio.shield(flusher.start())
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

        Statuses and ``next_begin_offset`` follow docs/protocol.md §3.3. At least one message is
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
        scanned, outcome = read_plan.collect(
            raw,
            offset,
            max_msgs,
            max_bytes,
            self._log.min_offset,
            matches,
            -1 if topic.startswith(LITE_QUEUE_PREFIX) else queue_id,  # an LMQ's: others'
            self._log.read_span,
            messages,
            codes,
            offsets,
            faults,
        )
        for what, a, b in faults:
            if what == read_plan.UNREADABLE:
                _log.error("message store: log span %d+%d is unreadable", a, b)
            else:
                _log.error(
                    "message store: record at %d (queue offset %d) fails validation; skipped",
                    a,
                    b,
                )
        if outcome == read_plan.PLANNED:
            status = GetStatus.FOUND if messages else GetStatus.MESSAGE_WAS_REMOVING
        elif outcome == read_plan.REMOVING:
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
        """The offset whose store time is closest to ``timestamp_ms`` (docs/protocol.md §6.5).

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

    def set_tags_code(self, topic: str, queue_id: int, offset: int, tags_code: int) -> bool:
        """Rewrite the tags code of an existing index entry (the timer service marks a parked
        message done with it); False if the queue has no such entry. Recovery keeps a
        rewritten code unless it rebuilds the whole queue.

        Raises:
            ClientClosedError: the store is not open.
            OSError: the index could not be read or written.
        """
        self._check_open()
        queue = self._queues.get((topic, queue_id))
        entry = None if queue is None or offset < queue.min_offset else queue.entry(offset)
        if queue is not None and entry is not None:
            commit_log_offset, size, _, stored = entry
            queue.write_at(offset, commit_log_offset, size, tags_code, stored)
        return entry is not None

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
            durable_offset=self._flusher.durable,
            flushes=self._flusher.flushes,
            checkpoint_offset=max(self._flusher.checkpoint_offset, 0),
            commit_log_bytes=log.total_bytes,
            commit_log_segments=len(log.segments()),
            queues=len(self._queues),
            consume_queue_segments=sum(q.segment_count for q in self._queues.values()),
            open_files=len(self._files) + log.open_files,
            segments_deleted=self._segments_deleted,
            recovered_truncated_bytes=self._recovered.truncated_bytes,
            recovered_reindexed=self._recovered.reindexed,
            recovered_rebuilt_queues=self._recovered.rebuilt_queues,
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
        # Worker thread: lock the directory, repair the log and indexes, then fsync all and
        # write a checkpoint at the log end.
        root = self._data_dir
        root.mkdir(parents=True, exist_ok=True)
        self._lock_fd = os.open(root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigurationError(f"{root} is in use by another message store") from None
        self._cq_root.mkdir(exist_ok=True)
        report = recover(
            root,
            self._log,
            self._queues,
            cq_root=self._cq_root,
            make_queue=self._make_queue,
            tags_code_of=self._tags_code_of,
        )
        self._recovered = report
        self._flusher.sync_now()
        log = self._log
        _log.info(
            "message store: recovered %s: log [%d, %d), %d queues, %d bytes cut, "
            "%d entries re-indexed, %d queues rebuilt",
            root,
            log.min_offset,
            log.end,
            len(self._queues),
            report.truncated_bytes,
            report.reindexed,
            report.rebuilt_queues,
        )
