"""What every member of a consumer group does, whatever feeds it (the start/shutdown skeleton
both Java ``DefaultMQPushConsumerImpl`` and ``DefaultLitePullConsumerImpl`` share): names, the
member's lifecycle on a `Service` (a supervisor task owning the member's task group), joining
its brokers through its `Membership` (routes, heartbeats, client id, unregistering), and the
one shutdown whose steps each kind fills in (`ShutdownSteps`).

A consumer is composed, not derived: it holds a `GroupMember` and hands it a `ConsumerKind`,
what its kind of consumer plugs in (its checks, its parts, its start-up, what it holds).
[`PushConsumer`][aiorocket.PushConsumer], [`PullConsumer`][aiorocket.PullConsumer],
[`SimpleConsumer`][aiorocket.SimpleConsumer] and [`LiteConsumer`][aiorocket.LiteConsumer] do so;
`MemberOwner` gives each the same public lifecycle from its member.

The lifecycle docs/architecture.md describes: ``start()`` builds the parts (no I/O), starts
one supervisor task holding a task group, and returns once the kind's start-up (routes, first
heartbeat, first rebalance) finished, so start-up errors reach the caller; ``close()`` runs the
graceful shutdown in the order of `ShutdownSteps`, each step the kind's; a bug in any task
crashes the group, is logged, and is re-raised by ``wait_closed`` and by leaving
``async with``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiorocket._client.instance import ClientInstance
from aiorocket._client.membership import Membership
from aiorocket._concurrency import Service, ServiceOwner, bounded
from aiorocket._consumer.context import ConsumerContext
from aiorocket._consumer.offset_store import LocalFileOffsetStore, OffsetStore, RemoteOffsetStore
from aiorocket._consumer.process_queue import FlowLimits
from aiorocket._consumer.rebalance import describe_queues
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

__all__ = ["ConsumerKind", "GroupMember", "MemberOwner", "MemberParts", "flow_limits"]

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


@dataclass(frozen=True, slots=True)
class MemberParts:
    """What a kind's ``build`` made that the member itself runs."""

    #: the consumer's client (connections, routes, requests)
    client: ClientInstance
    #: routes, heartbeats, client id, unregistering (`GroupMember.new_membership`)
    membership: Membership
    #: what this kind does at each step of its shutdown
    steps: ShutdownSteps
    #: the message trace's sender, flushed by the shutdown before tasks are cancelled
    tracer: TraceDispatcher | None = None


@dataclass(frozen=True, slots=True)
class ConsumerKind:
    """What one kind of consumer plugs into its `GroupMember`."""

    #: what the logs call this kind of consumer ("pull consumer")
    name: str
    #: ``ConsumerData.consumeType`` in heartbeats: a push consumer is fed by the client
    #: (CONSUME_PASSIVELY), the others' application asks (CONSUME_ACTIVELY)
    consume_type: str
    #: raises [`ConfigurationError`][aiorocket.errors.ConfigurationError] when the consumer
    #: cannot start as configured; may complete the configuration (the retry subscription)
    check_startable: Callable[[], None]
    #: creates the parts (no I/O, nothing started)
    build: Callable[[], MemberParts]
    #: the kind's start-up in the task group: joining (`GroupMember.join`), first
    #: rebalance, background tasks
    startup: Callable[[], Awaitable[None]]
    #: the queues the consumer holds now
    held: Callable[[], list[MessageQueue]]
    #: how the start's log line describes the mode (None: model, order and consume mode)
    describe_mode: Callable[[], str] | None = None


