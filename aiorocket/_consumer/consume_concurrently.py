"""Concurrent consumption (Java ``ConsumeMessageConcurrentlyService``).

Pulled messages are split into requests of ``consume_batch_size`` and queued; ``concurrency``
long-lived workers take requests in order and run the handler, so at most ``concurrency``
handler calls run at once (the bound Java's thread pool gives) without a task per message. A
worker whose handler finishes without suspending goes straight on to the next request; a
new worker is woken only while requests are waiting and none has been woken already, so a fast
handler runs back to back on one worker and a slow one fans out to all of them.

Outcome of a call (``processConsumeResult``):

* success up to ``ctx.ack_index``; the rest, or all on RECONSUME_LATER or an exception, failed;
* clustering: each failed message goes back to the broker (CONSUMER_SEND_MSG_BACK, falling
  back to a resend into ``%RETRY%<group>``); one that cannot be returned stays cached and is
  consumed again locally after ``reconsume_later_delay``; broadcasting: failures are logged
  and dropped;
* the finished messages leave the process queue and the offset it returns is recorded
  (increase-only), unless the queue was dropped meanwhile.

A clean-up pass sends back the messages of calls running longer than ``consume_timeout`` and
removes them, so one stuck handler cannot hold the committed offset forever. It also cancels
those calls (the handler sees ``CancelledError`` and its worker is free again) unless
``cancel_timed_out_handlers`` is off, which keeps Java's behaviour: the call runs on, holding
its worker, and its outcome is ignored. A message that cannot be sent back stays cached and is
consumed again locally, so the offset never passes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import anyio

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.consume_service import ConsumeServiceBase
from aiorocket._consumer.hooks import ConsumeHook, ConsumeHookContext, run_before
from aiorocket._consumer.offset_store import OffsetStore
from aiorocket._consumer.popping import PoppedMessage
from aiorocket._consumer.process_queue import ProcessQueue
from aiorocket._consumer.stats import StatsRecorder
from aiorocket.models import (
    ConcurrentContext,
    ConsumeStatus,
    ReceivedMessage,
    _concurrent_context,
)
from aiorocket.settings import ConsumerSettings

__all__ = ["ConcurrentConsumeService", "Handler"]

log = logging.getLogger("aiorocket.consumer")

#: ``async def handler(msgs, ctx) -> ConsumeStatus | None``
Handler = Callable[[list[ReceivedMessage], ConcurrentContext], Awaitable[ConsumeStatus | None]]

_SUCCESS = ConsumeStatus.CONSUME_SUCCESS
_LATER = ConsumeStatus.RECONSUME_LATER
#: requests a worker runs back to back before it lets other tasks in
_FAIRNESS_BATCH = 64


class _Request:
    """One handler call's worth of messages (Java ``ConsumeRequest``)."""

    __slots__ = ("cancelled", "expired", "msgs", "pq", "retry", "started", "worker")

    def __init__(self, pq: ProcessQueue, msgs: list[ReceivedMessage], retry: bool = False):
        self.pq = pq
        self.msgs = msgs
        #: monotonic start of the handler call; 0.0 while queued
        self.started = 0.0
        #: the clean-up sent the messages back; the late outcome is ignored
        self.expired = False
        #: a local retry after a failed send-back
        self.retry = retry
        #: the worker task running the handler call
        self.worker: asyncio.Task[None] | None = None
        #: the clean-up cancelled the handler call (consume timeout)
        self.cancelled = False


