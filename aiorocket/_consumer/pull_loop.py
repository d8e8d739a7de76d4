"""One long-polling pull task per assigned queue (Java ``PullMessageService`` +
``DefaultMQPushConsumerImpl.pullMessage`` + ``PullCallback``).

Each iteration: wait for cache capacity (flow control, woken by consumption), send one
PULL_MESSAGE that the broker may hold up to ``pull_suspend_timeout``, then act on the status
(docs/protocol.md §3.3):

* FOUND (0): decode, re-check tags by string (§6.3), rewrite retry messages to their real
  topic (§6.6), cache them and hand them to the consume service; pull again at once.
* NO_NEW_MSG (19) / NO_MATCHED_MSG (20): move to ``nextBeginOffset``; with nothing cached,
  that is also the consume offset (``correctTagsOffset``); pull again at once.
* OFFSET_ILLEGAL (21): drop the queue, and after ``offset_illegal_delay`` store
  ``nextBeginOffset`` as its offset and hand the queue back to the rebalancer.

Connection losses and broker errors are expected: logged, counted, retried after a jittered,
growing pause (at most ``pull_retry_max_delay``). The task ends when its queue stops being
active (dropped or draining) or is cancelled.

A paused queue (``ProcessQueue.paused``, the consumers' ``pause()``) is not pulled: the loop
waits for the resume, and the messages of a pull that was in flight when the queue was paused
are dropped unseen and pulled again after the resume (the next offset does not move), so
nothing of a paused queue is delivered after the pause.

A watchdog (Java's ``ProcessQueue.isPullExpired`` checked by every rebalance) looks for pull
tasks that have shown no sign of life for twice ``pull_timeout`` outside a legitimate wait
(flow control, pause, lock): `PullLoop.silent_for` tells how long, and the consumer
restarts such a task from where it stood (`PullLoop.run` again), logging it. A healthy
loop is never that silent, since every pull and every retry is bounded by a timeout.

Orderly consumption in clustering mode passes a `PullGate`: the queue is pulled only
while this member holds a live broker lock on it (the loop waits for the lock otherwise), and
the first pull after the lock re-reads the start offset from the broker (Java
``PullRequest.lockedFirst``), so pulling starts where the previous owner's last commit left it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from aiorocket._client.instance import ClientInstance
from aiorocket._client.pull import PreparedPull, PullResponse, PullStatus, to_received
from aiorocket._concurrency import Backoff
from aiorocket._consumer.process_queue import FlowLimits, ProcessQueue
from aiorocket._consumer.stats import StatsRecorder
from aiorocket._consumer.subscription import Subscription
from aiorocket._names import is_retry_topic
from aiorocket._protocol.codes import PullSysFlag
from aiorocket._protocol.headers import PullMessageRequestHeader, PullMessageResponseHeader
from aiorocket._protocol.message import decode_messages
from aiorocket.errors import (
    BrokerError,
    ClientClosedError,
    RemoteProtocolError,
    TransportError,
)
from aiorocket.models import MessageQueue, ReceivedMessage
from aiorocket.settings import ConsumerSettings

__all__ = [
    "Dispatch",
    "PullGate",
    "PullLoop",
    "PullOffsets",
]

log = logging.getLogger("aiorocket.consumer")

_T = TypeVar("_T")


class Dispatch(Protocol):
    """The consume service as a pull loop sees it (concurrent or orderly)."""

    #: whether the span limit applies (Java skips it for orderly consumption)
    uses_span_limit: bool

    def submit(self, pq: ProcessQueue, msgs: list[ReceivedMessage]) -> None:
        """Hand freshly cached messages of ``pq`` over for consumption (must not block)."""


class PullOffsets(Protocol):
    """The consume offsets as a pull loop uses them (an ``OffsetStore`` is one): the offset it
    piggy-backs on each pull (COMMIT_OFFSET) and where a queue with nothing cached moves when
    a pull skipped messages that do not match (``correctTagsOffset``)."""

    def read(self, mq: MessageQueue) -> int:
        """The offset to commit with the next pull, -1 if none."""

    def update(self, mq: MessageQueue, offset: int, *, increase_only: bool = True) -> None:
        """Nothing is cached and nothing before ``offset`` is left for the application."""


class PullGate(Protocol):
    """What an orderly pull loop asks before pulling (clustering only)."""

    def pullable(self, pq: ProcessQueue) -> bool:
        """Whether ``pq`` is locked by this member and the lock has not expired."""

    async def wait_pullable(self, pq: ProcessQueue) -> None:
        """Wait for a change of ``pq``'s lock state (or for it to stop being active)."""

    async def locked_first_offset(self, pq: ProcessQueue) -> int:
        """The offset to pull from after the queue was locked (``computePullFromWhere``).

        Raises:
            TransportError, BrokerError: the broker could not be asked (retried).
        """


