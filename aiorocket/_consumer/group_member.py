"""What every member of a consumer group does, push or pull (the start/shutdown skeleton both
Java ``DefaultMQPushConsumerImpl`` and ``DefaultLitePullConsumerImpl`` share): names, the
member's lifecycle on a `Service` (a supervisor task owning the member's task group), joining
its brokers through its `Membership` (routes, heartbeats, client id, unregistering), and the
one shutdown whose steps each kind fills in (`ShutdownSteps`).

`GroupMember` is the base of [`PushConsumer`][aiorocket.PushConsumer] and
[`PullConsumer`][aiorocket.PullConsumer]. It runs the lifecycle docs/architecture.md describes:
``start()`` builds the parts (no I/O), starts one supervisor task holding a task group, and returns
once the subclass's start-up (routes, first heartbeat, first rebalance) finished, so start-up errors
reach the caller; ``close()`` runs the subclass's graceful shutdown; a bug in any task crashes
the group, is logged, and is re-raised by `wait_closed` and by leaving
``async with``. Subclasses build their parts (and with them the collaborators' frozen
`ConsumerContext`) and their start-up after `_join`; the shutdown's order is this class's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, ClassVar

from aiorocket._client.instance import ClientInstance
from aiorocket._client.membership import Membership
from aiorocket._concurrency import Periodic, Service, ServiceOwner, bounded
from aiorocket._consumer.context import ConsumerContext
from aiorocket._consumer.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from aiorocket._consumer.process_queue import FlowLimits
from aiorocket._consumer.rebalance import Rebalancer, describe_queues
from aiorocket._consumer.shutdown import ShutdownSteps
from aiorocket._consumer.stats import StatsRecorder
from aiorocket._consumer.subscription import Subscription
from aiorocket._names import retry_topic, validate_group, wrap_namespace
from aiorocket._protocol.allocation import AllocationStrategy, strategy_named
from aiorocket._protocol.bodies import ConsumerData, HeartbeatData
from aiorocket._trace import TraceDispatcher
from aiorocket.errors import (
    BrokerError,
    ClientClosedError,
    ConfigurationError,
    TransportError,
    broker_error,
)
from aiorocket.models import MessageQueue, validate_name
from aiorocket.settings import ConsumerSettings

__all__ = ["GroupMember", "flow_limits"]

log = logging.getLogger("aiorocket.consumer")

#: broadcasting consumers without instance_name on one host (files DEFAULT, DEFAULT-2, ...)
_DEFAULT_SLOTS = 64


def flow_limits(settings: ConsumerSettings, queues: int, *, span: bool) -> FlowLimits:
    """The flow limits of one queue of a topic held ``queues`` times
    (``RebalancePushImpl.messageQueueChanged``: a topic-wide threshold is split over its
    queues); ``span``: whether the span limit applies (not to orderly consumption)."""
    s = settings
    n = max(queues, 1)
    count = s.pull_threshold_for_queue
    if s.pull_threshold_for_topic >= 0:
        count = max(1, s.pull_threshold_for_topic // n)
    mib = s.pull_threshold_size_for_queue
    if s.pull_threshold_size_for_topic >= 0:
        mib = max(1, s.pull_threshold_size_for_topic // n)
    return FlowLimits(max_count=count, max_mib=mib, max_span=s.max_span if span else None)


class GroupMember(ServiceOwner):
    """The group-membership half of a consumer (see the module docs).

    Subclasses implement `_check_startable`, `_build` (which sets `_steps`), `_startup`
    and `held`; the shutdown is this class's, in the order of
    [`ShutdownSteps`][aiorocket._consumer.shutdown.ShutdownSteps].
    """

    #: ``ConsumerData.consumeType`` in heartbeats: the push consumer is fed by the client
    #: (CONSUME_PASSIVELY), a pull consumer's application asks (CONSUME_ACTIVELY).
    _consume_type: ClassVar[str] = "CONSUME_PASSIVELY"
    #: what the logs call this kind of consumer
    _kind: ClassVar[str] = "consumer"

    def __init__(self, settings: ConsumerSettings) -> None:
        self.settings = settings
        s = settings
        validate_group(s.group, "consumer group")
        self._group = wrap_namespace(s.namespace, s.group)
        validate_name(self._group, "consumer group")
        self._clustering = s.message_model == "clustering"
        self._retry_topic = retry_topic(self._group)
        self._subscriptions: dict[str, Subscription] = {}
        self._lifecycle = Service(
            f"consumer {self._group}",
            startup=self._start_up,
            shutdown=self._shutdown,
            abort=self._abort,
            finalize=self._finalize,
            cleanup_timeout=self._cleanup_timeout(),
            logger=log,
        )
        self._tasks: set[asyncio.Task[Any]] = self._lifecycle.tasks
        self._start_wall = 0
        #: the message trace's sender (``trace=True``; push and pull consumers build it)
        self.tracer: TraceDispatcher | None = None
        # Built by start() (the subclass's _build): the client, stores and timers.
        self._client: ClientInstance
        self._stats: StatsRecorder
        self._offsets: OffsetStore
        self._rebalancer: Rebalancer
        self._persist_timer: Periodic
        #: routes, heartbeats, client id, unregistering
        self._membership: Membership
        #: what this kind of consumer does at each step of its shutdown (set by `_build`)
        self._steps = ShutdownSteps()

    # -- configuration ------------------------------------------------------------------------

    @property
    def group(self) -> str:
        """The consumer group (without namespace)."""
        return self.settings.group

    @property
    def client_id(self) -> str:
        """This member's client id (``<ip>@<instance>``); empty before start."""
        return self._client.client_id if self._started else ""

    @property
    def _started(self) -> bool:
        """Whether `start` was called (successful or not)."""
        return self._lifecycle.started

    @property
    def _closing(self) -> bool:
        """Whether a close was asked for, or the member stopped (closed, crashed)."""
        return self._lifecycle.closing

    def _check_not_started(self, what: str) -> None:
        if self._started or self._closing:
            raise ConfigurationError(f"cannot {what} after the consumer started")

    def _wire_topic(self, topic: str) -> str:
        return wrap_namespace(self.settings.namespace, topic)

    def _require_running(self) -> None:
        """The check of a consumer the application drives (pull, simple, lite): not started
        is a usage error, closed (or crashed) a state.

        Raises:
            ConfigurationError: never started.
            ClientClosedError: closed, or crashed (the crash as its cause).
        """
        if not self._started:
            raise ConfigurationError("the consumer has not been started")
        if self._closing:
            if self.crash is not None:
                raise ClientClosedError("the consumer crashed") from self.crash
            raise ClientClosedError("the consumer is closed")

    # -- what subclasses provide --------------------------------------------------------------

    def _check_startable(self) -> None:
        """Raise [`ConfigurationError`][aiorocket.errors.ConfigurationError] when the member cannot
        start as configured; may complete the configuration (the retry subscription)."""
        raise NotImplementedError

    def _build(self) -> None:
        """Create the parts (no I/O, nothing started)."""
        raise NotImplementedError

    async def _startup(self) -> None:
        """Routes, first heartbeat, first rebalance, background tasks (in the task group)."""
        raise NotImplementedError

    def _new_membership(self, on_routes_changed: Callable[[], None] = lambda: None) -> None:
        """Create the [`Membership`][aiorocket._client.membership.Membership] (heartbeat and
        route-update tasks) every member runs; `_startup` starts it. ``on_routes_changed``:
        a member holding queues rebalances."""
        s = self.settings
        self._membership = Membership(
            self._client,
            group=self._group,
            role="consumer",
            settings=s,
            heartbeat_data=self._heartbeat_data,
            spawn=self._spawn,
            closing=lambda: self._closing,
            topics=self._subscriptions.keys,
            on_routes_changed=on_routes_changed,
            missing_route_retry=s.missing_route_retry,
        )

    def held(self) -> list[MessageQueue]:
        """The queues this member holds now."""
        raise NotImplementedError

    # -- parts shared by the subclasses' _build -----------------------------------------------

    def _new_offset_store(self, client: ClientInstance) -> OffsetStore:
        """Clustering: offsets on the broker; broadcasting: a local file per consumer and
        group (``<offset_store_dir>/<ip>@<instance>/<group>/offsets.json``), locked while in
        use. Without ``instance_name`` the instance is ``DEFAULT``, or ``DEFAULT-2``,
        ``DEFAULT-3``, ... when live consumers on this host hold the earlier ones (several
        processes, ``aiorocket run --workers N``): unique among live consumers, and the same
        files again after a restart."""
        s = self.settings
        if self._clustering:
            return RemoteOffsetStore(client, self._group)

        def path(instance: str) -> Path:
            return s.offset_store_dir / f"{client.ip}@{instance}" / self._group / "offsets.json"

        return LocalFileOffsetStore(
            path(s.instance_name or "DEFAULT"),
            alternatives=()
            if s.instance_name
            else [path(f"DEFAULT-{i}") for i in range(2, _DEFAULT_SLOTS + 1)],
            cluster=";".join(sorted(s.namesrv)),
            instance_name=s.instance_name,
        )

    def _allocation_strategy(self) -> AllocationStrategy:
        """The configured allocation strategy (``by_config`` queues get the namespace)."""
        s = self.settings
        strategy: AllocationStrategy
        if callable(s.allocation):
            strategy = s.allocation
            return strategy
        return strategy_named(
            s.allocation,
            queues=(
                MessageQueue(self._wire_topic(q.topic), q.broker_name, q.queue_id)
                for q in s.allocation_queues
            ),
            virtual_nodes=s.consistent_hash_virtual_nodes,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start consuming; returns after routes, the first heartbeat and the first rebalance.

        Prefer ``async with consumer:``.

        Raises:
            ConfigurationError: the consumer is not fully configured (no listener, no
                subscription, ...).
            ClientClosedError: the consumer was closed before.
            ConnectError: no name server could be connected within ``connect_timeout`` (each
                address tried is named).
            TransportError: no name server or broker could be reached at start.
            RocketError: another start-up failure.
        """
        if self._closing:
            raise ClientClosedError("the consumer is closed")
        if not self._started:
            self._check_startable()
            self._build()
        await self._lifecycle.start()

    async def close(self) -> None:
        """Shut down gracefully (see the module docs); safe to call more than once.

        Raises:
            Exception: the shutdown itself failed unexpectedly (its last steps, flushing
                offsets, unlocking and unregistering, log their failures instead); a crash of
                the consumer is re-raised by `wait_closed`.
        """
        # Shielded, bounded by shutdown_grace and the cleanup timeouts.
        await self._lifecycle.close()

    def _never_started(self) -> str | None:
        if self._started or self._closing:
            return None
        return f"{type(self).__name__} of group {self.settings.group!r}"

    def _cleanup_timeout(self) -> float:
        return max(3.0, self.settings.request_timeout)

    async def _cleanup(self, step: Awaitable[object], what: str) -> bool:
        """Await one last step of a shutdown (flush offsets, unlock queues, unregister):
        shielded and bounded by the cleanup timeout (`bounded`); returns whether the
        step completed."""
        return await bounded(step, what, self._cleanup_timeout(), log)

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        return self._lifecycle.spawn(coro, name)

    async def _start_up(self) -> None:
        """The supervisor's start-up: the client's inbound requests run in the task group."""
        client = self._client
        client.start(self._lifecycle.task_group.create_task)
        await client.connect_namesrv()
        await self._startup()
        log.info(
            "consumer %s started as %s (%s): %s",
            self._group,
            client.client_id,
            self._describe_mode(),
            self._describe_holdings(),
        )

    def _describe_mode(self) -> str:
        s = self.settings
        order = "orderly" if s.orderly else "concurrently"
        return f"{s.message_model}, {order}, {s.consume_mode}"

    def _describe_holdings(self) -> str:
        """Each subscribed topic with its filter and the queues held of it (the start's log)."""
        held = self.held()
        parts = []
        for topic, sub in self._subscriptions.items():
            mine = [mq for mq in held if mq.topic == topic]
            where = f" on {describe_queues(mine, topics=False)}" if mine else ""
            parts.append(f"{topic} {sub.data().sub_string!r}{where}")
        return "; ".join(parts) or "nothing subscribed"

    async def _shutdown(self) -> None:
        """The graceful shutdown (in the task group), in the order of `ShutdownSteps`."""
        steps = self._steps
        steps.stop_assigning()
        await steps.stop_feeding()
        await steps.drain(self.settings.shutdown_grace)
        # Everything else the member runs stops, but the heartbeats: the member stays
        # registered until it unregisters.
        self._membership.stop_refresh()
        # The tracer first: its task may be sending a batch that cancelling would lose.
        if self.tracer is not None:
            await self._cleanup(self.tracer.close(), "flush traces")
        for task in list(self._tasks):
            if task is not self._membership.heartbeat_task:
                task.cancel()
        await self._leave(flush=True)
        log.info("%s %s closed", self._kind, self._group)

    async def _abort(self, started: bool) -> None:
        # The group died or start-up failed: keep what finished, leave the group, disconnect.
        self._steps.stop_assigning()
        await self._leave(flush=started)

    async def _leave(self, *, flush: bool) -> None:
        """The last steps: flush offsets, release, unregister, close the connections."""
        steps = self._steps
        if flush and steps.flush_offsets is not None:
            await self._cleanup(steps.flush_offsets(), "flush offsets")
        await steps.release()
        await self._cleanup(self._membership.leave(), "unregister consumer")
        await self._client.close()

    def _finalize(self) -> None:
        self._steps.finalize()

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
            consume_type=self._consume_type,
            message_model="CLUSTERING" if self._clustering else "BROADCASTING",
            consume_from_where=where,
            subscriptions=tuple(sub.data() for sub in self._subscriptions.values()),
        )
        return HeartbeatData(client_id=self._client.client_id, consumers=(consumer,))

    async def _check_client_config(self) -> None:
        """Before the first heartbeat, ask every broker whether it serves each SQL92
        subscription (``MQClientInstance.checkClientInBroker``): a broker without
        ``enablePropertyFilter`` refuses, and the start fails with its answer instead of
        every pull failing later. An unreachable broker is left to the heartbeat's checks.

        Raises:
            BrokerError: a broker refused a subscription.
        """
        client = self._client
        subs = [sub for sub in self._subscriptions.values() if sub.sql is not None]
        if not subs:
            return
        for addr in client.all_broker_addresses():
            for sub in subs:
                try:
                    await client.check_client_config(addr, self._group, sub.data())
                except TransportError as exc:
                    log.warning("subscription check at %s failed: %s", addr, exc)
                except BrokerError as exc:
                    raise broker_error(
                        exc.code,
                        f"broker {addr} refused the SQL92 subscription to {sub.topic} "
                        f"({sub.sql!r}): {exc.remark}",
                    ) from exc

    async def _join(self, *, heartbeats: bool, claim_id: bool = False) -> None:
        """The start-up's first steps, the same for every kind of consumer: the routes; then,
        for a member its brokers hear (``heartbeats``), the SQL92 check, a unique client id
        (``claim_id``: see
        [`claim_client_id`][aiorocket._client.membership.Membership.claim_client_id]), the
        first heartbeat, and the routes the heartbeat created.

        Raises:
            TransportError: no name server or broker could be reached.
            BrokerError: a broker refused a subscription.
        """
        membership = self._membership
        await membership.refresh_routes(at_start=True)
        if not heartbeats:
            return
        await self._check_client_config()
        if claim_id:
            await membership.claim_client_id()
        await membership.send_heartbeats(at_start=True)
        if membership.missing_routes():
            # A Java broker creates %RETRY%<group> when the first heartbeat names the group.
            await membership.refresh_routes()

    # -- the collaborators' context -----------------------------------------------------------

    def _new_context(self, wake_rebalance: Callable[[], None]) -> ConsumerContext:
        """The context of this member's collaborators (once the client, offsets and stats
        are built; the start's wall clock is the running info's start time)."""
        self._start_wall = int(time.time() * 1000)
        return ConsumerContext(
            client=self._client,
            group=self._group,
            settings=self.settings,
            subscriptions=self._subscriptions,
            offsets=self._offsets,
            stats=self._stats,
            consume_type=self._consume_type,
            start_wall=self._start_wall,
            spawn=self._spawn,
            wake_rebalance=wake_rebalance,
            cleanup=self._cleanup,
            closing=lambda: self._closing,
        )
