"""The lite consumer: RocketMQ 5.5 lite topics over remoting (docs/protocol.md §12.8), in the
style of the SimpleConsumer (the 5.x SDKs' ``LitePushConsumer`` and ``LiteSimpleConsumer``
keep the same subscriptions through the proxy's gRPC API).

A lite topic is a short-lived child of a parent topic of type LITE (one per conversation,
session or request). The consumer is bound to one parent; while it runs it subscribes and
unsubscribes lite topics (LITE_SUBSCRIPTION_CTL, ``PARTIAL_ADD`` / ``PARTIAL_REMOVE`` at every
broker of the parent), repeats its whole set every ``sync_interval`` (``COMPLETE_ADD``: a broker
forgets a client whose set was not repeated for 3 minutes) and leaves with ``COMPLETE_REMOVE``.
``receive`` pops the messages of all its lite topics at once (POP_LITE_MESSAGE), one request
held in each broker at a time; a lite topic is read in order, one batch at a time: its next
messages come once the batch is acked (or its invisible time passed). A broker may take a lite
topic away (NOTIFY_UNSUBSCRIBE_LITE, an exclusive group's other member subscribed it): it leaves
the set, and ``on_unsubscribed`` is told.

Lite consumption needs brokers of RocketMQ 5.5+ (or the embedded broker) reached through their
name server: a 5.5 proxy's remoting port does not serve it. Either is refused at start with
[UnsupportedFeatureError][aiorocket.errors.UnsupportedFeatureError].
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal

from aiorocket._client.instance import ClientInstance
from aiorocket._client.lite import lite_subscription_ctl
from aiorocket._concurrency import Periodic
from aiorocket._consumer.group_member import ConsumerKind, MemberOwner, MemberParts
from aiorocket._consumer.hooks import ReceiveHook, ReceiveHookContext, run_received
from aiorocket._consumer.popping import (
    MAX_MESSAGES,
    PopClient,
    PoppedMessage,
    duration_ms,
)
from aiorocket._consumer.shutdown import ShutdownSteps
from aiorocket._consumer.subscription import Subscription
from aiorocket._consumer.trace_hook import trace_dispatcher
from aiorocket._names import now_ms, without_namespace
from aiorocket._protocol.codes import (
    VERSION_V5_0_0_SNAPSHOT,
    VERSION_V5_5_0,
    Perm,
    RequestCode,
)
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.lite import (
    MAX_LITE_TOPIC_LENGTH,
    POLICY_MAX,
    POLICY_MIN,
    LiteSubscriptionCtlRequestBody,
    LiteSubscriptionDTO,
    NotifyUnsubscribeLiteRequestHeader,
    OffsetOption,
    is_valid_lite_topic,
)
from aiorocket._remoting import Connection, Dispatcher
from aiorocket.errors import (
    ClientClosedError,
    ConfigurationError,
    RequestCodeNotSupportedError,
    RocketError,
    TopicNotExistError,
    TransportError,
    UnsupportedFeatureError,
)
from aiorocket.models import MessageQueue, ReceivedMessage, validate_name
from aiorocket.settings import ConsumerSettings, build_settings

__all__ = ["LiteConsumer", "LiteStart"]

log = logging.getLogger("aiorocket.consumer")

#: where a new lite subscription starts: ``"first"`` (the lite topic's first message),
#: ``"last"`` (its end: messages sent from now on), an offset, or ``None`` (the group's
#: committed offset; a new group reads a young lite topic from its start)
LiteStart = Literal["first", "last"] | int | None

#: settings a lite consumer has no use for (push consumers', and the start of a subscription,
#: which each subscribe_lite names)
_REFUSED = frozenset(
    {
        "orderly",
        "order_by",
        "concurrency",
        "consume_batch_size",
        "consume_timeout",
        "listener",
        "consume_from",
    }
)


class LiteConsumer(MemberOwner):
    """A consumer of the lite topics of one parent topic (RocketMQ 5.5; see the module docs):
    [subscribe_lite][aiorocket.LiteConsumer.subscribe_lite] and
    [unsubscribe_lite][aiorocket.LiteConsumer.unsubscribe_lite] while it runs,
    [receive][aiorocket.LiteConsumer.receive], then [ack][aiorocket.LiteConsumer.ack] (or let
    the invisible time pass: the lite topic's batch comes again).

    The parent must be a topic of type LITE
    ([Admin.create_topic][aiorocket.Admin.create_topic] with ``message_type="LITE"``) and the
    group bound to it ([Admin.create_group][aiorocket.Admin.create_group] with
    ``lite_bind_topic=``); producers send with ``Message(parent, body, lite_topic=...)``.

    Args:
        group: the consumer group, bound to ``topic``.
        namesrv: name server address(es) of the brokers (not a proxy's).
        topic: the parent topic.
        invisible_duration: seconds a received message stays invisible (its lite topic
            blocked for the group) unless acked; the default of
            [receive][aiorocket.LiteConsumer.receive].
        await_duration: seconds [receive][aiorocket.LiteConsumer.receive] waits in the brokers
            for a message.
        sync_interval: seconds between two repetitions of the whole subscription set (30, as
            the 5.x SDKs; brokers forget a client after 3 minutes without one).
        on_unsubscribed: called with the name of each lite topic a broker took away.
        **settings: client and consumer settings
            ([ConsumerSettings][aiorocket.settings.ConsumerSettings]: ``namespace``,
            ``max_reconsume_times`` (a message delivered more often goes to
            ``%DLQ%<group>``), TLS, ACL, timeouts, ``trace``, ...).

    Raises:
        ConfigurationError: a bad setting.
        InvalidNameError: a bad group or topic name.
    """

    def __init__(
        self,
        *,
        group: str,
        namesrv: str | Sequence[str],
        topic: str,
        invisible_duration: float = 30.0,
        await_duration: float = 20.0,
        sync_interval: float = 30.0,
        on_unsubscribed: Callable[[str], object] | None = None,
        **settings: Any,
    ) -> None:
        refused = sorted(_REFUSED & set(settings))
        if refused:
            raise ConfigurationError(f"{', '.join(refused)}: not a lite consumer setting")
        built = build_settings(ConsumerSettings, {"group": group, "namesrv": namesrv, **settings})
        self._compose(
            built,
            ConsumerKind(
                name="lite consumer",
                consume_type="CONSUME_ACTIVELY",
                check_startable=self._check_startable,
                build=self._build,
                startup=self._startup,
                held=self.held,
            ),
        )
        if not self._m.clustering:
            raise ConfigurationError("lite consumption is clustering only")
        validate_name(topic)
        self._topic = self._m.wire_topic(topic)
        self._m.subscriptions[self._topic] = Subscription.create(self._topic, "*", None)
        self._invisible_ms = duration_ms(invisible_duration, "invisible_duration")
        if not await_duration >= 0:
            raise ConfigurationError("await_duration must not be negative")
        if not sync_interval > 0:
            raise ConfigurationError("sync_interval must be positive")
        self._await = float(await_duration)
        self._sync_interval = float(sync_interval)
        self._on_unsubscribed = on_unsubscribed
        self._lite: set[str] = set()
        self._starts: dict[str, OffsetOption] = {}  # subscribed before start, with a start
        self._inflight: dict[str, asyncio.Task[list[PoppedMessage] | RocketError]] = {}
        self._attempts: dict[str, str] = {}
        self._buffer: list[PoppedMessage] = []
        self._ctl_lock = asyncio.Lock()
        self._receive_hooks: list[ReceiveHook] = []
        self._pop: PopClient
        self._sync_timer: Periodic

    # -- configuration ------------------------------------------------------------------------

    @property
    def topic(self) -> str:
        """The parent topic (without namespace)."""
        return without_namespace(self.settings.namespace, self._topic)

    @property
    def lite_topics(self) -> frozenset[str]:
        """The lite topics subscribed now."""
        return frozenset(self._lite)

    def register_hook(self, hook: ReceiveHook) -> None:
        """Add a hook whose ``received`` runs once per
        [receive][aiorocket.LiteConsumer.receive] that returns messages.

        Raises:
            ConfigurationError: the consumer was started already.
        """
        self._m.check_not_started("register a hook")
        self._receive_hooks.append(hook)

    # -- subscriptions --------------------------------------------------------------------------

    async def subscribe_lite(self, *lite_topics: str, start: LiteStart = None) -> None:
        """Subscribe ``lite_topics`` (before start, or while running: at every broker of the
        parent at once); those subscribed already are left as they are.

        Args:
            lite_topics: lite topic names: 1-64 characters from ``[a-zA-Z0-9_-]``.
            start: where reading starts: ``"first"`` (the lite topic's first message),
                ``"last"`` (messages sent from now on), an offset, or ``None`` (the group's
                committed offset; a new group reads a young lite topic from its start).

        Raises:
            ConfigurationError: no or a bad lite topic name, or a bad ``start``.
            BrokerError: a broker refused (2018: it holds too many lite subscriptions).
            TransportError: a broker could not be reached.
            ClientClosedError: the consumer is closed.
        """
        option = _offset_option(start)
        names = _checked(lite_topics)
        if not self._m.started:
            if self._m.closing:
                raise ClientClosedError("the consumer is closed")
            self._lite.update(names)
            if option is not None:
                self._starts.update(dict.fromkeys(names, option))
            return
        self._m.require_running()
        new = [t for t in names if t not in self._lite]
        if new:
            async with self._ctl_lock:
                await self._ctl("PARTIAL_ADD", new, option)
                self._lite.update(new)

    async def unsubscribe_lite(self, *lite_topics: str) -> None:
        """Unsubscribe ``lite_topics`` (at every broker of the parent); messages of them no
        longer arrive, even those received by a request still in flight.

        Raises:
            ConfigurationError: no lite topic named.
            BrokerError, TransportError: a broker refused or could not be reached.
            ClientClosedError: the consumer is closed.
        """
        if not lite_topics:
            raise ConfigurationError("name at least one lite topic")
        if not self._m.started:
            self._lite.difference_update(lite_topics)
            return
        self._m.require_running()
        gone = [t for t in dict.fromkeys(lite_topics) if t in self._lite]
        if gone:
            async with self._ctl_lock:
                await self._ctl("PARTIAL_REMOVE", gone, None)
                self._lite.difference_update(gone)

    async def _ctl(
        self, action: str, lite_topics: Iterable[str], option: OffsetOption | None
    ) -> None:
        """One LITE_SUBSCRIPTION_CTL to every broker of the parent (as the proxy's
        ``LiteSubscriptionService``); the first failure is raised once all answered."""
        dto = LiteSubscriptionDTO(
            action=action,
            client_id=self._client.client_id,
            group=self._m.group,
            topic=self._topic,
            lite_topic_set=tuple(sorted(lite_topics)),
            offset_option=option,
        )
        body = LiteSubscriptionCtlRequestBody((dto,))
        names = await self._brokers_now()
        results = await asyncio.gather(
            *(self._ctl_at(name, body) for name in names), return_exceptions=True
        )
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def _ctl_at(self, broker_name: str, body: LiteSubscriptionCtlRequestBody) -> None:
        client = self._client
        addr = await client.find_broker(broker_name, self._topic, master=True)
        try:
            await lite_subscription_ctl(client, addr, body)
        except RequestCodeNotSupportedError as exc:
            raise self._unsupported(addr) from exc

    def _unsupported(self, addr: str) -> UnsupportedFeatureError:
        """Code 3 to a lite request: a broker before 5.5, or a proxy's remoting port (a 5.x
        server answering as 5.5+, or the address given as name server, which a proxy's routes
        name as the broker)."""
        version = self._client.server_version(addr) or 0
        proxy = version >= VERSION_V5_0_0_SNAPSHOT and (
            version >= VERSION_V5_5_0 or addr in self.settings.namesrv
        )
        if proxy:
            message = (
                f"{addr} is a RocketMQ proxy (its routes name it as the broker) and its remoting "
                "port does not serve lite topics: lite consumption needs the brokers' name "
                "server, not a proxy"
            )
        else:
            message = (
                f"the broker at {addr} (version ordinal {version}) does not serve lite topics: "
                "lite topics need RocketMQ 5.5+"
            )
        return UnsupportedFeatureError(message, broker=addr, version=version, needed=VERSION_V5_5_0)

    async def _sync_all(self) -> None:
        """``COMPLETE_ADD`` of the whole set (``syncAllLiteSubscription``)."""
        async with self._ctl_lock:
            await self._ctl("COMPLETE_ADD", set(self._lite), None)

    async def _on_unsubscribe(self, conn: Connection, cmd: RemotingCommand) -> None:
        # NOTIFY_UNSUBSCRIBE_LITE (oneway): a broker took a lite topic away.
        h = NotifyUnsubscribeLiteRequestHeader.from_ext(cmd.ext_fields)
        if h.consumer_group != self._m.group or h.lite_topic not in self._lite:
            return
        self._lite.discard(h.lite_topic)
        log.info("lite topic %s of %s was taken away by its broker", h.lite_topic, self._m.group)
        if self._on_unsubscribed is not None:
            try:
                self._on_unsubscribed(h.lite_topic)
            except Exception:
                log.exception("on_unsubscribed(%r) failed", h.lite_topic)

    # -- lifecycle (its GroupMember's kind)----------------------------------------------------

    def _check_startable(self) -> None:
        """Nothing to check: a lite consumer may start with no lite topic."""

    def _build(self) -> MemberParts:
        s = self.settings
        requests = Dispatcher()
        requests.register(RequestCode.NOTIFY_UNSUBSCRIBE_LITE, self._on_unsubscribe)
        self._client = client = ClientInstance(s, handler=requests)
        self.tracer = trace_dispatcher(client, s)
        self._pop = PopClient.for_group(client, self._m.group, s, self.tracer)
        self._sync_timer = Periodic(
            self._sync_all, self._sync_interval, name="lite sync", run_first=False
        )
        steps = ShutdownSteps(stop_assigning=self._sync_timer.stop, release=self._release)
        return MemberParts(client, self._m.new_membership(client), steps, self.tracer)

    async def _startup(self) -> None:
        await self._m.join(heartbeats=False)
        if self._client.route(self._topic) is None:
            raise TopicNotExistError(
                f"the parent topic {self._topic} has no route: create it as a LITE topic "
                "(Admin.create_topic(..., message_type='LITE'))"
            )
        await self._sync_all()  # refused at once by a broker (or proxy) without lite topics
        by_option: dict[OffsetOption, list[str]] = {}
        for name, option in self._starts.items():
            by_option.setdefault(option, []).append(name)
        self._starts.clear()
        for option, names in by_option.items():
            await self._ctl("PARTIAL_ADD", names, option)
        self._client.on_new_brokers = self._on_new_brokers
        self._m.spawn(self._sync_timer.run(), name="lite sync")
        self._m.membership.start(heartbeats=False)  # (a lite consumer is heard through its syncs)
        if self.tracer is not None:
            self._m.spawn(self.tracer.run(), name="trace")

    def _on_new_brokers(self, names: set[str]) -> None:
        if not self._m.closing:
            self._sync_timer.wake()  # subscribe there too

    async def _release(self) -> None:
        # What was popped and not handed out comes back after its invisible time.
        self._buffer.clear()
        await self._m.cleanup(self._remove_subscriptions(), "remove lite subscriptions")

    async def _remove_subscriptions(self) -> None:
        # The proxy's offlineClientLiteSubscription: COMPLETE_REMOVE at every broker.
        try:
            await self._ctl("COMPLETE_REMOVE", (), None)
        except RocketError as exc:
            log.debug("removing the lite subscriptions failed: %s", exc)

    def held(self) -> list[MessageQueue]:
        """No queue is held: every message is popped from whichever lite topic has it."""
        return []

    # -- receiving ----------------------------------------------------------------------------

    def _brokers(self) -> list[str]:
        route = self._client.route(self._topic)
        if route is None:
            return []
        return sorted({q.broker_name for q in route.queue_datas if q.perm & Perm.READ})

    async def _brokers_now(self) -> list[str]:
        names = self._brokers()
        if not names:
            await self._m.membership.refresh_routes()
            names = self._brokers()
        return names

    async def receive(
        self, max_messages: int = 16, invisible_duration: float | None = None
    ) -> list[PoppedMessage]:
        """Up to ``max_messages`` (1-32) messages of the subscribed lite topics, each
        invisible to the rest of the group (its lite topic blocked) for
        ``invisible_duration`` seconds (the consumer's default if None) unless acked; waits
        up to ``await_duration`` for the first; an empty list when none came. A message's
        lite topic is its [lite_topic][aiorocket.ReceivedMessage.lite_topic].

        Raises:
            ConfigurationError: ``max_messages`` outside 1-32, a non-positive duration, or
                the consumer was never started.
            BrokerError: a broker refused (the topic is not LITE, the group not bound to it).
            TransportError: no broker could be reached.
            ClientClosedError: the consumer is closed.
        """
        if not 1 <= max_messages <= MAX_MESSAGES:
            raise ConfigurationError(f"max_messages must be 1-{MAX_MESSAGES}, not {max_messages}")
        invisible = (
            self._invisible_ms
            if invisible_duration is None
            else duration_ms(invisible_duration, "invisible_duration")
        )
        self._m.require_running()
        started = time.time_ns()
        got = await self._receive(max_messages, invisible)
        if got and self._receive_hooks:
            s = self.settings
            ctx = ReceiveHookContext(s.group, s.namespace, "receive", list(got), started)
            run_received(self._receive_hooks, ctx)
        return got

    async def _receive(self, max_messages: int, invisible_ms: int) -> list[PoppedMessage]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._await
        failed: dict[str, RocketError] = {}
        while True:
            self._collect(failed)
            got = self._take(max_messages)
            if got:
                return got
            names = await self._brokers_now()
            remaining = deadline - loop.time()
            if not names:
                # No route (the parent is missing): wait a little rather than let a loop spin.
                await asyncio.sleep(min(max(remaining, 0.0), 1.0))
                return []
            if len(failed) >= len(names):
                raise next(iter(failed.values()))
            if remaining > 0:
                for name in names:
                    if name not in self._inflight and name not in failed:
                        self._start_pop(name, max_messages, invisible_ms, int(remaining * 1000))
            if not self._inflight or remaining <= 0:
                return []
            await asyncio.wait(
                self._inflight.values(), timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )

    def _start_pop(
        self, broker_name: str, max_messages: int, invisible_ms: int, poll_ms: int
    ) -> None:
        # One request held per broker; its attemptId is used again after a lost answer, so
        # the broker does not keep the lite topics it handed out blocked on its account.
        attempt = self._attempts.setdefault(broker_name, uuid.uuid4().hex)
        self._inflight[broker_name] = self._m.spawn(
            self._pop_at(broker_name, max_messages, invisible_ms, poll_ms, attempt),
            name=f"lite pop {broker_name}",
        )

    async def _pop_at(
        self, broker_name: str, max_messages: int, invisible_ms: int, poll_ms: int, attempt: str
    ) -> list[PoppedMessage] | RocketError:
        try:
            return await self._pop.pop_lite(
                (self._m.subscriptions[self._topic], broker_name),
                client_id=self._client.client_id,
                max_messages=max_messages,
                invisible_ms=invisible_ms,
                poll_ms=poll_ms,
                attempt_id=attempt,
            )
        except RequestCodeNotSupportedError:
            addr = self._client.master_address(broker_name) or broker_name
            return self._unsupported(addr)
        except RocketError as exc:
            return exc

    def _collect(self, failed: dict[str, RocketError]) -> None:
        """Move the answers of finished requests into the buffer; a broker's failure is
        noted in ``failed`` (a transport failure) or raised (a refusal)."""
        for name, task in list(self._inflight.items()):
            if not task.done():
                continue
            del self._inflight[name]
            result = task.result()
            if isinstance(result, TransportError):
                log.debug("lite pop from %s failed: %s", name, result)
                failed[name] = result
                continue
            del self._attempts[name]
            if isinstance(result, RocketError):
                raise result
            self._buffer.extend(result)

    def _take(self, max_messages: int) -> list[PoppedMessage]:
        """Up to ``max_messages`` buffered messages of lite topics still subscribed whose
        handles are still valid; the others are dropped (they come back after their
        invisible time, to whoever subscribes their lite topic then)."""
        now = now_ms()
        keep = [
            m
            for m in self._buffer
            if m.lite_topic in self._lite and m.invisible_until.timestamp() * 1000 > now
        ]
        out, self._buffer = keep[:max_messages], keep[max_messages:]
        return out

    # -- acknowledging ------------------------------------------------------------------------

    async def ack(self, msg: ReceivedMessage) -> None:
        """Acknowledge ``msg``: the group is done with it (once its lite topic's batch is
        acked, the lite topic's next messages can come).

        Raises:
            InvalidReceiptHandleError: ``msg`` was not received by this consumer.
            ReceiptHandleExpiredError: its invisible time passed (it may come again).
            BrokerError, TransportError: the broker refused or could not be reached.
            ClientClosedError: the consumer is closed.
        """
        self._m.require_running()
        await self._pop.ack_received((msg,))

    async def ack_all(self, msgs: Iterable[ReceivedMessage]) -> None:
        """Acknowledge several messages (one ACK_MESSAGE each: brokers take no batch ack of
        lite messages).

        Raises:
            InvalidReceiptHandleError: a message was not received by this consumer (nothing
                is sent then).
            ReceiptHandleExpiredError: a message's invisible time passed (nothing is sent).
            BrokerError, TransportError: a broker refused or could not be reached.
            ClientClosedError: the consumer is closed.
        """
        self._m.require_running()
        await self._pop.ack_received(msgs)

    async def change_invisible_duration(self, msg: ReceivedMessage, seconds: float) -> None:
        """Make ``msg`` invisible for ``seconds`` from now (its lite topic stays blocked until
        then); its receipt handle is renewed in place.

        Raises:
            ConfigurationError: a non-positive duration.
            RocketError: as [ack][aiorocket.LiteConsumer.ack] (a foreign or expired
                handle, a refusal, a transport failure, a closed consumer).
        """
        invisible = duration_ms(seconds, "seconds")
        self._m.require_running()
        await self._pop.change_invisible(self._pop.check(msg), invisible)

    def __repr__(self) -> str:
        state = "closed" if self._m.closing else "started" if self._m.started else "new"
        return (
            f"LiteConsumer(group={self._m.group!r}, {state}, topic={self._topic!r}, "
            f"lite_topics={len(self._lite)})"
        )


def _checked(lite_topics: Sequence[str]) -> list[str]:
    if not lite_topics:
        raise ConfigurationError("name at least one lite topic")
    for name in lite_topics:
        if not is_valid_lite_topic(name):
            raise ConfigurationError(
                f"invalid lite topic name {name!r}: use 1-{MAX_LITE_TOPIC_LENGTH} characters "
                "from [a-zA-Z0-9_-]"
            )
    return list(dict.fromkeys(lite_topics))


def _offset_option(start: LiteStart) -> OffsetOption | None:
    """``start`` as the subscription's ``OffsetOption`` (POLICY MIN / MAX, OFFSET)."""
    if start is None:
        return None
    if start == "first":
        return OffsetOption("POLICY", POLICY_MIN)
    if start == "last":
        return OffsetOption("POLICY", POLICY_MAX)
    if isinstance(start, int) and not isinstance(start, bool) and start >= 0:
        return OffsetOption("OFFSET", start)
    raise ConfigurationError(
        f"start must be 'first', 'last', an offset >= 0 or None, not {start!r}"
    )
