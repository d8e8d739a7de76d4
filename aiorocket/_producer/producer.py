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
from aiorocket._concurrency.service import AsyncResource
from aiorocket._names import now_ms, without_namespace, wrap_namespace
from aiorocket._producer.checks import (
    check_lite,
    check_sharding_key,
    deliver_ms,
    group_key,
    has_timer,
    msg_type,
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
    QueueSelector,
    TopicPublishInfo,
    queue_for_key,
    queue_for_lite_topic,
)
from aiorocket._producer.trace_hook import SendTraceHook
from aiorocket._protocol.bodies import HeartbeatData, ProducerData
from aiorocket._protocol.codes import VERSION_V5_0_0_SNAPSHOT, MessageSysFlag
from aiorocket._protocol.headers import SendMessageRequestHeader
from aiorocket._protocol.message import BatchItem, compress_body, encode_batch_body
from aiorocket._protocol.msgid import UniqKeyGenerator
from aiorocket._protocol.properties import (
    DELAY,
    KEYS,
    LITE_TOPIC,
    SHARDING_KEY,
    TAGS,
    TIMER_DELIVER_MS,
    UNIQ_KEY,
    WAIT,
    encode_properties,
)
from aiorocket._remoting import RequestHandler
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
    TopicNotExistError,
    UnsupportedFeatureError,
)
from aiorocket.models import Message, MessageQueue, SendResult, SendStatus, validate_name
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
#: per-message overhead Java's ``MessageBatch`` size check adds besides body and properties
_BATCH_ITEM_OVERHEAD = 22
#: first pause before retrying a send a broker refused as busy; doubles per attempt, jittered
_BUSY_BACKOFF = 0.05


