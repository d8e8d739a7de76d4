"""The push consumer (Java ``DefaultMQPushConsumer`` / ``DefaultMQPushConsumerImpl``).

One supervisor task owns one task group holding everything the consumer runs: route refresh,
heartbeats, rebalance (woken early by NOTIFY_CONSUMER_IDS_CHANGED), offset persistence, the
consume-timeout clean-up, one pull task per held queue, the consume workers and the handlers
of requests brokers send us. Nothing starts in the constructor. ``start()`` (or ``async
with``) returns once routes are known, the first heartbeat went out and the first rebalance
ran, so start-up errors reach the caller. A bug in any task crashes the group; the error is
logged and re-raised by :meth:`PushConsumer.wait_closed` and by leaving ``async with``. The
lifecycle, routes and heartbeats are :class:`~aiorocket._consumer.group_member.GroupMember`'s,
shared with the pull consumer.

Shutdown (ARCHITECTURE.md): stop rebalancing (and lock renewal); cancel pulls and put queues
in *draining*; wait up to ``shutdown_grace`` for running handlers; flush offsets, unlock
orderly queues and unregister (shielded, bounded); close connections.

Orderly consumption (``orderly=True``) swaps the consume service for
:class:`~aiorocket._consumer.consume_orderly.OrderlyConsumeService`. In clustering mode it also
runs the ``lock renewal`` task (:mod:`~aiorocket._consumer.lock_renewer`), locks queues before
adding them, pulls and consumes a queue only under a live lock, writes a queue's offset to the
broker only while it holds that lock (a member that was stopped past its lease must not move
the new owner's offset back), and unlocks a dropped queue once its running handler call ended
(later by ``unlock_delay`` if messages were still cached, Java ``unlockDelay``). With
``order_by`` (``"sharding_key"`` or a callable) the same service keeps the order per key
instead of per queue, the keys of a queue running concurrently; locks and offsets are as above.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, TypeVar, cast

from aiorocket._client.instance import ClientInstance
from aiorocket._concurrency import Periodic
from aiorocket._consumer.consume_concurrently import ConcurrentConsumeService, Handler
from aiorocket._consumer.consume_orderly import OrderlyConsumeService, OrderlyHandler
from aiorocket._consumer.group_member import GroupMember, flow_limits
from aiorocket._consumer.hooks import ConsumeHook
from aiorocket._consumer.key_order import key_function, safe_key
from aiorocket._consumer.lock_renewer import BrokerLocks
from aiorocket._consumer.process_queue import FlowLimits, ProcessQueue
from aiorocket._consumer.pull_loop import (
    RETRY_PREFIX,
    PullGate,
    PullLoop,
    Subscription,
    check_selector,
    to_received,
)
from aiorocket._consumer.rebalance import Rebalancer
from aiorocket._consumer.stats import (
    ConsumerStatistics,
    QueueStatistics,
    StatsRecorder,
    TopicStatistics,
)
from aiorocket._protocol.bodies import (
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ProcessQueueInfo,
    ResetOffsetBody,
    TopicConsumeStatus,
)
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    ResetOffsetRequestHeader,
)
from aiorocket._protocol.message import decode_message
from aiorocket._remoting import Connection, Dispatcher
from aiorocket.errors import (
    ConfigurationError,
)
from aiorocket.models import (
    ConcurrentContext,
    ConsumeStatus,
    MessageQueue,
    OrderlyContext,
    OrderlyStatus,
    ReceivedMessage,
    validate_name,
)
from aiorocket.settings import ConsumerSettings, build_settings

__all__ = ["PushConsumer"]

log = logging.getLogger("aiorocket.consumer")

_H = TypeVar("_H", bound=Handler | OrderlyHandler)
_MIB = 1024 * 1024
_CLIENT_VERSION = "V4_9_8"
#: CONSUME_MESSAGE_DIRECTLY results of an orderly handler (Java ``CMResult``)
_DIRECT_ORDERLY: dict[OrderlyStatus | None, str] = {
    None: "CR_SUCCESS",
    OrderlyStatus.SUCCESS: "CR_SUCCESS",
    OrderlyStatus.COMMIT: "CR_COMMIT",
    OrderlyStatus.ROLLBACK: "CR_ROLLBACK",
    OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: "CR_LATER",
}


@dataclass(slots=True)
class _Held:
    """A held queue: its cache, its pull task and the pull loop the task runs."""

    pq: ProcessQueue
    task: asyncio.Task[None]
    loop: PullLoop | None = None


@dataclass(slots=True)
class _Release:
    """An orderly queue dropped by rebalance whose broker lock is not released yet."""

    pq: ProcessQueue
    task: asyncio.Task[None]


class _LockGate:
    """The pull gate of an orderly clustering consumer (see :class:`PullGate`)."""

    __slots__ = ("_consumer",)

    def __init__(self, consumer: PushConsumer) -> None:
        self._consumer = consumer

    def pullable(self, pq: ProcessQueue) -> bool:
        return pq.lock_valid(asyncio.get_running_loop().time(), self._consumer.settings.lock_expiry)

    async def wait_pullable(self, pq: ProcessQueue) -> None:
        self._consumer._on_lock_expired()
        await pq.wait_lock_change()

    async def locked_first_offset(self, pq: ProcessQueue) -> int:
        # computePullFromWhere: the stored offset, else the consume-from policy.
        return await self._consumer._rebalancer.start_offset(pq.queue)


class PushConsumer(GroupMember):
    """Consumes topics with a handler, queues shared across the group.

    ::

        consumer = PushConsumer(group="billing", namesrv="127.0.0.1:9876")
        consumer.subscribe("orders", "created || paid")

        @consumer.listener
        async def on_orders(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None: ...

        async with consumer:
            await consumer.wait_closed()

    With ``orderly=True`` the same :meth:`listener` takes an orderly handler, ``async def
    (msgs, ctx: OrderlyContext) -> OrderlyStatus | None``, called for one queue at a time in
    offset order (see :class:`~aiorocket.OrderlyStatus`). Add ``order_by="sharding_key"`` (the
    ``__SHARDINGKEY`` property a producer's ``sharding_key`` sets) or ``order_by=fn`` (``fn(msg)
    -> str | None``) to keep the order per key instead: the messages of a queue with the same
    key are handled one call at a time in queue order, different keys concurrently up to
    ``concurrency``; messages without a key keep queue order among themselves, as one more key.

    Keyword arguments are the settings of :class:`~aiorocket.settings.ConsumerSettings`
    (``group`` and ``namesrv`` required).

    Raises:
        ConfigurationError: invalid settings or group name (at construction).
    """

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str],
        consume_from: Literal["last", "first"] | datetime = "last",
        message_model: Literal["clustering", "broadcasting"] = "clustering",
        orderly: bool = False,
        order_by: Literal["queue", "sharding_key"] | Callable[[ReceivedMessage], str | None] = (
            "queue"
        ),
        **settings: Any,
    ) -> None:
        built = build_settings(
            ConsumerSettings,
            {
                "group": group,
                "namesrv": namesrv,
                "consume_from": consume_from,
                "message_model": message_model,
                "orderly": orderly,
                "order_by": order_by,
                **settings,
            },
        )
        super().__init__(built)
        s = self.settings
        self._orderly = s.orderly
        #: orderly clustering: queues are locked on their brokers
        self._locking = s.orderly and self._clustering
        self._handler: Handler | OrderlyHandler | None = None
        self._hooks: list[ConsumeHook] = []
        self._held: dict[MessageQueue, _Held] = {}
        self._releasing: dict[MessageQueue, _Release] = {}
        #: pause(): everything, or queues and topics (wire names), not pulled while listed
        self._paused_all = False
        self._paused_queues: set[MessageQueue] = set()
        self._paused_topics: set[str] = set()
        # Built by start() (_build), besides GroupMember's parts.
        self._service: ConcurrentConsumeService | OrderlyConsumeService
        self._locks: BrokerLocks | None = None
        self._clean_timer: Periodic | None = None
        self._lock_timer: Periodic | None = None

    # -- configuration ------------------------------------------------------------------------

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"*"``, ``"A"``,
        ``"A || B"``), or, with ``sql=``, whose properties match an SQL92 expression such as
        ``"region = 'eu' AND amount > 100"`` (filtered by the broker, which must have
        property filtering enabled). Subscribing a topic again replaces its expression.

        Raises:
            InvalidNameError: a bad topic name.
            InvalidSelectorError: ``sql`` does not compile (the message gives the position).
            ConfigurationError: both a tag expression and ``sql``, or the consumer was started
                already.
        """
        self._check_not_started("subscribe")
        check_selector(expression, sql)
        validate_name(topic)
        wire = self._wire_topic(topic)
        self._subscriptions[wire] = Subscription.create(wire, expression, sql)

    def register_listener(self, handler: Handler | OrderlyHandler) -> None:
        """Set the handler: ``async def (msgs, ctx) -> ConsumeStatus | None``.

        ``None`` or ``CONSUME_SUCCESS`` is success; ``RECONSUME_LATER`` or an exception is a
        failure (retried through ``%RETRY%<group>``); ``ctx.ack_index`` marks partial success
        of a batch and ``ctx.delay_level`` picks the retry delay.

        An orderly consumer (``orderly=True``) takes ``async def (msgs, ctx: OrderlyContext)
        -> OrderlyStatus | None`` instead: ``None`` or ``SUCCESS`` is success; an exception or
        ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` delivers the same messages again after
        ``ctx.suspend_millis`` with nothing later in their queue (with ``order_by``: of their
        key) delivered meanwhile; with ``ctx.auto_commit = False`` (refused with ``order_by``),
        ``COMMIT`` and ``ROLLBACK`` settle everything consumed since the last commit.

        Raises:
            ConfigurationError: not an ``async def``, a handler is set already, or the
                consumer was started already.
        """
        self._check_not_started("register a listener")
        if not (
            inspect.iscoroutinefunction(handler)
            or inspect.iscoroutinefunction(getattr(handler, "__call__", None))  # noqa: B004
        ):
            raise ConfigurationError("the listener must be an async def function")
        if self._handler is not None:
            raise ConfigurationError("a listener is registered already")
        self._handler = handler

    def listener(self, handler: _H) -> _H:
        """Decorator form of :meth:`register_listener`.

        Raises:
            ConfigurationError: as :meth:`register_listener`.
        """
        self.register_listener(handler)
        return handler

    def register_hook(self, hook: ConsumeHook) -> None:
        """Add a hook called around every handler call (Java ``ConsumeMessageHook``).

        Raises:
            ConfigurationError: the consumer was started already.
        """
        self._check_not_started("register a hook")
        self._hooks.append(hook)

    def pause(self, *targets: MessageQueue | str) -> None:
        """Stop pulling the given queues (:class:`MessageQueue`) or topics (their names), or
        everything when called with no argument (Java ``suspend()``), until :meth:`resume`.

        A paused queue is not pulled, so no new message of it reaches the handler; messages
        pulled before the pause are still handled, and a pull in flight at the pause is
        dropped unseen and pulled again after the resume. The queue stays held, with its
        offsets. The pause belongs to the consumer, not to a rebalance: a paused queue or
        topic this member holds later (after a rebalance, a restart of the queue) starts
        paused. May be called before :meth:`start`. A topic's retried messages come through
        ``%RETRY%<group>``, which pausing the topic does not pause (pause it by that name).

        Raises:
            ConfigurationError: a topic (or a queue's topic) this consumer does not subscribe.
        """
        if not targets:
            self._paused_all = True
        for target in targets:
            if isinstance(target, MessageQueue):
                mq = MessageQueue(
                    self._wire_topic(target.topic), target.broker_name, target.queue_id
                )
                self._check_subscribed(mq.topic)
                self._paused_queues.add(mq)
            else:
                topic = self._wire_topic(target)
                self._check_subscribed(topic)
                self._paused_topics.add(topic)
        self._apply_pause()

    def resume(self, *targets: MessageQueue | str) -> None:
        """Undo :meth:`pause` for the given queues or topics, or for everything when called
        with no argument; their pulls start again at once.

        A queue stays paused while it is paused by name or through its topic.

        Raises:
            ConfigurationError: a topic (or a queue's topic) this consumer does not subscribe.
        """
        if not targets:
            self._paused_all = False
            self._paused_queues.clear()
            self._paused_topics.clear()
        for target in targets:
            if isinstance(target, MessageQueue):
                mq = MessageQueue(
                    self._wire_topic(target.topic), target.broker_name, target.queue_id
                )
                self._check_subscribed(mq.topic)
                self._paused_queues.discard(mq)
            else:
                topic = self._wire_topic(target)
                self._check_subscribed(topic)
                self._paused_topics.discard(topic)
        self._apply_pause()

    def _check_subscribed(self, topic: str) -> None:
        if topic not in self._subscriptions and not (
            self._clustering and topic == self._retry_topic
        ):
            raise ConfigurationError(f"topic {topic} is not subscribed by this consumer")

    def _is_paused(self, mq: MessageQueue) -> bool:
        return self._paused_all or mq in self._paused_queues or mq.topic in self._paused_topics

    def _apply_pause(self) -> None:
        for mq, held in self._held.items():
            if self._is_paused(mq):
                held.pq.pause()
            else:
                held.pq.resume()

    # -- lifecycle ----------------------------------------------------------------------------

    def _check_startable(self) -> None:
        if self._handler is None:
            raise ConfigurationError("register a listener before starting the consumer")
        if not self._subscriptions:
            raise ConfigurationError("subscribe to at least one topic before starting")
        if self._clustering:
            self._subscriptions.setdefault(
                self._retry_topic, Subscription.create(self._retry_topic, "*")
            )

    def _build(self) -> None:
        """Create the parts (no I/O, nothing started)."""
        s = self.settings
        assert self._handler is not None
        dispatcher = Dispatcher()
        dispatcher.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        dispatcher.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info)
        dispatcher.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset)
        dispatcher.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._on_consume_directly)
        self._client = client = ClientInstance(s, handler=dispatcher)
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._table_lock = asyncio.Lock()
        self._stats = StatsRecorder(now=loop.time())
        self._offsets = self._new_offset_store(client)
        if self._orderly:
            self._service = OrderlyConsumeService(
                handler=cast(OrderlyHandler, self._handler),
                group=self._group,
                settings=s,
                client=client,
                offsets=self._offsets,
                stats=self._stats,
                spawn=self._spawn,
                hooks=self._hooks,
                on_lock_expired=self._on_lock_expired,
                key_of=key_function(s.order_by),
            )
        else:
            self._service = ConcurrentConsumeService(
                handler=cast(Handler, self._handler),
                group=self._group,
                settings=s,
                client=client,
                offsets=self._offsets,
                stats=self._stats,
                hooks=self._hooks,
            )
        if self._locking:
            self._locks = BrokerLocks(client=client, group=self._group)
        self._rebalancer = Rebalancer(
            client=client,
            group=self._group,
            host=self,
            offsets=self._offsets,
            strategy=self._allocation_strategy(),
            broadcasting=not self._clustering,
            consume_from=s.consume_from,
            locker=self._locks,
            on_duplicate_id=self._disambiguate_client_id if self._clustering else None,
        )
        for topic in self._subscriptions:
            self._limits[topic] = self._flow_limits(topic, 1)
        self._membership_timers()
        self._persist_timer = Periodic(
            self._persist_offsets, s.offset_persist_interval, name="persist", run_first=False
        )
        if isinstance(self._service, ConcurrentConsumeService):
            # Java's orderly service has no cleanExpireMsg: a running orderly batch is never
            # sent back behind its handler's back (that would break the order).
            self._clean_timer = Periodic(
                self._service.clean_expired, s.consume_timeout, name="clean-up", run_first=False
            )
        if self._locking:
            self._lock_timer = Periodic(
                self._renew_locks, s.lock_renew_interval, name="lock renewal", run_first=False
            )

    # -- start-up -----------------------------------------------------------------------------

    async def _startup(self) -> None:
        self._start_wall = int(time.time() * 1000)
        await self._offsets.load()
        await self._refresh_routes(at_start=True)
        await self._check_client_config()
        await self._claim_client_id()
        await self._send_heartbeats(at_start=True)
        if any(self._client.route(t) is None for t in self._subscriptions):
            # A Java broker creates %RETRY%<group> when the first heartbeat names the group.
            await self._refresh_routes()
        if isinstance(self._service, ConcurrentConsumeService):
            for i in range(self.settings.concurrency):
                self._spawn(self._service.worker(), name=f"consume worker {i}")
        await self._rebalance()
        self._spawn(self._rebalance_timer.run(), name="rebalance")
        if self._lock_timer is not None:
            self._spawn(self._lock_timer.run(), name="lock renewal")
        self._heartbeat_task = self._spawn(self._heartbeat_timer.run(), name="heartbeat")
        self._spawn(self._route_timer.run(), name="route refresh")
        self._spawn(self._persist_timer.run(), name="persist offsets")
        if self._clean_timer is not None:
            self._spawn(self._clean_timer.run(), name="consume clean-up")
        self._client.on_new_brokers = self._on_new_brokers

    # -- periodic work ------------------------------------------------------------------------

    async def _rebalance(self) -> None:
        if self._closing:
            return
        async with self._table_lock:
            self._restart_silent_pulls()
            await self._rebalancer.run_once(list(self._subscriptions))
        self._stats.rebalances += 1

    def _restart_silent_pulls(self) -> None:
        """The pull-expired watchdog (Java's rebalance drops a queue whose pull has been idle
        for ``pullMaxIdleTime`` and re-adds it): a pull task silent for twice
        ``pull_timeout`` outside a legitimate wait is replaced by a new one that goes on from
        the same offset, with the same cache (nothing is delivered twice)."""
        limit = 2 * self.settings.pull_timeout
        now = asyncio.get_running_loop().time()
        for mq, held in self._held.items():
            loop_ = held.loop
            if loop_ is None or not held.pq.active:
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
            self._stats.pull_restarts += 1
            held.task.cancel()
            loop_.last_active = now  # (not silent again before the new task first runs)
            held.task = self._spawn(loop_.run(loop_.next_offset), name=f"pull {mq}")

    async def _persist_offsets(self) -> None:
        self._stats.sample(asyncio.get_running_loop().time())
        if self._locking:
            for mq in self._lock_holding():
                await self._offsets.persist(mq)
        else:
            await self._offsets.persist_all(list(self._held))

    def _lock_holding(self) -> list[MessageQueue]:
        """Orderly clustering: the held queues whose lock is live, the only ones whose offset
        this member may write (after a long stop, another member may have moved on)."""
        now = asyncio.get_running_loop().time()
        expiry = self.settings.lock_expiry
        return [mq for mq, h in self._held.items() if h.pq.lock_valid(now, expiry)]

    async def _flush_offsets(self) -> None:
        if self._locking:
            holding = self._lock_holding()
            await asyncio.gather(*(self._offsets.persist(mq, sync=True) for mq in holding))
        else:
            await self._offsets.persist_all(list(self._held), sync=True)

    # -- orderly locks ------------------------------------------------------------------------

    async def _renew_locks(self) -> None:
        """``lockAll``: renew the locks of held queues, and of dropped ones still waiting for
        their handler (their lease must not run out under it).

        A queue whose lock went to another member is dropped (rebalance re-adds it once the
        lock is free again); one whose lock had expired here before it was granted again is
        re-seated: a fresh process queue whose first pull re-reads the broker's offset, as
        after any other lock (``lockedFirst``), since another member may have consumed it
        meanwhile.
        """
        if self._closing or self._locks is None:
            return
        queues = {mq: r.pq for mq, r in self._releasing.items()}
        queues.update((mq, h.pq) for mq, h in self._held.items())
        lost, regained = await self._locks.renew(queues, expiry=self.settings.lock_expiry)
        lost = [pq for pq in lost if not pq.dropped]
        regained = [pq for pq in regained if not pq.dropped]
        if (not lost and not regained) or self._closing:
            return
        async with self._table_lock:
            for pq in lost:
                held = self._held.get(pq.queue)
                if held is not None and held.pq is pq:
                    await self.stop_queue(pq.queue)
            for pq in regained:
                held = self._held.get(pq.queue)
                if held is None or held.pq is not pq or not pq.locked:
                    continue
                del self._held[pq.queue]
                pq.mark_dropped()
                held.task.cancel()
                self._offsets.remove(pq.queue)
                # The offset given here is replaced by the broker's before the first pull.
                self.start_queue(pq.queue, 0, locked_at=pq.last_lock_time)
        if lost:
            self._rebalance_timer.wake()

    def _on_lock_expired(self) -> None:
        # tryLockLaterAndReconsume: a queue waits for its lock; try to renew it now.
        if self._lock_timer is not None and not self._closing:
            self._lock_timer.wake()

    async def _release(self, mq: MessageQueue, pq: ProcessQueue) -> None:
        """Unlock a dropped orderly queue once no handler runs on it (the consume lock of
        seed 003 §6.2; ``removeUnnecessaryMessageQueue`` + ``unlockDelay``)."""
        assert isinstance(self._service, OrderlyConsumeService)
        assert self._locks is not None
        # Cancelled (re-added, or shutdown): the entry stays for start_queue or _unlock_all.
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

    async def _unlock_all(self) -> None:
        """``unlockAll`` at shutdown: every held queue and every dropped one not released
        yet (their handlers have ended or were cancelled by now)."""
        if self._locks is None:
            return
        mqs = set(self._held)
        for mq, release in list(self._releasing.items()):
            release.task.cancel()
            if release.pq.locked:
                mqs.add(mq)
        self._releasing.clear()
        if mqs:
            await self._cleanup(self._locks.unlock(sorted(mqs)), "unlock orderly queues")

    # -- queues (QueueHost) -------------------------------------------------------------------

    def held(self) -> list[MessageQueue]:
        """The queues this member holds now."""
        return list(self._held)

    def start_queue(self, mq: MessageQueue, offset: int, *, locked_at: float | None = None) -> None:
        """Start holding ``mq`` (rebalancer callback); ``locked_at``: when its granted lock
        request was sent (orderly clustering)."""
        pq = ProcessQueue(mq, now=asyncio.get_running_loop().time())
        if self._is_paused(mq):
            pq.pause()
        topic = mq.topic
        gate: PullGate | None = None
        if self._locking:
            gate = _LockGate(self)
            release = self._releasing.pop(mq, None)
            if release is not None:
                # Dropped and re-added before its unlock: keep the lock (just renewed by the
                # add); its old handler still holds the queue lock, so the new task waits.
                release.task.cancel()
            if locked_at is not None:
                pq.set_locked(True, locked_at)
        loop_ = PullLoop(
            pq=pq,
            subscription=self._subscriptions[topic],
            client=self._client,
            group=self._group,
            settings=self.settings,
            offsets=self._offsets,
            dispatch=self._service,
            stats=self._stats,
            limits=lambda: self._limits[topic],
            on_offset_illegal=self._on_offset_illegal,
            gate=gate,
        )
        task = self._spawn(loop_.run(offset), name=f"pull {mq}")
        self._held[mq] = _Held(pq, task, loop_)

    async def stop_queue(self, mq: MessageQueue) -> None:
        """Stop holding ``mq``: dropped, pull cancelled, offset persisted and forgotten
        (``removeUnnecessaryMessageQueue``); an orderly queue is unlocked once its running
        handler call (if any) has ended."""
        held = self._held.pop(mq, None)
        if held is None:
            return
        pq = held.pq
        pq.mark_dropped()
        held.task.cancel()
        if not self._locking:
            await self._offsets.persist(mq)
            self._offsets.remove(mq)
            return
        if pq.lock_valid(asyncio.get_running_loop().time(), self.settings.lock_expiry):
            # Awaited, so the broker has it before the unlock lets the next owner read it.
            await self._offsets.persist(mq, sync=True)
        self._offsets.remove(mq)
        task = self._spawn(self._release(mq, pq), name=f"release {mq}")
        self._releasing[mq] = _Release(pq, task)

    def queues_changed(self, topic: str, count: int) -> None:
        """Recompute ``topic``'s flow limits (per-topic thresholds split over its queues)."""
        self._limits[topic] = self._flow_limits(topic, count)

    def _flow_limits(self, topic: str, queues: int) -> FlowLimits:
        return flow_limits(self.settings, queues, span=self._service.uses_span_limit)

    async def _on_offset_illegal(self, pq: ProcessQueue, offset: int) -> None:
        mq = pq.queue
        async with self._table_lock:
            held = self._held.get(mq)
            if held is None or held.pq is not pq:
                return
            del self._held[mq]
            self._offsets.update(mq, offset, increase_only=False)
            await self._offsets.persist(mq, sync=True)
            self._offsets.remove(mq)
        log.warning("%s: offset reset to %d; re-adding it", mq, offset)
        self._rebalance_timer.wake()

    # -- shutdown -----------------------------------------------------------------------------

    async def _shutdown(self) -> None:
        s = self.settings
        client = self._client
        # 1. No more rebalancing or lock renewal: the held set is final.
        self._rebalance_timer.stop()
        if self._lock_timer is not None:
            self._lock_timer.stop()
        async with self._table_lock:
            # 2. Pulls stop; queues drain (finished work still commits).
            for held in self._held.values():
                held.pq.mark_draining()
                held.task.cancel()
        # 3. Running handlers finish within the grace period.
        await self._service.drain(s.shutdown_grace)
        for timer in (self._route_timer, self._persist_timer, self._clean_timer):
            if timer is not None:
                timer.stop()
        for task in list(self._tasks):
            if task is not self._heartbeat_task:
                task.cancel()
        # 4. Offsets flushed, orderly queues unlocked (after the flush, so the next owner
        #    reads the final offsets), client unregistered: shielded and bounded.
        await self._cleanup(self._flush_offsets(), "flush offsets")
        await self._unlock_all()
        self._heartbeat_timer.stop()
        await self._cleanup(self._unregister(), "unregister consumer")
        # 5. Connections closed.
        await client.close()
        log.info("consumer %s closed", self._group)

    # -- requests from brokers ----------------------------------------------------------------

    async def _on_running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_ext(cmd.ext_fields)
        if header.consumer_group != self._group:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer Group <{header.consumer_group}> not exist in this consumer",
            )
        return cmd.make_response(ResponseCode.SUCCESS, body=self._running_info().to_json())

    def _running_info(self) -> ConsumerRunningInfo:
        s = self.settings
        props: dict[str, str] = {}
        for name, value in s.model_dump().items():
            if name not in ("secret_key", "access_key", "allocation") and value is not None:
                props[name] = str(value)
        props.update(
            {
                "PROP_NAMESERVER_ADDR": ";".join(s.namesrv),
                "PROP_THREADPOOL_CORE_SIZE": str(s.concurrency),
                "PROP_CONSUMEORDERLY": "true" if self._orderly else "false",
                "PROP_CONSUME_TYPE": "CONSUME_PASSIVELY",
                "PROP_CLIENT_VERSION": _CLIENT_VERSION,
                "PROP_CONSUMER_START_TIMESTAMP": str(self._start_wall),
            }
        )
        offset = time.time() - asyncio.get_running_loop().time()
        mq_table = {}
        for mq, held in self._held.items():
            snap = held.pq.snapshot()
            mq_table[mq] = ProcessQueueInfo(
                commit_offset=self._offsets.read(mq),
                cached_msg_min_offset=max(snap.min_offset, 0),
                cached_msg_max_offset=max(snap.max_offset, 0),
                cached_msg_count=snap.cached_count,
                cached_msg_size_in_mib=snap.cached_bytes // _MIB,
                dropped=snap.dropped,
                locked=held.pq.locked,
                last_lock_timestamp=(
                    int((held.pq.last_lock_time + offset) * 1000) if held.pq.locked else 0
                ),
                last_pull_timestamp=int((snap.last_pull_time + offset) * 1000),
                last_consume_timestamp=int((snap.last_consume_time + offset) * 1000),
            )
        now = asyncio.get_running_loop().time()
        # DefaultMQPushConsumerImpl.consumerRunningInfo: a row for every subscribed topic
        # (mqadmin consumerStatus lists them all), zeros until it has statistics
        status = {topic: TopicConsumeStatus() for topic in self._subscriptions}
        for topic, t in self._stats.topic_statistics(now).items():
            status[topic] = TopicConsumeStatus(
                pull_rt=t.pull_rt_ms,
                pull_tps=t.pull_tps,
                consume_rt=t.consume_rt_ms,
                consume_ok_tps=t.consume_ok_tps,
                consume_failed_tps=t.consume_failed_tps,
                consume_failed_msgs=t.consumed_failed_total,
            )
        return ConsumerRunningInfo(
            properties=props,
            subscriptions=tuple(sub.data() for sub in self._subscriptions.values()),
            mq_table=mq_table,
            status_table=status,
        )

    async def _on_reset_offset(self, conn: Connection, cmd: RemotingCommand) -> None:
        header = ResetOffsetRequestHeader.from_ext(cmd.ext_fields)
        if header.group != self._group or not cmd.body:
            return
        table = ResetOffsetBody.from_json(cmd.body).offset_table
        log.warning("broker resets offsets of %s for %s", header.topic, self._group)
        async with self._table_lock:
            # ConsumerResetOffset (MQClientInstance.resetOffset): drop the topic's queues the
            # table names (the others go on untouched), store the new offsets, let the next
            # rebalance re-add them from there.
            for mq in [mq for mq in self._held if mq.topic == header.topic and mq in table]:
                held = self._held.pop(mq)
                held.pq.mark_dropped()
                held.pq.clear()
                held.task.cancel()
                self._offsets.remove(mq)
            for mq, offset in table.items():
                if mq.topic != header.topic:
                    continue
                self._offsets.update(mq, offset, increase_only=False)
                await self._offsets.persist(mq, sync=True)
                self._offsets.remove(mq)
        self._rebalance_timer.wake()
        return

    async def _on_consume_directly(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = ConsumeMessageDirectlyResultRequestHeader.from_ext(cmd.ext_fields)
        assert self._handler is not None
        rec, _ = decode_message(cmd.body)
        broker_name = header.broker_name or ""
        msgs = to_received(
            [rec],
            broker_name=broker_name,
            tag_filter=None,
            retry_queue=rec.topic.startswith(RETRY_PREFIX),
            namespace=self.settings.namespace,
        )
        mq = MessageQueue(rec.topic, broker_name, rec.queue_id)
        started = time.monotonic()
        remark = None
        auto_commit = True
        try:
            if self._orderly:
                # ConsumeMessageOrderlyService.consumeMessageDirectly
                suspend_ms = round(self.settings.suspend_delay * 1000)
                key_of = key_function(self.settings.order_by)
                if key_of is None:
                    octx = OrderlyContext(mq, suspend_millis=suspend_ms)
                else:
                    octx = OrderlyContext._for_key(mq, safe_key(key_of, msgs[0]), suspend_ms)
                ostatus = await cast(OrderlyHandler, self._handler)(msgs, octx)
                auto_commit = octx.auto_commit
                result = _DIRECT_ORDERLY.get(ostatus, "CR_LATER")
            else:
                ctx = ConcurrentContext(mq)
                status = await cast(Handler, self._handler)(msgs, ctx)
                ok = status in (None, ConsumeStatus.CONSUME_SUCCESS)
                result = "CR_SUCCESS" if ok else "CR_LATER"
        except Exception as exc:
            result = "CR_THROW_EXCEPTION"
            remark = f"{type(exc).__name__}: {exc}"
        body = ConsumeMessageDirectlyResult(
            order=self._orderly,
            auto_commit=auto_commit,
            consume_result=result,
            remark=remark,
            spent_time_mills=int((time.monotonic() - started) * 1000),
        )
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    # -- statistics ---------------------------------------------------------------------------

    def statistics(self) -> ConsumerStatistics:
        """Pull and consume rates per topic, cache figures per held queue, error counters.

        Raises:
            ConfigurationError: the consumer was never started.
        """
        if not self._started:
            raise ConfigurationError("the consumer has not been started")
        loop_now = asyncio.get_running_loop().time()
        offset = time.time() - loop_now
        queues = {}
        lag: dict[str, int] = {}
        for mq, held in self._held.items():
            pq = held.pq
            snap = pq.snapshot()
            committed = self._offsets.read(mq)
            broker = pq.broker_max_offset
            # the lag is what the broker holds beyond what this member will commit next
            behind = max(broker - committed, 0) if broker >= 0 and committed >= 0 else 0
            lag[mq.topic] = lag.get(mq.topic, 0) + behind
            oldest = pq.oldest_call_start()
            queues[mq] = QueueStatistics(
                queue=mq,
                cached_count=snap.cached_count,
                cached_bytes=snap.cached_bytes,
                span=snap.span,
                committed_offset=committed,
                last_pull_time=snap.last_pull_time + offset,
                last_consume_time=snap.last_consume_time + offset,
                locked=self._locking and pq.lock_valid(loop_now, self.settings.lock_expiry),
                last_lock_time=pq.last_lock_time + offset if pq.last_lock_time else 0.0,
                broker_offset=broker,
                lag=behind,
                in_flight=pq.calls_running,
                in_flight_since=oldest + offset if oldest is not None else 0.0,
                flow_blocked=pq.blocked_by(),
            )
        st = self._stats
        topics = st.topic_statistics(loop_now)
        for topic, behind in lag.items():
            topics[topic] = dataclasses.replace(topics.get(topic) or TopicStatistics(), lag=behind)
        return ConsumerStatistics(
            topics=topics,
            queues=queues,
            pull_errors=st.pull_errors,
            flow_control_pauses=st.flow_control_pauses,
            send_back_failures=st.send_back_failures,
            rebalances=st.rebalances,
            pull_restarts=st.pull_restarts,
            handlers_cancelled=st.handlers_cancelled,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closing else "started" if self._started else "new"
        return f"PushConsumer(group={self._group!r}, {state}, queues={len(self._held)})"
