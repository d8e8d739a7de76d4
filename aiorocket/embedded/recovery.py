"""Crash recovery of the message store: bring the commit log and the consume-queue indexes
back to a consistent state when a store opens (in a worker thread).

1. Load the log segments; find the checkpoint position C (0 without checkpoint).
2. Load every index; an index whose files are inconsistent, or that is shorter than the
   checkpoint says it was, is "damaged" and will be rebuilt from scratch.
3. Scan the log from C (from the oldest segment if anything is damaged), checking each
   entry's size, magic, stored offset, trailer CRC and full decode; stop at the first bad one
   and truncate the log there.
4. Each valid record's entry is (re)written at its own queue offset if missing or different;
   each queue seen is truncated after its last scanned record, others lose trailing entries
   pointing at or past min(C, valid end).
5. Queue minima are recomputed from the log's oldest offset. (The store then fsyncs
   everything and writes a new checkpoint at the log end.)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from aiorocket._names import DLQ_PREFIX, RETRY_PREFIX, SCHEDULE_TOPIC, is_valid_name
from aiorocket._protocol import properties as mp
from aiorocket._protocol.lite import is_lite_queue
from aiorocket._protocol.message import MessageRecord, decode_message
from aiorocket.embedded.commit_log import CommitLog
from aiorocket.embedded.consume_queue import MAX_QUEUE_ID, ConsumeQueue
from aiorocket.embedded.flush import read_checkpoint
from aiorocket.errors import ConfigurationError, InvalidNameError, RemoteProtocolError

__all__ = ["RecoveryReport", "dispatch_queues", "is_queue_name", "recover"]

_log = logging.getLogger("aiorocket.embedded.store")

_Key = tuple[str, int]
# MixAll.topicAllowsLMQ: records of these topics are never dispatched to light message queues
_NO_LMQ_PREFIXES = (RETRY_PREFIX, DLQ_PREFIX, "rmq_sys_")


def is_queue_name(topic: str) -> bool:
    """Whether the store keeps queues of ``topic``: a valid topic name, or the light message
    queue of a lite topic (``%LMQ%$<parent>$<lite topic>``, docs/protocol.md §12.8). Never
    raises."""
    return is_valid_name(topic) or is_lite_queue(topic)


def dispatch_queues(record: MessageRecord) -> list[str]:
    """The lite topics' queues ``record`` is also indexed in: those its
    ``INNER_MULTI_DISPATCH`` names when its topic allows light message queues (not a retry,
    dead-letter, ``rmq_sys_`` or schedule topic) and every name is a lite topic's queue; else
    none (the property is then a plain one). Never raises."""
    names = record.properties.get(mp.INNER_MULTI_DISPATCH)
    topic = record.topic
    if not names or topic.startswith(_NO_LMQ_PREFIXES) or topic == SCHEDULE_TOPIC:
        return []
    queues = names.split(mp.LMQ_SEPARATOR)
    return queues if all(is_lite_queue(q) for q in queues) else []


def _index_keys(record: MessageRecord) -> list[tuple[_Key, int]]:
    """Every (queue, offset) a stored record is indexed at: its own, then its light message
    queues' from ``INNER_MULTI_QUEUE_OFFSET`` (a malformed list is left out)."""
    out = [((record.topic, record.queue_id), record.queue_offset)]
    names = dispatch_queues(record)
    if names:
        offsets = record.properties.get(mp.INNER_MULTI_QUEUE_OFFSET, "").split(mp.LMQ_SEPARATOR)
        if len(offsets) == len(names) and all(o.isascii() and o.isdigit() for o in offsets):
            out += [((name, 0), int(o)) for name, o in zip(names, offsets, strict=True)]
    return out


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What `recover` did."""

    truncated_bytes: int
    reindexed: int
    rebuilt_queues: int


def recover(
    data_dir: Path,
    log: CommitLog,
    queues: dict[_Key, ConsumeQueue],
    *,
    cq_root: Path,
    make_queue: Callable[[str, int], ConsumeQueue],
    tags_code_of: Callable[[MessageRecord], int],
) -> RecoveryReport:
    """Recover ``log`` and fill ``queues`` (empty on entry) with the repaired indexes found
    under ``cq_root``, following the module's steps 1 to 5.

    Raises:
        OSError: a file cannot be read or repaired.
    """
    return _Recovery(log, queues, cq_root, make_queue, tags_code_of).run(data_dir)


@dataclass(slots=True, eq=False)
class _Recovery:
    _log: CommitLog
    _queues: dict[_Key, ConsumeQueue]
    _cq_root: Path
    _make_queue: Callable[[str, int], ConsumeQueue]
    _tags_code_of: Callable[[MessageRecord], int]
    _truncated: int = field(default=0, init=False)
    _reindexed: int = field(default=0, init=False)

    def run(self, data_dir: Path) -> RecoveryReport:
        log = self._log
        self._truncated += log.load()
        checkpoint = read_checkpoint(data_dir)
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
                    if not is_queue_name(topic) or not 0 <= qid <= MAX_QUEUE_ID:
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
        return RecoveryReport(self._truncated, self._reindexed, len(damaged))

    def _load_queues(self) -> set[_Key]:
        damaged: set[_Key] = set()
        with os.scandir(self._cq_root) as topics:
            for topic_entry in topics:
                topic = topic_entry.name
                if not topic_entry.is_dir(follow_symlinks=False) or not is_queue_name(topic):
                    continue
                with os.scandir(topic_entry.path) as ids:
                    for id_entry in ids:
                        name = id_entry.name
                        if not (name.isascii() and name.isdigit() and len(name) <= 10):
                            continue
                        qid = int(name)
                        if qid > MAX_QUEUE_ID or not id_entry.is_dir(follow_symlinks=False):
                            continue
                        queue = self._make_queue(topic, qid)
                        self._queues[(topic, qid)] = queue
                        if not queue.load():
                            damaged.add((topic, qid))
        return damaged

    def _index(
        self,
        record: MessageRecord,
        clo: int,
        size: int,
        key: _Key,
        qo: int,
        start: int,
        damaged: set[_Key],
        last_seen: dict[_Key, int],
        gaps: set[_Key],
    ) -> None:
        """(Re)write the entry of ``record`` (at log offset ``clo``) at offset ``qo`` of queue
        ``key`` if it is missing or different.

        Raises:
            InvalidNameError, ConfigurationError: the record's queue cannot exist.
        """
        rebuild = key in damaged
        if clo < start and not rebuild:
            return
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = self._make_queue(*key)
        if not rebuild and key not in last_seen and qo > queue.max_offset:
            # The index lost entries the checkpoint did not know about.
            gaps.add(key)
            return
        if key in gaps:
            return
        existing = queue.entry(qo) if qo < queue.max_offset else None
        if (
            existing is None
            or existing.commit_log_offset != clo
            or existing.size != size
            or existing.store_timestamp != record.store_timestamp
        ):
            queue.write_at(qo, clo, size, self._tags_code_of(record), record.store_timestamp)
            self._reindexed += 1
        last_seen[key] = qo

    def _reindex(self, start: int, damaged: set[_Key], floors: dict[_Key, int]) -> set[_Key]:
        """Scan the log and re-index; return queues found to have a gap before ``start``.

        ``floors`` are the checkpoint's queue maxima: entries below them were durable.
        """
        log = self._log
        for key in damaged:
            self._queues[key].destroy()
        scan_from = log.min_offset if damaged else start
        last_seen: dict[_Key, int] = {}
        gaps: set[_Key] = set()
        stop_reason: str | None = None
        scanner = log.scan(scan_from)
        for clo, data in scanner:
            try:
                record, _ = decode_message(data, decompress=False)
            except RemoteProtocolError as exc:
                stop_reason = str(exc)
                break
            try:
                for key, qo in _index_keys(record):
                    self._index(record, clo, len(data), key, qo, start, damaged, last_seen, gaps)
            except (InvalidNameError, ConfigurationError) as exc:
                stop_reason = str(exc)
                break
        # On an early break the scanner is parked at the bad record: scan_end is its start.
        scanner.close()
        end = log.scan_end
        if stop_reason is None and log.scan_error is not None:
            stop_reason = log.scan_error
        if stop_reason is not None:
            cut = log.truncate(end)
            self._truncated += cut
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