class Producer(AsyncResource):
    """Sends messages to RocketMQ topics.

    Use as an async context manager::

        async with Producer(namesrv="127.0.0.1:9876", group="shop") as producer:
            result = await producer.send(Message("orders", b"{}", tags="created"))

    Settings (keyword arguments) are those of :class:`~aiorocket.settings.ProducerSettings`;
    ``namesrv`` is required.

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
        validate_name(self._wire_group(), "producer group")
        self._client = ClientInstance(self.settings, handler=self._broker_requests())
        self._client.on_new_brokers = self._on_new_brokers
        self._publish: dict[str, TopicPublishInfo] = {}
        self._route_locks: dict[str, asyncio.Lock] = {}
        self._uniq = UniqKeyGenerator(self._client.ip, os.getpid(), random.getrandbits(31))
        self._lifecycle = Service(
            f"producer {self._wire_group()}",
            startup=self._start_up,
            shutdown=self._shutdown,
            abort=self._abort,
            cleanup_timeout=_UNREGISTER_TIMEOUT,
            logger=log,
        )
        self._started = False
        self._closed = False
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
        """Add a send hook (:mod:`aiorocket._producer.hooks`): its ``send_before`` /
        ``send_after`` run around every send attempt of :meth:`send`, :meth:`send_oneway` and
        :meth:`send_batch` (once per sub-batch, as Java runs ``SendMessageHook`` for a
        ``MessageBatch``); its ``send_prepare`` / ``send_done``, if it has them, once per call,
        ``send_prepare`` before the properties are encoded."""
        if callable(getattr(hook, "send_before", None)):
            self._hooks.append(hook)  # type: ignore[arg-type]
        if callable(getattr(hook, "send_prepare", None)):
            self._call_hooks.append(hook)  # type: ignore[arg-type]

    # -- lifecycle ----------------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        """This producer's client id (``<ip>@<instance>``)."""
        return self._client.client_id

    async def start(self) -> None:
        """Start background route refresh and heartbeats. Prefer ``async with``.

        Raises:
            ClientClosedError: the producer was closed before.
        """
        if self._closed:
            raise ClientClosedError("the producer is closed")
        if self._started:
            return
        s = self.settings
        self._refresh = Periodic(
            self._refresh_routes, s.route_refresh_interval, name="route refresh", run_first=False
        )
        self._heartbeat = Periodic(
            self._send_heartbeats, s.heartbeat_interval, name="heartbeat", run_first=False
        )
        await self._lifecycle.start()
        self._started = True

    async def close(self) -> None:
        """Stop background work, unregister from brokers and close connections."""
        if self._closed:
            return
        self._closed = True
        # Shielded: a caller being cancelled still unregisters and closes its connections
        # (nothing to do if start() was never called).
        await self._lifecycle.close()

    async def _start_up(self) -> None:
        # In the lifecycle's supervisor: the background tasks are not the caller's.
        tg = self._lifecycle.task_group
        self._client.start(tg.create_task)
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
        self._closed = True
        if started:
            await self._shutdown()
        else:
            await self._client.close()

    def _raise_crash(self) -> None:
        self._lifecycle.raise_crash()

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
        ``deliver_at`` / ``deliver_after`` as for :meth:`send`.

        Raises:
            As :meth:`send`, except broker refusals, which a oneway send never sees.
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

        Each sub-batch is stored contiguously in one queue; one :class:`SendResult` is returned
        per sub-batch, in order, with ``msg_id`` the ``,``-joined ids of its messages.
        ``timeout`` (default ``send_timeout``) is the budget of the whole call, every
        sub-batch and retry included; when a sub-batch fails, those before it stay stored
        (the error's note says how many). With
        ``sharding_key`` (or the messages' common ``message_group``) every message carries it
        as ``__SHARDINGKEY`` (see :meth:`send`).

        Raises:
            ConfigurationError: empty batch, several topics, a delayed or timer message (brokers
                do neither in batches), messages with different ``message_group`` values, or
                a ``sharding_key`` with ``\\x01``/``\\x02`` or unlike their group.
            MessageTooLargeError: a single message exceeds ``max_message_size``.
            BrokerError, TransportError, ClientClosedError: as :meth:`send`.
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
            # SendMessageProcessor dispatches single messages only (docs/protocol.md §12.5).
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
        fields = [self._properties(m, self._uniq_of(m), None, sharding_key) for m in msgs]
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
        limit = self.settings.max_message_size
        chunks: list[list[tuple[BatchItem, str, Message]]] = [[]]
        size = 0
        for m, props in zip(msgs, fields, strict=True):
            item = BatchItem(flag=0, body=m.body, properties=encode_properties(props))
            item_size = _BATCH_ITEM_OVERHEAD + len(m.body) + len(item.properties.encode())
            if chunks[-1] and size + item_size > limit:
                chunks.append([])
                size = 0
            chunks[-1].append((item, props[UNIQ_KEY], m))
            size += item_size
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

    # -- internals ----------------------------------------------------------------------------

    def _broker_requests(self) -> RequestHandler | None:
        # Requests brokers send this producer; a plain producer serves none.
        return None

    def _wire_group(self) -> str:
        return wrap_namespace(self.settings.namespace, self.settings.group)

    def _wire_topic(self, topic: str) -> str:
        return wrap_namespace(self.settings.namespace, topic)

    def _uniq_of(self, msg: Message) -> str:
        # MessageClientIDSetter.setUniqID: a UNIQ_KEY the message carries already is kept
        # (a sender deriving stable ids, e.g. the Spark sink's idempotentKeys), else a new one.
        return msg.properties.get(UNIQ_KEY) or self._uniq.next(int(time.time() * 1000))

    def _properties(
        self, msg: Message, uniq: str, delay_level: int | None, sharding_key: str | None
    ) -> dict[str, str]:
        props = dict(msg.properties)
        if sharding_key:
            # The key the message was routed by, for consumers ordering by key (RocketMQ
            # 5.x MessageConst.PROPERTY_SHARDING_KEY, its FIFO message group).
            props[SHARDING_KEY] = sharding_key
        if msg.tags:
            props[TAGS] = msg.tags
        if msg.keys:
            props[KEYS] = " ".join(msg.keys)
        level = delay_level if delay_level is not None else msg.delay_level
        if level:
            props[DELAY] = str(level)
        props[WAIT] = "true"
        props[UNIQ_KEY] = uniq
        return props

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
        fields = self._properties(msg, uniq, delay_level, sharding_key)
        if extra:
            fields.update(extra)
        call = None
        if self._call_hooks:
            call = SendCallContext(s.group, msg.topic, (msg,), [fields], oneway=oneway)
            run_send_prepare(self._call_hooks, call)
        timer = has_timer(fields)
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
                timer=timer,
                msg_type=msg_type(fields),
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
        timer: bool = False,
        msg_type: str = "Normal",
        batch_msgs: Sequence[Message] = (),
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
                    if timer:
                        await self._require_timers(addr)
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
                        addr, header, body, timeout=max(remaining, 0.001), oneway=oneway
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

    async def _require_timers(self, addr: str) -> None:
        # A 4.x broker stores timer properties as plain ones and delivers the message at once:
        # refuse instead. Its release is the version of its responses (docs/protocol.md §0.3).
        version = self._client.server_version(addr)
        if version is None:
            # It never answered us (its first heartbeat may still be on its way): ask it now.
            version = await self._client.heartbeat(addr, self._heartbeat_data())
        if version < VERSION_V5_0_0_SNAPSHOT:
            raise UnsupportedFeatureError(
                f"broker {addr} answers as MQVersion ordinal {version}, older than 5.0 "
                f"({VERSION_V5_0_0_SNAPSHOT}): it cannot deliver a message at a time; it would "
                "deliver it at once",
                broker=addr,
                version=version,
                needed=VERSION_V5_0_0_SNAPSHOT,
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
        )

    def _user_topic(self, topic: str) -> str:
        return without_namespace(self.settings.namespace, topic)

    async def _publish_info(self, topic: str, *, refresh: bool = False) -> TopicPublishInfo:
        seen = self._publish.get(topic)
        if seen is not None and not refresh:
            return seen
        async with self._route_locks.setdefault(topic, asyncio.Lock()):
            current = self._publish.get(topic)
            if current is not None and current is not seen:
                return current  # another send refreshed it while we waited
            try:
                info = await self._load_publish_info(topic, current)
            except RocketError:
                if current is None:
                    raise
                return current  # keep sending with what we know while the name server is away
            self._publish[topic] = info
            return info

    async def _load_publish_info(
        self, topic: str, previous: TopicPublishInfo | None
    ) -> TopicPublishInfo:
        try:
            # a refresh after a failed send is coalesced and rate-limited per topic
            refreshed = await self._client.refresh_route(topic) if previous else None
            route = refreshed or await self._client.fetch_route(topic)
            queues = route.publish_queues(topic)
            if queues:
                return TopicPublishInfo(
                    queues, _next=previous._next if previous else random.randrange(1 << 16)
                )
        except TopicNotExistError:
            pass
        # Unknown topic: send through TBW102's brokers so that the broker auto-creates the topic
        # with min(defaultTopicQueueNums, TBW102 queues) queues (§7.3).
        s = self.settings
        try:
            default = await self._client.fetch_route(s.create_topic_key)
        except TopicNotExistError:
            raise TopicNotExistError(
                f"no route for topic {topic} and auto-creation is not available"
            ) from None
        queues = []
        for mq in default.publish_queues(topic):
            qd = next(q for q in default.queue_datas if q.broker_name == mq.broker_name)
            if mq.queue_id < min(s.default_topic_queue_nums, qd.read_queue_nums):
                queues.append(mq)
        if not queues:
            raise TopicNotExistError(f"no writable route for topic {topic}")
        return TopicPublishInfo(queues, via_default_topic=True)

    async def _refresh_routes(self) -> None:
        for topic, info in list(self._publish.items()):
            try:
                route = await self._client.fetch_route(topic)
            except TopicNotExistError:
                continue
            queues = route.publish_queues(topic)
            if queues and queues != info.queues:
                self._publish[topic] = TopicPublishInfo(queues, _next=info._next)

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
