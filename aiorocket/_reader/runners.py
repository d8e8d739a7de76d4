"""How a blocking reader runs the async [`QueueReader`][aiorocket.QueueReader]: a `Runner` runs
one coroutine to completion and drives the chunk reads of a range.

`PortalRunner` keeps an event loop in a daemon thread behind an anyio blocking portal (any
thread may call; what [`SyncQueueReader`][aiorocket.SyncQueueReader] uses). `CallerLoopRunner`
keeps a private loop that runs in the caller's thread only while the caller waits (one thread,
no hop per chunk; what the Spark executors read with).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import Awaitable, Coroutine, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar

from anyio.from_thread import BlockingPortal, start_blocking_portal

from aiorocket._reader.queue_reader import Chunk, RangeRead
from aiorocket.errors import ClientClosedError, ConfigurationError

__all__ = ["CallerLoopRunner", "PortalRunner", "Runner"]

_T = TypeVar("_T")

_END: Final = object()


class Runner(Protocol):
    """Where a blocking reader's coroutines run. Started once, closed once; calls come between."""

    def start(self) -> None:
        """Make the event loop ready."""

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """``coro``'s result, waited for."""

    def chunks(self, read: RangeRead) -> Iterator[Chunk]:
        """The chunks ``read`` hands over, in order."""

    def close(self, closing: Coroutine[Any, Any, None]) -> None:
        """Run ``closing`` (the reader's close), then end the loop."""


class PortalRunner:
    """An event loop in a daemon thread behind an anyio blocking portal.

    Args:
        prefetch: chunks `chunks` keeps ready ahead of its caller, so the network overlaps
            with the caller's work.

    Raises:
        ConfigurationError: ``prefetch`` < 1.
    """

    def __init__(self, prefetch: int) -> None:
        if prefetch < 1:
            raise ConfigurationError("prefetch must be at least 1")
        self._prefetch = prefetch
        self._portal_cm: contextlib.AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._stopping = False

    @property
    def portal(self) -> BlockingPortal | None:
        """The portal to the loop thread; ``None`` before `start`."""
        return self._portal

    def start(self) -> None:
        """Start the loop thread."""
        cm = start_blocking_portal(backend="asyncio")
        self._portal = cm.__enter__()
        self._portal_cm = cm

    def _submit(self, coro: Coroutine[Any, Any, _T]) -> Future[_T]:
        portal = self._portal
        if portal is None:
            coro.close()
            raise ClientClosedError("not started")
        try:
            return portal.start_task_soon(_awaited, coro)
        except RuntimeError:
            # Called from the portal's own thread, or the portal stopped meanwhile.
            coro.close()
            if self._stopping:
                raise ClientClosedError("the queue reader is closed") from None
            raise

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """``coro``'s result; it runs on the loop thread.

        Raises:
            ClientClosedError: the runner is closing.
            RuntimeError: called from the loop thread.
        """
        return self._submit(coro).result()

    def chunks(self, read: RangeRead) -> Iterator[Chunk]:
        """The chunks of ``read``; a task on the loop reads up to ``prefetch`` of them ahead."""
        buf: queue.Queue[Any] = queue.Queue()
        slots: list[tuple[asyncio.AbstractEventLoop, asyncio.Semaphore]] = []

        async def produce() -> None:
            # Runs on the loop: reads ahead while at most `prefetch` chunks wait in `buf`.
            sem = asyncio.Semaphore(self._prefetch)
            slots.append((asyncio.get_running_loop(), sem))
            try:
                async for chunk in read.chunks():
                    await sem.acquire()
                    buf.put(chunk)
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
                # Not through the portal: a per-chunk wake-up, without a round trip.
                loop, sem = slots[0]
                loop.call_soon_threadsafe(sem.release)
                yield item
        finally:
            if not future.done():
                future.cancel()

    def close(self, closing: Coroutine[Any, Any, None]) -> None:
        """Run ``closing`` on the loop, then stop the loop thread."""
        self._stopping = True
        portal, cm = self._portal, self._portal_cm
        if portal is None or cm is None:
            closing.close()
            return
        try:
            portal.call(_awaited, closing)
        finally:
            # Reads still running (an iteration left unfinished) are cancelled, not awaited.
            portal.call(portal.stop, True)
            cm.__exit__(None, None, None)


class CallerLoopRunner:
    """A private event loop that runs in the caller's thread while the caller waits.

    Not for a thread that runs an event loop already (the loop could not run).
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    def _require(self) -> asyncio.AbstractEventLoop:
        loop = self._loop
        if loop is None or loop.is_closed():
            raise ClientClosedError("the queue reader is closed" if loop else "not started")
        return loop

    def start(self) -> None:
        """Create the loop."""
        self._loop = asyncio.new_event_loop()

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """``coro``'s result; the loop runs until it is done.

        Raises:
            ClientClosedError: the loop is closed.
        """
        try:
            loop = self._require()
        except ClientClosedError:
            coro.close()
            raise
        return loop.run_until_complete(coro)

    def chunks(self, read: RangeRead) -> Iterator[Chunk]:
        """The chunks of ``read``; the loop runs while this waits for the next one, and the
        pulls in flight are answered into the socket buffer while the caller works."""
        loop = self._require()
        pending = read.pending
        try:
            while True:
                read.fill(loop)
                if not pending:
                    return
                if not pending[0].done():
                    # The loop runs (sending the new pulls, reading answers) until the next
                    # chunk is complete; chunks completed meanwhile are taken without running
                    # it again.
                    loop.run_until_complete(pending[0])
                while pending and pending[0].done():
                    chunk = pending.popleft().result()
                    if read.accept(chunk):
                        yield chunk
                    if read.done:
                        return
        finally:
            if pending and not loop.is_closed():
                loop.run_until_complete(read.cancel())

    def close(self, closing: Coroutine[Any, Any, None]) -> None:
        """Run ``closing``, end what it left on the loop, and close the loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            closing.close()
            return
        try:
            loop.run_until_complete(closing)
            # Whatever the reader left (connection tasks) ends before the loop does.
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


async def _awaited(aw: Awaitable[_T]) -> _T:
    """``aw``'s result (a blocking portal takes an async function, not an awaitable)."""
    return await aw


@dataclass(frozen=True, slots=True)
class _Failed:
    """An error raised by the producing side of `PortalRunner.chunks`."""

    exc: BaseException