class PullLoop:
    """The pull task of one queue; `run` is the task's coroutine.

    Args:
        pq: the queue's cache; the loop ends when it stops being active.
        subscription: the queue's topic subscription.
        limits: returns the current flow limits of the queue (they change with per-topic
            thresholds as queues come and go).
        on_offset_illegal: called (awaited) with the queue and the offset to restart from
            after OFFSET_ILLEGAL and the delay; it re-seats the queue.
        gate: orderly clustering consumption: pull only while the queue is locked, and
            re-read the start offset at the first pull after locking.
    """

    def __init__(
        self,
        *,
        pq: ProcessQueue,
        subscription: Subscription,
        client: ClientInstance,
        group: str,
        settings: ConsumerSettings,
        offsets: PullOffsets,
        dispatch: Dispatch,
        stats: StatsRecorder,
        limits: Callable[[], FlowLimits],
        on_offset_illegal: Callable[[ProcessQueue, int], Awaitable[None]],
        gate: PullGate | None = None,
    ) -> None:
        self.pq = pq
        self._sub = subscription
        self._client = client
        self._group = group
        self._settings = settings
        self._offsets = offsets
        self._dispatch = dispatch
        self._stats = stats
        self._limits = limits
        self._on_offset_illegal = on_offset_illegal
        self._gate = gate
        self._retry_queue = is_retry_topic(pq.queue.topic)
        self._tag_filter = None if subscription.filter.match_all else subscription.filter
        self._clustering = settings.message_model == "clustering"
        #: the offset the next pull asks for
        self.next_offset = 0
        #: loop time of the last sign of life: a pull sent, or a wait begun or ended (or the
        #: creation: a task not started yet is not silent)
        self.last_active = asyncio.get_running_loop().time()
        #: a wait that may legitimately last is under way (flow control, pause, lock)
        self.waiting = False
        #: runs started; an older run that is still around stops at its next iteration
        self._runs = 0

    def silent_for(self, now: float) -> float:
        """Seconds since the last sign of life (0 during a legitimate wait): the watchdog
        restarts a loop silent for more than twice ``pull_timeout``."""
        return 0.0 if self.waiting else max(0.0, now - self.last_active)

    async def _wait(self, waiter: Awaitable[_T]) -> _T:
        # A wait the watchdog must not mistake for a stuck pull.
        self.waiting = True
        try:
            return await waiter
        finally:
            self.waiting = False
            self.last_active = asyncio.get_running_loop().time()

    async def run(self, offset: int) -> None:
        """Pull from ``offset`` until the queue stops being active.

        Raises:
            Nothing expected: broker and connection errors are retried; anything else is a
            bug and propagates to the consumer's task group.
        """
        self.next_offset = offset
        pq = self.pq
        mq = pq.queue
        s = self._settings
        client = self._client
        loop = asyncio.get_running_loop()
        self._runs += 1
        run = self._runs
        self.waiting = False
        self.last_active = loop.time()
        backoff = Backoff(initial=0.05, maximum=s.pull_retry_max_delay)
        broker_id = 0
        # Plain ints: IntFlag arithmetic runs Python code per pull.
        base_flag = int(PullSysFlag.SUSPEND) | (
            int(PullSysFlag.SUBSCRIPTION) if s.post_subscription else 0
        )
        commit_flag = int(PullSysFlag.COMMIT_OFFSET)
        prepared = self._prepared(base_flag)
        gate = self._gate
        locked_first = False
        while pq.active and self._runs == run:
            if pq.paused and await self._wait(pq.wait_resumed()):
                continue  # (re-check: the queue may have stopped meanwhile)
            if gate is not None:
                if not await self._pass_gate(gate, backoff, first=not locked_first):
                    continue  # (re-check: the queue may have stopped meanwhile)
                locked_first = True
            limits = self._limits()
            if not pq.has_capacity(limits):
                await self._wait(pq.wait_has_capacity(limits))
                self._stats.flow_control_pauses += 1
                continue  # re-check: the queue may have stopped meanwhile
            addr = await self._address(broker_id, backoff)
            if addr is None:
                continue
            commit = self._offsets.read(mq) if self._clustering else -1
            started = loop.time()
            pq.last_pull_time = self.last_active = started
            try:
                resp = await client.pull_prepared(
                    addr,
                    prepared,
                    self.next_offset,
                    base_flag | commit_flag if commit > 0 else base_flag,
                    commit if commit > 0 else 0,
                    timeout=s.pull_timeout,
                )
            except ClientClosedError:
                return
            except (TransportError, BrokerError) as exc:
                await self._failed(exc, backoff)
                if isinstance(exc, TransportError):
                    # the broker may be gone (a master died): the name server may know better
                    await client.refresh_route(mq.topic)
                broker_id = 0
                continue
            if pq.dropped or pq.draining:
                return
            broker_id = resp.header.suggest_which_broker_id
            pq.broker_max_offset = resp.header.max_offset  # the lag statistics' broker side
            if pq.paused and resp.code is PullStatus.FOUND:
                continue  # paused meanwhile: pulled again from the same offset once resumed
            if not await self._on_result(resp, loop.time() - started, backoff):
                return

    def _prepared(self, sys_flag: int) -> PreparedPull:
        """The queue's PULL_MESSAGE, encoded once: only the offset, the flag and the commit
        offset change from pull to pull."""
        s = self._settings
        mq = self.pq.queue
        return PreparedPull(
            PullMessageRequestHeader(
                consumer_group=self._group,
                topic=mq.topic,
                queue_id=mq.queue_id,
                queue_offset=0,
                max_msg_nums=s.pull_batch_size,
                sys_flag=sys_flag,
                commit_offset=0,
                suspend_timeout_millis=int(s.pull_suspend_timeout * 1000),
                subscription=self._sub.expression if s.post_subscription else None,
                sub_version=self._sub.sub_version,
                expression_type=self._sub.expression_type,
                broker_name=mq.broker_name,
            )
        )

    async def _pass_gate(self, gate: PullGate, backoff: Backoff, *, first: bool) -> bool:
        """Whether the queue may be pulled now (orderly): False after waiting for its lock, or
        when the ``first`` pull's offset after locking could not be read (retried)."""
        # DefaultMQPushConsumerImpl.pullMessage (orderly): an unlocked queue is not pulled;
        # the first pull once locked starts from the broker's offset.
        pq = self.pq
        if not gate.pullable(pq):
            await self._wait(gate.wait_pullable(pq))
            return False
        if not first:
            return True
        try:
            offset = await gate.locked_first_offset(pq)
        except (TransportError, BrokerError) as exc:
            await self._failed(exc, backoff)
            return False
        if not pq.active:
            return False
        if offset != self.next_offset:
            log.info(
                "%s: first pull after locking starts at %d (was %d)",
                pq.queue,
                offset,
                self.next_offset,
            )
        self.next_offset = offset
        return True

    async def _on_result(self, resp: PullResponse, took: float, backoff: Backoff) -> bool:
        """Act on a pull's status (``PullCallback.onSuccess``); False when the loop ends."""
        code = resp.code
        if code is PullStatus.FOUND:
            await self._found(resp, took, backoff)
        elif code is PullStatus.NO_NEW_MSG or code is PullStatus.NO_MATCHED_MSG:
            backoff.reset()
            self._stats.pulled(self.pq.queue.topic, took, 0)
            self._move_to(resp.header.next_begin_offset)
        elif code is PullStatus.OFFSET_ILLEGAL:
            await self._offset_illegal(resp.header)
            return False
        else:  # pragma: no cover - pull_message raises for any other code
            raise AssertionError(f"unexpected pull code {code}")
        return True

    def _move_to(self, offset: int) -> None:
        """The next pull starts at ``offset``; with nothing cached, that is also the consume
        offset (``DefaultMQPushConsumerImpl.correctTagsOffset``)."""
        self.next_offset = offset
        if self.pq.cached_count == 0:
            self._offsets.update(self.pq.queue, offset)

    async def _found(self, resp: PullResponse, took: float, backoff: Backoff) -> None:
        """FOUND: decode, filter and cache the messages and hand them to the consume service."""
        pq = self.pq
        mq = pq.queue
        try:
            records = decode_messages(resp.body)
        except RemoteProtocolError as exc:
            # Nothing of a bad body is delivered; the same offset is pulled again.
            await self._failed(exc, backoff)
            return
        backoff.reset()
        self._stats.pulled(mq.topic, took, len(records))
        h = resp.header
        prev = self.next_offset
        if h.next_begin_offset < prev or (records and records[0].queue_offset < prev):
            log.warning(
                "%s: pull result goes backwards (asked %d, next %d, first %d)",
                mq,
                prev,
                h.next_begin_offset,
                records[0].queue_offset if records else -1,
            )
        msgs = to_received(
            records,
            broker_name=mq.broker_name,
            tag_filter=self._tag_filter,
            retry_queue=self._retry_queue,
            namespace=self._settings.namespace,
        )
        if msgs:
            self.next_offset = h.next_begin_offset
            pq.put(msgs)
            self._dispatch.submit(pq, msgs)
        else:
            # Everything was filtered out by tag: the offset may move past it.
            self._move_to(h.next_begin_offset)
        if self._settings.pull_interval > 0:
            await self._wait(asyncio.sleep(self._settings.pull_interval))

    async def _offset_illegal(self, h: PullMessageResponseHeader) -> None:
        """OFFSET_ILLEGAL: drop the queue, and after ``offset_illegal_delay`` hand it back to
        be re-seated at the offset to restart from."""
        # PullCallback OFFSET_ILLEGAL: restart where the broker suggests (the oldest message
        # still stored when the offset fell below it, Java's behaviour), or at the queue's end
        # when the application would rather skip what it missed.
        s = self._settings
        pq = self.pq
        target = h.next_begin_offset
        below = self.next_offset < h.min_offset
        if below and s.offset_out_of_range == "last":
            target = max(h.max_offset, target)
        log.warning(
            "%s: offset %d is out of range (the queue holds %d..%d); "
            "restarting at %d (offset_out_of_range=%r) in %.1f s",
            pq.queue,
            self.next_offset,
            h.min_offset,
            h.max_offset,
            target,
            s.offset_out_of_range if below else "beyond the end: the broker's offset",
            s.offset_illegal_delay,
        )
        self.next_offset = target
        pq.mark_dropped()
        await asyncio.sleep(s.offset_illegal_delay)
        await self._on_offset_illegal(pq, self.next_offset)

    async def _failed(self, exc: Exception, backoff: Backoff) -> None:
        self._stats.pull_errors += 1
        delay = backoff.next_delay()
        # A retry topic that does not exist yet fails every time; keep that quiet (Java does).
        level = logging.DEBUG if self._retry_queue or backoff.attempts > 3 else logging.WARNING
        log.log(level, "pull %s failed: %s; retry in %.2f s", self.pq.queue, exc, delay)
        await asyncio.sleep(delay)

    async def _address(self, broker_id: int, backoff: Backoff) -> str | None:
        """Where to pull (``findBrokerAddressInSubscribe``: the suggested broker, else the
        master, else any), ``None`` after a pause when the broker is unknown."""
        mq = self.pq.queue
        try:
            return await self._client.find_broker(mq.broker_name, mq.topic, broker_id=broker_id)
        except BrokerError as exc:
            await self._failed(exc, backoff)
            return None
