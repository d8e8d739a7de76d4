"""The producer: async sends over the shared client layer (Java ``DefaultMQProducerImpl``)."""

from __future__ import annotations

import datetime
import logging
import os
import random
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from aiorocket._client.instance import ClientInstance
from aiorocket._client.membership import Membership
from aiorocket._concurrency import Service, bounded
from aiorocket._concurrency.service import ServiceOwner
from aiorocket._names import validate_group, wrap_namespace
from aiorocket._producer.checks import (
    check_batch,
    check_send,
    check_sharding_key,
    check_size,
    deliver_ms,
    group_key,
    message_properties,
    msg_type,
    needed_release,
    split_batch,
)
from aiorocket._producer.hooks import (
    SendCallContext,
    SendCallHook,
    SendHook,
    run_send_done,
    run_send_prepare,
)
from aiorocket._producer.publish import (
    ROUND_ROBIN,
    PublishRoutes,
    QueueChoice,
    QueueSelector,
    TopicPublishInfo,
)
from aiorocket._producer.recall import recall_message
from aiorocket._producer.request import PendingRequests, create_reply_message, request_reply
from aiorocket._producer.sender import Outgoing, Sender
from aiorocket._producer.trace_hook import SendTraceHook
from aiorocket._protocol.bodies import HeartbeatData, ProducerData
from aiorocket._protocol.codes import MessageSysFlag, RequestCode
from aiorocket._protocol.message import compress_body
from aiorocket._protocol.msgid import UniqKeyGenerator
from aiorocket._protocol.properties import MSG_TYPE, REPLY_MESSAGE_FLAG, UNIQ_KEY, encode_properties
from aiorocket._remoting import Dispatcher, RequestHandler
from aiorocket._trace import TraceDispatcher
from aiorocket.errors import ClientClosedError
from aiorocket.models import Message, MessageQueue, ReceivedMessage, SendResult, validate_name
from aiorocket.settings import ProducerSettings, build_settings

__all__ = ["Producer"]

log = logging.getLogger("aiorocket.producer")

#: seconds close() gives the brokers to unregister the producer
_UNREGISTER_TIMEOUT = 3.0


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
        self._sender = Sender(
            self._client,
            self._routes,
            self.settings,
            self._hooks,
            heartbeat_data=self._heartbeat_data,
            check_running=self._check_running,
        )

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
            self._membership = Membership(
                self._client,
                group=self._wire_group(),
                role="producer",
                settings=self.settings,
                heartbeat_data=self._heartbeat_data,
                spawn=self._lifecycle.spawn,
                closing=lambda: self._closed,
                refresh=self._routes.refresh_all,
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
        self._membership.start()
        if self.tracer is not None:
            tg.create_task(self.tracer.run(), name="trace")

    async def _shutdown(self) -> None:
        self._membership.stop_refresh()
        if self.tracer is not None:
            await bounded(self.tracer.close(), "flush traces", _UNREGISTER_TIMEOUT, log)
        # Bounded: an unreachable broker must not hang the close.
        await bounded(self._membership.leave(), "unregister producer", _UNREGISTER_TIMEOUT, log)
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
        s = self.settings
        sharding_key = check_batch(msgs, sharding_key, s.max_message_size)
        topic = msgs[0].topic
        fields = [message_properties(m, self._uniq_of(m), None, sharding_key) for m in msgs]
        call = None
        if self._call_hooks:
            call = SendCallContext(s.group, topic, msgs, fields, batch=True)
            run_send_prepare(self._call_hooks, call)
        try:
            # the hooks prepared the properties: only now are they encoded
            chunks = split_batch(msgs, fields, s.max_message_size)
            results = await self._sender.send_chunks(
                self._wire_topic(topic),
                chunks,
                self._choice(topic, sharding_key, None, queue, None),
                timeout or s.send_timeout,
            )
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
                await self._membership.send_heartbeats()
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
        # DefaultMQProducerImpl.sendDefaultImpl's preparation: check, build the properties
        # (the call hooks see them first), encode and compress once for every attempt.
        validate_name(msg.topic)
        sharding_key = group_key(msg.message_group, sharding_key)
        check_sharding_key(sharding_key)
        derived = check_send(msg, sharding_key, selector, queue, delay_level, deliver_ms)
        s = self.settings
        check_size(msg, s.max_message_size)
        uniq = self._uniq_of(msg)
        fields = message_properties(msg, uniq, delay_level, sharding_key)
        if extra:
            fields.update(extra)
        if derived:
            fields.update(derived)
        call = None
        if self._call_hooks:
            call = SendCallContext(s.group, msg.topic, (msg,), [fields], oneway=oneway)
            run_send_prepare(self._call_hooks, call)
        body = msg.body
        if s.compress_threshold and len(body) >= s.compress_threshold:
            body = compress_body(body, s.compress_level)
            sys_flag |= MessageSysFlag.COMPRESSED
        out = Outgoing(
            self._wire_topic(msg.topic),
            body,
            encode_properties(fields),
            uniq,
            msg,
            sys_flag,
            msg_type=msg_type(fields),
            needs=needed_release(fields),
            oneway=oneway,
            # MQClientAPIImpl.sendMessage: a MSG_TYPE=reply message goes as a reply
            reply=fields.get(MSG_TYPE) == REPLY_MESSAGE_FLAG,
        )
        choice = self._choice(msg.topic, sharding_key, selector, queue, msg.lite_topic)
        try:
            result = await self._sender.send(out, choice, timeout or s.send_timeout)
        except BaseException as exc:
            self._call_done(call, exc)
            raise
        if call is not None and result is not None:
            call.results.append(result)
        self._call_done(call)
        return result

    def _choice(
        self,
        topic: str,
        sharding_key: str | None,
        selector: QueueSelector | None,
        queue: MessageQueue | None,
        lite_topic: str | None,
    ) -> QueueChoice:
        # How each attempt picks its queue; an explicit queue is the user's, named here on
        # the wire (its topic may be given without the namespace).
        if queue is None and sharding_key is None and selector is None and lite_topic is None:
            return ROUND_ROBIN
        if queue is not None:
            queue = MessageQueue(self._wire_topic(topic), queue.broker_name, queue.queue_id)
        return QueueChoice(queue, sharding_key, selector, lite_topic)

    def _check_running(self) -> None:
        if self._closed or not self._started:
            raise ClientClosedError(
                "the producer is closed" if self._closed else "the producer is not started"
            )

    async def _publish_info(self, topic: str, *, refresh: bool = False) -> TopicPublishInfo:
        return await self._routes.get(topic, refresh=refresh)

    def _heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            client_id=self._client.client_id,
            producers=(ProducerData(group_name=self._wire_group()),),
        )
