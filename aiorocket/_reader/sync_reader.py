"""The blocking face of [`QueueReader`][aiorocket.QueueReader]:
[`SyncQueueReader`][aiorocket.SyncQueueReader] runs the async reader on an event loop in a daemon
thread behind an anyio blocking portal, for plain code such as Spark executors."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Awaitable, Coroutine, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from aiorocket._reader.queue_reader import (
    _PULL_BATCH,
    DEFAULT_PULL_GROUP,
    QueueReader,
    ReadBatch,
)
from aiorocket.errors import ClientClosedError, ConfigurationError
from aiorocket.models import MessageQueue, ReceivedMessage
from aiorocket.settings import ClientSettings

__all__ = ["SyncQueueReader"]

_T = TypeVar("_T")

_END: Final = object()


class SyncQueueReader:
    """A [`QueueReader`][aiorocket.QueueReader] for plain (blocking) code: the async reader runs on
    an event loop in a daemon thread behind an anyio blocking portal, and each method waits for its
    result.

    ```python
    with SyncQueueReader(namesrv="127.0.0.1:9876") as reader:
        mq = reader.queues("orders")[0]
        for msgs in reader.read_range_batches(mq, 0, reader.max_offset(mq)):
            ...
    ```

    Methods are those of [`QueueReader`][aiorocket.QueueReader], blocking, with the same errors;
    they may be called from any thread except the reader's own. Arguments are those of
    [`QueueReader`][aiorocket.QueueReader], plus:

    Args:
        prefetch: lists [`read_range_batches`][aiorocket.SyncQueueReader.read_range_batches] keeps
            ready ahead of its caller, so the network overlaps with the caller's work.

    Raises:
        ConfigurationError: invalid settings (at construction).
    """

    def __init__(
        self,
        *,
        namesrv: str | Sequence[str],
        pull_group: str = DEFAULT_PULL_GROUP,
        prefetch: int = 8,
        **settings: Any,
    ) -> None:
        self._reader = QueueReader(namesrv=namesrv, pull_group=pull_group, **settings)
        if prefetch < 1:
            raise ConfigurationError("prefetch must be at least 1")
        self._prefetch = prefetch
        self._portal_cm: contextlib.AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._closed = False
        self._lock = threading.Lock()

    @property
    def settings(self) -> ClientSettings:
        """The reader's settings."""
        return self._reader.settings

    def start(self) -> None:
        """Start the loop thread and the reader. Prefer ``with``.

        Raises:
            ClientClosedError: the reader was closed before.
        """
        with self._lock:
            if self._closed:
                raise ClientClosedError("the queue reader is closed")
            if self._portal is not None:
                return
            cm = start_blocking_portal(backend="asyncio")
            self._portal = cm.__enter__()
            self._portal_cm = cm
        self._run(self._reader.start())

    def close(self) -> None:
        """Close the reader and stop its thread; safe to call more than once."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            portal, cm = self._portal, self._portal_cm
        if portal is None or cm is None:
            return
        try:
            portal.call(self._reader.close)
        finally:
            # Reads still running (an iteration left unfinished) are cancelled, not awaited.
            portal.call(portal.stop, True)
            cm.__exit__(None, None, None)

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

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> Future[_T]:
        portal = self._portal
        if portal is None or self._closed:
            coro.close()
            raise ClientClosedError("the queue reader is closed" if self._closed else "not started")
        try:
            return portal.start_task_soon(_awaited, coro)
        except RuntimeError:
            # Called from the portal's own thread, or the portal stopped meanwhile.
            coro.close()
            if self._closed:
                raise ClientClosedError("the queue reader is closed") from None
            raise

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self._submit(coro).result()

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
        """See [`QueueReader.read_range_batches`][aiorocket.QueueReader.read_range_batches]; up to
        ``prefetch`` lists are read ahead of the caller."""
        buf: queue.Queue[Any] = queue.Queue()
        slots: list[tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = []

        async def produce() -> None:
            # Runs on the loop: pulls ahead while at most `prefetch` lists wait in `buf`.
            sem = asyncio.Semaphore(self._prefetch)
            slots.append((asyncio.get_running_loop(), sem))
            try:
                async for msgs in self._reader.read_range_batches(
                    mq,
                    start,
                    end,
                    expression=expression,
                    tolerate_loss=tolerate_loss,
                    pipeline=pipeline,
                ):
                    await sem.acquire()
                    buf.put(msgs)
            except BaseException as exc:
                # Whatever ends the producer must wake the consumer (cancellation too).
                buf.put(_Failed(exc))
                if not isinstance(exc, Exception):
                    raise
            else:
                buf.put(_END)

        future = self._submit(produce())
        try:
            while True:
                item = buf.get()
                if item is _END:
                    return
                if isinstance(item, _Failed):
                    if isinstance(item.exc, Exception):
                        raise item.exc
                    raise ClientClosedError("the queue reader was closed during the read")
                # Not through the portal: a per-list wake-up, without a round trip.
                loop, sem = slots[0]
                loop.call_soon_threadsafe(sem.release)
                yield item
        finally:
            if not future.done():
                future.cancel()

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
        for msgs in self.read_range_batches(
            mq, start, end, expression=expression, tolerate_loss=tolerate_loss, pipeline=pipeline
        ):
            yield from msgs

    def committed_offset(self, group: str, mq: MessageQueue) -> int | None:
        """See [`QueueReader.committed_offset`][aiorocket.QueueReader.committed_offset]."""
        return self._run(self._reader.committed_offset(group, mq))

    def commit(self, group: str, mq: MessageQueue, offset: int) -> None:
        """See [`QueueReader.commit`][aiorocket.QueueReader.commit]."""
        self._run(self._reader.commit(group, mq, offset))

    def commit_many(self, group: str, offsets: Mapping[MessageQueue, int]) -> None:
        """See [`QueueReader.commit_many`][aiorocket.QueueReader.commit_many]."""
        self._run(self._reader.commit_many(group, offsets))


async def _awaited(aw: Awaitable[_T]) -> _T:
    """``aw``'s result (a blocking portal takes an async function, not an awaitable)."""
    return await aw


@dataclass(frozen=True, slots=True)
class _Failed:
    """An error raised by the producing side of
    [`SyncQueueReader.read_range_batches`][aiorocket.SyncQueueReader.read_range_batches]."""

    exc: BaseException
