"""The queues a consumer holds: one table for the push and the pull consumer, group and
assigned queues alike (aiokafka's ``SubscriptionState`` plays this part).

`QueueTable` keeps, per held queue, its process queue and pull task (the one place a
`PullLoop` is built), the per-topic flow limits, the
lock a rebalance round holds, and the pause state; it is the rebalancer's
`QueueHost`. Its specialisations differ in how messages
leave it: `PushQueues` hands them to the consume service (and, orderly in clustering
mode, pulls under broker locks), `PullQueues` keeps them in per-queue buffers until
the application takes them, and each queue's positions (see the pull consumer's docs).

Pause: a queue is not pulled while it is paused by name, through its topic, or as part of
everything; a queue the table starts holding later starts paused if that covers it. (The
pull consumer forgets a queue's pause when it stops owning it.)
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Generic, TypeVar

from aiorocket._consumer.consume_concurrently import ConcurrentConsumeService
from aiorocket._consumer.consume_orderly import OrderlyConsumeService
from aiorocket._consumer.context import ConsumerContext
from aiorocket._consumer.group_member import flow_limits
from aiorocket._consumer.lock_renewer import BrokerLocks
from aiorocket._consumer.offset_store import OffsetStore
from aiorocket._consumer.process_queue import FlowLimits, ProcessQueue
from aiorocket._consumer.pull_loop import Dispatch, PullGate, PullLoop, PullOffsets
from aiorocket.models import MessageQueue, ReceivedMessage

__all__ = ["OwnedQueue", "Pauses", "PullQueues", "PushQueues", "QueueEntry", "QueueTable"]

log = logging.getLogger("aiorocket.consumer")


class QueueEntry:
    """A held queue: its cache, and the pull loop filling it and the task running that."""

    __slots__ = ("loop", "mq", "pq", "task")

    def __init__(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        self.mq = mq
        self.pq = pq
        self.task: asyncio.Task[None] | None = None
        self.loop: PullLoop | None = None


_E = TypeVar("_E", bound=QueueEntry)


class Pauses:
    """What the application paused: queues by name, topics, or everything (wire names). It
    belongs to the consumer, not to its queue table, so a push consumer can pause before it
    started (the table is built by the start)."""

    __slots__ = ("everything", "queues", "topics")

    def __init__(self) -> None:
        self.everything = False
        self.queues: set[MessageQueue] = set()
        self.topics: set[str] = set()

    def covers(self, mq: MessageQueue) -> bool:
        """Whether ``mq`` is paused, by name, through its topic or as part of everything."""
        return self.everything or mq in self.queues or mq.topic in self.topics

    def set(
        self,
        paused: bool,
        queues: Iterable[MessageQueue] = (),
        topics: Iterable[str] = (),
        *,
        everything: bool = False,
    ) -> None:
        """Pause (or resume) these queues and topics, or everything; resuming everything also
        forgets every queue and topic paused by name."""
        if paused:
            self.queues.update(queues)
            self.topics.update(topics)
        else:
            if everything:
                self.queues.clear()
                self.topics.clear()
            self.queues.difference_update(queues)
            self.topics.difference_update(topics)
        if everything:
            self.everything = paused


class QueueTable(Generic[_E]):
    """The held queues of one consumer (see the module docs).

    Subclasses provide `dispatch`, `start_queue`, `stop_queue` and
    `_on_offset_illegal`, and may override `_pull_offsets` and
    `_pause_changed`.
    """

    def __init__(self, ctx: ConsumerContext, pauses: Pauses) -> None:
        self._ctx = ctx
        self.settings = ctx.settings
        #: what the application paused (shared with the consumer)
        self.pauses = pauses
        #: the held queues (wire names)
        self.entries: dict[MessageQueue, _E] = {}
        #: held while the table changes in steps that await (rebalance, resets, shutdown)
        self.lock = asyncio.Lock()
        #: the flow limits of one queue of each topic
        self.limits: dict[str, FlowLimits] = {}
        for topic in ctx.subscriptions:  # (until the first rebalance counts the queues)
            self.queues_changed(topic, 1)

    # -- what specialisations provide ---------------------------------------------------------

    @property
    def dispatch(self) -> Dispatch:
        """Where the pull loops hand pulled messages."""
        raise NotImplementedError

    def start_queue(self, mq: MessageQueue, offset: int, *, locked_at: float | None = None) -> None:
        """Start holding ``mq``, pulling from ``offset`` (rebalancer callback); ``locked_at``:
        when its granted lock request was sent (orderly clustering)."""
        raise NotImplementedError

    async def stop_queue(self, mq: MessageQueue) -> None:
        """Stop holding ``mq`` (rebalancer callback)."""
        raise NotImplementedError

    async def _on_offset_illegal(self, pq: ProcessQueue, offset: int) -> None:
        raise NotImplementedError

    def _pull_offsets(self) -> PullOffsets:
        return self._ctx.offsets

    def _pause_changed(self, entry: _E, paused: bool) -> None:
        """``entry``'s pause state was applied (called for every held queue)."""

    # -- the rebalancer's host ----------------------------------------------------------------

    def held(self) -> list[MessageQueue]:
        """The queues held now (wire names)."""
        return list(self.entries)

    def queues_changed(self, topic: str, count: int) -> None:
        """Recompute ``topic``'s flow limits (per-topic thresholds split over its queues)."""
        self.limits[topic] = flow_limits(self.settings, count, span=self.dispatch.uses_span_limit)

    # -- pulling ------------------------------------------------------------------------------

    def _new_pq(self, mq: MessageQueue) -> ProcessQueue:
        pq = ProcessQueue(mq, now=asyncio.get_running_loop().time())
        if self.is_paused(mq):
            pq.pause()
        return pq

    def _start_pulling(self, entry: _E, offset: int, gate: PullGate | None = None) -> None:
        """Build ``entry``'s pull loop and start its task at ``offset``."""
        ctx = self._ctx
        topic = entry.mq.topic
        loop_ = PullLoop(
            pq=entry.pq,
            subscription=ctx.subscriptions[topic],
            client=ctx.client,
            group=ctx.group,
            settings=self.settings,
            offsets=self._pull_offsets(),
            dispatch=self.dispatch,
            stats=ctx.stats,
            limits=lambda: self.limits[topic],
            on_offset_illegal=self._on_offset_illegal,
            gate=gate,
        )
        entry.loop = loop_
        entry.task = ctx.spawn(loop_.run(offset), f"pull {entry.mq}")

    def restart_silent_pulls(self) -> None:
        """The pull-expired watchdog (Java's rebalance drops a queue whose pull has been idle
        for ``pullMaxIdleTime`` and re-adds it): a pull task silent for twice
        ``pull_timeout`` outside a legitimate wait is replaced by a new one that goes on from
        the same offset, with the same cache (nothing is delivered twice)."""
        limit = 2 * self.settings.pull_timeout
        now = asyncio.get_running_loop().time()
        for mq, entry in self.entries.items():
            loop_ = entry.loop
            if loop_ is None or not entry.pq.active:
                continue
            silent = loop_.silent_for(now)
            if silent <= limit:
                continue
            log.error(
                "%s: the pull task has been silent for %.0f s (limit %.0f s); restarting it "
                "at offset %d",
                mq,
                silent,
                limit,
                loop_.next_offset,
            )
            self._ctx.stats.pull_restarts += 1
            if entry.task is not None:
                entry.task.cancel()
            loop_.last_active = now  # (not silent again before the new task first runs)
            entry.task = self._ctx.spawn(loop_.run(loop_.next_offset), f"pull {mq}")

    def stop_pulling(self) -> None:
        """Shutdown (under `lock`): pulls stop; queues drain (finished work still
        commits)."""
        for entry in self.entries.values():
            entry.pq.mark_draining()
            if entry.task is not None:
                entry.task.cancel()

    # -- pause --------------------------------------------------------------------------------

    def is_paused(self, mq: MessageQueue) -> bool:
        """Whether ``mq`` is paused, by name, through its topic or as part of everything."""
        return self.pauses.covers(mq)

    def set_paused(self, paused: bool, queues: Iterable[MessageQueue]) -> None:
        """Pause (or resume) these queues (wire names; see
        [`Pauses.set`][aiorocket._consumer.queue_table.Pauses.set]), and apply it."""
        self.pauses.set(paused, queues)
        self.apply_pause()

    def apply_pause(self) -> None:
        """Pause or resume each held queue as `pauses` says."""
        for mq, entry in self.entries.items():
            paused = self.is_paused(mq)
            if paused:
                entry.pq.pause()
            else:
                entry.pq.resume()
            self._pause_changed(entry, paused)


