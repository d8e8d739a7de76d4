"""The blocking face of [`QueueReader`][aiorocket.QueueReader], written once: `BlockingReader`
waits for each call on a `Runner` (`aiorocket._reader.runners`), which decides where the event
loop runs. [`SyncQueueReader`][aiorocket.SyncQueueReader] and `InlineReader` are its two
set-ups."""

from __future__ import annotations

import threading
from collections.abc import Coroutine, Iterable, Iterator, Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

from aiorocket._reader.queue_reader import (
    _PULL_BATCH,
    Chunk,
    QueueReader,
    RawChunk,
    ReadBatch,
    ReadRange,
)
from aiorocket._reader.runners import Runner
from aiorocket.errors import ClientClosedError
from aiorocket.models import MessageQueue, ReceivedMessage
from aiorocket.settings import ClientSettings

__all__ = ["BlockingReader"]

_T = TypeVar("_T")


class BlockingReader:
    """A [`QueueReader`][aiorocket.QueueReader] for plain (blocking) code: each method runs the
    reader's coroutine on ``runner`` and waits for its result.

    Methods are those of [`QueueReader`][aiorocket.QueueReader], blocking, with the same errors.

    Args:
        reader: the async reader, not started.
        runner: where its coroutines run.
    """

    def __init__(self, reader: QueueReader, runner: Runner) -> None:
        self._reader = reader
        self._runner = runner
        self._started = False
        self._closed = False
        self._lock = threading.Lock()

    @property
    def settings(self) -> ClientSettings:
        """The reader's settings."""
        return self._reader.settings

    def start(self) -> None:
        """Start the event loop and the reader. Prefer ``with``.

        Raises:
            ClientClosedError: the reader was closed before.
        """
        with self._lock:
            if self._closed:
                raise ClientClosedError("the queue reader is closed")
            if self._started:
                return
            self._runner.start()
            self._started = True
        self._run(self._reader.start())

    def close(self) -> None:
        """Close the reader and end its event loop; safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            started = self._started
        if started:
            self._runner.close(self._reader.close())

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed or not self._started:
            raise ClientClosedError("the queue reader is closed" if self._closed else "not started")

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        try:
            self._check_open()
        except ClientClosedError:
            coro.close()
            raise
        return self._runner.run(coro)

    def _chunks(self, rng: ReadRange, *, raw: bool) -> Iterator[Chunk]:
        self._check_open()
        return self._runner.chunks(self._reader.open_range(rng, raw=raw))

    def queues(self, topic: str) -> list[MessageQueue]:
        """See [`QueueReader.queues`][aiorocket.QueueReader.queues]."""
        return self._run(self._reader.queues(topic))

    def min_offset(self, mq: MessageQueue) -> int:
        """See [`QueueReader.min_offset`][aiorocket.QueueReader.min_offset]."""
        return self._run(self._reader.min_offset(mq))

    def max_offset(self, mq: MessageQueue) -> int:
        """See [`QueueReader.max_offset`][aiorocket.QueueReader.max_offset]."""
        return self._run(self._reader.max_offset(mq))

    def min_offsets(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """See [`QueueReader.min_offsets`][aiorocket.QueueReader.min_offsets]."""
        return self._run(self._reader.min_offsets(mqs))

    def max_offsets(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """See [`QueueReader.max_offsets`][aiorocket.QueueReader.max_offsets]."""
        return self._run(self._reader.max_offsets(mqs))

    def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """See [`QueueReader.offset_for_timestamp`][aiorocket.QueueReader.offset_for_timestamp]."""
        return self._run(self._reader.offset_for_timestamp(mq, timestamp_ms))

    def read(
        self,
        mq: MessageQueue,
        offset: int,
        max_messages: int = _PULL_BATCH,
        *,
        expression: str = "*",
    ) -> ReadBatch:
        """See [`QueueReader.read`][aiorocket.QueueReader.read]."""
        return self._run(self._reader.read(mq, offset, max_messages, expression=expression))

    def read_range_batches(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        expression: str = "*",
        tolerate_loss: bool = False,
        pipeline: int = 8,
    ) -> Iterator[list[ReceivedMessage]]:
        """See [`QueueReader.read_range_batches`][aiorocket.QueueReader.read_range_batches]."""
        rng = ReadRange(mq, start, end, expression, tolerate_loss, pipeline)
        for chunk in self._chunks(rng, raw=False):
            yield chunk.msgs

    def read_range_raw(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        expression: str = "*",
        tolerate_loss: bool = False,
        pipeline: int = 8,
    ) -> Iterator[RawChunk]:
        """See [`QueueReader.read_range_raw`][aiorocket.QueueReader.read_range_raw]."""
        rng = ReadRange(mq, start, end, expression, tolerate_loss, pipeline)
        for chunk in self._chunks(rng, raw=True):
            yield chunk.as_raw()

    def read_range(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        expression: str = "*",
        tolerate_loss: bool = False,
        pipeline: int = 8,
    ) -> Iterator[ReceivedMessage]:
        """See [`QueueReader.read_range`][aiorocket.QueueReader.read_range]."""
        rng = ReadRange(mq, start, end, expression, tolerate_loss, pipeline)
        for chunk in self._chunks(rng, raw=False):
            yield from chunk.msgs

    def committed_offset(self, group: str, mq: MessageQueue) -> int | None:
        """See [`QueueReader.committed_offset`][aiorocket.QueueReader.committed_offset]."""
        return self._run(self._reader.committed_offset(group, mq))

    def commit(self, group: str, mq: MessageQueue, offset: int) -> None:
        """See [`QueueReader.commit`][aiorocket.QueueReader.commit]."""
        self._run(self._reader.commit(group, mq, offset))

    def commit_many(self, group: str, offsets: Mapping[MessageQueue, int]) -> None:
        """See [`QueueReader.commit_many`][aiorocket.QueueReader.commit_many]."""
        self._run(self._reader.commit_many(group, offsets))
