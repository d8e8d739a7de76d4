"""The producer: async sends over the shared client layer (Java ``DefaultMQProducerImpl``)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import random
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from aiorocket._client.instance import ClientInstance, SendResponse, is_retriable
from aiorocket._concurrency import Periodic, Service, bounded
from aiorocket._concurrency.service import ServiceOwner
from aiorocket._names import now_ms, validate_group, without_namespace, wrap_namespace
from aiorocket._producer.checks import (
    check_lite,
    check_sharding_key,
    deliver_ms,
    group_key,
    has_timer,
    message_properties,
    msg_type,
    split_batch,
)
from aiorocket._producer.hooks import (
    SendCallContext,
    SendCallHook,
    SendHook,
    SendHookContext,
    run_send_after,
    run_send_before,
    run_send_done,
    run_send_prepare,
)
from aiorocket._producer.publish import (
    PublishRoutes,
    QueueSelector,
    TopicPublishInfo,
    queue_for_key,
    queue_for_lite_topic,
)
from aiorocket._producer.recall import recall_message
from aiorocket._producer.request import PendingRequests, create_reply_message, request_reply
from aiorocket._producer.trace_hook import SendTraceHook
from aiorocket._protocol.bodies import HeartbeatData, ProducerData
from aiorocket._protocol.codes import (
    VERSION_V5_0_0_SNAPSHOT,
    VERSION_V5_4_0,
    MessageSysFlag,
    RequestCode,
)
from aiorocket._protocol.headers import SendMessageRequestHeader
from aiorocket._protocol.message import compress_body, encode_batch_body
from aiorocket._protocol.msgid import UniqKeyGenerator
from aiorocket._protocol.properties import (
    LITE_TOPIC,
    MSG_TYPE,
    PRIORITY,
    REPLY_MESSAGE_FLAG,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
    WAIT,
    encode_properties,
)
from aiorocket._remoting import Dispatcher, RequestHandler
from aiorocket._trace import TraceDispatcher
from aiorocket.errors import (
    ClientClosedError,
    ConfigurationError,
    ConnectError,
    FlowControlError,
    MessageTooLargeError,
    RequestTimeoutError,
    RocketError,
    ServiceNotAvailableError,
    SystemBusyError,
    UnsupportedFeatureError,
)
from aiorocket.models import (
    Message,
    MessageQueue,
    ReceivedMessage,
    SendResult,
    SendStatus,
    validate_name,
)
from aiorocket.settings import ProducerSettings, build_settings

__all__ = ["Producer"]

log = logging.getLogger("aiorocket.producer")

#: seconds close() gives the brokers to unregister the producer
_UNREGISTER_TIMEOUT = 3.0

_STATUS = {
    0: SendStatus.SEND_OK,
    10: SendStatus.FLUSH_DISK_TIMEOUT,
    11: SendStatus.SLAVE_NOT_AVAILABLE,
    12: SendStatus.FLUSH_SLAVE_TIMEOUT,
}
#: first pause before retrying a send a broker refused as busy; doubles per attempt, jittered
_BUSY_BACKOFF = 0.05


#: a broker release a message needs: its MQVersion ordinal, its name, what older ones cannot do
_Release = tuple[int, str, str]
_TIMER_RELEASE: _Release = (
    VERSION_V5_0_0_SNAPSHOT,
    "5.0",
    "deliver a message at a time; it would deliver it at once",
)
_PRIORITY_RELEASE: _Release = (
    VERSION_V5_4_0,
    "5.4",
    "order messages by priority; it would keep the priority as a plain property",
)


def _needed_release(props: dict[str, str]) -> _Release | None:
    if has_timer(props):
        return _TIMER_RELEASE
    if PRIORITY in props:
        return _PRIORITY_RELEASE
    return None


class Producer(ServiceOwner):
    """Sends messages to RocketMQ topics.

    Use as an async context manager:

    ```python
    async with Producer(namesrv="127.0.0.1:9876", group="shop") as producer:
        result = await producer.send(Message("orders", b"{}", tags="created"))
    ```

    Settings (keyword arguments) are those of
    [`ProducerSettings`][aiorocket.settings.ProducerSettings]; ``namesrv`` is required.

    Raises:
        ConfigurationError: invalid settings (at construction).
    """

    #: the settings model (a subclass adds its own settings)
    _settings_class: ClassVar[type[ProducerSettings]] = ProducerSettings

    def __init__(
        self, *, namesrv: str | Sequence[str], group: str = "DEFAULT_PRODUCER", **settings: Any
    ) -> None:
        self.settings: ProducerSettings = build_settings(
            self._settings_class, {"namesrv": namesrv, "group": group, **settings}
        )
        validate_group(self.settings.group, "producer group")
        validate_name(self._wire_group(), "producer group")
        self._requests = PendingRequests()
        #: topics a request was sent to: the first one heartbeats every broker first
        self._request_topics: set[str] = set()
        self._client = ClientInstance(self.settings, handler=self._broker_requests())
        self._client.on_new_brokers = self._on_new_brokers
        self._routes = PublishRoutes(
            self._client,
            create_topic_key=self.settings.create_topic_key,
            default_topic_queue_nums=self.settings.default_topic_queue_nums,
        )
        self._uniq = UniqKeyGenerator(self._client.ip, os.getpid(), random.getrandbits(31))
        self._lifecycle = Service(
            f"producer {self._wire_group()}",
            startup=self._start_up,
            shutdown=self._shutdown,
            abort=self._abort,
            cleanup_timeout=_UNREGISTER_TIMEOUT,
            logger=log,
        )
        self._hooks: list[SendHook] = []
        self._call_hooks: list[SendCallHook] = []
        #: the message trace's sender (``trace=True``)
        self.tracer: TraceDispatcher | None = None
        if self.settings.trace:
            self.tracer = TraceDispatcher(
                self._client,
                group=self.settings.group,
                kind="PRODUCE",
                trace_topic=self.settings.trace_topic,
                namespace=self.settings.namespace,
            )
            self._hooks.append(SendTraceHook(self.tracer))

    def register_hook(self, hook: SendHook | SendCallHook) -> None:
        """Add a send hook (`aiorocket._producer.hooks`): its ``send_before`` /
        ``send_after`` run around every send attempt of [`send`][aiorocket.Producer.send],
        [`send_oneway`][aiorocket.Producer.send_oneway] and
        [`send_batch`][aiorocket.Producer.send_batch] (once per sub-batch, as Java runs
        ``SendMessageHook`` for a ``MessageBatch``); its ``send_prepare`` / ``send_done``, if it has
        them, once per call, ``send_prepare`` before the properties are encoded."""
        if callable(getattr(hook, "send_before", None)):
            self._hooks.append(hook)  # type: ignore[arg-type]
        if callable(getattr(hook, "send_prepare", None)):
            self._call_hooks.append(hook)  # type: ignore[arg-type]

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """This producer's client id (``<ip>@<instance>``)."""
        return self._client.client_id

    @property
    def _started(self) -> bool:
        return self._lifecycle.ready

    @property
    def _closed(self) -> bool:
        return self._lifecycle.closing

    async def start(self) -> None:
        """Connect to a name server, then start background route refresh and heartbeats.
        Prefer ``async with``.

        Raises:
            ClientClosedError: the producer was closed before.
            ConnectError: no name server could be connected within ``connect_timeout``
                (each address tried is named).
        """
        if self._closed:
            raise ClientClosedError("the producer is closed")
        if not self._lifecycle.started:
            s = self.settings
            self._refresh = Periodic(
                self._routes.refresh_all,
                s.route_refresh_interval,
                name="route refresh",
                run_first=False,
            )
            self._heartbeat = Periodic(
                self._send_heartbeats, s.heartbeat_interval, name="heartbeat", run_first=False
            )
        await self._lifecycle.start()

    async def close(self) -> None:
        """Stop background work, unregister from brokers and close connections."""
        # Shielded: a caller being cancelled still unregisters and closes its connections
        # (nothing to do if start() was never called).
        await self._lifecycle.close()

    async def _start_up(self) -> None:
        # In the lifecycle's supervisor: the background tasks are not the caller's.
        tg = self._lifecycle.task_group
        self._client.start(tg.create_task)
        await self._client.connect_namesrv()
        tg.create_task(self._refresh.run(), name="route refresh")
        tg.create_task(self._heartbeat.run(), name="heartbeat")
        if self.tracer is not None:
            tg.create_task(self.tracer.run(), name="trace")

    async def _shutdown(self) -> None:
        self._refresh.stop()
        self._heartbeat.stop()
        if self.tracer is not None:
            await bounded(self.tracer.close(), "flush traces", _UNREGISTER_TIMEOUT, log)
        # Bounded: an unreachable broker must not hang the close.
        await bounded(self._unregister(), "unregister producer", _UNREGISTER_TIMEOUT, log)
        await self._client.close()

    async def _abort(self, started: bool) -> None:
        # A background task crashed (logged by the lifecycle): leave as close() would.
        if started:
            await self._shutdown()
        else:
            await self._client.close()

    def _never_started(self) -> str | None:
        if self._lifecycle.started or self._closed:
            return None
        return f"{type(self).__name__} of group {self.settings.group!r}"

    # -- sending ------------------------------------------------------------------------------

    async def send(
        self,
        msg: Message,
        *,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
        delay_level: int | None = None,
        timeout: float | None = None,
        deliver_at: datetime.datetime | None = None,
        deliver_after: float | None = None,
    ) -> SendResult:
        """Send one message and wait for the broker's answer.

        The queue is chosen round-robin over the topic's writable queues, unless ``queue``
        names one, ``sharding_key`` is given (the same key always maps to the same queue, which
        ordered consumption relies on) or ``selector`` picks one. A non-empty ``sharding_key``
        also travels with the message as its ``__SHARDINGKEY`` property (RocketMQ 5.x's
        message group), which an orderly consumer with ``order_by="sharding_key"`` keeps in
        order per key while handling different keys of a queue concurrently; a message's
        ``message_group`` means the same. Failures on retriable codes and timeouts are retried
        up to ``retries`` more times, on another broker where possible (not for keyed, selected
        or explicit queues, whose queue must not change); every copy carries the same
        ``UNIQ_KEY``.

        ``deliver_at`` (a timezone-aware datetime) or ``deliver_after`` (seconds from now)
        make it a RocketMQ 5.x timer message: it carries its delivery time as
        ``TIMER_DELIVER_MS`` (ms since the epoch; a retry keeps the same time) and the broker
        makes it visible then, not before (Apache at its ``timerPrecisionMs``, 1 s by default;
        the embedded broker at the millisecond). A time already past is delivered at once; one
        beyond the broker's ``timerMaxDelaySec`` (3 days) is refused (MessageIllegalError). A
        4.x broker would ignore the time, so the message is not sent to one.

        Raises:
            MessageTooLargeError: the body exceeds ``max_message_size`` (nothing is sent).
            InvalidNameError, ConfigurationError: bad topic, delay level or arguments: both
                timer arguments, a timer with a delay level or a message group / sharding key
                (5.x's message types exclude each other), a naive ``deliver_at``.
            UnsupportedFeatureError: a timer message for a broker older than 5.0.
            BrokerError: the broker refused the message (after retries where retriable).
            TransportError: the broker could not be reached or did not answer in time.
            ClientClosedError: the producer is closed or was never started.
        """
        result = await self._send_one(
            msg,
            sharding_key,
            selector,
            queue,
            delay_level,
            timeout,
            oneway=False,
            deliver_ms=deliver_ms(deliver_at, deliver_after),
        )
        assert result is not None
        return result

    async def send_oneway(
        self,
        msg: Message,
        *,
        sharding_key: str | None = None,
        selector: QueueSelector | None = None,
        queue: MessageQueue | None = None,
        delay_level: int | None = None,
        deliver_at: datetime.datetime | None = None,
        deliver_after: float | None = None,
    ) -> None:
        """Send one message without waiting for the broker to store it (no result, no retry);
        ``deliver_at`` / ``deliver_after`` as for [`send`][aiorocket.Producer.send].

        Raises:
            RocketError: as [`send`][aiorocket.Producer.send], except broker refusals, which a
                oneway send never sees.
        """
        await self._send_one(
            msg,
            sharding_key,
            selector,
            queue,
            delay_level,
            None,
            oneway=True,
            deliver_ms=deliver_ms(deliver_at, deliver_after),
        )

    async def send_batch(
        self,
        msgs: Sequence[Message],
        *,
        sharding_key: str | None = None,
        queue: MessageQueue | None = None,
        timeout: float | None = None,
    ) -> list[SendResult]:
        """Send messages of one topic as batches (SEND_BATCH_MESSAGE), split under the size cap.

        Each sub-batch is stored contiguously in one queue; one [`SendResult`][aiorocket.SendResult]
        is returned per sub-batch, in order, with ``msg_id`` the ``,``-joined ids of its messages.
        ``timeout`` (default ``send_timeout``) is the budget of the whole call, every
        sub-batch and retry included; when a sub-batch fails, those before it stay stored
        (the error's note says how many). With
        ``sharding_key`` (or the messages' common ``message_group``) every message carries it
        as ``__SHARDINGKEY`` (see [`send`][aiorocket.Producer.send]).

        Raises:
            ConfigurationError: empty batch, several topics, a delayed or timer message (brokers
                do neither in batches), messages with different ``message_group`` values, or
                a ``sharding_key`` with ``\\x01``/``\\x02`` or unlike their group.
            MessageTooLargeError: a single message exceeds ``max_message_size``.
            BrokerError, TransportError, ClientClosedError: as [`send`][aiorocket.Producer.send].
        """
        if not msgs:
            raise ConfigurationError("send_batch needs at least one message")
        topic = msgs[0].topic
        if any(m.topic != topic for m in msgs):
            raise ConfigurationError("all messages of a batch must have the same topic")
        if any(m.delay_level for m in msgs):
            raise ConfigurationError("delayed messages cannot be sent in a batch")
        if any(has_timer(m.properties) for m in msgs):
            # CommitLog.asyncPutMessages never parks a batch: they would arrive at once.
            raise ConfigurationError("timer messages cannot be sent in a batch")
        if any(m.lite_topic is not None for m in msgs):
            # SendMessageProcessor dispatches single messages only (docs/protocol.md §12.8).
            raise ConfigurationError("lite messages cannot be sent in a batch")
        groups = {m.message_group for m in msgs}
        if len(groups) > 1:
            raise ConfigurationError("all messages of a batch must have the same message_group")
        sharding_key = group_key(groups.pop(), sharding_key)
        validate_name(topic)
        check_sharding_key(sharding_key)
        limit = self.settings.max_message_size
        for m in msgs:
            if len(m.body) > limit:
                raise MessageTooLargeError(
                    f"message body of {len(m.body)} bytes exceeds {limit} bytes"
                )
        fields = [message_properties(m, self._uniq_of(m), None, sharding_key) for m in msgs]
        call = None
        if self._call_hooks:
            call = SendCallContext(self.settings.group, topic, msgs, fields, batch=True)
            run_send_prepare(self._call_hooks, call)
        try:
            results = await self._send_chunks(topic, msgs, fields, sharding_key, queue, timeout)
        except BaseException as exc:
            self._call_done(call, exc)
            raise
        if call is not None:
            call.results = results
        self._call_done(call)
        return results

    def _call_done(self, call: SendCallContext | None, exc: BaseException | None = None) -> None:
        # send_done once per call, with its results or the error it ends with.
        if call is not None:
            call.exception = exc
            run_send_done(self._call_hooks, call)

    async def _send_chunks(
        self,
        topic: str,
        msgs: Sequence[Message],
        fields: list[dict[str, str]],
        sharding_key: str | None,
        queue: MessageQueue | None,
        timeout: float | None,
    ) -> list[SendResult]:
        # send_batch's sends, its messages' properties built (and prepared by the hooks).
        chunks = split_batch(msgs, fields, self.settings.max_message_size)
        results = []
        # One budget for the whole call, as for send(): each sub-batch gets what is left.
        loop = asyncio.get_running_loop()
        budget = timeout or self.settings.send_timeout
        deadline = loop.time() + budget
        for i, chunk in enumerate(chunks):
            body = encode_batch_body([it for it, _, _ in chunk])
            uniqs = ",".join(u for _, u, _ in chunk)
            remaining = deadline - loop.time()
            try:
                if remaining <= 0:
                    raise RequestTimeoutError(f"send_batch: the {budget:g} s budget ran out")
                results.append(
                    await self._send_with_retries(
                        topic,
                        body,
                        0,
                        encode_properties({WAIT: "true"}),
                        uniqs,
                        None,
                        sharding_key,
                        None,
                        queue,
                        remaining,
                        batch=True,
                        oneway=False,
                        batch_msgs=[m for _, _, m in chunk],
                    )
                )
            except RocketError as exc:
                if i:
                    exc.add_note(f"{i} of {len(chunks)} sub-batches were stored before this one")
                raise
        return [r for r in results if r is not None]

    async def recall(
        self, target: SendResult | str, *, topic: str | None = None, timeout: float | None = None
    ) -> str:
        """Cancel a timer message before it is due (RocketMQ 5.3.2+, with the brokers'
        ``recallMessageEnable=true``; Java's ``recallMessage``); returns its message id.

        ``target`` is the [`SendResult`][aiorocket.SendResult] of a ``send(...,
        deliver_at=)`` / ``deliver_after=`` or its ``recall_handle`` (kept, say, in a
        database); ``topic`` optionally checks the handle is that topic's.

        Raises:
            ConfigurationError: the result has no recall handle (not a timer message), the
                handle is malformed or of another topic.
            UnsupportedFeatureError: the broker is older than 5.3.2 (4.x cannot recall).
            IllegalOperationError: the message is already due: it has been delivered.
            BrokerError, TransportError: the broker refused (recalls not enabled: code 16)
                or could not be reached.
            ClientClosedError: the producer is not running.
        """
        if self._closed or not self._started:
            raise ClientClosedError("the producer is not started or is closed")
        wire_topic = self._wire_topic(topic) if topic is not None else None
        return await recall_message(
            self._client,
            target,
            group=self._wire_group(),
            wire_topic=wire_topic,
            timeout=timeout or self.settings.request_timeout,
        )

    # -- request/reply ------------------------------------------------------------------------

    async def request(
        self,
        msg: Message,
        *,
        timeout: float | None = None,
        sharding_key: str | None = None,
        queue: MessageQueue | None = None,
    ) -> ReceivedMessage:
        """Send ``msg`` as a request and return the reply a responder sends back (Java's
        ``DefaultMQProducer.request``; docs/protocol.md §13).

        The message carries a new ``CORRELATION_ID``, this producer's client id as
        ``REPLY_TO_CLIENT`` and the timeout as ``TTL``; a consumer of the topic answers
        with [Producer.reply][aiorocket.Producer.reply] (or an `App` handler returning a
        value), and the broker pushes the reply straight to this producer. ``timeout``
        (default ``send_timeout``) bounds the send and the wait together; any number of
        requests may be in flight, each with its own. A reply arriving after its request
        timed out is dropped and counted in
        [unmatched_replies][aiorocket.Producer.unmatched_replies]. The queue is chosen as
        for [send][aiorocket.Producer.send].

        Raises:
            ReplyTimeoutError: the request was stored but no reply came within ``timeout``.
            RocketError: the request could not be sent (as [send][aiorocket.Producer.send]).
        """
        wire_topic = self._wire_topic(msg.topic)

        async def prepare() -> None:
            # prepareSendRequest: before a topic's first request every broker hears this
            # client, so that whichever stores the reply can push it here.
            if wire_topic not in self._request_topics:
                await self._publish_info(wire_topic)
                await self._send_heartbeats()
                self._request_topics.add(wire_topic)

        async def send(fields: dict[str, str], left: float) -> object:
            return await self._send_one(
                msg, sharding_key, None, queue, None, left, oneway=False, extra=fields
            )

        return await request_reply(
            self._requests,
            send,
            client_id=self.client_id,
            topic=msg.topic,
            timeout=timeout or self.settings.send_timeout,
            prepare=prepare,
        )

    async def reply(
        self,
        request: ReceivedMessage,
        body: bytes | str,
        *,
        tags: str | None = None,
        keys: Sequence[str] = (),
        properties: dict[str, str] | None = None,
        timeout: float | None = None,
    ) -> SendResult:
        """Answer ``request`` (a message sent with [request][aiorocket.Producer.request], by
        any client) with ``body``: a reply to ``<cluster>_REPLY_TOPIC`` that the broker
        pushes to the requester (Java's ``MessageUtil.createReplyMessage`` then ``send``).

        Raises:
            NotARequestError: ``request`` asked for no reply.
            BrokerError: the broker refused it, or could not reach the requester (code 1:
                it is gone, or its request timed out and it left).
            TransportError, ClientClosedError: as [send][aiorocket.Producer.send].
        """
        data = body.encode() if isinstance(body, str) else body
        message = create_reply_message(request, data, tags=tags, keys=keys, properties=properties)
        return await self.send(message, timeout=timeout)

    @property
    def unmatched_replies(self) -> int:
        """Replies that reached this producer but matched no waiting request: their request
        had timed out already (Java logs "receive reply message, but not matched any
        request")."""
        return self._requests.unmatched

    # -- internals ----------------------------------------------------------------------------

    def _broker_requests(self) -> RequestHandler | None:
        # Requests brokers send this producer: the replies to its requests.
        return self._dispatcher()

    def _dispatcher(self) -> Dispatcher:
        # ClientRemotingProcessor: PUSH_REPLY_MESSAGE_TO_CLIENT (a subclass adds its codes).
        dispatcher = Dispatcher()
        dispatcher.register(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, self._requests.on_push)
        return dispatcher

    def _wire_group(self) -> str:
        return wrap_namespace(self.settings.namespace, self.settings.group)

    def _wire_topic(self, topic: str) -> str:
        return wrap_namespace(self.settings.namespace, topic)

    def _uniq_of(self, msg: Message) -> str:
        # MessageClientIDSetter.setUniqID: a UNIQ_KEY the message carries already is kept
        # (a sender deriving stable ids, e.g. the Spark sink's idempotentKeys), else a new one.
        return msg.properties.get(UNIQ_KEY) or self._uniq.next(int(time.time() * 1000))

    async def _send_one(
        self,
        msg: Message,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
        delay_level: int | None,
        timeout: float | None,
        *,
        oneway: bool,
        extra: dict[str, str] | None = None,
        sys_flag: int = 0,
        deliver_ms: int | None = None,
    ) -> SendResult | None:
        validate_name(msg.topic)
        sharding_key = group_key(msg.message_group, sharding_key)
        check_sharding_key(sharding_key)
        if delay_level is not None and not 0 <= delay_level <= 18:
            raise ConfigurationError("delay_level must be within 0..18")
        if msg.priority is not None and (
            sharding_key is not None or delay_level or deliver_ms or msg.lite_topic is not None
        ):
            # TopicMessageType: a message is of one kind; a broker would drop its priority
            # (SendMessageProcessor clears it from a FIFO or delay message).
            raise ConfigurationError(
                "a priority message has no sharding key, message group, delay, delivery time or "
                "lite topic"
            )
        if msg.lite_topic is not None:
            check_lite(sharding_key, selector, queue, delay_level, deliver_ms)
            extra = {**(extra or {}), LITE_TOPIC: msg.lite_topic}
        if deliver_ms is not None:
            if delay_level or (delay_level is None and msg.delay_level):
                raise ConfigurationError("a message has either a delivery time or a delay level")
            if sharding_key is not None:
                # 5.x MessageBuilderImpl: "messageGroup and deliveryTimestamp should not be set
                # at same time" (a FIFO message is not a delay message).
                raise ConfigurationError(
                    "a message has either a delivery time or a message group / sharding key"
                )
            if has_timer(msg.properties):
                raise ConfigurationError("the message's properties already set a delivery time")
            extra = {**(extra or {}), TIMER_DELIVER_MS: str(deliver_ms)}
        s = self.settings
        if len(msg.body) > s.max_message_size:
            # Java's Validators.checkMessage refuses before compressing.
            raise MessageTooLargeError(
                f"message body of {len(msg.body)} bytes exceeds {s.max_message_size} bytes"
            )
        uniq = self._uniq_of(msg)
        fields = message_properties(msg, uniq, delay_level, sharding_key)
        if extra:
            fields.update(extra)
        call = None
        if self._call_hooks:
            call = SendCallContext(s.group, msg.topic, (msg,), [fields], oneway=oneway)
            run_send_prepare(self._call_hooks, call)
        needs = _needed_release(fields)
        props = encode_properties(fields)
        body = msg.body
        if s.compress_threshold and len(body) >= s.compress_threshold:
            body = compress_body(body, s.compress_level)
            sys_flag |= MessageSysFlag.COMPRESSED
        try:
            result = await self._send_with_retries(
                msg.topic,
                body,
                sys_flag,
                props,
                uniq,
                msg,
                sharding_key,
                selector,
                queue,
                timeout,
                batch=False,
                oneway=oneway,
                needs=needs,
                msg_type=msg_type(fields),
                # MQClientAPIImpl.sendMessage: a MSG_TYPE=reply message goes as a reply
                reply=fields.get(MSG_TYPE) == REPLY_MESSAGE_FLAG,
                lite_topic=msg.lite_topic,
            )
        except BaseException as exc:
            self._call_done(call, exc)
            raise
        if call is not None and result is not None:
            call.results.append(result)
        self._call_done(call)
        return result

    async def _send_with_retries(
        self,
        topic: str,
        body: bytes,
        sys_flag: int,
        props: str,
        uniq: str,
        msg: Message | None,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
        timeout: float | None,
        *,
        batch: bool,
        oneway: bool,
        needs: _Release | None = None,
        msg_type: str = "Normal",
        batch_msgs: Sequence[Message] = (),
        reply: bool = False,
        lite_topic: str | None = None,
    ) -> SendResult | None:
        if self._closed or not self._started:
            raise ClientClosedError(
                "the producer is closed" if self._closed else "the producer is not started"
            )
        s = self.settings
        timeout = timeout or s.send_timeout
        wire_topic = self._wire_topic(topic)
        pinned = (
            queue is not None
            or sharding_key is not None
            or selector is not None
            or lite_topic is not None
        )
        attempts = 1 if oneway else 1 + s.retries
        # Java's sendMsgTimeout is the budget of the whole call, retries included
        # (DefaultMQProducerImpl.sendDefaultImpl): each attempt gets what is left of it.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last_broker: str | None = None
        last_exc: BaseException | None = None
        try:
            for attempt in range(attempts):
                info = await self._publish_info(
                    wire_topic, refresh=attempt > 0 and last_exc is not None
                )
                if queue is not None:
                    mq = MessageQueue(wire_topic, queue.broker_name, queue.queue_id)
                elif sharding_key is not None:
                    mq = queue_for_key(info.queues, sharding_key)
                elif lite_topic is not None:
                    mq = queue_for_lite_topic(info.queues, lite_topic)
                elif selector is not None:
                    mq = selector(info.queues, msg, sharding_key)
                else:
                    mq = info.next_queue(avoid_broker=last_broker)
                header = SendMessageRequestHeader(
                    producer_group=self._wire_group(),
                    topic=wire_topic,
                    default_topic=s.create_topic_key,
                    default_topic_queue_nums=s.default_topic_queue_nums,
                    queue_id=mq.queue_id,
                    sys_flag=sys_flag,
                    born_timestamp=int(time.time() * 1000),
                    flag=0,
                    properties=props,
                    reconsume_times=0,
                    unit_mode=False,
                    batch=batch,
                    broker_name=mq.broker_name,
                )
                remaining = deadline - loop.time()
                if remaining <= 0 and last_exc is not None:
                    raise last_exc
                hook = None
                try:
                    # sends need the master; without one the route is asked again at once
                    addr = await self._client.find_broker(mq.broker_name, wire_topic, master=True)
                    if needs is not None:
                        await self._require_release(addr, needs)
                    if self._hooks:
                        hook = SendHookContext(
                            s.group,
                            # a sub-batch is seen as one message, as Java's MessageBatch
                            msg if msg is not None else Message(topic, body),
                            mq,
                            addr,
                            msg_type,
                            started=now_ms(),
                            batch=batch_msgs,
                        )
                        run_send_before(self._hooks, hook)
                    resp = await self._client.send_message(
                        addr,
                        header,
                        body,
                        timeout=max(remaining, 0.001),
                        oneway=oneway,
                        reply=reply,
                    )
                except RocketError as exc:
                    if hook is not None:
                        hook.exception = exc
                        self._hook_after(hook, None, mq, uniq)
                    last_exc, last_broker = exc, mq.broker_name
                    remaining = deadline - loop.time()
                    if oneway or not is_retriable(exc) or attempt + 1 >= attempts or remaining <= 0:
                        raise
                    # A keyed, selected or explicit queue stays the same on retry: moving the
                    # message elsewhere would break the order its key promises.
                    log.info("send to %s failed (%s); retry %d/%d", mq, exc, attempt + 1, s.retries)
                    if pinned:
                        last_broker = None
                    if isinstance(exc, SystemBusyError | FlowControlError):
                        # An overloaded broker (full send queue, busy page cache): back off before
                        # asking again, within what is left of the budget.
                        pause = _BUSY_BACKOFF * 2**attempt * random.uniform(0.5, 1.0)
                        await asyncio.sleep(min(pause, remaining / 2))
                    elif isinstance(exc, ConnectError | ServiceNotAvailableError):
                        # the master is gone or unknown: the next attempt's route refresh may
                        # name a new one (a DLedger group elects it in seconds); give it time
                        await asyncio.sleep(min(s.route_retry_interval, remaining / 2))
                    continue
                if hook is not None:
                    return self._hook_after(hook, resp, mq, uniq)
                if resp is None:
                    return None
                return self._result(resp, mq, uniq)
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            # The raised error's traceback holds this frame: unbound, no cycle is left.
            last_exc = hook = None

    def _hook_after(
        self, hook: SendHookContext, resp: SendResponse | None, mq: MessageQueue, uniq: str
    ) -> SendResult | None:
        # DefaultMQProducerImpl.sendKernelImpl: the after-hooks see the result or the error.
        hook.cost_ms = now_ms() - hook.started
        result = None
        if resp is not None:
            hook.result = result = self._result(resp, mq, uniq)
            hook.region_id, hook.trace_on = resp.header.msg_region, resp.header.trace_on
        run_send_after(self._hooks, hook)
        return result

    async def _require_release(self, addr: str, needs: _Release) -> None:
        # An older broker stores timer or priority properties as plain ones (delivering at
        # once, in no priority order): refuse instead. Its release is the version of its
        # responses (docs/protocol.md §0.3).
        needed, release, what = needs
        version = self._client.server_version(addr)
        if version is None:
            # It never answered us (its first heartbeat may still be on its way): ask it now.
            version = await self._client.heartbeat(addr, self._heartbeat_data())
        if version < needed:
            raise UnsupportedFeatureError(
                f"broker {addr} answers as MQVersion ordinal {version}, older than {release} "
                f"({needed}): it cannot {what}",
                broker=addr,
                version=version,
                needed=needed,
            )

    def _result(self, resp: SendResponse, mq: MessageQueue, uniq: str) -> SendResult:
        h = resp.header
        return SendResult(
            status=_STATUS.get(resp.code, SendStatus.SEND_OK),
            msg_id=uniq,
            offset_msg_id=h.msg_id,
            # Without the namespace, as Java's processSendResponse builds it.
            queue=MessageQueue(self._user_topic(mq.topic), mq.broker_name, h.queue_id),
            queue_offset=h.queue_offset,
            recall_handle=h.recall_handle,
        )

    def _user_topic(self, topic: str) -> str:
        return without_namespace(self.settings.namespace, topic)

    async def _publish_info(self, topic: str, *, refresh: bool = False) -> TopicPublishInfo:
        return await self._routes.get(topic, refresh=refresh)

    def _on_new_brokers(self, names: set[str]) -> None:
        if self._started and not self._closed:
            self._heartbeat.wake()

    def _heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            client_id=self._client.client_id,
            producers=(ProducerData(group_name=self._wire_group()),),
        )

    async def _send_heartbeats(self) -> None:
        data = self._heartbeat_data()
        # Producer-only clients heartbeat masters only (MQClientInstance.sendHeartbeatToAllBroker).
        for addr in self._client.all_broker_addresses(masters_only=True):
            try:
                await self._client.heartbeat(addr, data)
            except RocketError as exc:
                log.warning("heartbeat to %s failed: %s", addr, exc)

    async def _unregister(self) -> None:
        for addr in self._client.all_broker_addresses(masters_only=True):
            try:
                await self._client.unregister_client(addr, producer_group=self._wire_group())
            except RocketError as exc:
                log.debug("unregister from %s failed: %s", addr, exc)