class _Release:
    """An orderly queue dropped by rebalance whose broker lock is not released yet."""

    __slots__ = ("pq", "task")

    def __init__(self, pq: ProcessQueue, task: asyncio.Task[None]) -> None:
        self.pq = pq
        self.task = task


class _LockGate:
    """The pull gate of an orderly clustering consumer (see `PullGate`)."""

    __slots__ = ("_expiry", "_on_lock_expired", "_start_offset")

    def __init__(
        self,
        expiry: float,
        on_lock_expired: Callable[[], None],
        start_offset: Callable[[MessageQueue], Awaitable[int]],
    ) -> None:
        self._expiry = expiry
        self._on_lock_expired = on_lock_expired
        self._start_offset = start_offset

    def pullable(self, pq: ProcessQueue) -> bool:
        return pq.lock_valid(asyncio.get_running_loop().time(), self._expiry)

    async def wait_pullable(self, pq: ProcessQueue) -> None:
        self._on_lock_expired()
        await pq.wait_lock_change()

    async def locked_first_offset(self, pq: ProcessQueue) -> int:
        # computePullFromWhere: the stored offset, else the consume-from policy.
        return await self._start_offset(pq.queue)


class PushQueues(QueueTable[QueueEntry]):
    """The push consumer's queues: pulled messages go to the consume service. Orderly in
    clustering mode (``locking``), queues are pulled and their offsets written only under a
    live broker lock, and a dropped queue is unlocked once its running handler call ended.

    Args:
        ctx: the consumer's parts.
        pauses: what the application paused.
        service: where pulled messages go.
        locks: the broker locks (orderly clustering), else ``None``: queues are then pulled
            without a lock.
        on_lock_expired: called when a queue waits for its lock (renew them now).
        start_offset: where a queue starts once locked (the stored offset, else the
            consume-from policy).
    """

    def __init__(
        self,
        ctx: ConsumerContext,
        pauses: Pauses,
        *,
        service: ConcurrentConsumeService | OrderlyConsumeService,
        locks: BrokerLocks | None,
        on_lock_expired: Callable[[], None],
        start_offset: Callable[[MessageQueue], Awaitable[int]],
    ) -> None:
        self._service = service
        super().__init__(ctx, pauses)
        self._locks = locks
        self._locking = locks is not None
        self._releasing: dict[MessageQueue, _Release] = {}
        self._gate = (
            _LockGate(self.settings.lock_expiry, on_lock_expired, start_offset)
            if locks is not None
            else None
        )

    @property
    def dispatch(self) -> Dispatch:
        """The consume service."""
        return self._service

    def start_queue(self, mq: MessageQueue, offset: int, *, locked_at: float | None = None) -> None:
        """Start holding ``mq`` (rebalancer callback); ``locked_at``: when its granted lock
        request was sent (orderly clustering)."""
        entry = QueueEntry(mq, self._new_pq(mq))
        gate: PullGate | None = self._gate
        if self._locking:
            release = self._releasing.pop(mq, None)
            if release is not None:
                # Dropped and re-added before its unlock: keep the lock (just renewed by the
                # add); its old handler still holds the queue lock, so the new task waits.
                release.task.cancel()
            if locked_at is not None:
                entry.pq.set_locked(True, locked_at)
        self._start_pulling(entry, offset, gate)
        self.entries[mq] = entry

    async def stop_queue(self, mq: MessageQueue) -> None:
        """Stop holding ``mq``: dropped, pull cancelled, offset persisted and forgotten
        (``removeUnnecessaryMessageQueue``); an orderly queue is unlocked once its running
        handler call (if any) has ended."""
        entry = self.entries.pop(mq, None)
        if entry is None:
            return
        offsets = self._ctx.offsets
        pq = entry.pq
        pq.mark_dropped()
        if entry.task is not None:
            entry.task.cancel()
        if not self._locking:
            await offsets.persist(mq)
            offsets.remove(mq)
            return
        if pq.lock_valid(asyncio.get_running_loop().time(), self.settings.lock_expiry):
            # Awaited, so the broker has it before the unlock lets the next owner read it.
            await offsets.persist(mq, sync=True)
        offsets.remove(mq)
        task = self._ctx.spawn(self._release(mq, pq), f"release {mq}")
        self._releasing[mq] = _Release(pq, task)

    async def _on_offset_illegal(self, pq: ProcessQueue, offset: int) -> None:
        mq = pq.queue
        offsets = self._ctx.offsets
        async with self.lock:
            entry = self.entries.get(mq)
            if entry is None or entry.pq is not pq:
                return
            del self.entries[mq]
            offsets.update(mq, offset, increase_only=False)
            await offsets.persist(mq, sync=True)
            offsets.remove(mq)
        log.warning("%s: offset reset to %d; re-adding it", mq, offset)
        self._ctx.wake_rebalance()

    async def reset_offsets(self, topic: str, table: Mapping[MessageQueue, int]) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET (``MQClientInstance.resetOffset``): drop ``topic``'s
        queues the table names (the others go on untouched), store the new offsets, let the
        next rebalance re-add them from there."""
        offsets = self._ctx.offsets
        async with self.lock:
            for mq in [mq for mq in self.entries if mq.topic == topic and mq in table]:
                entry = self.entries.pop(mq)
                entry.pq.mark_dropped()
                entry.pq.clear()
                if entry.task is not None:
                    entry.task.cancel()
                offsets.remove(mq)
            for mq, offset in table.items():
                if mq.topic != topic:
                    continue
                offsets.update(mq, offset, increase_only=False)
                await offsets.persist(mq, sync=True)
                offsets.remove(mq)
        self._ctx.wake_rebalance()

    # -- orderly locks ------------------------------------------------------------------------

    def lock_holding(self) -> list[MessageQueue]:
        """Orderly clustering: the held queues whose lock is live, the only ones whose offset
        this member may write (after a long stop, another member may have moved on)."""
        now = asyncio.get_running_loop().time()
        expiry = self.settings.lock_expiry
        return [mq for mq, e in self.entries.items() if e.pq.lock_valid(now, expiry)]

    async def renew_locks(self) -> None:
        """``lockAll``: renew the locks of held queues, and of dropped ones still waiting for
        their handler (their lease must not run out under it).

        A queue whose lock went to another member is dropped (rebalance re-adds it once the
        lock is free again); one whose lock had expired here before it was granted again is
        re-seated: a fresh process queue whose first pull re-reads the broker's offset, as
        after any other lock (``lockedFirst``), since another member may have consumed it
        meanwhile.
        """
        ctx = self._ctx
        if ctx.closing() or self._locks is None:
            return
        queues = {mq: r.pq for mq, r in self._releasing.items()}
        queues.update((mq, e.pq) for mq, e in self.entries.items())
        lost, regained = await self._locks.renew(queues, expiry=self.settings.lock_expiry)
        lost = [pq for pq in lost if not pq.dropped]
        regained = [pq for pq in regained if not pq.dropped]
        if (not lost and not regained) or ctx.closing():
            return
        async with self.lock:
            for pq in lost:
                entry = self.entries.get(pq.queue)
                if entry is not None and entry.pq is pq:
                    await self.stop_queue(pq.queue)
            for pq in regained:
                entry = self.entries.get(pq.queue)
                if entry is None or entry.pq is not pq or not pq.locked:
                    continue
                del self.entries[pq.queue]
                pq.mark_dropped()
                if entry.task is not None:
                    entry.task.cancel()
                ctx.offsets.remove(pq.queue)
                # The offset given here is replaced by the broker's before the first pull.
                self.start_queue(pq.queue, 0, locked_at=pq.last_lock_time)
        if lost:
            ctx.wake_rebalance()

    async def _release(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Unlock a dropped orderly queue once no handler runs on it (the consume lock of
        Java ``removeUnnecessaryMessageQueue`` + ``unlockDelay``)."""
        assert isinstance(self._service, OrderlyConsumeService)
        assert self._locks is not None
        # Cancelled (re-added, or shutdown): the entry stays for start_queue or unlock_all.
        async with self._service.queue_lock(mq):
            pass  # the last handler call of the dropped queue has ended
        if pq.locked:
            if pq.cached_count:
                # unlockDelay: it was still being consumed; give the offset time to land
                # before the next owner reads it.
                await asyncio.sleep(self.settings.unlock_delay)
            await self._locks.unlock([mq])
        release = self._releasing.get(mq)
        if release is not None and release.pq is pq:
            del self._releasing[mq]

    async def unlock_all(self) -> None:
        """``unlockAll`` at shutdown: every held queue and every dropped one not released
        yet (their handlers have ended or were cancelled by now)."""
        if self._locks is None:
            return
        mqs = set(self.entries)
        for mq, release in list(self._releasing.items()):
            release.task.cancel()
            if release.pq.locked:
                mqs.add(mq)
        self._releasing.clear()
        if mqs:
            await self._ctx.cleanup(self._locks.unlock(sorted(mqs)), "unlock orderly queues")


