"""The push consumer (Java ``DefaultMQPushConsumer`` / ``DefaultMQPushConsumerImpl``).

One supervisor task owns one task group holding everything the consumer runs: route refresh,
heartbeats, rebalance (woken early by NOTIFY_CONSUMER_IDS_CHANGED), offset persistence, the
consume-timeout clean-up, one pull task per held queue, the consume workers and the handlers
of requests brokers send us. Nothing starts in the constructor. ``start()`` (or ``async
with``) returns once routes are known, the first heartbeat went out and the first rebalance
ran, so start-up errors reach the caller. A bug in any task crashes the group; the error is
logged and re-raised by [`PushConsumer.wait_closed`][aiorocket.PushConsumer.wait_closed] and by
leaving ``async with``. The lifecycle is its `GroupMember`'s, as every consumer's;
routes and heartbeats are its `Membership`'s, shared with the producer too.

Shutdown (docs/architecture.md): stop rebalancing (and lock renewal); cancel pulls and put queues
in *draining*; wait up to ``shutdown_grace`` for running handlers; flush offsets, unlock
orderly queues and unregister (shielded, bounded); close connections.

Orderly consumption (``orderly=True``) swaps the consume service for
`OrderlyConsumeService`. In clustering mode it also
runs the ``lock renewal`` task (`lock_renewer`), locks queues before
adding them, pulls and consumes a queue only under a live lock, writes a queue's offset to the
broker only while it holds that lock (a member that was stopped past its lease must not move
the new owner's offset back), and unlocks a dropped queue once its running handler call ended
(later by ``unlock_delay`` if messages were still cached, Java ``unlockDelay``). With
``order_by`` (``"sharding_key"`` or a callable) the same service keeps the order per key
instead of per queue, the keys of a queue running concurrently; locks and offsets are as above.

POP (``consume_mode="pop"``, RocketMQ 5.x): no queues are held; one pop task per broker of
each subscribed topic feeds the same consume service, which acks instead of committing and
retries through the invisible time (`pop_feed`). With
``consume_mode="server"`` each rebalance asks the broker how the group reads each topic
(QUERY_ASSIGNMENT) and pops or pulls accordingly, so ``mqadmin setConsumeMode`` switches it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
import typing
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar, cast

from aiorocket._client.instance import ClientInstance
from aiorocket._client.pop import query_assignment
from aiorocket._concurrency import Periodic
from aiorocket._consumer.broker_requests import PushRequests
from aiorocket._consumer.consume_concurrently import ConcurrentConsumeService, Handler
from aiorocket._consumer.consume_orderly import OrderlyConsumeService, OrderlyHandler
from aiorocket._consumer.group_member import ConsumerKind, MemberOwner, MemberParts
from aiorocket._consumer.hooks import ConsumeHook
from aiorocket._consumer.key_order import key_function
from aiorocket._consumer.lock_renewer import BrokerLocks
from aiorocket._consumer.pop_feed import FeedTarget, PopFeed
from aiorocket._consumer.popping import PopClient
from aiorocket._consumer.queue_table import Pauses, PushQueues
from aiorocket._consumer.rebalance import Rebalancer
from aiorocket._consumer.shutdown import ShutdownSteps
from aiorocket._consumer.stats import (
    ConsumerStatistics,
    QueueStatistics,
    StatsRecorder,
    TopicStatistics,
)
from aiorocket._consumer.subscription import Subscription, check_selector
from aiorocket._consumer.trace_hook import install_trace
from aiorocket._protocol.codes import Perm
from aiorocket._protocol.pop import QueryAssignmentRequestBody
from aiorocket._remoting import Dispatcher
from aiorocket.errors import (
    BrokerError,
    ConfigurationError,
    RequestCodeNotSupportedError,
    TransportError,
)
from aiorocket.models import (
    ConcurrentContext,
    MessageQueue,
    OrderlyContext,
    ReceivedMessage,
    validate_name,
)
from aiorocket.settings import ConsumerSettings, build_settings

__all__ = ["PushConsumer", "check_listener"]

log = logging.getLogger("aiorocket.consumer")

_H = TypeVar("_H", bound=Handler | OrderlyHandler)


def check_listener(handler: object, *, orderly: bool) -> None:
    """Refuse a listener the consume service could not call as ``await handler(msgs, ctx)``:
    not an ``async def``, another number of parameters, or annotations saying one message
    (not a list) or the other mode's context. Java checks the listener's interface at
    ``start()`` (``checkConfig``); a signature is Python's interface.

    Raises:
        ConfigurationError: naming the listener, the mistake and the signature to use.
    """
    context = "OrderlyContext" if orderly else "ConcurrentContext"
    returns = "OrderlyStatus | None" if orderly else "ConsumeStatus | None"
    name = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    expected = f"async def {name}(msgs: list[ReceivedMessage], ctx: {context}) -> {returns}"
    call = handler
    if not inspect.iscoroutinefunction(handler):
        call = getattr(handler, "__call__", None)  # noqa: B004 (an object with async __call__)
    if not inspect.iscoroutinefunction(call):
        raise ConfigurationError(f"the listener {name} must be an async def function: {expected}")
    assert callable(call)
    try:
        inspect.signature(call).bind(None, None)
    except TypeError as exc:
        raise ConfigurationError(
            f"the listener {name} cannot be called with (msgs, ctx) ({exc}): {expected}"
        ) from None
    except ValueError:  # no signature to read (a builtin): let it be
        return
    hints = _hints(call)
    params = [p.name for p in inspect.signature(call).parameters.values()]
    first = hints.get(params[0]) if params else None
    if first is ReceivedMessage:
        raise ConfigurationError(
            f"the listener {name} is called with a list of messages, not one: {expected}"
        )
    second = hints.get(params[1]) if len(params) > 1 else None
    wrong = ConcurrentContext if orderly else OrderlyContext
    if second is wrong:
        mode = "an orderly" if orderly else "a concurrent (orderly=False)"
        raise ConfigurationError(f"the listener {name} of {mode} consumer takes: {expected}")


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # annotations that do not resolve here are not ours to judge
        return {}


class PushConsumer(MemberOwner):
    """Consumes topics with a handler, queues shared across the group.

    ```python
    consumer = PushConsumer(group="billing", namesrv="127.0.0.1:9876")
    consumer.subscribe("orders", "created || paid")

    @consumer.listener
    async def on_orders(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None: ...

    async with consumer:
        await consumer.wait_closed()
    ```

    With ``orderly=True`` the same [`listener`][aiorocket.PushConsumer.listener] takes an orderly
    handler, ``async def (msgs, ctx: OrderlyContext) -> OrderlyStatus | None``, called for one queue
    at a time in offset order (see [`OrderlyStatus`][aiorocket.OrderlyStatus]). Add
    ``order_by="sharding_key"`` (the ``__SHARDINGKEY`` property a producer's ``sharding_key`` sets)
    or ``order_by=fn`` (``fn(msg) -> str | None``) to keep the order per key instead: the messages
    of a queue with the same key are handled one call at a time in queue order, different keys
    concurrently up to ``concurrency``; messages without a key keep queue order among themselves, as
    one more key.

    Keyword arguments are the settings of [`ConsumerSettings`][aiorocket.settings.ConsumerSettings]
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
        self._compose(
            built,
            ConsumerKind(
                name="consumer",
                consume_type="CONSUME_PASSIVELY",
                check_startable=self._check_startable,
                build=self._build,
                startup=self._startup,
                held=self.held,
            ),
        )
        s = self.settings
        self._orderly = s.orderly
        #: orderly clustering: queues are locked on their brokers
        self._locking = s.orderly and self._m.clustering
        self._handler: Handler | OrderlyHandler | None = None
        self._hooks: list[ConsumeHook] = []
        #: what pause() paused: everything, or queues and topics (wire names)
        self._pauses = Pauses()
        # Built by start() (_build).
        #: the held queues
        self._queues: PushQueues
        self._service: ConcurrentConsumeService | OrderlyConsumeService
        self._locks: BrokerLocks | None = None
        self._clean_timer: Periodic | None = None
        self._lock_timer: Periodic | None = None
        #: POP and server modes: the pop tasks (None in pull mode)
        self._feed: PopFeed | None = None

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
        self._m.check_not_started("subscribe")
        check_selector(expression, sql)
        validate_name(topic)
        wire = self._m.wire_topic(topic)
        self._m.subscriptions[wire] = Subscription.create(wire, expression, sql)

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
            ConfigurationError: not an ``async def`` taking ``(msgs, ctx)`` (a list of
                messages and the context of this consumer's mode), a handler is set already,
                or the consumer was started already.
        """
        self._m.check_not_started("register a listener")
        check_listener(handler, orderly=self._orderly)
        if self._handler is not None:
            raise ConfigurationError("a listener is registered already")
        self._handler = handler

    def listener(self, handler: _H) -> _H:
        """Decorator form of [`register_listener`][aiorocket.PushConsumer.register_listener].

        Raises:
            ConfigurationError: as [`register_listener`][aiorocket.PushConsumer.register_listener].
        """
        self.register_listener(handler)
        return handler

    def register_hook(self, hook: ConsumeHook) -> None:
        """Add a hook called around every handler call (Java ``ConsumeMessageHook``).

        Raises:
            ConfigurationError: the consumer was started already.
        """
        self._m.check_not_started("register a hook")
        self._hooks.append(hook)

    def pause(self, *targets: MessageQueue | str) -> None:
        """Stop pulling the given queues ([`MessageQueue`][aiorocket.MessageQueue]) or topics (their
        names), or everything when called with no argument (Java ``suspend()``), until
        [`resume`][aiorocket.PushConsumer.resume].

        A paused queue is not pulled, so no new message of it reaches the handler; messages
        pulled before the pause are still handled, and a pull in flight at the pause is
        dropped unseen and pulled again after the resume. The queue stays held, with its
        offsets. The pause belongs to the consumer, not to a rebalance: a paused queue or
        topic this member holds later (after a rebalance, a restart of the queue) starts
        paused. May be called before [`start`][aiorocket.PushConsumer.start]. A topic's retried
        messages come through ``%RETRY%<group>``, which pausing the topic does not pause (pause it
        by that name).

        Raises:
            ConfigurationError: a topic (or a queue's topic) this consumer does not subscribe.
        """
        queues, topics = self._pause_targets(targets)
        self._pauses.set(True, queues, topics, everything=not targets)
        if self._m.started:
            self._queues.apply_pause()

    def resume(self, *targets: MessageQueue | str) -> None:
        """Undo [`pause`][aiorocket.PushConsumer.pause] for the given queues or topics, or for
        everything when called with no argument; their pulls start again at once.

        A queue stays paused while it is paused by name or through its topic.

        Raises:
            ConfigurationError: a topic (or a queue's topic) this consumer does not subscribe.
        """
        queues, topics = self._pause_targets(targets)
        self._pauses.set(False, queues, topics, everything=not targets)
        if self._m.started:
            self._queues.apply_pause()

    def _pause_targets(
        self, targets: Sequence[MessageQueue | str]
    ) -> tuple[list[MessageQueue], list[str]]:
        """``targets`` as wire queues and topics, each checked to be subscribed."""
        queues: list[MessageQueue] = []
        topics: list[str] = []
        for target in targets:
            if isinstance(target, MessageQueue):
                mq = MessageQueue(
                    self._m.wire_topic(target.topic), target.broker_name, target.queue_id
                )
                self._check_subscribed(mq.topic)
                queues.append(mq)
            else:
                topic = self._m.wire_topic(target)
                self._check_subscribed(topic)
                topics.append(topic)
        return queues, topics

    def _check_subscribed(self, topic: str) -> None:
        if topic not in self._m.subscriptions and not (
            self._m.clustering and topic == self._m.retry_topic
        ):
            raise ConfigurationError(f"topic {topic} is not subscribed by this consumer")

    # -- lifecycle ----------------------------------------------------------------------------

    def _check_startable(self) -> None:
        if self._handler is None:
            raise ConfigurationError("register a listener before starting the consumer")
        if not self._m.subscriptions:
            raise ConfigurationError("subscribe to at least one topic before starting")
        if self._m.clustering and self.settings.consume_mode != "pop":
            # POP retries go through the broker's POP retry topics, not %RETRY%<group>.
            self._m.subscriptions.setdefault(
                self._m.retry_topic, Subscription.create(self._m.retry_topic, "*")
            )

    def _build(self) -> MemberParts:
        """Create the parts (no I/O, nothing started)."""
        s = self.settings
        assert self._handler is not None
        dispatcher = Dispatcher()  # (filled below, once the queues it reports exist)
        self._client = client = ClientInstance(s, handler=dispatcher)
        loop = asyncio.get_running_loop()
        self._stats = StatsRecorder(now=loop.time())
        self._offsets = self._m.new_offset_store(client)
        self._rebalance_timer = Periodic(
            self._rebalance, s.rebalance_interval, name="rebalance", run_first=False
        )
        ctx = self._m.new_context(client, self._offsets, self._stats, self._rebalance_timer.wake)
        self.tracer = install_trace(client, s, self._hooks)
        self._service = self._new_service(client)
        if self._locking:
            self._locks = BrokerLocks(client=client, group=self._m.group)
        if s.consume_mode != "pull":
            self._feed = self._new_feed(client)
        self._queues = PushQueues(
            ctx,
            self._pauses,
            service=self._service,
            locks=self._locks,
            on_lock_expired=self._on_lock_expired,
            start_offset=self._start_offset,
        )
        requests = PushRequests(ctx, self._queues, handler=self._handler, orderly=self._orderly)
        requests.register(dispatcher, grouped=True)
        self._rebalancer = Rebalancer(
            client=client,
            group=self._m.group,
            host=self._queues,
            offsets=self._offsets,
            strategy=self._m.allocation_strategy(),
            broadcasting=not self._m.clustering,
            consume_from=s.consume_from,
            locker=self._locks,
            on_duplicate_id=self._disambiguate_client_id if self._m.clustering else None,
        )
        membership = self._m.new_membership(client, on_routes_changed=self._rebalance_timer.wake)
        steps = ShutdownSteps(
            stop_assigning=self._stop_assigning,
            stop_feeding=self._stop_feeding,
            drain=self._drain,
            flush_offsets=self._flush_offsets,
            release=self._queues.unlock_all,
            finalize=self._offsets.close,
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
                self._queues.renew_locks,
                s.lock_renew_interval,
                name="lock renewal",
                run_first=False,
            )
        return MemberParts(client, membership, steps, self.tracer)

    def _new_service(
        self, client: ClientInstance
    ) -> ConcurrentConsumeService | OrderlyConsumeService:
        """The consume service of this consumer's mode."""
        s = self.settings
        if self._orderly:
            return OrderlyConsumeService(
                handler=cast(OrderlyHandler, self._handler),
                group=self._m.group,
                settings=s,
                client=client,
                offsets=self._offsets,
                stats=self._stats,
                spawn=self._m.spawn,
                hooks=self._hooks,
                on_lock_expired=self._on_lock_expired,
                key_of=key_function(s.order_by),
            )
        return ConcurrentConsumeService(
            handler=cast(Handler, self._handler),
            group=self._m.group,
            settings=s,
            client=client,
            offsets=self._offsets,
            stats=self._stats,
            hooks=self._hooks,
        )

    def _new_feed(self, client: ClientInstance) -> PopFeed:
        """POP and server modes: the pop tasks feeding the consume service."""
        s = self.settings
        pop = PopClient.for_group(client, self._m.group, s)
        service = self._service
        concurrent = service if isinstance(service, ConcurrentConsumeService) else None
        feed = PopFeed(
            pop=pop,
            service=concurrent,
            settings=s,
            stats=self._stats,
            spawn=self._m.spawn,
            orderly=None if concurrent else cast(OrderlyHandler, self._handler),
        )
        if concurrent is not None:
            concurrent.pop_retry = feed.retry
        return feed

    # -- start-up -----------------------------------------------------------------------------

    async def _startup(self) -> None:
        await self._offsets.load()
        await self._m.join(heartbeats=True, claim_id=self._m.clustering)
        if isinstance(self._service, ConcurrentConsumeService):
            for i in range(self.settings.concurrency):
                self._m.spawn(self._service.worker(), name=f"consume worker {i}")
        if self._feed is not None:
            self._feed.start()
        await self._rebalance()
        self._m.spawn(self._rebalance_timer.run(), name="rebalance")
        if self._lock_timer is not None:
            self._m.spawn(self._lock_timer.run(), name="lock renewal")
        self._m.membership.start()
        self._m.spawn(self._persist_timer.run(), name="persist offsets")
        if self._clean_timer is not None:
            self._m.spawn(self._clean_timer.run(), name="consume clean-up")
        if self.tracer is not None:
            self._m.spawn(self.tracer.run(), name="trace")

    # -- periodic work ------------------------------------------------------------------------

    async def _rebalance(self) -> None:
        if self._m.closing:
            return
        pulled = list(self._m.subscriptions)
        targets: list[FeedTarget] = []
        if self._feed is not None:
            targets = await self._pop_targets()
            # A topic switching mode stops the old way before the new one starts, so the
            # new one starts from the offsets the old one left (pops and commits both move
            # the group's offsets on the broker).
            self._feed.update(targets, start=False)
            popped = {sub.topic for sub, _, _ in targets}
            pulled = [t for t in pulled if t not in popped]
        async with self._queues.lock:
            self._queues.restart_silent_pulls()
            await self._rebalancer.run_once(pulled)
        if self._feed is not None:
            self._feed.update(targets)
        self._stats.rebalances += 1

    async def _pop_targets(self) -> list[FeedTarget]:
        """What to pop from: every broker of each subscribed topic (``"pop"``), or what the
        brokers assign in POP mode (``"server"``, QUERY_ASSIGNMENT; the retry topic is always
        pulled, as the broker assigns it)."""
        out: list[FeedTarget] = []
        client = self._client
        for topic, sub in self._m.subscriptions.items():
            if topic == self._m.retry_topic:
                continue
            route = client.route(topic)
            if route is None:
                continue
            brokers = sorted({q.broker_name for q in route.queue_datas if q.perm & Perm.READ})
            if self.settings.consume_mode == "pop":
                out.extend((sub, name, -1) for name in brokers)
                continue
            body = QueryAssignmentRequestBody(
                topic=topic, consumer_group=self._m.group, client_id=client.client_id
            )
            for name in brokers:
                try:
                    addr = await client.find_broker(name, topic, master=True)
                    assigned = await query_assignment(client, addr, body)
                except RequestCodeNotSupportedError:
                    log.warning("broker %s assigns nothing (RocketMQ 4.x): pulling %s", name, topic)
                    break
                except (BrokerError, TransportError) as exc:
                    log.warning("assignment of %s from %s failed: %s", topic, name, exc)
                    continue
                # QueryAssignmentProcessor answers for the whole topic: one broker is enough.
                out.extend(
                    (sub, a.message_queue.broker_name, a.message_queue.queue_id)
                    for a in assigned or ()
                    if a.mode == "POP"
                )
                break
        return out

    async def _persist_offsets(self) -> None:
        self._stats.sample(asyncio.get_running_loop().time())
        if self._locking:
            for mq in self._queues.lock_holding():
                await self._offsets.persist(mq)
        else:
            await self._offsets.persist_all(self._queues.held())

    async def _flush_offsets(self) -> None:
        if self._locking:
            holding = self._queues.lock_holding()
            await asyncio.gather(*(self._offsets.persist(mq, sync=True) for mq in holding))
        else:
            await self._offsets.persist_all(self._queues.held(), sync=True)

    # -- orderly locks ------------------------------------------------------------------------

    async def _disambiguate_client_id(self) -> None:
        await self._m.membership.disambiguate_client_id()

    async def _start_offset(self, mq: MessageQueue) -> int:
        return await self._rebalancer.start_offset(mq)

    def _on_lock_expired(self) -> None:
        # tryLockLaterAndReconsume: a queue waits for its lock; try to renew it now.
        if self._lock_timer is not None and not self._m.closing:
            self._lock_timer.wake()

    def held(self) -> list[MessageQueue]:
        """The queues this member holds now."""
        return self._queues.held()

    # -- shutdown -----------------------------------------------------------------------------

    # (the order is its GroupMember's shutdown; these are this consumer's steps)

    def _stop_assigning(self) -> None:
        # No more rebalancing or lock renewal: the held set is final.
        self._rebalance_timer.stop()
        if self._lock_timer is not None:
            self._lock_timer.stop()

    async def _stop_feeding(self) -> None:
        async with self._queues.lock:
            # Pulls (and pops) stop; queues drain (finished work still commits).
            self._queues.stop_pulling()
            if self._feed is not None:
                self._feed.stop_popping()

    async def _drain(self, grace: float) -> None:
        # Running handlers finish within the grace period; their acks go out.
        await self._service.drain(grace)
        if self._feed is not None:
            await self._feed.drain(grace)
            await self._m.cleanup(self._feed.flush(), "send acks")

    # -- statistics ---------------------------------------------------------------------------

    def statistics(self) -> ConsumerStatistics:
        """Pull and consume rates per topic, cache figures per held queue, error counters.

        Raises:
            ConfigurationError: the consumer was never started.
        """
        if not self._m.started:
            raise ConfigurationError("the consumer has not been started")
        loop_now = asyncio.get_running_loop().time()
        offset = time.time() - loop_now
        queues = {}
        lag: dict[str, int] = {}
        for mq, entry in self._queues.entries.items():
            pq = entry.pq
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
        state = "closed" if self._m.closing else "started" if self._m.started else "new"
        held = len(self.held()) if self._m.started else 0
        return f"PushConsumer(group={self._m.group!r}, {state}, queues={held})"
