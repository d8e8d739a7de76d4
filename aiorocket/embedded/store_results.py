"""What the embedded broker's ``MessageStore`` answers:
where a put went, what a get found (Java ``PutMessageResult``, ``GetMessageResult``), and its
statistics."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["GetResult", "GetStatus", "PutResult", "StoreStatistics"]


class GetStatus(enum.Enum):
    """The outcome of `MessageStore.get`: Java's ``GetMessageStatus``.

    The value is the Java name, which a broker sends as the pull response's remark.
    docs/protocol.md §3.3 maps each one to a wire code.
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
    """Where `MessageStore.put` stored a record.

    ``commit_log_end`` is the log position just after the record's entry: pass it to
    `MessageStore.wait_durable`.
    """

    queue_offset: int
    commit_log_offset: int
    store_timestamp: int
    store_size: int
    commit_log_end: int
    #: the light message queues (queue 0) the record was also indexed in, with its offset in
    #: each (multi-dispatch, docs/protocol.md §12.8)
    dispatched: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class GetResult:
    """The answer of `MessageStore.get` (Java's ``GetMessageResult``).

    ``messages`` are raw stored records (docs/protocol.md §4.1), ready to be concatenated into a
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
        """The summed size of `messages`."""
        return sum(len(m) for m in self.messages)


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """A snapshot of a `MessageStore`.

    Counters ending in ``_put`` and ``flushes`` (fsync rounds) count since
    `MessageStore.open`; ``recovered_*`` describe what the last recovery did.
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