class OwnedQueue(QueueEntry):
    """A queue a pull consumer owns: the pulled batches not yet handed out, and its
    positions (see the pull consumer's module docs)."""

    __slots__ = ("acked", "buffer", "given", "idx", "queued", "revoking", "written")

    def __init__(self, mq: MessageQueue, pq: ProcessQueue, offset: int, written: int) -> None:
        super().__init__(mq, pq)
        #: pulled batches in offset order; ``buffer[0][:idx]`` were handed out already
        self.buffer: deque[list[ReceivedMessage]] = deque()
        self.idx = 0
        #: the position once ``buffer[0]`` was started (see `position`)
        self.given = offset
        #: the acknowledged position
        self.acked = offset
        #: the acknowledged position auto commit last wrote (-1: none)
        self.written = written
        #: in the ready ring (buffered, not paused, not revoking)
        self.queued = False
        #: a rebalance is taking it away: nothing more is delivered from it
        self.revoking = False

    def position(self) -> int:
        """The offset of the next message the application gets from this queue."""
        if self.idx:
            return self.buffer[0][self.idx].queue_offset
        if not self.buffer and self.loop is not None:
            # Everything pulled was handed out or filtered out by tag: what the next pull
            # asks for is next (Java's correctTagsOffset, without waiting for that pull).
            return max(self.given, self.loop.next_offset)
        return self.given


