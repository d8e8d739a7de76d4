"""The push consumer (Java ``DefaultMQPushConsumer`` / ``DefaultMQPushConsumerImpl``).

One supervisor task owns one task group holding everything the consumer runs: route refresh,
heartbeats, rebalance (woken early by NOTIFY_CONSUMER_IDS_CHANGED), offset persistence, the
consume-timeout clean-up, one pull task per held queue, the consume workers and the handlers
of requests brokers send us. Nothing starts in the constructor. ``start()`` (or ``async
with``) returns once routes are known, the first heartbeat went out and the first rebalance
ran, so start-up errors reach the caller. A bug in any task crashes the group; the error is
logged and re-raised by :meth:`PushConsumer.wait_closed` and by leaving ``async with``.

Shutdown (ARCHITECTURE.md): stop rebalancing (and lock renewal); cancel pulls and put queues
in *draining*; wait up to ``shutdown_grace`` for running handlers; flush offsets, unlock
orderly queues and unregister (shielded, bounded); close connections.

Orderly consumption (``orderly=True``) swaps the consume service for
:class:`~aiorocket._consumer.consume_orderly.OrderlyConsumeService`. In clustering mode it also
runs the ``lock renewal`` task (:mod:`~aiorocket._consumer.lock_renewer`), locks queues before
adding them, pulls and consumes a queue only under a live lock, writes a queue's offset to the
broker only while it holds that lock (a member that was stopped past its lease must not move
the new owner's offset back), and unlocks a dropped queue once its running handler call ended
(later by ``unlock_delay`` if messages were still cached, Java ``unlockDelay``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, Self, TypeVar, cast

from aiorocket._client.instance import ClientInstance
from aiorocket._concurrency import Periodic, bounded_cleanup
from aiorocket._consumer.allocation import AllocationStrategy, strategy_named
from aiorocket._consumer.consume_concurrently import ConcurrentConsumeService, Handler
from aiorocket._consumer.consume_orderly import OrderlyConsumeService, OrderlyHandler
from aiorocket._consumer.hooks import ConsumeHook
from aiorocket._consumer.lock_renewer import BrokerLocks
from aiorocket._consumer.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from aiorocket._consumer.process_queue import FlowLimits, ProcessQueue
from aiorocket._consumer.pull_loop import (
    RETRY_PREFIX,
    PullGate,
    PullLoop,
    Subscription,
    to_received,
)
from aiorocket._consumer.rebalance import Rebalancer
from aiorocket._consumer.stats import ConsumerStatistics, QueueStatistics, StatsRecorder
from aiorocket._protocol.bodies import (
    ConsumeMessageDirectlyResult,
    ConsumerData,
    ConsumerRunningInfo,
    HeartbeatData,
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
    BrokerError,
    ClientClosedError,
    ConfigurationError,
    RocketError,
    TopicNotExistError,
    TransportError,
)
from aiorocket.models import (
    ConcurrentContext,
    ConsumeStatus,
    MessageQueue,
    OrderlyContext,
    OrderlyStatus,
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
    """A held queue: its cache and its pull task."""

    pq: ProcessQueue
    task: asyncio.Task[None]


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


class PushConsumer:
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
    offset order (see :class:`~aiorocket.OrderlyStatus`).

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
        **settings: Any,
    ) -> None:
        self.settings: ConsumerSettings = build_settings(
            ConsumerSettings,
            {
                "group": group,
                "namesrv": namesrv,
                "consume_from": consume_from,
                "message_model": message_model,
                "orderly": orderly,
                **settings,
            },
        )
        s = self.settings
        self._group = f"{s.namespace}%{group}" if s.namespace else group
        validate_name(self._group, "consumer group")
        self._clustering = s.message_model == "clustering"
        self._orderly = s.orderly
        #: orderly clustering: queues are locked on their brokers
        self._locking = s.orderly and self._clustering
        self._retry_topic = f"{RETRY_PREFIX}{self._group}"
        self._subscriptions: dict[str, Subscription] = {}
        self._handler: Handler | OrderlyHandler | None = None
        self._hooks: list[ConsumeHook] = []
        self._runner: asyncio.Task[None] | None = None
        self._held: dict[MessageQueue, _Held] = {}
        self._releasing: dict[MessageQueue, _Release] = {}
        self._limits: dict[str, FlowLimits] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._tg: asyncio.TaskGroup | None = None
        self._crash: BaseException | None = None
        self._crash_reported = False
        self._started = False
        self._closing = False
        self._start_wall = 0
        # Built by start() (_build): the client, stores, services and timers.
        self._client: ClientInstance
        self._stop: asyncio.Event
        self._table_lock: asyncio.Lock
        self._stats: StatsRecorder
        self._offsets: OffsetStore
        self._service: ConcurrentConsumeService | OrderlyConsumeService
        self._locks: BrokerLocks | None = None
        self._rebalancer: Rebalancer
        self._rebalance_timer: Periodic
        self._heartbeat_timer: Periodic
        self._route_timer: Periodic
        self._persist_timer: Periodic
        self._clean_timer: Periodic | None = None
        self._lock_timer: Periodic | None = None
        self._rebalance_task: asyncio.Task[Any]
        self._heartbeat_task: asyncio.Task[Any]
        self._lock_task: asyncio.Task[Any] | None = None

    # -- configuration ------------------------------------------------------------------------

    @property
    def group(self) -> str:
        """The consumer group (without namespace)."""
        return self.settings.group

    @property
    def client_id(self) -> str:
        """This member's client id (``<ip>@<instance>``); empty before start."""
        return self._client.client_id if self._started else ""

    def subscribe(self, topic: str, expression: str = "*") -> None:
        """Consume ``topic``'s messages whose tag matches ``expression`` (``"*"``, ``"A"``,
        ``"A || B"``). Subscribing a topic again replaces its expression.

        Raises:
            InvalidNameError: a bad topic name.
            ConfigurationError: the consumer was started already.
        """
        self._check_not_started("subscribe")
        validate_name(topic)
        wire = self._wire_topic(topic)
        self._subscriptions[wire] = Subscription.create(wire, expression)

    def register_listener(self, handler: Handler | OrderlyHandler) -> None:
        """Set the handler: ``async def (msgs, ctx) -> ConsumeStatus | None``.

        ``None`` or ``CONSUME_SUCCESS`` is success; ``RECONSUME_LATER`` or an exception is a
        failure (retried through ``%RETRY%<group>``); ``ctx.ack_index`` marks partial success
        of a batch and ``ctx.delay_level`` picks the retry delay.

        An orderly consumer (``orderly=True``) takes ``async def (msgs, ctx: OrderlyContext)
        -> OrderlyStatus | None`` instead: ``None`` or ``SUCCESS`` is success; an exception or
        ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` delivers the same messages again after
        ``ctx.suspend_millis`` with nothing later in their queue delivered meanwhile; with
        ``ctx.auto_commit = False``, ``COMMIT`` and ``ROLLBACK`` settle everything consumed
        since the last commit.

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

    def _check_not_started(self, what: str) -> None:
        if self._started or self._closing:
            raise ConfigurationError(f"cannot {what} after the consumer started")

    def _wire_topic(self, topic: str) -> str:
        ns = self.settings.namespace
        if ns and not topic.startswith(RETRY_PREFIX) and not topic.startswith(ns + "%"):
            return f"{ns}%{topic}"
        return topic

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start consuming; returns after routes, the first heartbeat and the first rebalance.

        Prefer ``async with consumer:``.

        Raises:
            ConfigurationError: no listener or no subscription.
            ClientClosedError: the consumer was closed before.
            TransportError: no name server or broker could be reached at start.
            RocketError: another start-up failure.
        """
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        if self._started:
            return
        if self._handler is None:
            raise ConfigurationError("register a listener before starting the consumer")
        if not self._subscriptions:
            raise ConfigurationError("subscribe to at least one topic before starting")
        if self._clustering:
            self._subscriptions.setdefault(
                self._retry_topic, Subscription.create(self._retry_topic, "*")
            )
        self._build()
        self._started = True
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._runner = asyncio.create_task(self._run(ready), name=f"consumer {self._group}")
        try:
            await asyncio.shield(ready)
        except BaseException:
            self._closing = True
            self._stop.set()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(asyncio.shield(self._runner), self._cleanup_timeout())
            raise

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
        if self._clustering:
            self._offsets = RemoteOffsetStore(client, self._group)
        else:
            instance = s.instance_name or "DEFAULT"
            path = s.offset_store_dir / f"{client.ip}@{instance}" / self._group / "offsets.json"
            self._offsets = LocalFileOffsetStore(path)
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
        strategy: AllocationStrategy
        if callable(s.allocation):
            strategy = s.allocation
        else:
            strategy = strategy_named(
                s.allocation,
                queues=(
                    MessageQueue(self._wire_topic(q.topic), q.broker_name, q.queue_id)
                    for q in s.allocation_queues
                ),
                virtual_nodes=s.consistent_hash_virtual_nodes,
            )
        self._rebalancer = Rebalancer(
            client=client,
            group=self._group,
            host=self,
            offsets=self._offsets,
            strategy=strategy,
            broadcasting=not self._clustering,
            consume_from=s.consume_from,
            locker=self._locks,
        )
        for topic in self._subscriptions:
            self._limits[topic] = self._flow_limits(topic, 1)
        self._rebalance_timer = Periodic(
            self._rebalance, s.rebalance_interval, name="rebalance", run_first=False
        )
        self._heartbeat_timer = Periodic(
            self._send_heartbeats, s.heartbeat_interval, name="heartbeat", run_first=False
        )
        self._route_timer = Periodic(
            self._refresh_routes, s.route_refresh_interval, name="route refresh", run_first=False
        )
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

    async def close(self) -> None:
        """Shut down gracefully (see the module docs); safe to call more than once.

        Raises:
            Nothing: a crash of the consumer is re-raised by :meth:`wait_closed` instead.
        """
        self._closing = True
        if self._runner is None:
            return
        self._stop.set()
        with contextlib.suppress(BaseException):
            await asyncio.shield(self._runner)

    async def wait_closed(self) -> None:
        """Wait until the consumer has stopped (closed, or crashed).

        Raises:
            BaseExceptionGroup: the consumer crashed on an unexpected error (a bug), which
                it also logged.
        """
        if self._runner is None:
            return
        with contextlib.suppress(BaseException):
            await asyncio.shield(self._runner)
        if self._crash is not None:
            self._crash_reported = True
            raise self._crash

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
        if exc is None and self._crash is not None and not self._crash_reported:
            self._crash_reported = True
            raise self._crash

    def _cleanup_timeout(self) -> float:
        return max(3.0, self.settings.request_timeout)

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        assert self._tg is not None
        task = self._tg.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(self, ready: asyncio.Future[None]) -> None:
        """The supervisor: owns the task group from start-up to the end of shutdown."""
        client = self._client
        phase = "starting"
        start_error: Exception | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                client.start(tg.create_task)
                try:
                    await self._startup()
                except Exception as exc:
                    start_error = exc
                    raise
                ready.set_result(None)
                log.info(
                    "consumer %s (%s) started with %d queue(s)",
                    self._group,
                    client.client_id,
                    len(self._held),
                )
                phase = "running"
                await self._stop.wait()
                phase = "stopping"
                await self._shutdown()
                phase = "stopped"
                for task in list(self._tasks):
                    task.cancel()
        except BaseException as exc:
            if not ready.done():
                # Start-up failed: the error goes to start()'s caller, unwrapped if it was
                # raised by a start-up step, as the task group's error if a task crashed.
                if start_error is not None:
                    ready.set_exception(start_error)
                elif isinstance(exc, asyncio.CancelledError):
                    ready.cancel()
                else:
                    ready.set_exception(exc)
            elif phase != "stopped" and not isinstance(exc, asyncio.CancelledError):
                # A task of the group failed on something unexpected: a bug. Be loud.
                self._crash = exc
                log.error("consumer %s crashed", self._group, exc_info=exc)
            if phase != "stopped":
                await self._emergency_cleanup(flush=phase != "starting")
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._tg = None
            self._closing = True

    async def _emergency_cleanup(self, *, flush: bool) -> None:
        # The group died or start-up failed: keep what finished, leave the group, disconnect.
        timeout = self._cleanup_timeout()
        if flush:
            await bounded_cleanup(self._flush_offsets(), timeout=timeout, what="flush offsets")
        await self._unlock_all()
        await bounded_cleanup(self._unregister(), timeout=timeout, what="unregister consumer")
        await self._client.close()

    # -- start-up -----------------------------------------------------------------------------

    async def _startup(self) -> None:
        self._start_wall = int(time.time() * 1000)
        await self._offsets.load()
        await self._refresh_routes(at_start=True)
        await self._send_heartbeats(at_start=True)
        if any(self._client.route(t) is None for t in self._subscriptions):
            # A Java broker creates %RETRY%<group> when the first heartbeat names the group.
            await self._refresh_routes()
        if isinstance(self._service, ConcurrentConsumeService):
            for i in range(self.settings.concurrency):
                self._spawn(self._service.worker(), name=f"consume worker {i}")
        await self._rebalance()
        self._rebalance_task = self._spawn(self._rebalance_timer.run(), name="rebalance")
        if self._lock_timer is not None:
            self._lock_task = self._spawn(self._lock_timer.run(), name="lock renewal")
        self._heartbeat_task = self._spawn(self._heartbeat_timer.run(), name="heartbeat")
        self._spawn(self._route_timer.run(), name="route refresh")
        self._spawn(self._persist_timer.run(), name="persist offsets")
        if self._clean_timer is not None:
            self._spawn(self._clean_timer.run(), name="consume clean-up")
        self._client.on_new_brokers = self._on_new_brokers

    def _on_new_brokers(self, names: set[str]) -> None:
        if not self._closing:
            self._heartbeat_timer.wake()

    # -- periodic work ------------------------------------------------------------------------

    async def _refresh_routes(self, *, at_start: bool = False) -> None:
        client = self._client
        changed = False
        unreachable: list[TransportError] = []
        for topic in self._subscriptions:
            before = client.route(topic)
            try:
                route = await client.fetch_route(topic)
            except TopicNotExistError:
                log.log(
                    logging.DEBUG if topic.startswith(RETRY_PREFIX) else logging.WARNING,
                    "topic %s has no route yet",
                    topic,
                )
                continue
            except (TransportError, BrokerError) as exc:
                # At start the caller gets the error itself; later, the log is all there is.
                level = logging.DEBUG if at_start else logging.WARNING
                log.log(level, "route of %s not refreshed: %s", topic, exc)
                if isinstance(exc, TransportError):
                    unreachable.append(exc)
                continue
            if before is None or before.subscribe_queues(topic) != route.subscribe_queues(topic):
                changed = True
        if at_start and unreachable and len(unreachable) == len(self._subscriptions):
            raise unreachable[0]  # no name server answered: a start-up error
        if changed and self._runner is not None and not at_start:
            self._rebalance_timer.wake()

    def _heartbeat_data(self) -> HeartbeatData:
        s = self.settings
        if s.consume_from == "first":
            where = "CONSUME_FROM_FIRST_OFFSET"
        elif s.consume_from == "last":
            where = "CONSUME_FROM_LAST_OFFSET"
        else:
            where = "CONSUME_FROM_TIMESTAMP"
        consumer = ConsumerData(
            group_name=self._group,
            consume_type="CONSUME_PASSIVELY",
            message_model="CLUSTERING" if self._clustering else "BROADCASTING",
            consume_from_where=where,
            subscriptions=tuple(sub.data() for sub in self._subscriptions.values()),
        )
        return HeartbeatData(client_id=self._client.client_id, consumers=(consumer,))

    async def _send_heartbeats(self, *, at_start: bool = False) -> None:
        client = self._client
        data = self._heartbeat_data()
        addrs = client.all_broker_addresses()
        errors: list[RocketError] = []
        for addr in addrs:
            try:
                await client.heartbeat(addr, data)
            except (TransportError, BrokerError) as exc:
                errors.append(exc)
                log.warning("heartbeat to %s failed: %s", addr, exc)
        if at_start and addrs and len(errors) == len(addrs):
            raise errors[0]

    async def _rebalance(self) -> None:
        if self._closing:
            return
        async with self._table_lock:
            await self._rebalancer.run_once(list(self._subscriptions))
        self._stats.rebalances += 1

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
            await bounded_cleanup(
                self._locks.unlock(sorted(mqs)),
                timeout=self._cleanup_timeout(),
                what="unlock orderly queues",
            )

    async def _unregister(self) -> None:
        client = self._client
        for addr in client.all_broker_addresses():
            try:
                await client.unregister_client(addr, consumer_group=self._group)
            except (TransportError, BrokerError) as exc:
                log.debug("unregister from %s failed: %s", addr, exc)

    # -- queues (QueueHost) -------------------------------------------------------------------

    def held(self) -> list[MessageQueue]:
        """The queues this member holds now."""
        return list(self._held)

    def start_queue(self, mq: MessageQueue, offset: int, *, locked_at: float | None = None) -> None:
        """Start holding ``mq`` (rebalancer callback); ``locked_at``: when its granted lock
        request was sent (orderly clustering)."""
        pq = ProcessQueue(mq, now=asyncio.get_running_loop().time())
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
        self._held[mq] = _Held(pq, task)

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
        # RebalancePushImpl.messageQueueChanged: a topic threshold is shared by its queues.
        s = self.settings
        n = max(queues, 1)
        count = s.pull_threshold_for_queue
        if s.pull_threshold_for_topic >= 0:
            count = max(1, s.pull_threshold_for_topic // n)
        mib = s.pull_threshold_size_for_queue
        if s.pull_threshold_size_for_topic >= 0:
            mib = max(1, s.pull_threshold_size_for_topic // n)
        span = s.max_span if self._service.uses_span_limit else None
        return FlowLimits(max_count=count, max_mib=mib, max_span=span)

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
        # 1. No more rebalancing or lock renewal: the held set is final. (stop() as well as
        #    cancel(): a cancellation lost inside 3.11's wait_for must not keep a loop alive.)
        self._rebalance_timer.stop()
        self._rebalance_task.cancel()
        if self._lock_task is not None:
            if self._lock_timer is not None:
                self._lock_timer.stop()
            self._lock_task.cancel()
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
        await bounded_cleanup(
            self._flush_offsets(), timeout=self._cleanup_timeout(), what="flush offsets"
        )
        await self._unlock_all()
        self._heartbeat_timer.stop()
        self._heartbeat_task.cancel()
        await bounded_cleanup(
            self._unregister(), timeout=self._cleanup_timeout(), what="unregister consumer"
        )
        # 5. Connections closed.
        await client.close()
        log.info("consumer %s closed", self._group)

    # -- requests from brokers ----------------------------------------------------------------

    async def _on_ids_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        log.debug("consumer ids of %s changed; rebalancing now", self._group)
        self._rebalance_timer.wake()
        return

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
        status = {
            topic: TopicConsumeStatus(
                pull_rt=t.pull_rt_ms,
                pull_tps=t.pull_tps,
                consume_rt=t.consume_rt_ms,
                consume_ok_tps=t.consume_ok_tps,
                consume_failed_tps=t.consume_failed_tps,
                consume_failed_msgs=t.consumed_failed_total,
            )
            for topic, t in self._stats.topic_statistics(now).items()
        }
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
            # ConsumerResetOffset (MQClientInstance.resetOffset): drop the topic's queues,
            # store the new offsets, let the next rebalance re-add them from there.
            for mq in [mq for mq in self._held if mq.topic == header.topic]:
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
                octx = OrderlyContext(mq, suspend_millis=round(self.settings.suspend_delay * 1000))
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
        for mq, held in self._held.items():
            snap = held.pq.snapshot()
            queues[mq] = QueueStatistics(
                queue=mq,
                cached_count=snap.cached_count,
                cached_bytes=snap.cached_bytes,
                span=snap.span,
                committed_offset=self._offsets.read(mq),
                last_pull_time=snap.last_pull_time + offset,
                last_consume_time=snap.last_consume_time + offset,
                locked=self._locking and held.pq.lock_valid(loop_now, self.settings.lock_expiry),
                last_lock_time=held.pq.last_lock_time + offset if held.pq.last_lock_time else 0.0,
            )
        st = self._stats
        return ConsumerStatistics(
            topics=st.topic_statistics(loop_now),
            queues=queues,
            pull_errors=st.pull_errors,
            flow_control_pauses=st.flow_control_pauses,
            send_back_failures=st.send_back_failures,
            rebalances=st.rebalances,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closing else "started" if self._started else "new"
        return f"PushConsumer(group={self._group!r}, {state}, queues={len(self._held)})"