class GroupMember:
    """The group-membership half of a consumer (see the module docs): its names and
    subscriptions, its `Service`, its joining and its shutdown.

    Args:
        settings: the consumer's settings.
        kind: what the consumer's kind plugs in.

    Raises:
        ConfigurationError: a bad group name.
    """

    def __init__(self, settings: ConsumerSettings, kind: ConsumerKind) -> None:
        self.settings = settings
        self.kind = kind
        validate_group(settings.group, "consumer group")
        #: the consumer group with its namespace (the name brokers know)
        self.group = wrap_namespace(settings.namespace, settings.group)
        validate_name(self.group, "consumer group")
        self.clustering = settings.message_model == "clustering"
        #: ``%RETRY%<group>``
        self.retry_topic = retry_topic(self.group)
        #: the subscribed wire topics (fixed once started)
        self.subscriptions: dict[str, Subscription] = {}
        #: the supervisor task and its task group (the owner's ``start``/``close``/...)
        self.lifecycle = Service(
            f"consumer {self.group}",
            startup=self._start_up,
            shutdown=self._shutdown,
            abort=self._abort,
            finalize=self._finalize,
            cleanup_timeout=self._cleanup_timeout(),
            logger=log,
        )
        self._parts: MemberParts | None = None

    # -- state --------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether `start` was called (successful or not)."""
        return self.lifecycle.started

    @property
    def closing(self) -> bool:
        """Whether a close was asked for, or the member stopped (closed, crashed)."""
        return self.lifecycle.closing

    @property
    def parts(self) -> MemberParts:
        """What the kind's ``build`` made.

        Raises:
            ConfigurationError: the consumer has not been started.
        """
        if self._parts is None:
            raise ConfigurationError("the consumer has not been started")
        return self._parts

    @property
    def membership(self) -> Membership:
        """Routes, heartbeats, client id, unregistering (once started)."""
        return self.parts.membership

    @property
    def client_id(self) -> str:
        """This member's client id (``<ip>@<instance>``); empty before start."""
        return self._parts.client.client_id if self._parts is not None else ""

    def check_not_started(self, what: str) -> None:
        """Refuse a configuration step once started.

        Raises:
            ConfigurationError: the consumer was started (or closed) already.
        """
        if self.started or self.closing:
            raise ConfigurationError(f"cannot {what} after the consumer started")

    def wire_topic(self, topic: str) -> str:
        """``topic`` with the consumer's namespace (the name brokers know)."""
        return wrap_namespace(self.settings.namespace, topic)

    def require_running(self) -> None:
        """The check of a consumer the application drives (pull, simple, lite): not started
        is a usage error, closed (or crashed) a state.

        Raises:
            ConfigurationError: never started.
            ClientClosedError: closed, or crashed (the crash as its cause).
        """
        if not self.started:
            raise ConfigurationError("the consumer has not been started")
        if self.closing:
            if self.lifecycle.crash is not None:
                raise ClientClosedError("the consumer crashed") from self.lifecycle.crash
            raise ClientClosedError("the consumer is closed")

    def never_started(self, owner: object) -> str | None:
        """What a never-started warning names (``None`` once started or closed)."""
        if self.started or self.closing:
            return None
        return f"{type(owner).__name__} of group {self.settings.group!r}"

    # -- parts the kinds' builds share --------------------------------------------------------

    def new_membership(
        self, client: ClientInstance, on_routes_changed: Callable[[], None] = lambda: None
    ) -> Membership:
        """The [`Membership`][aiorocket._client.membership.Membership] (heartbeat and
        route-update tasks) every member runs; the kind's start-up starts it.
        ``on_routes_changed``: a member holding queues rebalances."""
        s = self.settings
        return Membership(
            client,
            group=self.group,
            role="consumer",
            settings=s,
            heartbeat_data=self._heartbeat_data,
            spawn=self.spawn,
            closing=lambda: self.closing,
            topics=self.subscriptions.keys,
            on_routes_changed=on_routes_changed,
            missing_route_retry=s.missing_route_retry,
        )

    def new_offset_store(self, client: ClientInstance) -> OffsetStore:
        """Clustering: offsets on the broker; broadcasting: a local file per consumer and
        group (``<offset_store_dir>/<ip>@<instance>/<group>/offsets.json``), locked while in
        use. Without ``instance_name`` the instance is ``DEFAULT``, or ``DEFAULT-2``,
        ``DEFAULT-3``, ... when live consumers on this host hold the earlier ones (several
        processes, ``aiorocket run --workers N``): unique among live consumers, and the same
        files again after a restart."""
        s = self.settings
        if self.clustering:
            return RemoteOffsetStore(client, self.group)

        def path(instance: str) -> Path:
            return s.offset_store_dir / f"{client.ip}@{instance}" / self.group / "offsets.json"

        return LocalFileOffsetStore(
            path(s.instance_name or "DEFAULT"),
            alternatives=()
            if s.instance_name
            else [path(f"DEFAULT-{i}") for i in range(2, _DEFAULT_SLOTS + 1)],
            cluster=";".join(sorted(s.namesrv)),
            instance_name=s.instance_name,
        )

    def allocation_strategy(self) -> AllocationStrategy:
        """The configured allocation strategy (``by_config`` queues get the namespace)."""
        s = self.settings
        strategy: AllocationStrategy
        if callable(s.allocation):
            strategy = s.allocation
            return strategy
        return strategy_named(
            s.allocation,
            queues=(
                MessageQueue(self.wire_topic(q.topic), q.broker_name, q.queue_id)
                for q in s.allocation_queues
            ),
            virtual_nodes=s.consistent_hash_virtual_nodes,
        )

    def new_context(
        self,
        client: ClientInstance,
        offsets: OffsetStore,
        stats: StatsRecorder,
        wake_rebalance: Callable[[], None],
    ) -> ConsumerContext:
        """The context of the consumer's collaborators (the start's wall clock is the
        running info's start time)."""
        return ConsumerContext(
            client=client,
            group=self.group,
            settings=self.settings,
            subscriptions=self.subscriptions,
            offsets=offsets,
            stats=stats,
            consume_type=self.kind.consume_type,
            start_wall=int(time.time() * 1000),
            spawn=self.spawn,
            wake_rebalance=wake_rebalance,
            cleanup=self.cleanup,
            closing=lambda: self.closing,
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Check, build and start the member (see `MemberOwner.start`).

        Raises:
            ConfigurationError: the consumer is not fully configured.
            ClientClosedError: the consumer was closed before.
            Exception: what the start-up raised.
        """
        if self.closing:
            raise ClientClosedError("the consumer is closed")
        if not self.started:
            self.kind.check_startable()
            self._parts = self.kind.build()
        await self.lifecycle.start()

    def _cleanup_timeout(self) -> float:
        return max(3.0, self.settings.request_timeout)

    async def cleanup(self, step: Awaitable[object], what: str) -> bool:
        """Await one last step of a shutdown (flush offsets, unlock queues, unregister):
        shielded and bounded by the cleanup timeout (`bounded`); returns whether the
        step completed."""
        return await bounded(step, what, self._cleanup_timeout(), log)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` in the member's task group (`Service.spawn`)."""
        return self.lifecycle.spawn(coro, name)

    async def _start_up(self) -> None:
        """The supervisor's start-up: the client's inbound requests run in the task group."""
        client = self.parts.client
        client.start(self.lifecycle.task_group.create_task)
        await client.connect_namesrv()
        await self.kind.startup()
        mode = self.kind.describe_mode() if self.kind.describe_mode else self._describe_mode()
        log.info(
            "consumer %s started as %s (%s): %s",
            self.group,
            client.client_id,
            mode,
            self._describe_holdings(),
        )

    def _describe_mode(self) -> str:
        s = self.settings
        order = "orderly" if s.orderly else "concurrently"
        return f"{s.message_model}, {order}, {s.consume_mode}"

    def _describe_holdings(self) -> str:
        """Each subscribed topic with its filter and the queues held of it (the start's log)."""
        held = self.kind.held()
        parts = []
        for topic, sub in self.subscriptions.items():
            mine = [mq for mq in held if mq.topic == topic]
            where = f" on {describe_queues(mine, topics=False)}" if mine else ""
            parts.append(f"{topic} {sub.data().sub_string!r}{where}")
        return "; ".join(parts) or "nothing subscribed"

    async def _shutdown(self) -> None:
        """The graceful shutdown (in the task group), in the order of `ShutdownSteps`."""
        parts = self.parts
        steps = parts.steps
        steps.stop_assigning()
        await steps.stop_feeding()
        await steps.drain(self.settings.shutdown_grace)
        # Everything else the member runs stops, but the heartbeats: the member stays
        # registered until it unregisters.
        parts.membership.stop_refresh()
        # The tracer first: its task may be sending a batch that cancelling would lose.
        if parts.tracer is not None:
            await self.cleanup(parts.tracer.close(), "flush traces")
        for task in list(self.lifecycle.tasks):
            if task is not parts.membership.heartbeat_task:
                task.cancel()
        await self._leave(flush=True)
        log.info("%s %s closed", self.kind.name, self.group)

    async def _abort(self, started: bool) -> None:
        # The group died or start-up failed: keep what finished, leave the group, disconnect.
        self.parts.steps.stop_assigning()
        await self._leave(flush=started)

    async def _leave(self, *, flush: bool) -> None:
        """The last steps: flush offsets, release, unregister, close the connections."""
        parts = self.parts
        steps = parts.steps
        if flush and steps.flush_offsets is not None:
            await self.cleanup(steps.flush_offsets(), "flush offsets")
        await steps.release()
        await self.cleanup(parts.membership.leave(), "unregister consumer")
        await parts.client.close()

    def _finalize(self) -> None:
        if self._parts is not None:
            self._parts.steps.finalize()

    def _heartbeat_data(self) -> HeartbeatData:
        s = self.settings
        if s.consume_from == "first":
            where = "CONSUME_FROM_FIRST_OFFSET"
        elif s.consume_from == "last":
            where = "CONSUME_FROM_LAST_OFFSET"
        else:
            where = "CONSUME_FROM_TIMESTAMP"
        consumer = ConsumerData(
            group_name=self.group,
            consume_type=self.kind.consume_type,
            message_model="CLUSTERING" if self.clustering else "BROADCASTING",
            consume_from_where=where,
            subscriptions=tuple(sub.data() for sub in self.subscriptions.values()),
        )
        return HeartbeatData(client_id=self.parts.client.client_id, consumers=(consumer,))

    async def _check_client_config(self) -> None:
        """Before the first heartbeat, ask every broker whether it serves each SQL92
        subscription (``MQClientInstance.checkClientInBroker``): a broker without
        ``enablePropertyFilter`` refuses, and the start fails with its answer instead of
        every pull failing later. An unreachable broker is left to the heartbeat's checks.

        Raises:
            BrokerError: a broker refused a subscription.
        """
        client = self.parts.client
        subs = [sub for sub in self.subscriptions.values() if sub.sql is not None]
        if not subs:
            return
        for addr in client.all_broker_addresses():
            for sub in subs:
                try:
                    await client.check_client_config(addr, self.group, sub.data())
                except TransportError as exc:
                    log.warning("subscription check at %s failed: %s", addr, exc)
                except BrokerError as exc:
                    raise broker_error(
                        exc.code,
                        f"broker {addr} refused the SQL92 subscription to {sub.topic} "
                        f"({sub.sql!r}): {exc.remark}",
                    ) from exc

    async def join(self, *, heartbeats: bool, claim_id: bool = False) -> None:
        """The start-up's first steps, the same for every kind of consumer: the routes; then,
        for a member its brokers hear (``heartbeats``), the SQL92 check, a unique client id
        (``claim_id``: see
        [`claim_client_id`][aiorocket._client.membership.Membership.claim_client_id]), the
        first heartbeat, and the routes the heartbeat created.

        Raises:
            TransportError: no name server or broker could be reached.
            BrokerError: a broker refused a subscription.
        """
        membership = self.membership
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


class MemberOwner(ServiceOwner):
    """The public lifecycle every consumer shows, from the `GroupMember` it holds in
    ``self._m`` (set by its constructor, with ``self._lifecycle`` its member's
    ``lifecycle``)."""

    _m: GroupMember
    #: the message trace's sender (``trace=True``), made by the start
    tracer: TraceDispatcher | None

    def _compose(self, settings: ConsumerSettings, kind: ConsumerKind) -> None:
        """The constructor's first step: the member of ``kind`` with these settings."""
        self.settings = settings
        self._m = GroupMember(settings, kind)
        self._lifecycle = self._m.lifecycle
        self.tracer = None

    @property
    def group(self) -> str:
        """The consumer group (without namespace)."""
        return self._m.settings.group

    @property
    def client_id(self) -> str:
        """This consumer's client id (``<ip>@<instance>``); empty before start."""
        return self._m.client_id

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
        await self._m.start()

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
        return self._m.never_started(self)