class _Positions:
    """The pull loops' view of offsets (``PullOffsets``): the committed offset rides on each
    pull; a tag-filtered skip over an empty cache moves the queue's position."""

    __slots__ = ("_offsets", "_queues")

    def __init__(self, queues: PullQueues, offsets: OffsetStore) -> None:
        self._queues = queues
        self._offsets = offsets

    def read(self, mq: MessageQueue) -> int:
        return self._offsets.read(mq)

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        queues = self._queues
        owned = queues.entries.get(mq)
        if owned is None or owned.buffer or offset <= owned.given:
            return
        owned.given = offset
        if owned not in queues.dirty:
            # Nothing of it is in the application's hands: the skipped offsets are done.
            owned.acked = offset


class PullQueues(QueueTable[OwnedQueue]):
    """The pull consumer's queues: pulled batches wait in their queue's buffer, and queues
    with something to hand out take turns in a ready ring; a batch leaves the process queue
    when it was handed out whole (Java ``poll`` → ``removeMessage``), which lets the pull
    task go on. A queue's pause ends when it stops being owned."""

    #: Java's lite pull consumer applies ``consumeMaxSpan`` too.
    uses_span_limit = True

    def __init__(self, ctx: ConsumerContext, pauses: Pauses, *, auto_commit: bool) -> None:
        super().__init__(ctx, pauses)
        self._auto_commit = auto_commit
        #: queues with something to hand out, in turn
        self.ready: deque[OwnedQueue] = deque()
        #: queues the application got messages from since it last came back
        self.dirty: set[OwnedQueue] = set()
        #: set while ``ready`` is not empty (and on close, to wake readers)
        self.data = asyncio.Event()
        self._positions = _Positions(self, ctx.offsets)

    @property
    def dispatch(self) -> Dispatch:
        """The table itself: `submit` buffers pulled batches."""
        return self

    def _pull_offsets(self) -> PullOffsets:
        return self._positions

    # -- the rebalancer's host ----------------------------------------------------------------

    def start_queue(self, mq: MessageQueue, offset: int, *, locked_at: float | None = None) -> None:
        """Own ``mq`` and prefetch it from ``offset`` (rebalancer callback)."""
        owned = OwnedQueue(mq, self._new_pq(mq), offset, written=self._ctx.offsets.read(mq))
        self.entries[mq] = owned
        self._start_pulling(owned, offset)

    async def stop_queue(self, mq: MessageQueue) -> None:
        """Stop owning ``mq``: nothing more is delivered from it, its acknowledged position is
        committed and awaited (auto commit), its offset and pause forgotten."""
        owned = self.entries.pop(mq, None)
        if owned is None:
            return
        self.pauses.queues.discard(mq)
        offsets = self._ctx.offsets
        owned.pq.mark_dropped()
        if owned.task is not None:
            owned.task.cancel()
        self.forget_buffer(owned)
        if self._auto_commit:
            self.store_acknowledged([owned])
        # Awaited, so the broker has it before the next owner reads it.
        await offsets.persist(mq, sync=True)
        offsets.remove(mq)

    async def _on_offset_illegal(self, pq: ProcessQueue, offset: int) -> None:
        owned = self.entries.get(pq.queue)
        if owned is None or owned.pq is not pq:
            return
        log.warning("%s: offset reset to %d", pq.queue, offset)
        self.reseat(owned, offset)

    def reseat(self, owned: OwnedQueue, offset: int) -> None:
        """Restart ``owned`` at ``offset``: a fresh cache and pull task, nothing buffered."""
        owned.pq.mark_dropped()
        task = owned.task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self.forget_buffer(owned)
        owned.pq = self._new_pq(owned.mq)
        owned.given = owned.acked = offset
        self._start_pulling(owned, offset)

    def stop_pulling(self) -> None:
        """Shutdown (under `lock`): pulls stop, nothing more is handed out."""
        super().stop_pulling()
        self.ready.clear()

    def _pause_changed(self, entry: OwnedQueue, paused: bool) -> None:
        if paused:
            self.unready(entry)
        elif entry.buffer and not entry.queued and not entry.revoking:
            entry.queued = True
            self.ready.append(entry)
            self.data.set()

    # -- the buffer ---------------------------------------------------------------------------

    def submit(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """Buffer a pulled batch of ``pq`` (the pull loops' ``Dispatch``)."""
        owned = self.entries.get(pq.queue)
        if owned is None or owned.pq is not pq:
            return  # a stale pull of a queue that was revoked or re-seated
        owned.buffer.append(msgs)
        if not owned.queued and not pq.paused and not owned.revoking:
            owned.queued = True
            self.ready.append(owned)
            self.data.set()

    def unready(self, owned: OwnedQueue) -> None:
        """Take ``owned`` out of the ready ring."""
        if owned.queued:
            owned.queued = False
            self.ready.remove(owned)
            if not self.ready and not self._ctx.closing():
                self.data.clear()

    def forget_buffer(self, owned: OwnedQueue) -> None:
        """Drop what ``owned`` buffered (revoked, or seeking)."""
        self.unready(owned)
        owned.buffer.clear()
        owned.idx = 0
        self.dirty.discard(owned)

    def acknowledge(self) -> None:
        """The application came back: what it was handed so far is processed."""
        for owned in self.dirty:
            owned.acked = owned.position()
        self.dirty.clear()

    def store_acknowledged(self, owned: Iterable[OwnedQueue]) -> list[MessageQueue]:
        """Put the acknowledged positions that changed since last written into the offset
        store; the queues that changed."""
        offsets = self._ctx.offsets
        changed = []
        for o in owned:
            if o.acked != o.written:
                offsets.update(o.mq, o.acked, increase_only=False)
                o.written = o.acked
                changed.append(o.mq)
        return changed

    def take(self, n: int) -> list[ReceivedMessage]:
        """Hand out up to ``n`` buffered messages, a pulled batch at a time from each ready
        queue in turn."""
        out: list[ReceivedMessage] = []
        ready = self.ready
        dirty = self.dirty
        while n > 0 and ready:
            owned = ready[0]
            buf = owned.buffer
            head = buf[0]
            i = owned.idx
            left = len(head) - i
            dirty.add(owned)
            if left > n:
                out.extend(head[i : i + n])
                owned.idx = i + n
                break
            out.extend(head[i:] if i else head)
            n -= left
            self._finish_batch(owned, head)
        return out

    def take_one(self) -> ReceivedMessage:
        """Hand out the next buffered message (``ready`` must not be empty)."""
        owned = self.ready[0]
        head = owned.buffer[0]
        i = owned.idx
        msg = head[i]
        i += 1
        if i < len(head):
            owned.idx = i
        else:
            self._finish_batch(owned, head)
        self.dirty.add(owned)
        return msg

    def _finish_batch(self, owned: OwnedQueue, head: list[ReceivedMessage]) -> None:
        # The whole pulled batch was handed out: it leaves the cache (the pull task may go
        # on), and the queue's turn passes to the next one.
        owned.buffer.popleft()
        owned.idx = 0
        offset = owned.pq.remove(head)
        if offset >= 0:
            owned.given = offset
        ready = self.ready
        ready.popleft()
        if owned.buffer:
            ready.append(owned)
        else:
            owned.queued = False
            if not ready and not self._ctx.closing():
                self.data.clear()