class _WorkQueue:
    """FIFO of requests with idle workers parked on futures; wakes at most one at a time."""

    def __init__(self) -> None:
        self.items: deque[_Request] = deque()
        self._idle: deque[asyncio.Future[None]] = deque()
        self._woken = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def put(self, req: _Request) -> None:
        self.items.append(req)
        if self._woken == 0:
            self._wake_one()

    def put_all(self, reqs: list[_Request]) -> None:
        """`put` each of ``reqs`` in order (one wake-up at most, as `put` gives)."""
        self.items.extend(reqs)
        if self._woken == 0:
            self._wake_one()

    def _wake_one(self) -> None:
        idle = self._idle
        while idle:
            fut = idle.popleft()
            if not fut.done():
                fut.set_result(None)
                self._woken += 1
                return

    def pop_nowait(self) -> _Request:
        """Take the next request (there must be one)."""
        items = self.items
        req = items.popleft()
        if items and self._woken == 0:
            # Recruit a helper while a backlog remains: if this handler suspends, the
            # helper carries on; if it does not, the helper finds nothing and parks again.
            self._wake_one()
        return req

    async def get(self) -> _Request:
        """Take the next request, waiting for one."""
        items = self.items
        while not items:
            loop = self._loop
            if loop is None:
                # Cached: asyncio.get_running_loop() costs a getpid() system call on 3.11.
                loop = self._loop = asyncio.get_running_loop()
            fut: asyncio.Future[None] = loop.create_future()
            self._idle.append(fut)
            try:
                await fut
            finally:
                if fut.done() and not fut.cancelled():
                    self._woken -= 1
                else:
                    fut.cancel()
        return self.pop_nowait()


