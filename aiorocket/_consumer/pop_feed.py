"""Push consumption over POP (RocketMQ 5.x; Java ``DefaultMQPushConsumerImpl.popMessage`` with
``ConsumeMessagePopConcurrentlyService``): one pop task per (topic, broker) feeds the consume
service, which runs the same handlers as pulled messages.

Each target is a `PopQueue`, the POP twin of a process queue as far as the concurrent
consume service sees it: messages leave it by ack, not by an offset commit. A failed message
is not sent back: its invisible time is set to the retry delay of its attempt (Java's
``popDelayLevel``, from the consumer's ``pop_retry_delays``), after which the broker's revive
delivers it again with ``reconsume_times`` + 1; past ``max_reconsume_times`` it goes to
``%DLQ%<group>`` (`popping`).

What no other client does: while a handler still runs, the invisible time of its messages is
extended (CHANGE_MESSAGE_INVISIBLETIME, ``invisible_duration`` again) whenever less than a
third of it is left, so a slow handler is not raced by a second delivery. An extension does
not count as a delivery: only a checkpoint the broker revives adds to ``reconsume_times``.
An ack waits for an extension of its message in flight, so it always carries the newest
handle (an ack with a spent handle does nothing, apache/rocketmq #9583).

Orderly handlers pop with ``order=true`` (FIFO): the broker hands a queue's messages to one
member at a time and holds the queue's later messages back until these are acked. Each
popped queue's messages go through the handler in offset order, a call at a time, acked as
they succeed; a failure moves the invisible time of the rest to the suspend delay, after
which the broker delivers them again, in order, with their delivery count
(``ConsumeMessagePopOrderlyService``); other queues go on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast

from aiorocket._concurrency.backoff import Backoff
from aiorocket._consumer.consume_concurrently import ConcurrentConsumeService
from aiorocket._consumer.consume_orderly import OrderlyHandler
from aiorocket._consumer.popping import MAX_MESSAGES, PopClient, PoppedMessage
from aiorocket._consumer.process_queue import ProcessQueue
from aiorocket._consumer.stats import StatsRecorder
from aiorocket._consumer.subscription import Subscription
from aiorocket._names import now_ms
from aiorocket.errors import (
    BrokerError,
    InvalidReceiptHandleError,
    RemoteProtocolError,
    TransportError,
)
from aiorocket.models import MessageQueue, OrderlyContext, OrderlyStatus, ReceivedMessage
from aiorocket.settings import ConsumerSettings

__all__ = ["FeedTarget", "PopFeed", "PopQueue"]

log = logging.getLogger("aiorocket.consumer")

Spawn = Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]]

#: one delivery of a message: popped topic, queue id and offset (copies made for local
#: retries share it, and the in-flight table holds the object with the newest handle)
_Key = tuple[str, int, int]


def _key(msg: PoppedMessage) -> _Key:
    return (msg._popped_topic, msg._handle.queue_id, msg._handle.offset)


#: what a push consumer pops from: a subscription, a broker and a queue id (-1: any queue)
FeedTarget = tuple[Subscription, str, int]


class PopQueue:
    """One (topic, broker, queue) a push consumer pops from, as the concurrent consume service
    sees a process queue: ``queue`` (queue id -1 for any), ``dropped``, call tracking, and
    `remove`, which acks instead of committing an offset."""

    __slots__ = ("_calls", "_feed", "dropped", "inflight", "queue", "room", "stopped", "target")

    def __init__(self, feed: PopFeed, target: FeedTarget) -> None:
        sub, broker_name, queue_id = target
        self._feed = feed
        self.target = target
        self.queue = MessageQueue(sub.topic, broker_name, queue_id)
        #: never set: what was popped can be acked whatever happens to the target
        self.dropped = False
        #: no more pops from this target
        self.stopped = False
        self._calls = 0
        #: messages handed to the consume service and not settled yet
        self.inflight: dict[_Key, PoppedMessage] = {}
        #: set while the queue may take more messages (flow control)
        self.room = asyncio.Event()
        self.room.set()

    def call_started(self, now: float) -> float:
        """A handler call over some of this queue's messages began."""
        self._calls += 1
        return now

    def call_ended(self, call: float) -> None:
        """That call ended."""
        self._calls -= 1

    @property
    def calls_running(self) -> int:
        """Handler calls in progress over this queue's messages."""
        return self._calls

    def remove(self, msgs: list[ReceivedMessage], *, now: float) -> int:
        """The consume service is done with ``msgs``: ack those it did not retry. No offset
        to commit (-1): the broker keeps POP offsets."""
        self._feed.settle(self, msgs)
        return -1


