"""The app layer: typed ``async def`` subscribers and a shared producer over the public API."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from aiorocket._concurrency import Periodic, Service, ServiceOwner, describe_crash
from aiorocket._consumer import PushConsumer
from aiorocket._consumer.hooks import ConsumeHook
from aiorocket._consumer.subscription import check_selector
from aiorocket._names import dlq_topic, validate_group, wrap_namespace
from aiorocket._producer.hooks import SendCallHook, SendHook
from aiorocket._producer.producer import Producer
from aiorocket._producer.request import is_request
from aiorocket.app.asyncapi import build_document
from aiorocket.app.declarations import (
    OrderBy,
    Publisher,
    Subscriber,
    SubscriberStatistics,
    parse_tags,
)
from aiorocket.app.decoding import (
    BodyDecodeError,
    body_decoder,
    encode_body,
    inspect_handler,
)
from aiorocket.app.failures import FailureLog
from aiorocket.app.health import QueueHealth, queue_health, readiness_report
from aiorocket.app.readiness import ReadinessProbe
from aiorocket.app.settings import AppSettings, check_group_settings, load_app_settings
from aiorocket.app.signals import DeadLetter, ReconsumeLater, RetryPolicy
from aiorocket.errors import ClientClosedError, ConfigurationError, RocketError
from aiorocket.models import (
    ConcurrentContext,
    ConsumeStatus,
    Message,
    OrderlyContext,
    OrderlyStatus,
    ReceivedMessage,
    SendResult,
    validate_name,
)
from aiorocket.settings import ClientSettings, ConsumerSettings, build_settings

__all__ = ["App", "SubscriberStatistics"]

log = logging.getLogger("aiorocket.app")

_F = TypeVar("_F", bound=Callable[..., Awaitable[Any]])

#: Properties put on a message quarantined by the app (the 5.x names, where there are some).
DLQ_REASON = "AIOROCKET_DLQ_REASON"
DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
#: delay levels 1-4 of the broker's default table in seconds (``messageDelayLevel``): an
#: orderly subscriber's ``ReconsumeLater(delay_level=...)`` suspends its queue this long;
#: higher levels are past the 30 s a suspension may last and get 30 s
_DELAY_LEVEL_SECONDS = (1, 5, 10, 30)
#: topics published to that the readiness probe follows, at most
_PUBLISHED_TOPICS = 64


class App(ServiceOwner):
    """An application of typed subscribers sharing one producer.

    ```python
    app = App(namesrv="127.0.0.1:9876")

    @app.subscriber("orders", group="billing", tags="created")
    async def bill(order: Order, msg: ReceivedMessage) -> None: ...

    async with app:          # or FastAPI(lifespan=app.lifespan), or `aiorocket run`
        await app.publish("orders", Order(id=1), tags="created")
    ```

    A crash of one of its clients (an unexpected error in a consumer's or the producer's
    background task: a bug) crashes the app: it closes its other clients,
    [`readiness`][aiorocket.app.App.readiness] names the crash, and
    [`wait_closed`][aiorocket.app.App.wait_closed] raises it.

    Settings come from keyword arguments, then ``AIOROCKET_*`` environment variables
    ([`AppSettings`][aiorocket.app.AppSettings]).

    Raises:
        ConfigurationError: invalid settings.
    """

    def __init__(self, *, namesrv: str | Sequence[str] | None = None, **settings: Any) -> None:
        self.settings: AppSettings = load_app_settings({"namesrv": namesrv, **settings})
        self._subscribers: list[Subscriber] = []
        self._publishers: list[Publisher] = []
        self._consumers: dict[str, PushConsumer] = {}
        self._producer: Producer | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._lifecycle = self._new_lifecycle()
        self._hooks: list[SendHook | SendCallHook | ConsumeHook] = []
        self._probe: ReadinessProbe | None = None
        self._probe_timer: Periodic | None = None
        self._published: dict[str, None] = {}  # wire topics, in order (the probe checks them)

    # -- declaring ----------------------------------------------------------------------------

    def subscriber(
        self,
        topic: str,
        *,
        group: str,
        tags: str = "*",
        sql: str | None = None,
        orderly: bool = False,
        order_by: OrderBy = "queue",
        batch: bool = False,
        batch_size: int = 32,
        concurrency: int | None = None,
        retry: RetryPolicy | None = None,
        **settings: Any,
    ) -> Callable[[_F], _F]:
        """Register ``async def handler(body: T[, msg: ReceivedMessage])`` for ``topic``.

        The first parameter's annotation chooses decoding: ``bytes``, ``str``, ``dict``/``list``
        (JSON) or a pydantic model (validated from JSON). A body that fails to decode goes to
        the dead-letter queue at once, with the error in the ``AIOROCKET_DLQ_REASON`` property.
        Returning is success; raising [`ReconsumeLater`][aiorocket.app.ReconsumeLater] or any
        exception retries the message through ``%RETRY%<group>``;
        [`DeadLetter`][aiorocket.app.DeadLetter] or ``retry`` rules send it to the DLQ. With
        ``batch=True`` the handler takes ``list[T]`` (up to ``batch_size``). Subscribers of one
        group share one consumer, so they must agree on ``orderly`` and ``order_by``.

        With ``orderly=True`` each queue's messages reach the handler one call at a time, in
        order: a failure suspends the queue and the same message comes again (after the
        ``ReconsumeLater`` delay level, within 30 s, else after the consumer's
        ``suspend_delay``) with nothing after it delivered meanwhile; retries are unlimited
        unless ``retry`` sets ``max_attempts``. Invalid bodies and failures the retry policy
        gives up on go to the dead-letter queue as above, and the queue moves on.

        Add ``order_by="sharding_key"`` (the key [`publish`][aiorocket.app.App.publish] got as
        ``sharding_key``) or ``order_by=fn`` (``fn(msg) -> str | None``) to keep the order per key
        instead of per
        queue: a queue's messages with the same key reach the handler one call at a time, in
        order, while different keys run concurrently (up to ``concurrency``); a failure holds
        back only its key. Messages without a key keep queue order among themselves.

        ``sql="region = 'eu' AND amount > 100"`` instead of ``tags`` subscribes by SQL92 over
        the message properties (the broker filters; it must have property filtering enabled).
        Such a subscriber is the only one of its group on its topic.

        Any per-group consumer setting (``consume_from="first"``, ``max_reconsume_times=3``,
        ``message_model="broadcasting"``, ...: the names of
        `GROUP_SETTINGS`) applies to this subscriber's group,
        over the app's own; subscribers of one group share one consumer, so they must not
        give one setting two values.

        A handler that returns a value (not ``None``) answers a request
        ([App.request][aiorocket.app.App.request], [Producer.request][aiorocket.Producer.request],
        Java's ``DefaultMQProducer.request``) with it, encoded as
        [publish][aiorocket.app.App.publish] encodes; its return annotation is the reply's type in
        the [AsyncAPI document][aiorocket.app.App.asyncapi]. For an ordinary message the value
        goes nowhere; batch handlers do not reply.

        Subscribers are push consumers: the library calls the handler, retries, commits.
        When your code must own the loop instead (a batch job that reads and stops, a service
        that fetches on request, bulk processing with explicit commits, ``seek`` to replay,
        ``pause`` for backpressure), use [`aiorocket.PullConsumer`][aiorocket.PullConsumer].

        Raises:
            ConfigurationError: bad names, a non-async handler, an unsupported body type, a
                conflict with another subscriber of the same group, or both ``tags`` and
                ``sql``.
            InvalidSelectorError: ``sql`` does not compile (the message gives the position).
            ConfigurationError: an unknown or invalid consumer setting (the message names it
                and suggests the closest name), or one another subscriber of the group set
                to another value.
        """
        check_selector(tags, sql)
        validate_name(topic)
        validate_group(group, "consumer group")
        if self._started:
            raise ConfigurationError("subscribers must be declared before the app starts")
        if batch_size < 1:
            raise ConfigurationError("batch_size must be at least 1")
        if order_by != "queue" and not orderly:
            raise ConfigurationError("order_by needs orderly=True")
        group_settings = self._group_settings(topic, group, settings)
        # Checked now, as the consumer will check it: a bad value fails at the decorator.
        build_settings(
            ConsumerSettings,
            {
                **self.settings.client_settings(),
                **self.settings.consumer,
                **group_settings,
                "group": group,
                "orderly": orderly,
                "order_by": order_by,
            },
        )

        def register(fn: _F) -> _F:
            sig = inspect_handler(fn, batch=batch)
            sub = Subscriber(
                topic=topic,
                group=group,
                tags=parse_tags(tags) if sql is None else None,
                sql=sql,
                orderly=orderly,
                order_by=order_by,
                batch=batch,
                batch_size=batch_size if batch else 1,
                concurrency=concurrency,
                retry=retry or RetryPolicy(),
                fn=fn,
                sig=sig,
                failures=FailureLog(
                    getattr(fn, "__name__", repr(fn)),
                    self.settings.failure_log_interval,
                    log,
                    time.monotonic,
                ),
                settings=dict(settings),
            )
            sub.check_joins(self._subscribers)
            self._subscribers.append(sub)
            return fn

        return register

    def _group_settings(self, topic: str, group: str, settings: dict[str, Any]) -> dict[str, Any]:
        """The consumer settings of ``group`` with a new subscriber's ``settings``: each
        checked, and none given two values by two subscribers (they share one consumer)."""
        where = f"subscriber of {topic!r} in group {group!r}"
        check_group_settings(settings, where, client=False)
        group_settings = dict(settings)
        for other in self._subscribers:
            if other.group != group:
                continue
            for name in other.settings.keys() & settings.keys():
                if other.settings[name] != settings[name]:
                    raise ConfigurationError(
                        f"{where}: {name}={settings[name]!r} but another subscriber of the "
                        f"group has {name}={other.settings[name]!r}; they share one consumer"
                    )
            group_settings = {**other.settings, **group_settings}
        return group_settings

    def publisher(
        self,
        topic: str,
        model: Any = bytes,
        *,
        tags: str | None = None,
        reply: Any = None,
        description: str | None = None,
    ) -> None:
        """Declare that the app publishes ``model`` bodies to ``topic`` (with ``tags``), or
        sends them as requests answered with ``reply`` bodies
        ([request][aiorocket.app.App.request]): a ``send`` operation of the
        [AsyncAPI document][aiorocket.app.App.asyncapi]. Publishing does not require it.

        Raises:
            InvalidNameError: a bad topic name.
        """
        validate_name(topic)
        self._publishers.append(Publisher(topic, model, tags, reply, description))

    def register_hook(self, hook: SendHook | SendCallHook | ConsumeHook) -> None:
        """Add a hook to the clients the app starts: a send hook (``send_before`` /
        ``send_after``, ``send_prepare`` / ``send_done``) to its producer, a consume hook
        (``consume_before`` / ``consume_after``) to every subscriber's consumer; a hook may be
        both (see [`Producer.register_hook`][aiorocket.Producer.register_hook] and
        [`PushConsumer.register_hook`][aiorocket.PushConsumer.register_hook]).

        Raises:
            ConfigurationError: the app was started already.
        """
        if self._started:
            raise ConfigurationError("hooks must be registered before the app starts")
        self._hooks.append(hook)

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def producer(self) -> Producer:
        """The app's shared producer (available while the app runs).

        Raises:
            ClientClosedError: the app is not running.
        """
        if self._producer is None:
            raise ClientClosedError("the app is not running")
        return self._producer

    async def start(self) -> None:
        """Start the producer, then one consumer per group; returns once each consumer has
        completed its first rebalance.

        Raises:
            ConfigurationError: invalid settings for a consumer or the producer.
            RocketError: a client could not start (name server unreachable, …).
        """
        if self._lifecycle.closing:  # stopped (or crashed) before: a new run
            self._lifecycle = self._new_lifecycle()
        await self._lifecycle.start()

    def _new_lifecycle(self) -> Service:
        # The clients are entered and left in the lifecycle's supervisor task, not in the
        # caller's (a lifespan): see aiorocket._concurrency.service.
        return Service(
            "app",
            startup=self._start_clients,
            shutdown=self._stop_clients,
            abort=self._abort,
            logger=log,
        )

    @property
    def _started(self) -> bool:
        return self._lifecycle.running

    async def close(self) -> None:
        """Stop consumers (in-flight handlers drain within their grace period, offsets are
        flushed), then the producer.

        Raises:
            BaseExceptionGroup: a consumer crashed while it was being closed.
        """
        await self._lifecycle.close()

    async def stop(self) -> None:
        """Same as [`close`][aiorocket.app.App.close] (kept for compatibility).

        Raises:
            BaseExceptionGroup: a consumer crashed while it was being closed.
        """
        await self.close()

    async def _start_clients(self) -> None:
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            base = self.settings.client_settings()
            producer = Producer(
                group=self.settings.producer_group, **base, **self.settings.producer
            )
            for hook in self._hooks:
                producer.register_hook(hook)  # type: ignore[arg-type]
            self._producer = await stack.enter_async_context(producer)
            for group, subs in self._groups().items():
                consumer = self._build_consumer(group, subs, base)
                for hook in self._hooks:
                    if callable(getattr(hook, "consume_before", None)):
                        consumer.register_hook(hook)  # type: ignore[arg-type]
                await stack.enter_async_context(consumer)
                self._consumers[group] = consumer
            # A crash of a client (a bug in one of its tasks) crashes the app.
            for client in (producer, *self._consumers.values()):
                self._lifecycle.watch(client)
            s = self.settings
            probe = ReadinessProbe(
                build_settings(ClientSettings, base),
                timeout=s.readiness_timeout,
                failing_after=s.failing_after,
                topics=self._probed_topics,
                consumers=self.consumers,
            )
            self._probe = await stack.enter_async_context(probe)
            await probe.check()  # the routes to follow are known before start() returns
            timer = Periodic(
                probe.check, s.readiness_interval, name="app readiness check", run_first=False
            )
            self._probe_timer = timer
            self._lifecycle.spawn(timer.run(), name="app readiness check")
        except BaseException:
            await stack.aclose()
            self._producer = None
            self._probe = None
            self._consumers.clear()
            raise
        self._stack = stack

    def _probed_topics(self) -> list[str]:
        namespace = self.settings.namespace
        subscribed = [wrap_namespace(namespace, s.topic) for s in self._subscribers]
        return [*subscribed, *self._published]

    async def _stop_clients(self) -> None:
        timer, self._probe_timer = self._probe_timer, None
        if timer is not None:
            timer.stop()
        self._probe = None
        stack, self._stack = self._stack, None
        try:
            if stack is not None:
                # A consumer's crash, re-raised by leaving it: close() raises it, as is.
                await stack.aclose()
        finally:
            self._producer = None
            self._consumers.clear()

    async def _abort(self, started: bool) -> None:
        # After a crash (or a failed start): the other clients close as close() would.
        try:
            await self._stop_clients()
        except Exception as exc:
            log.error("app: another client crashed while closing: %s", describe_crash(exc))

    @contextlib.asynccontextmanager
    async def lifespan(self, _asgi_app: object = None) -> AsyncIterator[None]:
        """A lifespan for ``FastAPI(lifespan=app.lifespan)``: runs the app with the web app."""
        async with self:
            yield

    # -- publishing ---------------------------------------------------------------------------

    async def publish(
        self,
        topic: str,
        body: bytes | str | BaseModel | Mapping[str, Any] | list[Any],
        *,
        tags: str | None = None,
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        sharding_key: str | None = None,
        delay_level: int | None = None,
        priority: int | None = None,
    ) -> SendResult:
        """Send one message through the shared producer; models and JSON values are encoded
        as JSON. ``priority`` makes it a RocketMQ 5.4+ priority message (see
        [`Message`][aiorocket.Message]).

        Raises:
            ClientClosedError: the app is not running.
            RocketError: as [`Producer.send`][aiorocket.Producer.send].
        """
        msg = Message(
            topic,
            encode_body(body),
            tags=tags,
            keys=keys,
            properties=properties,
            delay_level=delay_level,
            priority=priority,
        )
        result = await self.producer.send(msg, sharding_key=sharding_key)
        self._note_published(topic)
        return result

    async def request(
        self,
        topic: str,
        body: bytes | str | BaseModel | Mapping[str, Any] | list[Any],
        *,
        reply_model: Any = bytes,
        timeout: float | None = None,
        tags: str | None = None,
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        sharding_key: str | None = None,
    ) -> Any:
        """Send ``body`` (encoded as by [publish][aiorocket.app.App.publish]) as a request and
        return the reply decoded as ``reply_model`` (a pydantic model, ``dict``, ``list``,
        ``str``; ``bytes`` as it came). A subscriber of ``topic`` whose handler returns a
        value answers it (see [subscriber][aiorocket.app.App.subscriber]); any RocketMQ
        responder will do ([Producer.request][aiorocket.Producer.request]).

        Raises:
            ReplyTimeoutError: no reply within ``timeout`` (default ``send_timeout``).
            BodyDecodeError: the reply does not decode as ``reply_model``.
            ConfigurationError: ``reply_model`` is no supported type.
            ClientClosedError: the app is not running.
            RocketError: as [Producer.request][aiorocket.Producer.request].
        """
        decode = body_decoder(reply_model)
        msg = Message(topic, encode_body(body), tags=tags, keys=keys, properties=properties)
        reply = await self.producer.request(msg, timeout=timeout, sharding_key=sharding_key)
        self._note_published(topic)
        return decode(reply.body)

    def _note_published(self, topic: str) -> None:
        if len(self._published) < _PUBLISHED_TOPICS:
            self._published[wrap_namespace(self.settings.namespace, topic)] = None

    def asyncapi(
        self,
        *,
        title: str = "aiorocket app",
        version: str = "1.0.0",
        description: str | None = None,
    ) -> dict[str, Any]:
        """The app's AsyncAPI 3.0 document (JSON data; the module `aiorocket.app.asyncapi`): its
        name servers, a channel per topic, a ``receive`` operation per subscriber and a
        ``send`` operation per declared [publisher][aiorocket.app.App.publisher], the message
        schemas pydantic derives, request/reply operations linked to the reply channel."""
        endpoints = [s.endpoint() for s in self._subscribers]
        endpoints.extend(p.endpoint() for p in self._publishers)
        return build_document(
            endpoints,
            namesrv=build_settings(ClientSettings, self.settings.client_settings()).namesrv,
            title=title,
            version=version,
            description=description,
        )

    # -- health -------------------------------------------------------------------------------

    def is_ready(self) -> bool:
        """Started (connected, first rebalance done), reaching its name server and brokers
        (see [`problems`][aiorocket.app.App.problems]) and no queue stuck for longer than
        ``stuck_after`` seconds (see [`health`][aiorocket.app.App.health])."""
        return self._started and not self.problems() and not self.stuck_queues()

    def problems(self) -> dict[str, str]:
        """What keeps the app from working besides stuck queues, by what it is about (``"name
        server"``, ``"broker <name> (<address>)"``, ``"pulls of group <group>"``) with the
        latest error: failing its checks for ``failing_after`` seconds or more
        (`aiorocket.app.readiness`); once the app crashed, ``"crash"`` and what it crashed
        on. Empty while the app is not running."""
        crash = self._lifecycle.crash
        if crash is not None:
            return {"crash": describe_crash(crash)}
        probe = self._probe
        return probe.problems() if probe is not None and self._started else {}

    def readiness(self) -> dict[str, Any]:
        """The ``/readyz`` body: ``ready``, [`problems`][aiorocket.app.App.problems], the stuck
        queues with their reasons and every queue's health (`readiness_report`)."""
        health = self.health()
        problems = self.problems()
        ready = self._started and not problems and not any(h.stuck for h in health)
        return readiness_report(ready, health, problems)

    def health(self) -> list[QueueHealth]:
        """Per-queue health of every held queue: last pull, last consume, oldest in-flight
        handler call, flow-control state, lag, and whether (and why) it is stuck: a handler
        call running longer than ``stuck_after``, or cached messages with nothing consumed
        for that long (`aiorocket.app.health`)."""
        return queue_health(self._consumers, stuck_after=self.settings.stuck_after, now=time.time())

    def stuck_queues(self) -> list[str]:
        """The stuck queues (``topic@broker:queue``) of [`health`][aiorocket.app.App.health]."""
        return [h.queue for h in self.health() if h.stuck]

    def statistics(self) -> dict[str, SubscriberStatistics]:
        """Counters per subscriber, keyed ``"<group>:<topic>:<handler name>"``."""
        return {f"{s.group}:{s.topic}:{s.fn.__name__}": s.stats for s in self._subscribers}

    def consumers(self) -> Mapping[str, PushConsumer]:
        """The running consumers by group."""
        return dict(self._consumers)

    # -- internals ----------------------------------------------------------------------------

    def _groups(self) -> dict[str, list[Subscriber]]:
        groups: dict[str, list[Subscriber]] = {}
        for sub in self._subscribers:
            groups.setdefault(sub.group, []).append(sub)
        return groups

    def _build_consumer(
        self, group: str, subs: list[Subscriber], base: dict[str, Any]
    ) -> PushConsumer:
        options: dict[str, Any] = {**base, **self.settings.consumer}
        for s in subs:
            options.update(s.settings)  # the group's own settings (never in conflict)
        options["consume_batch_size"] = max(s.batch_size for s in subs)
        limits = [s.concurrency for s in subs if s.concurrency is not None]
        if limits:
            options["concurrency"] = max(limits)
        consumer = PushConsumer(
            group=group, orderly=subs[0].orderly, order_by=subs[0].order_by, **options
        )
        expressions: dict[str, set[str] | None] = {}
        for s in subs:
            if s.sql is not None:
                consumer.subscribe(s.topic, sql=s.sql)  # alone on its topic (see subscriber)
                continue
            if s.tags is None or expressions.get(s.topic, set()) is None:
                expressions[s.topic] = None
            else:
                current = expressions.setdefault(s.topic, set())
                assert current is not None
                current.update(s.tags)
        for topic, tags in expressions.items():
            consumer.subscribe(topic, "*" if tags is None else " || ".join(sorted(tags)))

        if subs[0].orderly:

            async def orderly(msgs: list[ReceivedMessage], ctx: OrderlyContext) -> OrderlyStatus:
                return await self._dispatch_orderly(group, subs, msgs, ctx)

            consumer.register_listener(orderly)
            return consumer

        async def listener(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> ConsumeStatus:
            return await self._dispatch(group, subs, msgs, ctx)

        consumer.register_listener(listener)
        return consumer

    async def _dispatch(
        self,
        group: str,
        subs: list[Subscriber],
        msgs: list[ReceivedMessage],
        ctx: ConcurrentContext,
    ) -> ConsumeStatus:
        first_failure, delay = await self._run_subscribers(group, subs, msgs)
        if first_failure is None:
            return ConsumeStatus.CONSUME_SUCCESS
        # Java semantics: messages after ack_index are sent back for a retry.
        ctx.ack_index = first_failure - 1
        if delay is not None:
            ctx.delay_level = delay
        return ConsumeStatus.CONSUME_SUCCESS if first_failure > 0 else ConsumeStatus.RECONSUME_LATER

    async def _dispatch_orderly(
        self,
        group: str,
        subs: list[Subscriber],
        msgs: list[ReceivedMessage],
        ctx: OrderlyContext,
    ) -> OrderlyStatus:
        first_failure, delay = await self._run_subscribers(group, subs, msgs)
        if first_failure is None:
            # Dead-lettered messages count as done too: the queue moves on.
            return OrderlyStatus.SUCCESS
        if delay is not None and delay > 0:
            level = min(delay, len(_DELAY_LEVEL_SECONDS))
            ctx.suspend_millis = _DELAY_LEVEL_SECONDS[level - 1] * 1000
        return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT

    async def _run_subscribers(
        self, group: str, subs: list[Subscriber], msgs: list[ReceivedMessage]
    ) -> tuple[int | None, int | None]:
        """Run each subscriber over its messages of the call; returns the index of the first
        message to retry (``None``: all done) and the retry delay level asked for."""
        now_ms = time.time() * 1000
        # A consume call carries messages of one queue, so of one topic; route by tag.
        by_sub: dict[int, list[tuple[int, ReceivedMessage]]] = {}
        for i, m in enumerate(msgs):
            sub = next((s for s in subs if s.matches(m)), None)
            if sub is None:
                continue  # nothing subscribed to this tag any more: acknowledge
            sub.stats.latencies_ms.append(max(0.0, now_ms - m.store_timestamp))
            by_sub.setdefault(id(sub), []).append((i, m))
        first_failure: int | None = None
        delay: int | None = None
        for sub in subs:
            items = by_sub.get(id(sub))
            if not items:
                continue
            failed_at, level = await (
                self._run_batch(group, sub, items)
                if sub.batch
                else self._run_each(group, sub, items)
            )
            if failed_at is not None and (first_failure is None or failed_at < first_failure):
                first_failure, delay = failed_at, level
        return first_failure, delay

    async def _run_each(
        self, group: str, sub: Subscriber, items: list[tuple[int, ReceivedMessage]]
    ) -> tuple[int | None, int | None]:
        for index, msg in items:
            try:
                body = sub.sig.decode(msg.body)
            except BodyDecodeError as exc:
                if not await self._dead_letter(group, sub, msg, f"invalid body: {exc}"):
                    return index, -1
                continue
            try:
                result = await (sub.fn(body, msg) if sub.sig.wants_message else sub.fn(body))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                outcome = await self._failure(group, sub, msg, exc)
                self._log_failure(group, sub, [msg], exc, [outcome])
                if outcome is not None:
                    return index, outcome
                continue
            sub.stats.handled += 1
            if result is not None and is_request(msg):
                await self._reply(msg, result)
        return None, None

    async def _reply(self, request: ReceivedMessage, value: Any) -> None:
        # A failed reply is the requester's loss (it times out), not a reason to consume the
        # request again: the handler's work is done (as a Java responder's send failing).
        try:
            await self.producer.reply(request, encode_body(value))
        except RocketError as exc:
            log.warning("could not reply to request %s: %s", request.msg_id, exc)

    async def _run_batch(
        self, group: str, sub: Subscriber, items: list[tuple[int, ReceivedMessage]]
    ) -> tuple[int | None, int | None]:
        bodies: list[Any] = []
        good: list[tuple[int, ReceivedMessage]] = []
        for index, msg in items:
            try:
                bodies.append(sub.sig.decode(msg.body))
                good.append((index, msg))
            except BodyDecodeError as exc:
                if not await self._dead_letter(group, sub, msg, f"invalid body: {exc}"):
                    return index, -1
        if not good:
            return None, None
        try:
            if sub.sig.wants_message:
                await sub.fn(bodies, [m for _, m in good])
            else:
                await sub.fn(bodies)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outcomes = [await self._failure(group, sub, m, exc) for _, m in good]
            self._log_failure(group, sub, [m for _, m in good], exc, outcomes)
            retried = [(i, o) for (i, _), o in zip(good, outcomes, strict=True) if o is not None]
            if retried:
                return retried[0]
            return None, None
        sub.stats.handled += len(good)
        return None, None

    async def _failure(
        self, group: str, sub: Subscriber, msg: ReceivedMessage, exc: Exception
    ) -> int | None:
        """Decide a failed message's fate: ``None`` when it was dead-lettered, else the retry
        delay level to hand back (0: the broker's schedule, -1: the broker's DLQ)."""
        if sub.retry.gives_up(exc, msg.reconsume_times):
            reason = f"{type(exc).__name__}: {exc}"
            if await self._dead_letter(group, sub, msg, reason):
                return None
            return -1
        sub.stats.failed += 1
        level = exc.delay_level if isinstance(exc, ReconsumeLater) else sub.retry.delay_level
        return level or 0

    @staticmethod
    def _log_failure(
        group: str,
        sub: Subscriber,
        msgs: list[ReceivedMessage],
        exc: Exception,
        outcomes: list[int | None],
    ) -> None:
        """Log a handler call's failure once, with its traceback (rate-limited per handler:
        `aiorocket.app.failures`). ``ReconsumeLater`` and ``DeadLetter`` are the
        handler's own decisions, not errors: the dead-letter line says enough of those."""
        if isinstance(exc, ReconsumeLater | DeadLetter):
            return
        if any(o is not None and o >= 0 for o in outcomes):
            outcome = "handed back for a retry"
        elif any(o is None for o in outcomes):
            outcome = f"sent to {dlq_topic(group)} (retry policy)"
        else:
            outcome = "left to the broker's dead-letter queue"
        sub.failures.failed(msgs, exc, outcome, expected=isinstance(exc, sub.retry.expected))

    async def _dead_letter(
        self, group: str, sub: Subscriber, msg: ReceivedMessage, reason: str
    ) -> bool:
        """Publish a copy of ``msg`` to ``%DLQ%<group>`` with ``reason``; False if that failed
        (the caller then lets the broker dead-letter it with delay level -1)."""
        props = {k: v for k, v in msg.properties.items() if k not in ("DELAY", "UNIQ_KEY", "WAIT")}
        props[DLQ_REASON] = reason.replace("\x01", " ").replace("\x02", " ")[:2000] or "error"
        props[DLQ_ORIGIN_TOPIC] = msg.topic
        props[DLQ_ORIGIN_MESSAGE_ID] = msg.msg_id
        try:
            await self.producer.send(Message.with_properties(dlq_topic(group), msg.body, props))
        except RocketError as exc:
            log.warning("could not publish %s to the dead-letter queue: %s", msg.msg_id, exc)
            return False
        sub.stats.dead_lettered += 1
        log.warning(
            "message %s of %s sent to %s: %s", msg.msg_id, msg.topic, dlq_topic(group), reason
        )
        return True
