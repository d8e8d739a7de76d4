"""The pull consumer (Java ``DefaultLitePullConsumer`` / ``DefaultLitePullConsumerImpl``): the
application asks for messages when it is ready.

Group membership is the push consumer's (a `GroupMember`: routes, heartbeats, unregistering, the
supervisor task group, the shutdown order) and so is the rebalance (`Rebalancer`, the same
allocation strategies), so Java, push and pull members of one group share its queues. The
owned queues are a `PullQueues`, the push consumer's
queue table with buffers instead of a consume service: each
owned queue has the push consumer's pull task (`PullLoop`:
long polling, the same flow-control thresholds) prefetching into its
`ProcessQueue`; instead of a consume service, the
pulled batches wait in a per-queue buffer until the application takes them. A message leaves
the process queue when it is handed to the application (Java ``poll`` → ``removeMessage``),
which is what lets the pull task go on: an application that reads slowly holds the cache at
``pull_threshold_for_queue`` (+ one pull batch) per queue, and an idle one costs parked long
polls, no CPU.

Positions, per owned queue:

* *position*: the next offset the application gets (everything before it was handed out or
  filtered out by tag);
* *acknowledged*: the position when the application last came back, by calling ``poll()``,
  iterating once more, or ``commit()``: what was handed out before that is done with;
* *committed*: what the broker (or, broadcasting, the local file) stores. Auto commit writes
  the acknowledged position every ``auto_commit_interval`` and on revocation; ``commit()``
  acknowledges everything handed out and writes it at once; ``close()`` does the same as
  ``commit()`` (``async with`` left by an exception writes only what was acknowledged).

A queue is revoked (rebalance) in this order: it stops delivering, ``on_revoked`` is awaited
(the queue is still owned, so the application may commit), its acknowledged position is
written and awaited (auto commit) so the next owner starts there, then its pull task stops.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal

from aiorocket._client.instance import ClientInstance
from aiorocket._concurrency import Periodic
from aiorocket._consumer.broker_requests import BrokerRequests
from aiorocket._consumer.group_member import ConsumerKind, MemberOwner, MemberParts
from aiorocket._consumer.hooks import (
    ConsumeHook,
    ReceiveHook,
    ReceiveHookContext,
    run_received,
)
from aiorocket._consumer.pull_positions import BrokerPositions
from aiorocket._consumer.queue_table import OwnedQueue, Pauses, PullQueues
from aiorocket._consumer.rebalance import Rebalancer, plan_rebalance
from aiorocket._consumer.send_back import SendBack
from aiorocket._consumer.shutdown import ShutdownSteps
from aiorocket._consumer.stats import StatsRecorder
from aiorocket._consumer.subscription import Subscription, check_selector
from aiorocket._consumer.trace_hook import install_trace, trace_polled
from aiorocket._names import without_namespace
from aiorocket._remoting import Dispatcher
from aiorocket.errors import (
    ConfigurationError,
    OffsetOutOfRangeError,
    QueueNotAssignedError,
    SubscriptionConflictError,
)
from aiorocket.models import MessageQueue, ReceivedMessage, validate_name
from aiorocket.settings import ConsumerSettings, build_settings

__all__ = ["PullConsumer", "RebalanceListener"]

log = logging.getLogger("aiorocket.consumer")

#: ``async def (queues) -> None``: told the queues this member got, or is about to lose
RebalanceListener = Callable[[list[MessageQueue]], Awaitable[None]]

_MIB = 1024 * 1024
_CLIENT_VERSION = "V4_9_8"

#: Consumer settings about handlers and their workers; a pull consumer has neither, so passing
#: one is a mistake worth reporting (``offset_persist_interval`` is ``auto_commit_interval``).
_PUSH_ONLY = frozenset(
    {
        "orderly",
        "order_by",
        "consume_batch_size",
        "concurrency",
        "consume_timeout",
        "reconsume_later_delay",
        "shutdown_grace",
        "offset_persist_interval",
        "lock_renew_interval",
        "lock_expiry",
        "max_continuous_consume_time",
        "suspend_delay",
        "unlock_delay",
    }
)


class PullConsumer(MemberOwner):
    """Reads topics when the application asks, queues shared across the group.

    ```python
    consumer = PullConsumer(group="reports", namesrv="127.0.0.1:9876")
    consumer.subscribe("orders", "paid")

    async with consumer:
        async for msg in consumer:            # one message at a time
            await handle(msg)
        # or: batch = await consumer.poll(max_messages=100, timeout=1.0)
    ```

    **Group or queues.** [`subscribe`][aiorocket.PullConsumer.subscribe] topics before starting to
    share their queues with the group (rebalance, heartbeats and allocation strategies as
    [`PushConsumer`][aiorocket.PushConsumer], so Java, push and pull members of one group split the
    queues between them), or [`assign`][aiorocket.PullConsumer.assign] fixed queues to read them
    with no group rebalance (such a consumer sends
    no heartbeat: the group's members do not count it). Not both.

    **At least once.** A message counts as processed once the application comes back for
    more after getting it: its next ``poll()``, the next step of ``async for``, or
    [`commit`][aiorocket.PullConsumer.commit]. With ``auto_commit`` (the default) that acknowledged
    position is committed every ``auto_commit_interval`` seconds, when a rebalance takes the queue
    away, and at [`close`][aiorocket.PullConsumer.close], which also counts the last batch as
    processed (leaving ``async with`` by an exception does not). After a crash, what was processed
    since the last commit is delivered again, as with the push consumer; after a clean close,
    nothing is. When a queue changes hands, its new owner may read the offset before the old owner's
    revocation commit lands (RocketMQ members rebalance independently) and repeat what was
    processed since the previous commit. Keep
    processing idempotent, keyed by ``msg.msg_id`` or a business key. ``close()`` counts
    every message handed out as processed, so end your reading loop before closing from
    another task. With ``auto_commit=False`` only [`commit`][aiorocket.PullConsumer.commit] writes
    offsets (also on
    revocation: commit in ``on_revoked``). Several tasks reading one consumer at once
    acknowledge each other's messages; give each its own consumer or commit explicitly.

    **Prefetch.** Every owned queue is pulled in the background with the push consumer's
    long polling and flow control (``pull_threshold_for_queue``, ``..._size_for_queue``,
    ``max_span``, the per-topic variants), so reading slowly bounds memory, an idle consumer
    costs no CPU, and [`poll`][aiorocket.PullConsumer.poll] returns at once when messages are
    waiting.

    **Retries.** [`reconsume_later`][aiorocket.PullConsumer.reconsume_later] sends a message back to
    ``%RETRY%<group>``, which a subscribing consumer reads too, with its reconsume count raised
    (``%DLQ%<group>`` after ``max_reconsume_times``); a broadcasting consumer cannot send messages
    back. Java 4.9's ``DefaultLitePullConsumer`` does not read ``%RETRY%<group>``: in a group shared
    with one, the retry queue may be allocated to it, and retried messages then wait.

    **Pull consumer or** ``@app.subscriber``? A subscriber (or
    [`PushConsumer`][aiorocket.PushConsumer]) is the
    default for services: the library runs your handler concurrently, retries failures and
    keeps offsets. Use a pull consumer when your code must own the loop: batch jobs that
    read, process and stop; request-driven services that fetch when asked; pipelines that
    process in bulk, commit explicitly, ``seek`` back to replay, or ``pause`` queues to apply
    backpressure of their own.

    Args:
        group: the consumer group.
        namesrv: name server addresses.
        consume_from: where a queue with no committed offset starts: ``"last"``, ``"first"``
            or a ``datetime``.
        message_model: ``"clustering"`` (queues shared by the group; offsets on the broker)
            or ``"broadcasting"`` (every member reads every queue; offsets in a local file).
        auto_commit: commit the acknowledged positions periodically, on revocation and at
            close (see above).
        auto_commit_interval: seconds between automatic commits (Java
            ``autoCommitIntervalMillis``, 5 s).
        on_assigned: ``async def (queues)`` awaited after a rebalance gave this member queues
            (they are pulled already; seeking them is allowed).
        on_revoked: ``async def (queues)`` awaited before a rebalance takes queues away
            (they deliver nothing more but are still owned: committing them is allowed).
            Listeners run in the rebalance task: an exception is logged and ignored, and a
            listener that never returns stops rebalancing.

    Other keyword arguments are the settings of
    [`ConsumerSettings`][aiorocket.settings.ConsumerSettings] (``pull_batch_size``, thresholds,
    intervals, ``allocation``, ...); those about handlers (``concurrency``, ``consume_batch_size``,
    ``orderly``, ...) are refused.

    Raises:
        ConfigurationError: invalid or push-only settings, a bad group name, a listener that
            is not ``async def`` (at construction).
    """

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str],
        consume_from: Literal["last", "first"] | datetime = "last",
        message_model: Literal["clustering", "broadcasting"] = "clustering",
        auto_commit: bool = True,
        auto_commit_interval: float = 5.0,
        on_assigned: RebalanceListener | None = None,
        on_revoked: RebalanceListener | None = None,
        **settings: Any,
    ) -> None:
        refused = sorted(_PUSH_ONLY & set(settings))
        if refused:
            raise ConfigurationError(
                f"{', '.join(refused)}: push consumer setting(s); a pull consumer has no handler"
            )
        built = build_settings(
            ConsumerSettings,
            {
                "group": group,
                "namesrv": namesrv,
                "consume_from": consume_from,
                "message_model": message_model,
                **settings,
            },
        )
        self._compose(
            built,
            ConsumerKind(
                name="pull consumer",
                consume_type="CONSUME_ACTIVELY",
                check_startable=self._check_startable,
                build=self._build,
                startup=self._startup,
                held=self.held,
            ),
        )
        if not auto_commit_interval > 0:
            raise ConfigurationError("auto_commit_interval must be positive")
        for name, fn in (("on_assigned", on_assigned), ("on_revoked", on_revoked)):
            if fn is not None and not (
                inspect.iscoroutinefunction(fn)
                or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004
            ):
                raise ConfigurationError(f"{name} must be an async def function")
        self._auto_commit = auto_commit
        self._auto_commit_interval = float(auto_commit_interval)
        self._on_assigned = on_assigned
        self._on_revoked = on_revoked
        self._mode: Literal["none", "subscribe", "assign"] = "none"
        #: assign(): the queues to read (wire names)
        self._assigned: list[MessageQueue] = []
        #: what pause() paused (queues, wire names)
        self._pauses = Pauses()
        #: close() counts what was handed out as processed; an exception leaving
        #: ``async with`` does not
        self._close_acks = True
        self._hooks: list[ConsumeHook] = []
        self._receive_hooks: list[ReceiveHook] = []
        # Built by start() (_build).
        #: the owned queues, their buffers and positions
        self._queues: PullQueues
        self._sender: SendBack
        self._commit_timer: Periodic

    # -- configuration ------------------------------------------------------------------------

    def register_hook(self, hook: ConsumeHook | ReceiveHook) -> None:
        """Add a hook (`aiorocket._consumer.hooks`): its ``received`` runs once per
        [`poll`][aiorocket.PullConsumer.poll] that returns messages; its ``consume_before`` /
        ``consume_after``, if it has them, run per queue over what a poll hands out, as consumed
        successfully at once (as Java's lite pull consumer runs its ``ConsumeMessageHook``).

        Raises:
            ConfigurationError: the consumer was started already.
        """
        self._m.check_not_started("register a hook")
        if callable(getattr(hook, "received", None)):
            self._receive_hooks.append(hook)  # type: ignore[arg-type]
        if callable(getattr(hook, "consume_before", None)):
            self._hooks.append(hook)  # type: ignore[arg-type]

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Read ``topic``'s messages whose tag matches ``expression`` (``"*"``, ``"A"``, ``"A ||
        B"``), or, with ``sql=``, whose properties match an SQL92 expression such as ``"region
        = 'eu' AND amount > 100"`` (filtered by the broker, which must have property filtering
        enabled), sharing its queues with the group. Subscribing a topic again replaces its
        expression.

        Raises:
            InvalidNameError: a bad topic name.
            InvalidSelectorError: ``sql`` does not compile (the message gives the position).
            SubscriptionConflictError: queues were assigned already.
            ConfigurationError: both a tag expression and ``sql``, or the consumer was started
                already.
        """
        self._m.check_not_started("subscribe")
        check_selector(expression, sql)
        if self._mode == "assign":
            raise SubscriptionConflictError("cannot subscribe: this consumer was assigned queues")
        validate_name(topic)
        wire = self._m.wire_topic(topic)
        self._m.subscriptions[wire] = Subscription.create(wire, expression, sql)
        self._mode = "subscribe"

    def assign(self, queues: Iterable[MessageQueue]) -> None:
        """Read exactly these queues, every message (no tag filter), with no group rebalance;
        assigning again before start replaces the set. Offsets are committed under the group.

        Raises:
            SubscriptionConflictError: topics were subscribed already.
            ConfigurationError: no queue, something that is not a
                [`MessageQueue`][aiorocket.MessageQueue], or the consumer was started already.
            InvalidNameError: a bad topic name.
        """
        self._m.check_not_started("assign queues")
        if self._mode == "subscribe":
            raise SubscriptionConflictError("cannot assign queues: this consumer subscribed topics")
        wanted: set[MessageQueue] = set()
        for q in queues:
            if not isinstance(q, MessageQueue):
                raise ConfigurationError(f"assign takes MessageQueue objects, not {q!r}")
            validate_name(q.topic)
            wanted.add(self._wire_mq(q))
        if not wanted:
            raise ConfigurationError("assign at least one queue")
        self._assigned = sorted(wanted)
        self._m.subscriptions.clear()
        for t in sorted({mq.topic for mq in wanted}):
            self._m.subscriptions[t] = Subscription.create(t, "*")
        self._mode = "assign"

    def _wire_mq(self, mq: MessageQueue) -> MessageQueue:
        topic = self._m.wire_topic(mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    def _user_mq(self, mq: MessageQueue) -> MessageQueue:
        topic = without_namespace(self.settings.namespace, mq.topic)
        return mq if topic == mq.topic else MessageQueue(topic, mq.broker_name, mq.queue_id)

    # -- lifecycle (its GroupMember's kind)----------------------------------------------------

    def _check_startable(self) -> None:
        if self._mode == "none":
            raise ConfigurationError("subscribe to a topic or assign queues before starting")
        if self._mode == "subscribe" and self._m.clustering:
            # Retried messages come back through %RETRY%<group> (the push consumer reads it
            # too; Java 4.9's lite pull consumer does not, and has no send-back).
            self._m.subscriptions.setdefault(
                self._m.retry_topic, Subscription.create(self._m.retry_topic, "*")
            )

    def _build(self) -> MemberParts:
        s = self.settings
        dispatcher = Dispatcher()  # (filled below, once the queues it reports exist)
        self._client = client = ClientInstance(s, handler=dispatcher)
        self._stats = StatsRecorder(now=asyncio.get_running_loop().time())
        self._offsets = self._m.new_offset_store(client)
        self._rebalance_timer = Periodic(
            self._rebalance, s.rebalance_interval, name="rebalance", run_first=False
        )
        ctx = self._m.new_context(client, self._offsets, self._stats, self._rebalance_timer.wake)
        self._queues = PullQueues(ctx, self._pauses, auto_commit=self._auto_commit)
        self._positions = BrokerPositions(ctx)
        requests = BrokerRequests(
            ctx, self._queues, properties={"autoCommit": "true" if self._auto_commit else "false"}
        )
        # RESET_CONSUMER_CLIENT_OFFSET and CONSUME_MESSAGE_DIRECTLY are push-consumer requests
        # (MQClientInstance answers them only for DefaultMQPushConsumerImpl): code 3 here.
        requests.register(dispatcher, grouped=self._mode == "subscribe")
        self._sender = SendBack(client=client, group=self._m.group, settings=s)
        self._trace_hooks: list[ConsumeHook] = list(self._hooks)
        self.tracer = install_trace(client, s, self._trace_hooks)
        self._rebalancer = Rebalancer(
            client=client,
            group=self._m.group,
            host=self._queues,
            offsets=self._offsets,
            strategy=self._m.allocation_strategy(),
            broadcasting=not self._m.clustering,
            consume_from=s.consume_from,
        )
        membership = self._m.new_membership(client, on_routes_changed=self._rebalance_timer.wake)
        steps = ShutdownSteps(
            stop_assigning=self._stop_assigning,
            stop_feeding=self._stop_feeding,
            drain=self._drain,
            flush_offsets=self._flush_offsets,
            finalize=self._offsets.close,
        )
        self._commit_timer = Periodic(
            self._auto_commit_now, self._auto_commit_interval, name="auto commit", run_first=False
        )
        return MemberParts(client, membership, steps, self.tracer)

    async def _startup(self) -> None:
        await self._offsets.load()
        grouped = self._mode == "subscribe"
        await self._m.join(heartbeats=grouped)
        await self._rebalance()
        # Assigned queues go through the same rounds: a queue whose start offset could not
        # be found is tried again at the next one.
        self._m.spawn(self._rebalance_timer.run(), name="rebalance")
        # (assigned queues: no group to be heard by)
        self._m.membership.start(heartbeats=grouped)
        if self._auto_commit:
            self._m.spawn(self._commit_timer.run(), name="auto commit")
        if self.tracer is not None:
            self._m.spawn(self.tracer.run(), name="trace")

    async def close(self) -> None:
        """Commit and shut down: with ``auto_commit``, everything handed out counts as
        processed and is committed (awaited), then pulls stop and the member leaves its
        group; safe to call more than once. Later reads raise
        [`ClientClosedError`][aiorocket.errors.ClientClosedError]; a reader waiting in
        [`poll`][aiorocket.PullConsumer.poll] gets an empty list, ``async for`` ends.

        Raises:
            Nothing: a crash of the consumer is re-raised by
                [`wait_closed`][aiorocket.PullConsumer.wait_closed] instead.
        """
        self._wake_readers()
        await super().close()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is not None:
            # The block failed, possibly on the batch in hand: commit only what the
            # application came back from.
            self._close_acks = False
        await super().__aexit__(exc_type, exc, tb)

    def _wake_readers(self) -> None:
        if self._m.started:
            self._queues.data.set()

    # (the order is its GroupMember's shutdown; these are this consumer's steps)

    def _stop_assigning(self) -> None:
        # No more rebalancing: the owned set is final; readers get nothing more.
        self._rebalance_timer.stop()
        self._wake_readers()

    async def _stop_feeding(self) -> None:
        async with self._queues.lock:
            self._queues.stop_pulling()

    async def _drain(self, grace: float) -> None:
        # What was handed out counts as processed on a clean close (only what the
        # application came back from otherwise); the flush then commits it.
        if self._close_acks:
            self._queues.acknowledge()

    async def _flush_offsets(self) -> None:
        if self._auto_commit:
            self._queues.store_acknowledged(list(self._queues.entries.values()))
        await self._offsets.persist_all(self._queues.held(), sync=True)

    # -- rebalance ----------------------------------------------------------------------------

    async def _rebalance(self) -> None:
        if self._m.closing:
            return
        queues = self._queues
        async with queues.lock:
            topics = list(self._m.subscriptions)
            if self._mode == "assign":
                wanted: dict[str, list[MessageQueue]] = {t: [] for t in topics}
                for mq in self._assigned:
                    wanted[mq.topic].append(mq)
                plan = plan_rebalance(queues.entries, wanted, topics)
            else:
                plan = await self._rebalancer.plan(topics)
            if not plan.empty:
                revoked = [queues.entries[mq] for mq in plan.drop if mq in queues.entries]
                for owned in revoked:
                    owned.revoking = True
                    queues.unready(owned)
                if revoked and self._on_revoked is not None:
                    await self._tell(self._on_revoked, [o.mq for o in revoked], "on_revoked")
                before = set(queues.entries)
                await self._rebalancer.apply(plan)
                added = [mq for mq in plan.add if mq in queues.entries and mq not in before]
                if added and self._on_assigned is not None:
                    await self._tell(self._on_assigned, added, "on_assigned")
        self._stats.rebalances += 1

    async def _tell(self, listener: RebalanceListener, mqs: list[MessageQueue], what: str) -> None:
        try:
            await listener(sorted(self._user_mq(mq) for mq in mqs))
        except Exception:
            log.exception("%s listener of %s failed", what, self._m.group)

    def held(self) -> list[MessageQueue]:
        """The queues this member owns now (wire names)."""
        return self._queues.held()

    # -- reading ------------------------------------------------------------------------------

    async def poll(
        self, max_messages: int = 32, timeout: float | None = 5.0
    ) -> list[ReceivedMessage]:
        """Up to ``max_messages`` messages, as soon as any are buffered; waits up to
        ``timeout`` seconds (``None``: until some arrive) and returns ``[]`` on timeout or
        when the consumer is closed meanwhile. Calling it acknowledges everything returned
        before (see the class docs).

        Raises:
            ConfigurationError: not started, or ``max_messages`` below 1.
            ClientClosedError: the consumer is closed.
        """
        self._m.require_running()
        if max_messages < 1:
            raise ConfigurationError("max_messages must be at least 1")
        started = time.time_ns() if self._receive_hooks else 0
        queues = self._queues
        if queues.dirty:
            queues.acknowledge()
        out = queues.take(max_messages)
        if out or timeout == 0:
            return self._hand_out(out, started)
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while not out:
            try:
                async with asyncio.timeout_at(deadline):
                    await queues.data.wait()
            except TimeoutError:
                return []
            if self._m.closing:
                return []
            out = queues.take(max_messages)
        return self._hand_out(out, started)

    def _hand_out(self, out: list[ReceivedMessage], started_ns: int) -> list[ReceivedMessage]:
        # What poll returns, past the hooks.
        if out and self._receive_hooks:
            s = self.settings
            ctx = ReceiveHookContext(s.group, s.namespace, "poll", out, started_ns)
            run_received(self._receive_hooks, ctx)
        return trace_polled(self._trace_hooks, self.settings.group, out)

    def __aiter__(self) -> PullConsumer:
        return self

    async def __anext__(self) -> ReceivedMessage:
        """The next message (waiting for one); the iteration ends when the consumer closes.
        Each step acknowledges the messages returned before it.

        Raises:
            ConfigurationError: the consumer was never started.
        """
        if not self._m.started:
            if self._m.closing:
                raise StopAsyncIteration
            raise ConfigurationError("the consumer has not been started")
        queues = self._queues
        if queues.dirty:
            queues.acknowledge()
        while not queues.ready:
            if self._m.closing:
                raise StopAsyncIteration
            await queues.data.wait()
        if self._m.closing:
            raise StopAsyncIteration
        return queues.take_one()

    # -- positions ----------------------------------------------------------------------------

    def _require_owned(self, queue: MessageQueue, *, revoking: bool = False) -> OwnedQueue:
        self._m.require_running()
        owned = self._queues.entries.get(self._wire_mq(queue))
        if owned is None:
            raise QueueNotAssignedError(queue)
        if owned.revoking and not revoking:
            raise QueueNotAssignedError(queue, "is being revoked by a rebalance")
        return owned

    def assignment(self) -> set[MessageQueue]:
        """The queues this consumer owns now (after [`assign`][aiorocket.PullConsumer.assign],
        before start: those)."""
        if not self._m.started and self._mode == "assign":
            return {self._user_mq(mq) for mq in self._assigned}
        if not self._m.started:
            return set()
        return {self._user_mq(mq) for mq, o in self._queues.entries.items() if not o.revoking}

    def position(self, queue: MessageQueue) -> int:
        """The offset of the next message [`poll`][aiorocket.PullConsumer.poll] returns from
        ``queue`` (also in ``on_revoked``, for a queue being revoked).

        Raises:
            QueueNotAssignedError: the queue is not owned.
            ClientClosedError: the consumer is closed.
        """
        return self._require_owned(queue, revoking=True).position()

    async def committed(self, queue: MessageQueue) -> int | None:
        """The committed offset of ``queue`` (any queue of a subscribed or other topic): the
        last one this consumer committed if it owns the queue, else the broker's (the local
        file's, broadcasting); ``None`` if there is none.

        Raises:
            ConfigurationError: not started.
            ClientClosedError: the consumer is closed.
            TransportError, BrokerError: the broker could not be asked.
        """
        self._m.require_running()
        mq = self._wire_mq(queue)
        owned = mq in self._queues.entries
        if owned:
            offset = self._offsets.read(mq)
            if offset >= 0:
                return offset
        if not self._m.clustering:
            return None if owned else await self._offsets.read_stored(mq)
        return await self._positions.committed(mq)

    async def commit(self, offsets: Mapping[MessageQueue, int] | None = None) -> None:
        """Commit, awaited: with no argument everything handed out so far (it counts as
        processed); with ``{queue: offset}`` exactly those offsets ("the next message to
        read"; lower than before rewinds the group). Works with ``auto_commit`` off or on.

        Raises:
            QueueNotAssignedError: a queue in ``offsets`` is not owned.
            ConfigurationError: not started, or a negative offset.
            ClientClosedError: the consumer is closed.
            TransportError, BrokerError: the broker did not take an offset (the first error,
                after every queue was tried).
        """
        self._m.require_running()
        if offsets is None:
            self._queues.acknowledge()
            targets = list(self._queues.entries.values())
            for owned in targets:
                owned.written = owned.acked
            pairs = [(o.mq, o.acked) for o in targets]
        else:
            pairs = []
            for queue, offset in offsets.items():
                found = self._queues.entries.get(self._wire_mq(queue))
                if found is None:
                    raise QueueNotAssignedError(queue)
                if offset < 0:
                    raise ConfigurationError(f"offset {offset} of {queue} is negative")
                pairs.append((found.mq, offset))
            for mq, _ in pairs:
                # An explicit commit stands until more progress is acknowledged.
                owned = self._queues.entries[mq]
                owned.written = owned.acked
        for mq, offset in pairs:
            self._offsets.update(mq, offset, increase_only=False)
        await self._positions.write(pairs)

    async def _auto_commit_now(self) -> None:
        self._stats.sample(asyncio.get_running_loop().time())
        live = [o for o in self._queues.entries.values() if not o.revoking]
        if self._queues.store_acknowledged(live):
            # Oneway, as the push consumer's periodic persistence (RemoteBrokerOffsetStore).
            await self._offsets.persist_all(self._queues.held())

    async def seek(self, queue: MessageQueue, offset: int) -> None:
        """Read ``queue`` from ``offset`` on: what was buffered is dropped and the next
        message [`poll`][aiorocket.PullConsumer.poll] returns from the queue is the one at
        ``offset``. With auto commit the new position is committed at the next tick (seeking back
        replays, also after a restart). Asks the broker for the queue's range first (Java ``seek``).

        Raises:
            QueueNotAssignedError: the queue is not owned (or was revoked meanwhile).
            OffsetOutOfRangeError: ``offset`` is below the queue's smallest stored offset or
                above its next offset to be written.
            ClientClosedError: the consumer is closed.
            TransportError, BrokerError: the broker could not be asked.
        """
        owned = self._require_owned(queue)
        lo, hi = await self._positions.bounds(owned.mq)
        if not lo <= offset <= hi:
            raise OffsetOutOfRangeError(queue, offset, lo, hi)
        self._seek_now(queue, owned, offset)

    def _seek_now(self, queue: MessageQueue, owned: OwnedQueue, offset: int) -> None:
        if self._queues.entries.get(owned.mq) is not owned or owned.revoking:
            raise QueueNotAssignedError(queue, "was revoked by a rebalance during the seek")
        self._m.require_running()
        log.info("%s: seek to %d", owned.mq, offset)
        self._queues.reseat(owned, offset)

    async def seek_to_beginning(self, queue: MessageQueue) -> None:
        """[`seek`][aiorocket.PullConsumer.seek] to the queue's smallest stored offset.

        Raises:
            RocketError: as [`seek`][aiorocket.PullConsumer.seek].
        """
        owned = self._require_owned(queue)
        lo, _ = await self._positions.bounds(owned.mq)
        self._seek_now(queue, owned, lo)

    async def seek_to_end(self, queue: MessageQueue) -> None:
        """[`seek`][aiorocket.PullConsumer.seek] past the queue's last message: only messages stored
        later are read.

        Raises:
            RocketError: as [`seek`][aiorocket.PullConsumer.seek].
        """
        owned = self._require_owned(queue)
        _, hi = await self._positions.bounds(owned.mq)
        self._seek_now(queue, owned, hi)

    async def seek_to_time(self, queue: MessageQueue, when: datetime) -> None:
        """[`seek`][aiorocket.PullConsumer.seek] to the first message stored at or after ``when``
        (past the last message if none is that recent). A naive ``datetime`` is local time.

        The broker's SEARCH_OFFSET_BY_TIMESTAMP answer is refined by reading the store times
        of messages around it (one-message pulls; see `aiorocket._client.time_search`).

        Raises:
            RocketError: as [`seek`][aiorocket.PullConsumer.seek].
        """
        owned = self._require_owned(queue)
        self._seek_now(queue, owned, await self._positions.offset_at(owned.mq, when))

    # -- flow ---------------------------------------------------------------------------------

    def pause(self, *queues: MessageQueue) -> None:
        """Stop delivering and pulling these queues until [`resume`][aiorocket.PullConsumer.resume]:
        nothing of them is returned by a later [`poll`][aiorocket.PullConsumer.poll] (buffered
        messages wait), they are not pulled, and their positions and offsets stay. A pause lasts
        while the queue is owned, through rebalances that keep it; a queue revoked and given back
        later starts unpaused.

        Raises:
            QueueNotAssignedError: a queue is not owned (nothing was paused).
            ClientClosedError: the consumer is closed.
        """
        targets = [self._require_owned(q) for q in queues]
        self._queues.set_paused(True, [owned.mq for owned in targets])

    def resume(self, *queues: MessageQueue) -> None:
        """Deliver and pull these queues again (buffered messages first).

        Raises:
            QueueNotAssignedError: a queue is not owned (nothing was resumed).
            ClientClosedError: the consumer is closed.
        """
        targets = [self._require_owned(q) for q in queues]
        self._queues.set_paused(False, [owned.mq for owned in targets])

    def paused(self) -> set[MessageQueue]:
        """The owned queues paused now."""
        if not self._m.started:
            return set()
        return {self._user_mq(mq) for mq in self._queues.entries if self._queues.is_paused(mq)}

    # -- retries, topics ----------------------------------------------------------------------

    async def reconsume_later(self, msg: ReceivedMessage, delay_level: int = 0) -> None:
        """Send ``msg`` back to the broker: it comes again through ``%RETRY%<group>`` after
        the delay of ``delay_level`` (0: the broker's choice, 3 + its reconsume count, as for
        a push consumer's failures), or lands in ``%DLQ%<group>`` past
        ``max_reconsume_times``. The message itself still counts as processed once you move
        on (it is the copy in ``%RETRY%`` that comes back). Broadcasting consumers have no
        send-back (every member has its own copy; Java drops failed broadcast messages).

        Raises:
            ConfigurationError: a broadcasting consumer, or not started.
            ClientClosedError: the consumer is closed.
            TransportError, BrokerError: neither the send-back nor the fallback resend into
                ``%RETRY%<group>`` got there; do not count the message as processed.
        """
        self._m.require_running()
        if not self._m.clustering:
            raise ConfigurationError("a broadcasting consumer cannot send messages back")
        await self._sender.send_back_or_raise(msg, delay_level, msg.broker_name)

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic`` (asks the name server; works before start too).

        Raises:
            InvalidNameError: a bad topic name.
            TopicNotExistError: the name server has no route for it.
            TransportError: no name server answered.
        """
        validate_name(topic)
        wire = self._m.wire_topic(topic)
        if self._m.started and not self._m.closing:
            route = await self._client.fetch_route(wire)
        else:
            client = ClientInstance(self.settings)
            client.start(asyncio.get_running_loop().create_task)
            try:
                route = await client.fetch_route(wire)
            finally:
                await client.close()
        return sorted(self._user_mq(mq) for mq in route.subscribe_queues(wire))

    def __repr__(self) -> str:
        state = "closed" if self._m.closing else "started" if self._m.started else "new"
        held = len(self.held()) if self._m.started else 0
        return f"PullConsumer(group={self._m.group!r}, {state}, queues={held})"
