"""The local cache of one assigned queue (Java ``ProcessQueue``).

Rules this state keeps:

* Messages are kept by queue offset (an ordered list of pulled runs) from the moment they
  are pulled until their consumption finished; `ProcessQueue.remove` returns the
  smallest offset still cached, or one past the largest ever cached when nothing is left.
  That is the offset to commit: it never passes a message whose consumption has not
  finished (Java's offset rule), at the price of redelivering what finished
  above it after a crash.
* A queue is *active*, *draining* (shutdown: no more pulls, finished consumption still
  commits) or *dropped* (rebalance gave it away: nothing commits any more, because another
  member may already own it). ``dropped`` is what a stale holder checks.
* Flow control (count, size, span) is a pure check; a pull loop over the limits waits in
  `ProcessQueue.wait_has_capacity` and is woken by the removal that frees capacity, not
  by polling.
* Orderly consumption (Java ``consumingMsgOrderlyTreeMap``): `ProcessQueue.take` hands
  out the next messages in offset order and keeps them as the *consuming* subset, still
  cached; `commit` forgets that subset and returns the offset after it,
  `rollback` and `make_again` put it (or its tail)
  back to be taken again. Orderly consumption only ever takes from the front, so the
  consuming subset is always a prefix of the cache and "where to take next" is one offset.
* Broker lock state of an orderly queue (``locked``, ``last_lock_time``): only stored here;
  waiters (the pull loop, the consume task) are woken whenever it changes.
* ``paused`` (the consumers' ``pause()``): the pull loop does not pull while it is set and
  waits in `ProcessQueue.wait_resumed`, woken by `resume`; the
  cache and the offsets are untouched.

No I/O and no clock: callers pass ``now`` (monotonic seconds).
"""

from __future__ import annotations

import asyncio
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiorocket.models import MessageQueue, ReceivedMessage

__all__ = ["FlowLimits", "ProcessQueue", "QueueSnapshot"]

_MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """When a queue must stop pulling (``DefaultMQPushConsumerImpl.pullMessage``).

    Pulling pauses while the cache holds *more than* ``max_count`` messages or ``max_mib``
    MiB of bodies, or (concurrent consumption only, ``max_span`` not ``None``) while its
    offsets span more than ``max_span``. "More than", as in Java, so a cache may reach the
    limit plus one pull batch.
    """

    max_count: int
    max_mib: int
    max_span: int | None


@dataclass(frozen=True, slots=True)
class QueueSnapshot:
    """A point-in-time view of one queue's cache, for statistics and running info."""

    queue: MessageQueue
    cached_count: int
    cached_bytes: int
    min_offset: int
    max_offset: int
    span: int
    dropped: bool
    draining: bool
    last_pull_time: float
    last_consume_time: float


class _Run:
    """Messages cached by one put (ascending offsets) and which of them are still cached.

    ``live[i]`` is 1 while ``msgs[i]`` is cached; ``head``/``tail`` are the first and last
    live indexes, so the smallest and largest cached offsets are O(1) to read.
    """

    __slots__ = ("count", "head", "live", "msgs", "nbytes", "offsets", "tail")

    def __init__(self, msgs: list[ReceivedMessage], offsets: list[int], nbytes: int) -> None:
        self.msgs = msgs
        self.offsets = offsets
        self.live = bytearray(b"\x01") * len(msgs)
        self.head = 0
        self.tail = len(msgs) - 1
        self.count = len(msgs)
        #: body bytes of the live messages
        self.nbytes = nbytes


