"""Orderly consumption (Java ``ConsumeMessageOrderlyService``).

Each queue is consumed by at most one task at a time, in offset order; different queues run in
parallel, at most ``concurrency`` of them at once (a task holds its slot for its slice, as a
Java consume thread does).

* **Requests.** Pulled messages wake the queue's consume task if it is not scheduled already
  (Java ``dispatchToConsume``). The task holds the queue's `asyncio.Lock` (Java
  ``MessageQueueLock``, one per queue, outliving its process queues) while it works, takes up
  to ``consume_batch_size`` messages from the front of the cache (the consuming subset,
  ``consumingMsgOrderlyTreeMap``), runs the handler and acts on the outcome, and repeats until
  the cache is empty, the outcome says wait, or ``max_continuous_consume_time`` has passed;
  then it ends and, where needed, a new task is scheduled (``submitConsumeRequestLater``).
* **Locks (clustering).** A batch is only taken while the queue's broker lock is held and
  younger than ``lock_expiry``; otherwise the task waits for the lock to be renewed. The
  queue's lock doubles as Java's *consume lock* (``ProcessQueue.consumeLock``): a rebalance
  that takes the queue away waits for it before unlocking the queue on the broker, so no
  other member can start on the queue while a handler of this member still runs on it.
* **Outcome** (``processConsumeResult``). With ``ctx.auto_commit`` (the default): SUCCESS
  commits the consuming subset (COMMIT and ROLLBACK count as SUCCESS, as in Java); SUSPEND
  (also an exception) puts the messages back with their reconsume count raised and
  resubmits the queue after ``ctx.suspend_millis``, nothing after them being delivered
  meanwhile. Without auto-commit: SUCCESS keeps the subset uncommitted, COMMIT commits it,
  ROLLBACK puts all of it back and suspends, SUSPEND as above without committing.
* **Retry limit** (``checkReconsumeTimes``). Unlimited unless ``max_reconsume_times`` is set;
  a message that reached it is sent to ``%DLQ%<group>`` (CONSUMER_SEND_MSG_BACK, delay level
  -1) and the queue moves past it; if that send fails it is retried like any other.

A result is committed to the offset store unless the queue was dropped meanwhile: another
member may already own it. Broadcasting consumers take no locks: per-queue sequencing only.
Hooks see ``CONSUME_SUCCESS`` for SUCCESS and COMMIT, ``RECONSUME_LATER`` otherwise.

**Ordering by key** (``order_by`` other than ``"queue"``; `key_order`
holds the per-key lanes). No RocketMQ client has it: the queue's order is kept per key, and the
keys of a queue run concurrently.

* One *dispatcher* task per queue, started by pulled messages (or a key's suspension ending)
  when none runs, holds the queue's `asyncio.Lock` while any handler call of the queue
  runs, so the lock is still the consume lock a rebalance waits for. Under a live broker lock
  it starts a call for every ready key, each call in a task of its own holding one of the
  ``concurrency`` slots (there is no continuous-consume slice: slots come back after every
  call); it ends once no call runs and no key is ready.
* A call holds up to ``consume_batch_size`` messages of one key. Success (COMMIT and ROLLBACK
  count as SUCCESS: auto-commit is the only mode, ``OrderlyContext.auto_commit = False`` is
  refused) forgets the messages in the process queue and commits its smallest cached offset,
  which is the smallest unfinished one of the queue: after a crash every key replays an
  in-order suffix. SUSPEND (or an exception) applies the retry limit as above, puts the rest
  back at the front of the key's lane and keeps the key busy for the suspend time, so only
  that key's later messages wait.
* A queue that is dropped, loses its lock or shuts down starts no call any more; the calls
  running finish first (shutdown waits for them within its grace), then the lock is released.
* A key suspended for long keeps its later messages cached, and they count toward the
  queue's pull thresholds: once ``pull_threshold_for_queue`` messages are cached the queue
  stops pulling for every key until that key moves on (or reaches ``max_reconsume_times``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.consume_service import ConsumeServiceBase
from aiorocket._consumer.hooks import ConsumeHook, ConsumeHookContext, run_before
from aiorocket._consumer.key_order import KeyFunction, KeyLanes, safe_key
from aiorocket._consumer.offset_store import OffsetStore
from aiorocket._consumer.process_queue import ProcessQueue
from aiorocket._consumer.stats import StatsRecorder
from aiorocket.errors import BrokerError, TransportError
from aiorocket.models import (
    MessageQueue,
    OrderlyContext,
    OrderlyStatus,
    ReceivedMessage,
)
from aiorocket.settings import ConsumerSettings

__all__ = ["OrderlyConsumeService", "OrderlyHandler"]

log = logging.getLogger("aiorocket.consumer")

#: ``async def handler(msgs, ctx) -> OrderlyStatus | None``
OrderlyHandler = Callable[[list[ReceivedMessage], OrderlyContext], Awaitable[OrderlyStatus | None]]

_SUCCESS = OrderlyStatus.SUCCESS
_SUSPEND = OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
_COMMIT = OrderlyStatus.COMMIT
_ROLLBACK = OrderlyStatus.ROLLBACK
#: a task that used up its time slice is resubmitted this much later (Java: 10 ms)
_RESUBMIT_DELAY = 0.01
#: Java clamps suspendCurrentQueueTimeMillis to 10 ms .. 30 s
_MIN_SUSPEND_MS, _MAX_SUSPEND_MS = 10, 30_000
#: batches a task runs back to back before it lets other tasks in
_FAIRNESS_BATCH = 64

Spawn = Callable[[Coroutine[Any, Any, None], str], "asyncio.Task[Any]"]


@dataclass(slots=True, eq=False)
class _Keyed:
    """Ordering by key: one process queue's lanes and the state of its dispatcher."""

    lanes: KeyLanes = field(default_factory=KeyLanes)
    #: set when the dispatcher may have something new to do (a call ended, messages came,
    #: a suspension ended)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    #: handler calls of this queue in progress (their outcome not processed yet)
    running: int = 0
    #: suspended keys and the timers that release them
    timers: dict[str | None, asyncio.TimerHandle] = field(default_factory=dict)


