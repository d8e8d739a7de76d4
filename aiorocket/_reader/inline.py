"""A queue reader driven from the calling thread: `InlineReader`.

[`SyncQueueReader`][aiorocket.SyncQueueReader] runs its event loop in a thread of its own, so every
list of messages crosses threads (a wake-up of the loop, a queue, a condition variable) and both
threads take turns holding the GIL. A Spark executor reading one range needs none of that:
here the loop belongs to the caller's thread and runs only while the caller waits for the
next chunk. Pulls stay pipelined all the same: the ones in flight are answered into the
socket buffer while the caller decodes, and are picked up when the loop runs again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, Self, TypeVar

from aiorocket._reader.queue_reader import DEFAULT_PULL_GROUP, QueueReader, RawChunk, _RangeRead
from aiorocket.errors import ClientClosedError
from aiorocket.models import MessageQueue

__all__ = ["InlineReader"]

_T = TypeVar("_T")


class InlineReader:
    """A [`QueueReader`][aiorocket.QueueReader] on a private event loop that runs in the caller's
    thread.

    ```python
    with InlineReader(namesrv="127.0.0.1:9876") as reader:
        for chunk in reader.read_range_raw(mq, 0, 1000):
            ...
    ```

    Not for use from a thread that runs an event loop already (the loop could not run).
    Arguments are those of [`QueueReader`][aiorocket.QueueReader].

    Raises:
        ConfigurationError: invalid settings (at construction).
    """

    def __init__(
        self, *, namesrv: str | Sequence[str], pull_group: str = DEFAULT_PULL_GROUP, **settings: Any
    ) -> None:
        self._reader = QueueReader(namesrv=namesrv, pull_group=pull_group, **settings)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        loop = self._loop
        if loop is None or self._closed:
            coro.close()
            raise ClientClosedError("the queue reader is closed" if self._closed else "not started")
        return loop.run_until_complete(coro)

    def start(self) -> None:
        """Create the loop and start the reader. Prefer ``with``.

        Raises:
            ClientClosedError: the reader was closed before.
        """
        if self._closed:
            raise ClientClosedError("the queue reader is closed")
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            self._run(self._reader.start())

    def close(self) -> None:
        """Close the reader and its loop; safe to call more than once."""
        loop = self._loop
        if self._closed or loop is None:
            self._closed = True
            return
        try:
            loop.run_until_complete(self._reader.close())
            # Whatever the reader left (connection tasks) ends before the loop does.
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            self._closed = True
            loop.close()

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
        """See [`QueueReader.read_range_raw`][aiorocket.QueueReader.read_range_raw]; the loop runs
        while this waits for the next chunk."""
        loop = self._loop
        if loop is None or self._closed:
            raise ClientClosedError("the queue reader is closed" if self._closed else "not started")
        rng = _RangeRead(self._reader, mq, start, end, expression, tolerate_loss, pipeline, True)
        pending = rng.pending
        try:
            while True:
                rng.fill(loop)
                if not pending:
                    return
                if not pending[0].done():
                    # The loop runs (sending the new pulls, reading answers) until the next
                    # chunk is complete; chunks completed meanwhile are taken without running
                    # it again.
                    loop.run_until_complete(pending[0])
                while pending and pending[0].done():
                    chunk = pending.popleft().result()
                    if rng.accept(chunk):
                        yield RawChunk(chunk.msgs, chunk.hi, chunk.tags)  # type: ignore[arg-type]
                    if rng.done:
                        return
        finally:
            if pending and not self._closed:
                loop.run_until_complete(rng.cancel())