class ProcessQueue:
    """Messages of one queue between pull and finished consumption.

    The cache is the list of pulled runs of messages in offset order (runs never overlap),
    with their first offsets beside it: an offset is found by bisecting those, then indexing
    its run. Pulls of a queue come in increasing offset order, so a put appends one run per
    pull (no per-message index to fill), and runs are emptied mostly from the front: a
    removal marks messages in their run and drops the run once it is empty, which keeps the
    per-message cost of the consumer's hot path low (the smallest cached offset is
    ``runs[0]``'s head, O(1)).

    Attributes:
        queue: the queue.
        dropped: the queue was taken away (rebalance, offset reset): stop and commit nothing.
        draining: the consumer is shutting down: no more pulls, finished work still commits.
        last_pull_time, last_consume_time: monotonic times of the last pull and removal.
        broker_max_offset: the queue's max offset as the broker's last pull response said
            (``maxOffset``, sent with every answer), -1 before the first one: with the
            committed offset it gives the lag without asking the broker.
    """

    __slots__ = (
        "_call_seq",
        "_calls",
        "_capacity_waiter",
        "_consuming",
        "_firsts",
        "_limits",
        "_lock_waiters",
        "_reconsume",
        "_resume_waiter",
        "_runs",
        "_take_from",
        "broker_max_offset",
        "cached_bytes",
        "cached_count",
        "draining",
        "dropped",
        "last_consume_time",
        "last_lock_time",
        "last_pull_time",
        "locked",
        "max_offset_ever",
        "paused",
        "queue",
    )

    def __init__(self, queue: MessageQueue, *, now: float = 0.0) -> None:
        self.queue = queue
        #: the runs in offset order, and the first offset of each (for bisect)
        self._runs: list[_Run] = []
        self._firsts: list[int] = []
        #: messages cached (pulled, consumption not finished)
        self.cached_count = 0
        self.cached_bytes = 0
        #: the largest offset ever put (Java ``queueOffsetMax``); -1 before the first put
        self.max_offset_ever = -1
        self.broker_max_offset = -1
        #: start times of the handler calls running on messages of this queue, by token
        #: (inserted in time order, so the first is the oldest)
        self._calls: dict[int, float] = {}
        self._call_seq = 0
        self.dropped = False
        self.draining = False
        self.last_pull_time = now
        self.last_consume_time = now
        self._capacity_waiter: asyncio.Future[None] | None = None
        self._limits: FlowLimits | None = None
        #: orderly: the taken, uncommitted messages in offset order (a prefix of the cache)
        self._consuming: list[ReceivedMessage] = []
        #: orderly: take() continues at the first cached offset >= this (-1: the front)
        self._take_from = -1
        #: orderly: reconsume counts of messages put back after a failure, by offset
        self._reconsume: dict[int, int] = {}
        #: orderly, clustering: whether the broker granted this member the queue's lock
        self.locked = False
        #: monotonic time the last granted lock request was *sent* (a lower bound of the
        #: broker's own grant time, so the lease is never overestimated)
        self.last_lock_time = 0.0
        self._lock_waiters: list[asyncio.Future[None]] = []
        #: paused by the application: not pulled until resumed
        self.paused = False
        self._resume_waiter: asyncio.Future[None] | None = None

    # -- contents -----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        """The smallest cached offset, -1 when empty."""
        if not self._runs:
            return -1
        run = self._runs[0]
        return run.offsets[run.head]

    @property
    def max_offset(self) -> int:
        """The largest cached offset, -1 when empty."""
        if not self._runs:
            return -1
        run = self._runs[-1]
        return run.offsets[run.tail]

    @property
    def span(self) -> int:
        """Largest minus smallest cached offset (Java ``getMaxSpan``); 0 when empty."""
        return self.max_offset - self.min_offset if self._runs else 0

    def __contains__(self, offset: object) -> bool:
        return isinstance(offset, int) and self._locate(offset) is not None

    def _locate(self, offset: int) -> tuple[_Run, int] | None:
        """The run and index of ``offset`` if it is cached."""
        pos = bisect_right(self._firsts, offset) - 1
        if pos < 0:
            return None
        run = self._runs[pos]
        offsets = run.offsets
        i = offset - offsets[0]
        if i >= len(offsets) or offsets[i] != offset:
            i = bisect_left(offsets, offset)  # a run with gaps (tags filtered out)
            if i >= len(offsets) or offsets[i] != offset:
                return None
        return (run, i) if run.live[i] else None

    def messages(self) -> list[ReceivedMessage]:
        """The cached messages in offset order (a copy)."""
        out: list[ReceivedMessage] = []
        for run in self._runs:
            live = run.live
            out.extend(m for i, m in enumerate(run.msgs) if live[i])
        return out

    def put(self, msgs: Sequence[ReceivedMessage]) -> int:
        """Cache pulled messages (``putMessage``); returns how many were new.

        An offset already cached is kept as it is (a duplicate pull changes nothing).
        """
        if not msgs:
            return 0
        runs = self._runs
        # ``m._r`` is the record behind the read-only message; reading its fields directly
        # skips property calls on the consumer's hot path.
        offsets = [m._r.queue_offset for m in msgs]
        first = offsets[0]
        # Strictly ascending? A pull's offsets are usually consecutive, which one list
        # comparison confirms (C speed); a pull with gaps (tags filtered) needs the sort.
        ascending = (
            offsets[-1] - first == len(offsets) - 1
            and offsets == list(range(first, first + len(offsets)))
        ) or sorted(set(offsets)) == offsets
        if ascending and (not runs or first > runs[-1].offsets[-1]):
            # The list itself is kept (not copied): removing that very list later takes the
            # whole run at once (see remove).
            self._add_run(msgs if type(msgs) is list else list(msgs), offsets)
            added = len(msgs)
        else:
            # Rare (a pull overlapping the cache): dedupe, then rebuild one ordered run.
            fresh = {m._r.queue_offset: m for m in msgs if m._r.queue_offset not in self}
            if not fresh:
                return 0
            merged = {m._r.queue_offset: m for m in self.messages()}
            merged.update(fresh)
            runs.clear()
            self._firsts.clear()
            self.cached_count = 0
            self.cached_bytes = 0
            order = sorted(merged)
            self._add_run([merged[o] for o in order], order)
            added = len(fresh)
        if offsets[-1] > self.max_offset_ever or not ascending:
            self.max_offset_ever = max(self.max_offset_ever, max(offsets))
        return added

    def _add_run(self, msgs: list[ReceivedMessage], offsets: list[int]) -> None:
        size = 0
        for m in msgs:
            size += len(m._r.body)
        run = _Run(msgs, offsets, size)
        # Always past the last run: put checks it, or rebuilds the cache from empty.
        self._runs.append(run)
        self._firsts.append(offsets[0])
        self.cached_count += len(msgs)
        self.cached_bytes += size

    def remove(self, msgs: Iterable[ReceivedMessage], *, now: float | None = None) -> int:
        """Forget messages whose consumption finished (``removeMessage``).

        Returns the offset to commit: the smallest offset still cached, or the largest offset
        ever cached + 1 when the cache is now empty; -1 when the cache was already empty.
        """
        runs = self._runs
        if not runs:
            return -1
        if now is not None:
            self.last_consume_time = now
        if type(msgs) is list and len(msgs) == 1:
            return self._remove_one(msgs[0])  # per-message consumption: the hot case
        locate = self._locate
        if type(msgs) is list and msgs:
            run = runs[0]
            if run.msgs is not msgs:
                found = locate(msgs[0]._r.queue_offset)
                if found is not None:
                    run = found[0]
            if run.msgs is msgs and run.count == len(msgs):
                # The whole run as it was put, all of it still cached: drop it in one go.
                self._drop_run(run)
                self.cached_count -= run.count
                self.cached_bytes -= run.nbytes
                return self._after_remove()
        freed = count = 0
        for m in msgs:
            found = locate(m._r.queue_offset)
            if found is None:
                continue  # not cached (any more)
            run, i = found
            live = run.live
            live[i] = 0
            count += 1
            size = len(run.msgs[i]._r.body)  # the cached copy's size, whatever was passed
            freed += size
            run.nbytes -= size
            run.count -= 1
            self._unlink(run, i)
        self.cached_count -= count
        self.cached_bytes -= freed
        if self._capacity_waiter is not None:
            self._wake_if_capacity()
        if runs:
            first = runs[0]
            return first.offsets[first.head]
        return self.max_offset_ever + 1

    def _unlink(self, run: _Run, i: int) -> None:
        """After entry ``i`` of ``run`` went (``live[i]`` cleared, ``count`` lowered): drop
        the run once empty, else move its head or tail past the dead entries."""
        if run.count == 0:
            self._drop_run(run)
            return
        live = run.live
        if i == run.head:
            head = i + 1
            while not live[head]:
                head += 1
            run.head = head
        if i == run.tail:
            tail = i - 1
            while not live[tail]:
                tail -= 1
            run.tail = tail

    def _remove_one(self, msg: ReceivedMessage) -> int:
        """`remove` of one message (the same steps, without the loop's bookkeeping)."""
        offset = msg._r.queue_offset
        runs = self._runs
        run = runs[0]  # consumption goes roughly in offset order: try the front run first
        offsets = run.offsets
        i = offset - offsets[0]
        if not (0 <= i < len(offsets) and offsets[i] == offset):
            found = self._locate(offset)
            run, i = found if found is not None else (run, -1)
        live = run.live
        if i >= 0 and live[i]:
            live[i] = 0
            size = len(run.msgs[i]._r.body)
            run.nbytes -= size
            run.count -= 1
            self.cached_count -= 1
            self.cached_bytes -= size
            self._unlink(run, i)
        if self._capacity_waiter is not None:
            self._wake_if_capacity()
        if runs:
            first = runs[0]
            return first.offsets[first.head]
        return self.max_offset_ever + 1

    def _drop_run(self, run: _Run) -> None:
        """Forget an emptied run."""
        runs = self._runs
        firsts = self._firsts
        if runs[0] is run:  # the usual case: consumption goes roughly in offset order
            del runs[0]
            del firsts[0]
        else:
            pos = bisect_left(firsts, run.offsets[0])
            del runs[pos]
            del firsts[pos]

    def _after_remove(self) -> int:
        if self._capacity_waiter is not None:
            self._wake_if_capacity()
        runs = self._runs
        if runs:
            first = runs[0]
            return first.offsets[first.head]
        return self.max_offset_ever + 1

    def clear(self) -> None:
        """Drop every cached message (offset reset)."""
        self._runs.clear()
        self._firsts.clear()
        self.cached_count = 0
        self.cached_bytes = 0
        self._consuming = []
        self._take_from = -1
        self._reconsume.clear()

    # -- orderly consumption ------------------------------------------------------------------

    @property
    def consuming_count(self) -> int:
        """Messages taken and not yet committed (orderly)."""
        return len(self._consuming)

    def take(self, n: int) -> list[ReceivedMessage]:
        """Take up to ``n`` messages in offset order after those taken already
        (``takeMessages``): they stay cached, as the consuming subset, until
        `commit`, `rollback` or `make_again`."""
        runs = self._runs
        if not runs or n <= 0:
            return []
        start = self._take_from
        # The common case, one offset after the last taken one still cached: one bisect.
        found = self._locate(start) if start >= 0 else None
        if found is None:
            found = self._run_from(start)
            if found is None:
                return []
        run, i = found
        out: list[ReceivedMessage] = []
        while True:
            live = run.live
            msgs = run.msgs
            tail = run.tail
            while i <= tail and len(out) < n:
                if live[i]:
                    out.append(msgs[i])
                i += 1
            if len(out) >= n:
                break
            pos = bisect_right(self._firsts, run.offsets[0])
            if pos >= len(runs):
                break
            run = runs[pos]
            i = run.head
        if not out:
            return out
        self._take_from = out[-1]._r.queue_offset + 1
        self._consuming.extend(out)
        if self._reconsume:
            again = self._reconsume
            out = [
                m._with_reconsume_times(again[m._r.queue_offset])
                if m._r.queue_offset in again
                else m
                for m in out
            ]
        return out

    def _run_from(self, start: int) -> tuple[_Run, int] | None:
        """The run and index of the first cached offset >= ``start`` (-1: the front)."""
        runs = self._runs
        if start < 0:
            run = runs[0]
            return run, run.head
        pos = max(bisect_right(self._firsts, start) - 1, 0)
        while pos < len(runs):
            run = runs[pos]
            offsets = run.offsets
            if offsets[run.tail] >= start:
                return run, max(run.head, bisect_left(offsets, start, run.head, run.tail + 1))
            pos += 1
        return None

    def commit(self, *, now: float | None = None) -> int:
        """Forget the consuming subset, whose consumption is final (``commit``); returns the
        offset to commit (see `remove`), -1 if nothing was being consumed."""
        consuming = self._consuming
        if not consuming:
            return -1
        self._consuming = []
        if self._reconsume:
            for m in consuming:
                self._reconsume.pop(m._r.queue_offset, None)
        return self.remove(consuming, now=now)

    def rollback(self) -> None:
        """Put the whole consuming subset back, to be taken again from the front
        (``rollback``)."""
        self._consuming = []
        self._take_from = -1

    def make_again(self, msgs: Sequence[ReceivedMessage]) -> None:
        """Put the tail of the consuming subset starting at ``msgs[0]`` back, to be taken
        again with the reconsume counts ``msgs`` carry (``makeMessageToConsumeAgain``)."""
        if not msgs:
            return
        first = min(m._r.queue_offset for m in msgs)
        self._consuming = [m for m in self._consuming if m._r.queue_offset < first]
        self._take_from = first if self._consuming else -1
        for m in msgs:
            self._reconsume[m._r.queue_offset] = m.reconsume_times

    # -- broker lock (orderly, clustering) ----------------------------------------------------

    def set_locked(self, locked: bool, at: float | None = None) -> None:
        """Record the outcome of a lock request sent at ``at`` and wake lock waiters."""
        self.locked = locked
        if locked and at is not None:
            self.last_lock_time = max(self.last_lock_time, at)
        self._wake_lock_waiters()

    def lock_valid(self, now: float, expiry: float) -> bool:
        """Locked, and the lock younger than ``expiry`` (Java ``isLocked() &&
        !isLockExpired()``)."""
        return self.locked and now - self.last_lock_time <= expiry

    async def wait_lock_change(self) -> None:
        """Wait for the next `set_locked`, or until the queue stops being active."""
        if not self.active:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lock_waiters.append(fut)
        try:
            await fut
        finally:
            if not fut.done():
                fut.cancel()
            if fut in self._lock_waiters:
                self._lock_waiters.remove(fut)

    def _wake_lock_waiters(self) -> None:
        waiters, self._lock_waiters = self._lock_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    # -- pause --------------------------------------------------------------------------------

    def pause(self) -> None:
        """Stop pulling (the application paused the queue); cache and offsets stay."""
        self.paused = True

    def resume(self) -> None:
        """Pull again; wakes the waiting pull loop."""
        self.paused = False
        self._release_resume_waiter()

    async def wait_resumed(self) -> bool:
        """Wait until `resume`, or until the queue stops being active; True if it was
        paused (so a loop re-checks its state)."""
        was = self.paused
        while self.paused and self.active:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._resume_waiter = fut
            try:
                await fut
            finally:
                if self._resume_waiter is fut:
                    self._resume_waiter = None
        return was

    def _release_resume_waiter(self) -> None:
        fut, self._resume_waiter = self._resume_waiter, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    # -- state --------------------------------------------------------------------------------

    def mark_dropped(self) -> None:
        """The queue was taken away: stop pulling, consuming and committing."""
        self.dropped = True
        self._release_waiter()
        self._release_resume_waiter()
        self._wake_lock_waiters()

    def mark_draining(self) -> None:
        """Shutdown: stop pulling; finished consumption still commits."""
        self.draining = True
        self._release_waiter()
        self._release_resume_waiter()
        self._wake_lock_waiters()

    @property
    def active(self) -> bool:
        """Neither dropped nor draining."""
        return not (self.dropped or self.draining)

    # -- flow control -------------------------------------------------------------------------

    def has_capacity(self, limits: FlowLimits) -> bool:
        """Whether a pull may be sent now under ``limits``."""
        if self.cached_count > limits.max_count:
            return False
        if self.cached_bytes // _MIB > limits.max_mib:
            return False
        return limits.max_span is None or self.span <= limits.max_span

    async def wait_has_capacity(self, limits: FlowLimits) -> bool:
        """Wait until `has_capacity` holds, or the queue stops being active.

        Returns True if it had to wait. Woken by `remove`, never by polling.
        """
        waited = False
        while self.active and not self.has_capacity(limits):
            waited = True
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._capacity_waiter = fut
            self._limits = limits
            try:
                await fut
            finally:
                if self._capacity_waiter is fut:
                    self._capacity_waiter = None
                    self._limits = None
        return waited

    def blocked_by(self) -> str | None:
        """While the pull loop waits for capacity: which limit holds it (``"count"``,
        ``"size"`` or ``"span"``, checked in that order); ``None`` when it is not waiting."""
        limits = self._limits
        if limits is None or self._capacity_waiter is None:
            return None
        if self.cached_count > limits.max_count:
            return "count"
        if self.cached_bytes // _MIB > limits.max_mib:
            return "size"
        if limits.max_span is not None and self.span > limits.max_span:
            return "span"
        return None

    # -- handler calls ------------------------------------------------------------------------

    def call_started(self, now: float) -> int:
        """A handler call on messages of this queue started at ``now`` (monotonic); returns
        the token to pass to `call_ended` (health: the oldest in-flight call)."""
        self._call_seq += 1
        self._calls[self._call_seq] = now
        return self._call_seq

    def call_ended(self, token: int) -> None:
        """The call of ``token`` returned, raised or was cancelled."""
        self._calls.pop(token, None)

    @property
    def calls_running(self) -> int:
        """Handler calls running on messages of this queue."""
        return len(self._calls)

    def oldest_call_start(self) -> float | None:
        """Monotonic start of the oldest handler call still running, ``None`` if none."""
        calls = self._calls
        return next(iter(calls.values())) if calls else None

    def _wake_if_capacity(self) -> None:
        limits = self._limits
        if limits is None or self.has_capacity(limits):
            self._release_waiter()

    def _release_waiter(self) -> None:
        fut, self._capacity_waiter = self._capacity_waiter, None
        self._limits = None
        if fut is not None and not fut.done():
            fut.set_result(None)

    # -- views --------------------------------------------------------------------------------

    def snapshot(self) -> QueueSnapshot:
        """The current state, for statistics."""
        lo, hi = self.min_offset, self.max_offset
        return QueueSnapshot(
            queue=self.queue,
            cached_count=self.cached_count,
            cached_bytes=self.cached_bytes,
            min_offset=lo,
            max_offset=hi,
            span=hi - lo if self._runs else 0,
            dropped=self.dropped,
            draining=self.draining,
            last_pull_time=self.last_pull_time,
            last_consume_time=self.last_consume_time,
        )

    def __repr__(self) -> str:
        state = "dropped" if self.dropped else "draining" if self.draining else "active"
        return f"ProcessQueue({self.queue}, {state}, cached={self.cached_count})"