class OrderlyConsumeService(ConsumeServiceBase[OrderlyHandler]):
    """Runs the handler over each queue's messages in order, one call per queue at a time.

    Args:
        handler: the user's ``async def (msgs, ctx)``.
        group: the wire consumer group (namespace applied).
        client: for sending messages past the retry limit to the DLQ.
        spawn: starts a task in the consumer's task group (``(coroutine, name) -> task``).
        on_lock_expired: called when a queue waits because its lock expired (clustering), so
            the consumer can renew locks early (Java ``tryLockLaterAndReconsume``).
        key_of: order by key (see the module docs): the key of a message; ``None`` orders
            whole queues.
        clock: monotonic seconds (tests pass a fake one).
    """

    uses_span_limit = False

    def __init__(
        self,
        *,
        handler: OrderlyHandler,
        group: str,
        settings: ConsumerSettings,
        client: ClientInstance,
        offsets: OffsetStore,
        stats: StatsRecorder,
        spawn: Spawn,
        hooks: Sequence[ConsumeHook] = (),
        on_lock_expired: Callable[[], None] | None = None,
        key_of: KeyFunction | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(handler, group, settings, client, offsets, stats, tuple(hooks))
        self._spawn = spawn
        self._on_lock_expired = on_lock_expired
        self._clock = clock or asyncio.get_running_loop().time
        self._expiry = settings.lock_expiry
        self._slice = settings.max_continuous_consume_time
        self._default_suspend_ms = round(settings.suspend_delay * 1000)
        self._max_reconsume = settings.effective_max_reconsume_times
        self._semaphore = asyncio.Semaphore(settings.concurrency)
        self._queue_locks: dict[MessageQueue, asyncio.Lock] = {}
        #: process queues with a consume task running, parked or due (Java ``consuming``)
        self._scheduled: set[ProcessQueue] = set()
        self._timers: dict[ProcessQueue, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._running = 0
        self._key_of = key_of
        #: ordering by key: the lanes of each process queue that received messages
        self._keyed: dict[ProcessQueue, _Keyed] = {}

    # -- state --------------------------------------------------------------------------------

    def queue_lock(self, mq: MessageQueue) -> asyncio.Lock:
        """The lock a consume task of ``mq`` holds while it works (Java
        ``MessageQueueLock.fetchLockObject``); holding it means no handler runs on ``mq``."""
        lock = self._queue_locks.get(mq)
        if lock is None:
            lock = self._queue_locks[mq] = asyncio.Lock()
        return lock

    def lock_valid(self, pq: ProcessQueue) -> bool:
        """Whether ``pq`` may be consumed now: always in broadcasting mode, else only while
        its broker lock is held and younger than ``lock_expiry``."""
        return not self._clustering or pq.lock_valid(self._clock(), self._expiry)

    @property
    def running(self) -> int:
        """Handler calls in progress."""
        return self._running

    # -- intake -------------------------------------------------------------------------------

    def submit(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """Messages were cached in ``pq``: make sure a consume task will take them."""
        if self._key_of is not None:
            self._submit_keyed(pq, msgs)
        elif pq not in self._scheduled and not self._closing:
            self._scheduled.add(pq)
            self._start(pq)

    def _start(self, pq: ProcessQueue) -> None:
        task = self._spawn(self._consume(pq), f"consume {pq.queue}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _resubmit_later(self, pq: ProcessQueue, delay: float) -> None:
        # submitConsumeRequestLater: the queue stays scheduled, so fresh pulls do not start a
        # task before the delay is over.
        loop = asyncio.get_running_loop()
        self._timers[pq] = loop.call_later(delay, self._fire, pq)

    def _fire(self, pq: ProcessQueue) -> None:
        self._timers.pop(pq, None)
        if self._closing or not pq.active:
            self._scheduled.discard(pq)
            return
        self._start(pq)

    def _suspend_delay(self, ctx: OrderlyContext) -> float:
        ms = ctx.suspend_millis
        if not isinstance(ms, int | float) or ms < 0:
            ms = self._default_suspend_ms
        return min(max(ms, _MIN_SUSPEND_MS), _MAX_SUSPEND_MS) / 1000

    # -- the consume task ---------------------------------------------------------------------

    async def _consume(self, pq: ProcessQueue) -> None:
        """One request of ``pq`` (Java ``ConsumeRequest.run``); ordering by key, the queue's
        dispatcher (see the module docs)."""
        keyed = None if self._key_of is None else self._keyed[pq]
        while True:
            if self._closing or not pq.active:
                self._scheduled.discard(pq)
                return
            if not self.lock_valid(pq):
                # Not locked, or the lock was not renewed in time: wait for the renewal
                # (and ask for it now) instead of consuming on a lock we cannot trust.
                if self._on_lock_expired is not None:
                    self._on_lock_expired()
                await pq.wait_lock_change()
                continue
            async with self.queue_lock(pq.queue):
                if keyed is None:
                    wait_for_lock = await self._run_slice(pq)
                else:
                    wait_for_lock = await self._run_keys(pq, keyed)
            if not wait_for_lock:
                return

    async def _run_slice(self, pq: ProcessQueue) -> bool:
        """Consume batches until done; True when the lock became untrusted meanwhile (the
        caller waits for it), False when this request is over.

        The task holds a concurrency slot for its whole slice, as a Java consume thread
        does, and the common outcome (success with auto-commit) is handled inline, so a
        batch costs no coroutine besides the handler's own.
        """
        clock = self._clock
        mq = pq.queue
        topic = mq.topic
        hooks = self._hooks
        stats = self._stats
        update_offset = self._offsets.update
        clustering = self._clustering
        expiry = self._expiry
        batch = self._batch
        suspend_ms = self._default_suspend_ms
        streak = 0
        async with self._semaphore:
            begin = clock()
            while True:
                if self._closing or pq.dropped or pq.draining:
                    self._scheduled.discard(pq)
                    return False
                now = clock()
                if clustering and not (pq.locked and now - pq.last_lock_time <= expiry):
                    return True
                if now - begin > self._slice:
                    # MAX_TIME_CONSUME_CONTINUOUSLY: hand the slot over, carry on shortly.
                    self._resubmit_later(pq, _RESUBMIT_DELAY)
                    return False
                msgs = pq.take(batch)
                if not msgs:
                    self._scheduled.discard(pq)
                    return False
                ctx = OrderlyContext(mq, suspend_millis=suspend_ms)
                hook_ctx = None
                if hooks:
                    hook_ctx = ConsumeHookContext(self._group, mq, msgs)
                    run_before(hooks, hook_ctx)
                result, raised = await self._invoke(pq, msgs, ctx, now, "the queue")
                end = clock()
                ok = result is None or result is _SUCCESS
                if ok and hook_ctx is None and ctx.auto_commit and not pq.dropped:
                    stats.consumed(topic, end - now, len(msgs), 0)
                    offset = pq.commit(now=end)
                    if offset >= 0:
                        update_offset(mq, offset, increase_only=False)
                else:
                    status = self._status(result)
                    if hook_ctx is not None:
                        self._after_hooks(
                            hook_ctx, status is _SUCCESS or status is _COMMIT, raised, end - now
                        )
                    if not await self._process_result(pq, msgs, status, ctx, end - now):
                        return False
                streak += 1
                if streak >= _FAIRNESS_BATCH:
                    streak = 0
                    await asyncio.sleep(0)

    async def _invoke(
        self,
        pq: ProcessQueue,
        msgs: list[ReceivedMessage],
        ctx: OrderlyContext,
        now: float,
        what: str,
    ) -> tuple[object, Exception | None]:
        """One handler call: (its result, what it raised). A raise is logged and answered
        as SUSPEND_CURRENT_QUEUE_A_MOMENT, as Java's ``ConsumeMessageOrderlyService`` does
        with a listener's exception; ``what`` (the queue or a key) is what it suspends."""
        self._running += 1
        call = pq.call_started(now)
        try:
            return await self._handler(msgs[:], ctx), None
        except Exception as exc:
            log.warning(
                "orderly handler failed on %d message(s) of %s; suspending %s",
                len(msgs),
                pq.queue,
                what,
                exc_info=True,
            )
            return _SUSPEND, exc
        finally:
            self._running -= 1
            pq.call_ended(call)

    @staticmethod
    def _status(result: object) -> OrderlyStatus:
        if result is None:
            return _SUCCESS
        if isinstance(result, OrderlyStatus):
            return result
        log.error("orderly handler returned %r, not an OrderlyStatus: suspending", result)
        return _SUSPEND

    # -- outcome ------------------------------------------------------------------------------

    async def _process_result(
        self,
        pq: ProcessQueue,
        msgs: list[ReceivedMessage],
        status: OrderlyStatus,
        ctx: OrderlyContext,
        rt: float,
    ) -> bool:
        """``processConsumeResult``; True when the task may take the next batch."""
        topic = pq.queue.topic
        n = len(msgs)
        offset = -1
        if pq.dropped:
            # The queue is gone (rebalance): nothing of it commits; the next owner consumes
            # these messages again from the last committed offset.
            self._stats.consumed(topic, rt, 0, 0)
            self._scheduled.discard(pq)
            return False
        if ctx.auto_commit:
            if status is _SUSPEND:
                self._stats.consumed(topic, rt, 0, n)
                if await self._suspend(pq, msgs, ctx):
                    return False
            else:
                if status is not _SUCCESS:
                    log.warning("%s returned with auto_commit on: treated as SUCCESS", status.name)
                self._stats.consumed(topic, rt, n, 0)
            offset = pq.commit(now=self._clock())
        elif status is _SUCCESS:
            self._stats.consumed(topic, rt, n, 0)
        elif status is _COMMIT:
            self._stats.consumed(topic, rt, n, 0)
            offset = pq.commit(now=self._clock())
        elif status is _ROLLBACK:
            self._stats.consumed(topic, rt, 0, n)
            pq.rollback()
            self._resubmit_later(pq, self._suspend_delay(ctx))
            return False
        else:
            self._stats.consumed(topic, rt, 0, n)
            if await self._suspend(pq, msgs, ctx):
                return False
        if offset >= 0 and not pq.dropped:
            # updateOffset(mq, offset, false): the consuming subset always ends where the next
            # commit starts, so no "increase only" guard is needed (or wanted after a reset).
            self._offsets.update(pq.queue, offset, increase_only=False)
        return True

    async def _suspend(
        self, pq: ProcessQueue, msgs: list[ReceivedMessage], ctx: OrderlyContext
    ) -> bool:
        """A failed batch (``checkReconsumeTimes``): True when the queue is suspended and the
        messages will come again; False when all of them went to the DLQ (the caller commits
        as for a success).

        Messages at the retry limit are dead-lettered from the front of the batch; the first
        one that is retried (under the limit, or its send-back failed) and all after it are
        put back, so the queue never skips a message it did not settle.
        """
        retry_from = await self._dead_letter_front(pq, msgs)
        if retry_from == len(msgs):
            return False
        pq.make_again([m._with_reconsume_times(m.reconsume_times + 1) for m in msgs[retry_from:]])
        if retry_from > 0 and ctx.auto_commit and not pq.dropped:
            offset = pq.commit(now=self._clock())  # the dead-lettered front is settled
            if offset >= 0:
                self._offsets.update(pq.queue, offset, increase_only=False)
        self._resubmit_later(pq, self._suspend_delay(ctx))
        return True

    async def _dead_letter_front(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> int:
        """Dead-letter the messages at the retry limit from the front of a failed batch; the
        index of the first one to retry (``len(msgs)`` when none is left)."""
        for i, m in enumerate(msgs):
            if m.reconsume_times < self._max_reconsume or not await self._send_to_dlq(pq, m):
                return i
        return len(msgs)

    async def _send_to_dlq(self, pq: ProcessQueue, msg: ReceivedMessage) -> bool:
        # ConsumeMessageOrderlyService.sendMessageBack past maxReconsumeTimes: the broker
        # stores the message in %DLQ%<group> (delay level -1), never to be delivered again.
        try:
            await self._sender.request(msg, -1, pq.queue.broker_name, topic=pq.queue.topic)
        except (BrokerError, TransportError) as exc:
            log.warning("could not dead-letter %s (%s); retrying it", msg.msg_id, exc)
            self._stats.send_back_failures += 1
            return False
        log.warning(
            "message %s of %s reached %d reconsumes: sent to %%DLQ%%%s",
            msg.msg_id,
            pq.queue,
            msg.reconsume_times,
            self._group,
        )
        return True

    # -- ordering by key ----------------------------------------------------------------------

    def _submit_keyed(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        if self._closing or not pq.active:
            return
        keyed = self._keyed.get(pq)
        if keyed is None:
            self._forget_stale()
            keyed = self._keyed[pq] = _Keyed()
        key_of = self._key_of
        assert key_of is not None
        if keyed.lanes.add(msgs, lambda m: safe_key(key_of, m)):
            self._kick(pq, keyed)

    def _forget_stale(self) -> None:
        # Lanes of queues gone (dropped, re-seated) whose calls have all ended.
        stale = [
            pq
            for pq, k in self._keyed.items()
            if not pq.active and not k.running and pq not in self._scheduled
        ]
        for pq in stale:
            del self._keyed[pq]

    def _kick(self, pq: ProcessQueue, keyed: _Keyed) -> None:
        """Wake ``pq``'s dispatcher, or start one."""
        if pq in self._scheduled:
            keyed.wake.set()
        else:
            self._scheduled.add(pq)
            self._start(pq)

    async def _run_keys(self, pq: ProcessQueue, keyed: _Keyed) -> bool:
        """Start calls for ready keys until none is ready and no call runs; True when the
        lock became untrusted (the caller waits for it), False when this dispatcher is over.
        Called with the queue lock held: it is released only once no call of ``pq`` runs."""
        lanes = keyed.lanes
        wake = keyed.wake
        semaphore = self._semaphore
        batch = self._batch
        while True:
            stop = self._closing or pq.dropped or pq.draining
            lock_ok = not stop and self.lock_valid(pq)
            if not lock_ok or not lanes.ready:
                if keyed.running:
                    # Calls still run: they end (or messages come) before anything changes.
                    wake.clear()
                    await wake.wait()
                    continue
                if lock_ok or stop:
                    self._scheduled.discard(pq)
                    return False
                return True
            await semaphore.acquire()
            if self._closing or not pq.active or not self.lock_valid(pq) or not lanes.ready:
                semaphore.release()
                continue
            taken = lanes.take(batch)
            assert taken is not None
            key, msgs = taken
            keyed.running += 1
            task = self._spawn(self._key_call(pq, keyed, key, msgs), f"consume {pq.queue}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _key_call(
        self, pq: ProcessQueue, keyed: _Keyed, key: str | None, msgs: list[ReceivedMessage]
    ) -> None:
        """One handler call of one key; gives its slot back and wakes the dispatcher."""
        try:
            await self._run_key_call(pq, keyed, key, msgs)
        finally:
            keyed.running -= 1
            self._semaphore.release()
            keyed.wake.set()

    async def _run_key_call(
        self, pq: ProcessQueue, keyed: _Keyed, key: str | None, msgs: list[ReceivedMessage]
    ) -> None:
        mq = pq.queue
        ctx = OrderlyContext._for_key(mq, key, self._default_suspend_ms)
        hook_ctx = None
        if self._hooks:
            hook_ctx = ConsumeHookContext(self._group, mq, msgs)
            run_before(self._hooks, hook_ctx)
        begin = self._clock()
        result, raised = await self._invoke(pq, msgs, ctx, begin, f"the key {key!r}")
        end = self._clock()
        status = self._status(result)
        if hook_ctx is not None:
            self._after_hooks(
                hook_ctx, status is _SUCCESS or status is _COMMIT, raised, end - begin
            )
        topic = mq.topic
        n = len(msgs)
        if pq.dropped:
            # Nothing of a queue given away commits (see _process_result).
            self._stats.consumed(topic, end - begin, 0, 0)
            return
        if status is _SUSPEND:
            self._stats.consumed(topic, end - begin, 0, n)
            await self._suspend_key(pq, keyed, key, msgs, ctx)
            return
        if status is not _SUCCESS:
            log.warning(
                "%s returned when ordering by key (auto-commit): treated as SUCCESS", status.name
            )
        self._stats.consumed(topic, end - begin, n, 0)
        self._settle(pq, msgs)
        keyed.lanes.release(key)

    def _settle(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """``msgs`` are done: forget them and commit the smallest unfinished offset."""
        if pq.dropped:
            return
        offset = pq.remove(msgs, now=self._clock())
        if offset >= 0:
            # The smallest cached offset never decreases while the queue is held (messages
            # come in offset order), so no "increase only" guard is needed.
            self._offsets.update(pq.queue, offset, increase_only=False)

    async def _suspend_key(
        self,
        pq: ProcessQueue,
        keyed: _Keyed,
        key: str | None,
        msgs: list[ReceivedMessage],
        ctx: OrderlyContext,
    ) -> None:
        """A failed call of ``key`` (``checkReconsumeTimes``, as `_suspend`): messages at
        the retry limit are dead-lettered from the front; the first one retried and all after
        it go back to the front of the key's lane, which stays busy for the suspend time."""
        retry_from = await self._dead_letter_front(pq, msgs)
        if retry_from:
            self._settle(pq, msgs[:retry_from])
        if retry_from == len(msgs):
            keyed.lanes.release(key)
            return
        if not pq.active:
            return
        keyed.lanes.put_back(
            key, [m._with_reconsume_times(m.reconsume_times + 1) for m in msgs[retry_from:]]
        )
        loop = asyncio.get_running_loop()
        keyed.timers[key] = loop.call_later(
            self._suspend_delay(ctx), self._resume_key, pq, keyed, key
        )

    def _resume_key(self, pq: ProcessQueue, keyed: _Keyed, key: str | None) -> None:
        keyed.timers.pop(key, None)
        if self._closing or not pq.active:
            return
        keyed.lanes.release(key)
        if keyed.lanes.ready:
            self._kick(pq, keyed)

    # -- shutdown -----------------------------------------------------------------------------

    async def drain(self, timeout: float) -> bool:
        """Stop taking batches and wait up to ``timeout`` for running handler calls; True if
        they all finished.

        Queues suspended for a later retry are not retried: their messages stay uncommitted
        and are delivered again after a restart, in order.
        """
        self._closing = True
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        for keyed in self._keyed.values():
            for handle in keyed.timers.values():
                handle.cancel()
            keyed.timers.clear()
        tasks = [t for t in self._tasks if not t.done()]
        if not tasks:
            return True
        _, pending = await asyncio.wait(tasks, timeout=timeout)
        if pending:
            log.warning(
                "shutdown grace of %.1f s over with %d orderly handler call(s) still running",
                timeout,
                self._running,
            )
            return False
        return True
