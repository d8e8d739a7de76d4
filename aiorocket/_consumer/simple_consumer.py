"""The simple consumer: RocketMQ 5.x POP consumption, asked for by the application
(the 5.x SDKs' ``SimpleConsumer``, over the remoting protocol; docs/protocol.md §12.3).

A POP broker hands out messages and keeps them invisible to the rest of the group until they
are acked or their invisible time passes; then its revive service puts them back (in the
group's POP retry topic, with ``reconsume_times`` + 1). There is no client-side rebalance: a
group may have more consumers than queues, and a slow consumer holds messages, not queues.

``receive`` pops from the subscribed topics' brokers in turn (``queueId`` -1: any queue of a
broker). With one broker to ask it is one long-polled POP; with several, one quick POP each,
then NOTIFICATION requests held by all of them at once, and a POP from the first that has
something. An idle consumer so waits in the brokers, costing no CPU. Dead letters and handles:
`popping`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.group_member import ConsumerKind, MemberOwner, MemberParts
from aiorocket._consumer.hooks import ReceiveHook, ReceiveHookContext, run_received
from aiorocket._consumer.popping import (
    MAX_MESSAGES,
    PopClient,
    PoppedMessage,
    PopTarget,
    duration_ms,
)
from aiorocket._consumer.shutdown import ShutdownSteps
from aiorocket._consumer.subscription import Subscription, check_selector
from aiorocket._consumer.trace_hook import trace_dispatcher
from aiorocket._protocol.codes import Perm
from aiorocket.errors import (
    BrokerError,
    ConfigurationError,
    RocketError,
    TransportError,
)
from aiorocket.models import MessageQueue, ReceivedMessage, validate_name
from aiorocket.settings import ConsumerSettings, build_settings

__all__ = ["SimpleConsumer"]

log = logging.getLogger("aiorocket.consumer")

#: PUSH settings a simple consumer has no use for
_PUSH_ONLY = frozenset(
    {"orderly", "order_by", "concurrency", "consume_batch_size", "consume_timeout", "listener"}
)


class SimpleConsumer(MemberOwner):
    """A POP consumer the application drives: ``receive``, then ``ack`` (or let the invisible
    time pass for a retry, or move it with ``change_invisible_duration``). Needs RocketMQ 5.x
    brokers (or the embedded broker); a 4.x broker answers
    [`RequestCodeNotSupportedError`][aiorocket.errors.RequestCodeNotSupportedError].

    Args:
        group: the consumer group (shared with 5.x push consumers in POP mode and with the
            5.x SDKs' simple consumers).
        namesrv: name server address(es).
        invisible_duration: seconds a received message stays invisible to the group unless
            acked (the default of [`receive`][aiorocket.SimpleConsumer.receive]).
        await_duration: seconds [`receive`][aiorocket.SimpleConsumer.receive] waits in the brokers
            for a message.
        consume_from: where a new group starts: ``"last"`` (messages sent from now on) or
            ``"first"``.
        fifo: ordered POP (RocketMQ 5.x FIFO): a queue's messages go to one receiver at a time
            and its later messages are held back until these are acked (or their invisible
            time ends, when they come again in order), so the messages of a message group
            (the producer's ``message_group`` / ``sharding_key``) are received in order.
        **settings: client and consumer settings
            ([`ConsumerSettings`][aiorocket.settings.ConsumerSettings]: ``namespace``,
            ``max_reconsume_times`` (16 by default: the 17th delivery goes to ``%DLQ%<group>``),
            TLS, ACL, timeouts, ...).

    Raises:
        ConfigurationError: a bad setting.
    """

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str],
        invisible_duration: float = 30.0,
        await_duration: float = 20.0,
        consume_from: Literal["last", "first"] = "last",
        fifo: bool = False,
        **settings: Any,
    ) -> None:
        refused = sorted(_PUSH_ONLY & set(settings))
        if refused:
            raise ConfigurationError(
                f"{', '.join(refused)}: push consumer setting(s); a simple consumer has no handler"
            )
        built = build_settings(
            ConsumerSettings,
            {"group": group, "namesrv": namesrv, "consume_from": consume_from, **settings},
        )
        self._compose(
            built,
            ConsumerKind(
                name="simple consumer",
                consume_type="CONSUME_ACTIVELY",
                check_startable=self._check_startable,
                build=self._build,
                startup=self._startup,
                held=self.held,
                describe_mode=self._describe_mode,
            ),
        )
        self._invisible_ms = duration_ms(invisible_duration, "invisible_duration")
        if not await_duration >= 0:
            raise ConfigurationError("await_duration must not be negative")
        self._await = float(await_duration)
        self._next_target = 0
        self._fifo = fifo
        self._pop: PopClient
        self._receive_hooks: list[ReceiveHook] = []

    # -- configuration ------------------------------------------------------------------------

    def register_hook(self, hook: ReceiveHook) -> None:
        """Add a hook whose ``received`` runs once per [`receive`][aiorocket.SimpleConsumer.receive]
        that returns messages (`aiorocket._consumer.hooks`).

        Raises:
            ConfigurationError: the consumer was started already.
        """
        self._m.check_not_started("register a hook")
        self._receive_hooks.append(hook)

    def subscribe(self, topic: str, expression: str = "*", *, sql: str | None = None) -> None:
        """Receive ``topic``'s messages whose tag matches ``expression`` (``"*"``, ``"A || B"``),
        or, with ``sql=``, whose properties match an SQL92 expression (filtered by the broker).
        Subscribing a topic again replaces its expression.

        Raises:
            InvalidNameError: a bad topic name.
            InvalidSelectorError: ``sql`` does not compile.
            ConfigurationError: both a tag expression and ``sql``, or already started.
        """
        self._m.check_not_started("subscribe")
        check_selector(expression, sql)
        validate_name(topic)
        wire = self._m.wire_topic(topic)
        self._m.subscriptions[wire] = Subscription.create(wire, expression, sql)

    # -- lifecycle (its GroupMember's kind)----------------------------------------------------

    def _check_startable(self) -> None:
        if not self._m.subscriptions:
            raise ConfigurationError("subscribe to a topic before starting")
        if not self._m.clustering:
            raise ConfigurationError("POP consumption is clustering only")

    def _build(self) -> MemberParts:
        s = self.settings
        self._client = client = ClientInstance(s)
        self.tracer = trace_dispatcher(client, s)
        self._pop = PopClient.for_group(client, self._m.group, s, self.tracer)
        return MemberParts(client, self._m.new_membership(client), ShutdownSteps(), self.tracer)

    async def _startup(self) -> None:
        await self._m.join(heartbeats=True)
        self._m.membership.start()
        if self.tracer is not None:
            self._m.spawn(self.tracer.run(), name="trace")

    def held(self) -> list[MessageQueue]:
        """No queue is held: every message is popped from whichever queue has it."""
        return []

    def _describe_mode(self) -> str:
        return "POP, the broker hands out messages" + (", FIFO" if self._fifo else "")

    # -- receiving ----------------------------------------------------------------------------

    def _targets(self) -> list[PopTarget]:
        """Every (subscription, broker name) with a readable queue, in a stable order."""
        out: list[PopTarget] = []
        for topic, sub in self._m.subscriptions.items():
            route = self._client.route(topic)
            if route is None:
                continue
            names = sorted({q.broker_name for q in route.queue_datas if q.perm & Perm.READ})
            out.extend((sub, name) for name in names)
        return out

    async def receive(
        self, max_messages: int = 16, invisible_duration: float | None = None
    ) -> list[PoppedMessage]:
        """Up to ``max_messages`` (1-32) messages, each invisible to the rest of the group for
        ``invisible_duration`` seconds (the consumer's default if None) unless acked; waits up
        to ``await_duration`` for the first; an empty list when none came.

        Raises:
            ConfigurationError: ``max_messages`` outside 1-32, a non-positive duration.
            RequestCodeNotSupportedError: the broker does not serve POP (RocketMQ 4.x).
            BrokerError: another refusal (an unknown topic, a missing subscription group).
            TransportError: no broker could be reached.
            ConfigurationError: the consumer was never started.
            ClientClosedError: the consumer is closed.
        """
        if not self._receive_hooks:
            return await self._receive(max_messages, invisible_duration)
        started = time.time_ns()
        got = await self._receive(max_messages, invisible_duration)
        if got:
            s = self.settings
            ctx = ReceiveHookContext(s.group, s.namespace, "receive", got, started)
            run_received(self._receive_hooks, ctx)
        return got

    async def _receive(
        self, max_messages: int, invisible_duration: float | None
    ) -> list[PoppedMessage]:
        if not 1 <= max_messages <= MAX_MESSAGES:
            raise ConfigurationError(f"max_messages must be 1-{MAX_MESSAGES}, not {max_messages}")
        invisible = (
            self._invisible_ms
            if invisible_duration is None
            else duration_ms(invisible_duration, "invisible_duration")
        )
        self._m.require_running()
        deadline = time.monotonic() + self._await
        targets = self._targets()
        if not targets:
            await self._m.membership.refresh_routes()
            targets = self._targets()
            if not targets:
                # No route yet (an unknown topic): wait a little rather than let a receive
                # loop spin.
                await asyncio.sleep(min(self._await, 1.0))
                return []
        start = self._next_target % len(targets)
        self._next_target += 1
        ordered = targets[start:] + targets[:start]
        if len(ordered) == 1:
            poll_ms = int(self._await * 1000)
            return await self._pop.pop(
                ordered[0],
                max_messages=max_messages,
                invisible_ms=invisible,
                poll_ms=poll_ms,
                order=self._fifo,
            )
        while True:
            failed: list[RocketError] = []
            for target in ordered:
                try:
                    got = await self._pop.pop(
                        target,
                        max_messages=max_messages,
                        invisible_ms=invisible,
                        poll_ms=0,
                        order=self._fifo,
                    )
                except (BrokerError, TransportError) as exc:
                    # One broker without a master (or unreachable) must not stop the others.
                    log.debug("pop from %s failed: %s", target[1], exc)
                    failed.append(exc)
                    continue
                if got:
                    return got
            if len(failed) == len(ordered):
                raise failed[0]
            remaining = deadline - time.monotonic()
            if remaining <= 0.05:
                return []
            ready = None
            if self._pop.notifies(ordered):
                ready = await self._pop.first_notified(ordered, remaining)
            remaining = deadline - time.monotonic()
            if ready is None and not self._pop.notifies(ordered) and remaining > 0.05:
                # No NOTIFICATION (a proxy): hold a POP at the first broker instead (the
                # first one rotates from one receive to the next).
                return await self._pop.pop(
                    ordered[0],
                    max_messages=max_messages,
                    invisible_ms=invisible,
                    poll_ms=int(remaining * 1000),
                    order=self._fifo,
                )
            if ready is None:
                return []
            ordered = [ready] + [t for t in ordered if t is not ready]

    # -- acknowledging ------------------------------------------------------------------------

    async def ack(self, msg: ReceivedMessage) -> None:
        """Acknowledge ``msg``: the group is done with it.

        Raises:
            InvalidReceiptHandleError: ``msg`` was not received by this consumer.
            ReceiptHandleExpiredError: its invisible time passed (it may come again).
            BrokerError, TransportError: the broker refused or could not be reached.
            ClientClosedError: the consumer is closed.
        """
        self._m.require_running()
        await self._pop.ack_received((msg,))

    async def ack_all(self, msgs: Iterable[ReceivedMessage]) -> None:
        """Acknowledge several messages, one BATCH_ACK_MESSAGE request per broker.

        Raises:
            RocketError: as [`ack`][aiorocket.SimpleConsumer.ack] (before anything is sent when a
                handle is foreign or expired).
        """
        self._m.require_running()
        await self._pop.ack_received(msgs)

    async def change_invisible_duration(self, msg: ReceivedMessage, seconds: float) -> None:
        """Make ``msg`` invisible to the group for ``seconds`` from now (to extend a long job,
        or to retry it sooner); its receipt handle is renewed in place (the old one is spent).
        The message counts as delivered once more only if it comes back (it is not acked
        before the new time passes): the broker re-checkpoints it, and only a revived
        checkpoint adds to ``reconsume_times``.

        Raises:
            ConfigurationError: a non-positive duration.
            RocketError: as [`ack`][aiorocket.SimpleConsumer.ack].
        """
        invisible = duration_ms(seconds, "seconds")
        self._m.require_running()
        await self._pop.change_invisible(self._pop.check(msg), invisible)

    def __repr__(self) -> str:
        state = "closed" if self._m.closing else "started" if self._m.started else "new"
        topics = sorted(self._m.subscriptions)
        return f"SimpleConsumer(group={self._m.group!r}, {state}, topics={topics})"