class PopFeed:
    """The POP side of a push consumer (see the module docs): pop tasks, acks, retries and
    invisible-time extensions, all in the consumer's task group."""

    def __init__(
        self,
        *,
        pop: PopClient,
        service: ConcurrentConsumeService | None,
        settings: ConsumerSettings,
        stats: StatsRecorder,
        spawn: Spawn,
        orderly: OrderlyHandler | None = None,
    ) -> None:
        self._pop = pop
        self._service = service
        self._orderly = orderly
        #: orderly: the handler calls running at once (``concurrency``)
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._settings = settings
        self._stats = stats
        self._spawn = spawn
        self._invisible_ms = max(1, int(settings.invisible_duration * 1000))
        self._queues: dict[MessageQueue, tuple[PopQueue, asyncio.Task[Any]]] = {}
        #: messages whose handler ended with a retry: not acked
        self._retried: set[_Key] = set()
        #: extensions in flight: an ack or retry of the message waits for its one
        self._renewing: dict[_Key, asyncio.Future[None]] = {}
        self._acks: list[PoppedMessage] = []
        #: orderly: the runs of popped queues in progress
        self._runs: set[asyncio.Task[None]] = set()
        self._ack_wake = asyncio.Event()
        self._closing = False

    # -- targets ------------------------------------------------------------------------------

    def queues(self) -> list[PopQueue]:
        """The targets popped from now."""
        return [pq for pq, _ in self._queues.values()]

    def update(self, targets: list[FeedTarget], *, start: bool = True) -> None:
        """Pop from exactly these targets: stop the others (their messages in flight are still
        settled) and, unless ``start`` is False, start tasks for the new ones."""
        wanted = {
            MessageQueue(sub.topic, broker, qid): (sub, broker, qid) for sub, broker, qid in targets
        }
        for key in [k for k in self._queues if k not in wanted]:
            pq, task = self._queues.pop(key)
            pq.stopped = True
            task.cancel()
            log.info("POP: stopped popping %s", key)
        if not start:
            return
        for key, target in wanted.items():
            if key not in self._queues and not self._closing:
                pq = PopQueue(self, target)
                task = self._spawn(self._pop_loop(pq), f"pop {key}")
                self._queues[key] = (pq, task)
                log.info("POP: popping %s", key)

    def start(self) -> None:
        """Start the ack and extension tasks (the pop tasks start with `update`)."""
        self._spawn(self._ack_loop(), "pop acks")
        self._spawn(self._renew_loop(), "pop invisible-time extension")

    async def _pop_loop(self, pq: PopQueue) -> None:
        s = self._settings
        batch = min(s.pull_batch_size, MAX_MESSAGES)
        poll_ms = int(s.pull_suspend_timeout * 1000)
        backoff = Backoff(initial=0.05, maximum=s.pull_retry_max_delay)
        while not pq.stopped:
            await pq.room.wait()
            started = time.monotonic()
            sub, broker_name, queue_id = pq.target
            try:
                msgs = await self._pop.pop(
                    (sub, broker_name),
                    max_messages=batch,
                    invisible_ms=self._invisible_ms,
                    poll_ms=poll_ms,
                    queue_id=queue_id,
                    order=self._orderly is not None,
                )
            except (BrokerError, TransportError, RemoteProtocolError) as exc:
                self._stats.pull_errors += 1
                delay = backoff.next_delay()
                log.warning("pop from %s failed: %s; again in %.2f s", pq.queue, exc, delay)
                await asyncio.sleep(delay)
                continue
            backoff.reset()
            if not msgs:
                continue
            self._stats.pulled(pq.queue.topic, time.monotonic() - started, len(msgs))
            for m in msgs:
                pq.inflight[_key(m)] = m
            if len(pq.inflight) >= s.pull_threshold_for_queue:
                pq.room.clear()
                self._stats.flow_control_pauses += 1
            if self._service is not None:
                self._service.submit(cast(ProcessQueue, pq), list(msgs))
            else:
                for run in _queue_runs(msgs):
                    task = self._spawn(self._run_ordered(pq, run), f"ordered pop {pq.queue}")
                    self._runs.add(task)
                    task.add_done_callback(self._runs.discard)

    # -- orderly ------------------------------------------------------------------------------

    async def _run_ordered(self, pq: PopQueue, msgs: list[PoppedMessage]) -> None:
        """One popped queue's messages, in offset order, a call at a time."""
        assert self._orderly is not None
        s = self._settings
        size = s.consume_batch_size
        i = 0
        while i < len(msgs):
            batch = msgs[i : i + size]
            m0 = batch[0]
            mq = MessageQueue(m0.topic, m0.broker_name, m0.queue_id)
            ctx = OrderlyContext(mq, suspend_millis=int(s.suspend_delay * 1000))
            async with self._slots:
                pq.call_started(0.0)
                started = time.monotonic()
                try:
                    result = await self._orderly(list[ReceivedMessage](batch), ctx)
                except Exception:
                    log.warning(
                        "orderly handler failed on %d message(s) of %s; suspending the queue",
                        len(batch),
                        mq,
                        exc_info=True,
                    )
                    result = OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
                finally:
                    pq.call_ended(0.0)
            rt = time.monotonic() - started
            if result is None or result in (OrderlyStatus.SUCCESS, OrderlyStatus.COMMIT):
                self._stats.consumed(mq.topic, rt, len(batch), 0)
                self.settle(pq, list(batch))
                i += len(batch)
                continue
            self._stats.consumed(mq.topic, rt, 0, len(batch))
            await self._suspend_rest(pq, msgs[i:], ctx.suspend_millis)
            return
        await self._flush_acks()

    async def _suspend_rest(self, pq: PopQueue, rest: list[PoppedMessage], suspend_ms: int) -> None:
        """A failed ordered call: the messages at the retry limit go to the DLQ from the front
        (as the orderly push consumer does); the others come back after ``suspend_ms``."""
        await self._flush_acks()  # what succeeded before is acked first, in order
        max_reconsume = self._settings.effective_max_reconsume_times
        for k, m in enumerate(rest):
            if m.reconsume_times < max_reconsume:
                rest = rest[k:]
                break
            await self._pop.dead_letter(m)
            pq.inflight.pop(_key(m), None)
        else:
            return
        for m in rest:
            key = _key(m)
            await self._renewal_done(key)
            newest = pq.inflight.pop(key, m)
            try:
                await self._pop.change_invisible(newest, max(1, suspend_ms))
            except (
                BrokerError,
                TransportError,
                RemoteProtocolError,
                InvalidReceiptHandleError,
            ) as exc:
                # It comes back when its invisible time ends anyway.
                log.warning("suspending %s failed: %s", m.msg_id, exc)
        if len(pq.inflight) < self._settings.pull_threshold_for_queue:
            pq.room.set()

    # -- settling -----------------------------------------------------------------------------

    def settle(self, pq: PopQueue, msgs: list[ReceivedMessage]) -> None:
        """The handler is done with ``msgs``: ack the ones not retried (in the background)."""
        for m in msgs:
            if not isinstance(m, PoppedMessage):
                continue
            key = _key(m)
            popped = pq.inflight.pop(key, m)
            if key in self._retried:
                self._retried.discard(key)
            else:
                self._acks.append(popped)
        if len(pq.inflight) < self._settings.pull_threshold_for_queue:
            pq.room.set()
        if self._acks:
            self._ack_wake.set()

    async def retry(self, msg: PoppedMessage, delay_level: int) -> bool:
        """A failed message: visible again after the retry delay of its attempt (Java
        ``ConsumeMessagePopConcurrentlyService.changePopInvisibleTime``); True when the broker
        took the change. ``delay_level`` > 0 picks the delay as the push consumer's does."""
        delays = self._settings.pop_retry_delays
        level = delay_level if delay_level > 0 else msg.reconsume_times
        seconds = delays[min(level, len(delays) - 1)]
        key = _key(msg)
        await self._renewal_done(key)
        newest = self._inflight(key) or msg
        try:
            await self._pop.change_invisible(newest, max(1, int(seconds * 1000)))
        except (BrokerError, TransportError, RemoteProtocolError, InvalidReceiptHandleError) as exc:
            log.warning("retry of %s failed: %s", msg.msg_id, exc)
            return False
        self._retried.add(key)
        return True

    def _inflight(self, key: _Key) -> PoppedMessage | None:
        for pq in self.queues():
            found = pq.inflight.get(key)
            if found is not None:
                return found
        return None

    async def _renewal_done(self, key: _Key) -> None:
        fut = self._renewing.get(key)
        if fut is not None:
            await asyncio.shield(fut)

    async def _ack_loop(self) -> None:
        while True:
            await self._ack_wake.wait()
            self._ack_wake.clear()
            await self._flush_acks()

    async def _flush_acks(self) -> None:
        batch, self._acks = self._acks, []
        if not batch:
            return
        for m in batch:
            await self._renewal_done(_key(m))
        fresh = [m for m in batch if m._handle.visible_at_ms > now_ms()]
        for m in batch:
            if m._handle.visible_at_ms <= now_ms():
                log.warning("message %s was handled after its invisible time: not acked", m.msg_id)
        try:
            await self._pop.ack_all(fresh)
        except Exception as exc:
            # One refusal must not lose the other acks: ack them one by one.
            log.debug("batch ack failed (%s); acking one by one", exc)
            for m in fresh:
                await self._pop.ack_quietly(m)

    # -- invisible-time extension -------------------------------------------------------------

    async def _renew_loop(self) -> None:
        period = max(0.05, self._settings.invisible_duration / 6)
        while True:
            await asyncio.sleep(period)
            await self.extend_due()

    async def extend_due(self) -> None:
        """Extend every message in flight with less than a third of its invisible time left."""
        margin = self._invisible_ms // 3
        due = now_ms() + margin
        for pq in self.queues():
            for key, m in list(pq.inflight.items()):
                if m._handle.visible_at_ms <= due and key not in self._renewing:
                    await self._extend(key, m)

    async def _extend(self, key: _Key, msg: PoppedMessage) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._renewing[key] = fut
        try:
            await self._pop.change_invisible(msg, self._invisible_ms)
        except Exception as exc:
            log.warning("could not extend the invisible time of %s: %s", msg.msg_id, exc)
        finally:
            del self._renewing[key]
            fut.set_result(None)

    # -- shutdown -----------------------------------------------------------------------------

    def stop_popping(self) -> None:
        """No more pops; messages in flight are still settled."""
        self._closing = True
        for pq, task in self._queues.values():
            pq.stopped = True
            task.cancel()

    async def drain(self, timeout: float) -> None:
        """Orderly: wait up to ``timeout`` for the queue runs in progress (what they did not
        finish comes back after its invisible time)."""
        if self._runs:
            await asyncio.wait(set(self._runs), timeout=timeout)

    async def flush(self) -> None:
        """Send the acks not sent yet (the consumer's shutdown, after the handlers drained)."""
        await self._flush_acks()


def _queue_runs(msgs: list[PoppedMessage]) -> list[list[PoppedMessage]]:
    """An ordered pop's messages split by queue, each run in offset order."""
    runs: dict[tuple[str, int], list[PoppedMessage]] = {}
    for m in msgs:
        runs.setdefault((m._popped_topic, m._handle.queue_id), []).append(m)
    return [sorted(run, key=lambda m: m._handle.offset) for run in runs.values()]