class ConcurrentConsumeService(ConsumeServiceBase[Handler]):
    """Runs the handler over pulled messages with bounded concurrency.

    Args:
        handler: the user's ``async def (msgs, ctx)``.
        group: the wire consumer group (namespace applied).
        client: for send-back and the fallback resend.
        clock: monotonic seconds (tests pass a fake one).
    """

    uses_span_limit = True

    def __init__(
        self,
        *,
        handler: Handler,
        group: str,
        settings: ConsumerSettings,
        client: ClientInstance,
        offsets: OffsetStore,
        stats: StatsRecorder,
        hooks: Sequence[ConsumeHook] = (),
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(handler, group, settings, client, offsets, stats, tuple(hooks))
        if clock is None:
            loop = asyncio.get_running_loop()
            # The default loop's time() is time.monotonic() behind a Python call: call it
            # directly (uvloop's is C already).
            clock = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        self._clock = clock
        self._queue = _WorkQueue()
        self._running: set[_Request] = set()
        self._later: dict[_Request, asyncio.TimerHandle] = {}
        self._idle = asyncio.Event()
        self._idle.set()
        #: set by a push consumer in POP mode: retries a popped message through its invisible
        #: time (ConsumeMessagePopConcurrentlyService) instead of CONSUMER_SEND_MSG_BACK
        self.pop_retry: Callable[[PoppedMessage, int], Awaitable[bool]] | None = None

    # -- intake -------------------------------------------------------------------------------

    def submit(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """Queue ``msgs`` (already cached in ``pq``) in requests of ``consume_batch_size``."""
        size = self._batch
        if len(msgs) <= size:
            reqs = [_Request(pq, msgs)]
        elif size == 1:  # per-message handlers: no slicing
            reqs = [_Request(pq, [m]) for m in msgs]
        else:
            reqs = [_Request(pq, msgs[i : i + size]) for i in range(0, len(msgs), size)]
        self._queue.put_all(reqs)
        self._idle.clear()

    def _submit_later(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        # submitConsumeRequestLater: the messages stay cached, so the offset waits for them.
        req = _Request(pq, msgs, retry=True)
        loop = asyncio.get_running_loop()
        self._later[req] = loop.call_later(
            self._settings.reconsume_later_delay, self._resubmit, req
        )
        self._idle.clear()

    def _resubmit(self, req: _Request) -> None:
        self._later.pop(req, None)
        if not req.pq.dropped:
            self._queue.put(req)
        self._check_idle()

    # -- workers ------------------------------------------------------------------------------

    async def worker(self) -> None:
        """One worker's loop (run ``concurrency`` of them in the consumer's task group).

        The common path (a whole batch succeeds) stays synchronous after the handler returns:
        no coroutine besides the handler's own is created per request.
        """
        queue = self._queue
        items = queue.items
        handler = self._handler
        clock = self._clock
        running = self._running
        hooks = self._hooks
        stats = self._stats
        update_offset = self._offsets.update
        me = asyncio.current_task()
        streak = 0
        try:
            while True:
                if items:
                    req = items.popleft()
                    if items and queue._woken == 0:
                        queue._wake_one()  # (pop_nowait, inlined)
                else:
                    streak = 0
                    self._check_idle()
                    req = await queue.get()
                if req.pq.dropped:
                    continue
                pq = req.pq  # (after the check: mypy would keep "not dropped" across the await)
                msgs = req.msgs
                ctx = _concurrent_context(pq.queue)
                hook_ctx = None
                if hooks:
                    hook_ctx = ConsumeHookContext(self._group, pq.queue, msgs)
                    run_before(hooks, hook_ctx)
                req.started = start = clock()
                req.worker = me
                running.add(req)
                call = pq.call_started(start)
                raised: Exception | None = None
                try:
                    status = await handler(msgs[:], ctx)
                except asyncio.CancelledError:
                    if not self._timed_out(req, me):
                        raise
                    status = _LATER
                except Exception as exc:
                    log.warning(
                        "handler failed on %d message(s) of %s", len(msgs), pq.queue, exc_info=True
                    )
                    status = _LATER
                    raised = exc
                finally:
                    running.discard(req)
                    pq.call_ended(call)
                if req.cancelled and not self._timed_out(req, me):
                    # The handler swallowed our cancellation, and another one (shutdown) is due.
                    raise asyncio.CancelledError
                end = clock()
                if status is None:
                    status = _SUCCESS
                elif status is not _SUCCESS and status is not _LATER:
                    log.error("handler returned %r, not a ConsumeStatus: a failure", status)
                    status = _LATER
                if hook_ctx is not None:
                    self._after_hooks(hook_ctx, status is _SUCCESS, raised, end - start)
                raised = None  # its traceback holds this frame
                if req.expired:
                    pass  # the clean-up already sent these back and moved the offset on
                elif pq.dropped:
                    # ConsumeRequest.run: a dropped queue's results are not processed.
                    stats.consumed(pq.queue.topic, end - start, 0, 0)
                elif status is _SUCCESS and ctx.ack_index >= len(msgs) - 1:
                    stats.consumed(pq.queue.topic, end - start, len(msgs), 0)
                    offset = pq.remove(msgs, now=end)
                    if offset >= 0:
                        update_offset(pq.queue, offset)
                else:
                    await self._process_result(req, status, ctx, end - start)
                streak += 1
                if streak >= _FAIRNESS_BATCH:
                    streak = 0
                    await asyncio.sleep(0)
        finally:
            # A worker ends cancelled; its task keeps the CancelledError, whose traceback keeps
            # this frame: unbound here, the task, its last request and messages are freed at
            # once instead of waiting in a cycle for a full collection (rare in a big heap).
            me = req = msgs = raised = None  # type: ignore[assignment]

    @staticmethod
    def _timed_out(req: _Request, me: asyncio.Task[None] | None) -> bool:
        """Withdraw the clean-up's cancellation of ``req``'s call; False when another
        cancellation of the worker is still pending (a shutdown), which must go on."""
        if not req.cancelled:
            return False
        req.cancelled = False
        return me is None or me.uncancel() == 0

    def _check_idle(self) -> None:
        if not self._queue.items and not self._running and not self._later:
            self._idle.set()

    async def _process_result(
        self, req: _Request, status: ConsumeStatus, ctx: ConcurrentContext, rt: float
    ) -> None:
        pq = req.pq
        msgs = req.msgs
        n = len(msgs)
        if status is _SUCCESS:
            ack = min(ctx.ack_index, n - 1)
            if ack < -1:
                ack = -1
        else:
            ack = -1
        self._stats.consumed(pq.queue.topic, rt, ack + 1, n - ack - 1)
        done = msgs
        if ack < n - 1:
            failed = msgs[ack + 1 :]
            if not self._clustering:
                for m in failed:
                    log.warning("broadcasting: dropping message %s after a failure", m)
            else:
                back_failed = [
                    m
                    for m in failed
                    if not await self.send_back(m, ctx.delay_level, pq.queue.broker_name)
                ]
                if back_failed:
                    self._stats.send_back_failures += len(back_failed)
                    keep = {id(m) for m in back_failed}
                    done = [m for m in msgs if id(m) not in keep]
                    if not pq.dropped:
                        self._submit_later(
                            pq,
                            [m._with_reconsume_times(m.reconsume_times + 1) for m in back_failed],
                        )
        offset = pq.remove(done, now=self._clock())
        if offset >= 0 and not pq.dropped:
            self._offsets.update(pq.queue, offset)

    # -- send-back ----------------------------------------------------------------------------

    async def send_back(self, msg: ReceivedMessage, delay_level: int, broker_name: str) -> bool:
        """Return a failed message to the broker for a later retry; True when it got there
        (`SendBack`; a popped message's invisible time
        is moved instead, `pop_retry`)."""
        if self.pop_retry is not None and isinstance(msg, PoppedMessage):
            return await self.pop_retry(msg, delay_level)
        return await self._sender.send_back(msg, delay_level, broker_name)

    # -- consume timeout ----------------------------------------------------------------------

    async def clean_expired(self) -> None:
        """Send back and drop the messages of calls running longer than ``consume_timeout``
        (``ConsumeMessageConcurrentlyService.cleanExpireMsg``)."""
        now = self._clock()
        timeout = self._settings.consume_timeout
        for req in [r for r in self._running if now - r.started > timeout and not r.expired]:
            pq = req.pq
            if pq.dropped:
                continue
            req.expired = True
            cancel = self._settings.cancel_timed_out_handlers
            log.warning(
                "%d message(s) of %s consumed for over %.0f s; %ssending them back",
                len(req.msgs),
                pq.queue,
                timeout,
                "cancelling the handler call and " if cancel else "",
            )
            worker = req.worker
            if cancel and worker is not None and worker is not asyncio.current_task():
                req.cancelled = worker.cancel()
                if req.cancelled:
                    self._stats.handlers_cancelled += 1
            kept: list[ReceivedMessage] = []
            if self._clustering:
                for m in req.msgs:
                    # Java sends expired messages back with delay level 3.
                    if not await self.send_back(m, 3, pq.queue.broker_name):
                        log.warning("could not send back expired message %s", m.msg_id)
                        kept.append(m)
            done = req.msgs
            if kept:
                # Still cached, so the offset waits for them: consumed again here later.
                self._stats.send_back_failures += len(kept)
                keep = {id(m) for m in kept}
                done = [m for m in req.msgs if id(m) not in keep]
                if not pq.dropped:
                    self._submit_later(
                        pq, [m._with_reconsume_times(m.reconsume_times + 1) for m in kept]
                    )
            offset = pq.remove(done, now=self._clock())
            if offset >= 0 and not pq.dropped:
                self._offsets.update(pq.queue, offset)

    # -- shutdown -----------------------------------------------------------------------------

    @property
    def running(self) -> int:
        """Handler calls in progress."""
        return len(self._running)

    @property
    def queued(self) -> int:
        """Requests waiting for a worker."""
        return len(self._queue.items)

    async def drain(self, timeout: float) -> bool:
        """Finish in-flight work of draining queues within ``timeout``; True if all finished.

        Requests that never started are discarded: their messages stay cached, so the
        committed offset stops before them and they are delivered after a restart, never
        twice. Local retries waiting for their delay run now, since their messages were
        delivered already and hold the offset back.
        """
        self._closing = True
        items = self._queue.items
        kept = [r for r in items if r.retry and not r.pq.dropped]
        items.clear()
        for req, handle in list(self._later.items()):
            handle.cancel()
            if not req.pq.dropped:
                kept.append(req)
        self._later.clear()
        for req in kept:
            self._queue.put(req)
        self._check_idle()
        # A cancel scope, not 3.11's wait_for: a cancellation arriving as the wait ends is
        # never swallowed, so a consumer cancelled mid-shutdown still stops.
        with anyio.move_on_after(timeout) as scope:
            await self._idle.wait()
        if scope.cancelled_caught:
            log.warning(
                "shutdown grace of %.1f s over with %d handler call(s) still running",
                timeout,
                len(self._running),
            )
            return False
        return True
