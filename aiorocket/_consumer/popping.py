"""What every POP consumer does (RocketMQ 5.x; docs/protocol.md §12.3): pop a batch from one
broker, turn the records into [`PoppedMessage`][aiorocket.PoppedMessage] objects carrying their
receipt handles, ack them (one by one or in batches), move their invisible time, and wait for a
message with NOTIFICATION. Used by [`SimpleConsumer`][aiorocket.SimpleConsumer] and by push
consumers in POP mode.

[LiteConsumer][aiorocket.LiteConsumer] pops with POP_LITE_MESSAGE (``PopClient.pop_lite``) and
acks the same way, each ack naming the message's lite topic (docs/protocol.md §12.8).

Dead letters follow the 5.x proxy (``PopMessageResultFilterImpl``): a popped message already
delivered ``max_reconsume_times`` + 1 times goes to ``%DLQ%<group>`` (CONSUMER_SEND_MSG_BACK,
delay level -1) and is acked instead of handed out; one whose tag does not match the
subscription (a tag-hash collision the broker let through) is acked at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from aiorocket._client.instance import ClientInstance
from aiorocket._client.lite import pop_lite_message
from aiorocket._client.pop import (
    ack_message,
    batch_ack,
    batch_acks,
    change_invisible_time,
    notification,
    pop_message,
)
from aiorocket._consumer.send_back import SendBack
from aiorocket._consumer.subscription import Subscription
from aiorocket._names import now_ms, without_namespace, wrap_namespace
from aiorocket._protocol.codes import PullSysFlag
from aiorocket._protocol.lite import PopLiteMessageRequestHeader, parse_lite_queue
from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.pop import (
    AckMessageRequestHeader,
    BatchAckMessageRequestBody,
    ChangeInvisibleTimeRequestHeader,
    NotificationRequestHeader,
    PopMessageRequestHeader,
    ReceiptHandle,
)
from aiorocket._protocol.properties import INNER_MULTI_DISPATCH, LITE_TOPIC, TAGS
from aiorocket._trace import TraceDispatcher
from aiorocket.errors import (
    BrokerError,
    ConfigurationError,
    InvalidReceiptHandleError,
    NotANameServerError,
    ReceiptHandleExpiredError,
    RequestCodeNotSupportedError,
    TransportError,
)
from aiorocket.models import ReceivedMessage
from aiorocket.settings import ConsumerSettings

__all__ = [
    "MAX_MESSAGES",
    "PopClient",
    "PopTarget",
    "PoppedMessage",
    "duration_ms",
    "trace_acked",
]

log = logging.getLogger("aiorocket.consumer")

#: ``PopMessageProcessor``: a broker pops at most 32 messages per request
MAX_MESSAGES = 32
#: ``ConsumeInitMode``: a new group starts at the queue's end (MAX) or start (MIN)
_INIT_MODE = {"last": 1, "first": 0}

#: a subscription and the name of a broker serving it
PopTarget = tuple[Subscription, str]


class PoppedMessage(ReceivedMessage):
    """A message received by POP (a [`SimpleConsumer`][aiorocket.SimpleConsumer], or a push consumer
    in POP mode): a [`ReceivedMessage`][aiorocket.ReceivedMessage] that also carries its receipt
    handle, which acks and changes of invisible time use (the latter renews it in place).

    Attributes:
        receipt_handle: the broker's handle of this delivery (its newest one).
        invisible_until: when the message becomes visible to the group again unless acked.
    """

    __slots__ = ("_handle", "_lite_topic", "_owner", "_popped_topic")

    _handle: ReceiptHandle
    _owner: PopClient
    _popped_topic: str
    #: the lite topic it was popped from (POP_LITE_MESSAGE), whose acks name it
    _lite_topic: str | None

    @property
    def receipt_handle(self) -> str:
        return self._handle.text

    @property
    def invisible_until(self) -> datetime:
        return datetime.fromtimestamp(self._handle.visible_at_ms / 1000, UTC)

    def _with_reconsume_times(self, times: int) -> PoppedMessage:
        # A local retry keeps the handle: the message is still this delivery.
        copy = PoppedMessage.__new__(PoppedMessage)
        copy._r = self._r
        copy._topic = self._topic
        copy._broker_name = self._broker_name
        copy._reconsume_times = times
        copy._handle = self._handle
        copy._owner = self._owner
        copy._popped_topic = self._popped_topic
        copy._lite_topic = self._lite_topic
        return copy


class PopClient:
    """The POP requests of one consumer group.

    Args:
        group: the wire consumer group (namespace applied).
        sender: for dead letters.
        tracer: what `ack_received` records acked messages with (``trace=True``).
    """

    def __init__(
        self,
        *,
        client: ClientInstance,
        group: str,
        settings: ConsumerSettings,
        sender: SendBack,
        tracer: TraceDispatcher | None = None,
    ) -> None:
        self._client = client
        self._tracer = tracer
        self._group = group
        self._settings = settings
        self._sender = sender
        self._init_mode = _INIT_MODE["first" if settings.consume_from == "first" else "last"]
        #: broker names whose address refused BATCH_ACK_MESSAGE / NOTIFICATION (a proxy's)
        self._no_batch_ack: set[str] = set()
        self._no_notification: set[str] = set()

    @classmethod
    def for_group(
        cls,
        client: ClientInstance,
        group: str,
        settings: ConsumerSettings,
        tracer: TraceDispatcher | None = None,
    ) -> PopClient:
        """The POP requests of ``group`` with their own sender of dead letters."""
        sender = SendBack(client=client, group=group, settings=settings)
        return cls(client=client, group=group, settings=settings, sender=sender, tracer=tracer)

    # -- popping ------------------------------------------------------------------------------

    async def pop(
        self,
        target: PopTarget,
        *,
        max_messages: int,
        invisible_ms: int,
        poll_ms: int,
        order: bool = False,
        queue_id: int = -1,
    ) -> list[PoppedMessage]:
        """One POP from one broker (``queue_id`` -1: any of its queues), held up to
        ``poll_ms`` while there is nothing.

        Raises:
            RequestCodeNotSupportedError: the broker does not serve POP (RocketMQ 4.x).
            BrokerError, RemoteProtocolError, TransportError.
        """
        sub, broker_name = target
        header = PopMessageRequestHeader(
            consumer_group=self._group,
            topic=sub.topic,
            queue_id=queue_id,
            max_msg_nums=max_messages,
            invisible_time=invisible_ms,
            poll_time=poll_ms,
            born_time=now_ms(),
            init_mode=self._init_mode,
            exp_type=sub.expression_type,
            exp=sub.expression,
            order=order,
            broker_name=broker_name,
            proxy_sys_flag=int(PullSysFlag.SUBSCRIPTION),
            proxy_suspend_ms=poll_ms,
        )
        addr = await self._client.find_broker(broker_name, sub.topic, master=True)
        if await self._client.is_proxy(addr):
            # Routes through a 5.x proxy name the proxy for every broker. Its remoting port
            # hands POP to its pull activity and never answers ACK_MESSAGE (Apache 5.3.3,
            # 5.5.0): messages could be popped but not acked (docs/protocol.md §12.8).
            raise NotANameServerError(
                f"{addr} is a RocketMQ proxy: its remoting port cannot serve POP consumption "
                "(it never answers ACK_MESSAGE); give the consumer the name server's address, "
                "or consume in pull mode (PushConsumer's default) through the proxy"
            )
        # The broker answers after its hold: the request timeout starts after it.
        timeout = poll_ms / 1000 + self._settings.request_timeout
        result = await pop_message(self._client, addr, broker_name, header, timeout=timeout)
        return await self._deliverable(sub, broker_name, result.records)

    async def pop_lite(
        self,
        target: PopTarget,
        *,
        client_id: str,
        max_messages: int,
        invisible_ms: int,
        poll_ms: int,
        attempt_id: str | None,
    ) -> list[PoppedMessage]:
        """One POP_LITE_MESSAGE to one broker: messages of the lite topics ``client_id``
        subscribes under the target's topic (their parent), held up to ``poll_ms`` while there
        is nothing (docs/protocol.md §12.8). Dead letters as ``pop``.

        Raises:
            RequestCodeNotSupportedError: the server does not serve lite topics.
            BrokerError, RemoteProtocolError, TransportError.
        """
        sub, broker_name = target
        header = PopLiteMessageRequestHeader(
            client_id=client_id,
            consumer_group=self._group,
            topic=sub.topic,
            max_msg_num=max_messages,
            invisible_time=invisible_ms,
            poll_time=poll_ms,
            born_time=now_ms(),
            attempt_id=attempt_id,
        )
        addr = await self._client.find_broker(broker_name, sub.topic, master=True)
        timeout = poll_ms / 1000 + self._settings.request_timeout
        result = await pop_lite_message(self._client, addr, broker_name, header, timeout=timeout)
        return await self._deliverable(sub, broker_name, result.records, lite=True)

    async def _deliverable(
        self,
        sub: Subscription,
        broker_name: str,
        records: list[tuple[MessageRecord, ReceiptHandle]],
        *,
        lite: bool = False,
    ) -> list[PoppedMessage]:
        out: list[PoppedMessage] = []
        max_reconsume = self._settings.effective_max_reconsume_times
        topic = without_namespace(self._settings.namespace, sub.topic)
        tag_filter = sub.filter
        for rec, handle in records:
            msg = PoppedMessage.__new__(PoppedMessage)
            msg._r = rec
            msg._topic = topic
            msg._broker_name = broker_name
            msg._reconsume_times = rec.reconsume_times
            msg._handle = handle
            msg._owner = self
            # From the handle, not the record: a retried message may come under its original
            # topic (ExtraInfoUtil.getRealTopic).
            msg._popped_topic = handle.popped_topic(sub.topic, self._group)
            msg._lite_topic = _lite_topic_of(rec) if lite else None
            if not tag_filter.match_all and rec.properties.get(TAGS) not in tag_filter.tags:
                await self.ack_quietly(msg)
            elif msg.reconsume_times > max_reconsume:
                await self._dead_letter(msg)
            else:
                out.append(msg)
        return out

    async def dead_letter(self, msg: PoppedMessage) -> None:
        """Send ``msg`` to ``%DLQ%<group>`` and ack it (a failure is logged: the message
        then comes back after its invisible time)."""
        await self._dead_letter(msg)

    async def _dead_letter(self, msg: PoppedMessage) -> None:
        # ConsumerProcessor's TO_DLQ: send back with delay level -1, then ack.
        try:
            await self._sender.request(msg, -1, msg.broker_name, topic=msg._popped_topic)
        except (BrokerError, TransportError) as exc:
            log.warning("dead-lettering %s failed (%s); it comes back later", msg.msg_id, exc)
            return
        log.info("message %s went to the DLQ after %d deliveries", msg.msg_id, msg.reconsume_times)
        await self.ack_quietly(msg)

    def notifies(self, targets: list[PopTarget]) -> bool:
        """Whether any of ``targets`` answered NOTIFICATION (or was not asked yet); a proxy's
        never do, so a receive holds a POP instead."""
        return any(name not in self._no_notification for _, name in targets)

    async def first_notified(self, targets: list[PopTarget], wait: float) -> PopTarget | None:
        """Hold a NOTIFICATION at every target for up to ``wait`` seconds; the first that has
        a message for the group, or None."""
        poll_ms = int(wait * 1000)

        async def ask(target: PopTarget) -> PopTarget | None:
            sub, broker_name = target
            header = NotificationRequestHeader(
                consumer_group=self._group,
                topic=sub.topic,
                queue_id=-1,
                poll_time=poll_ms,
                born_time=now_ms(),
                broker_name=broker_name,
            )
            try:
                addr = await self._client.find_broker(broker_name, sub.topic, master=True)
                has = await notification(
                    self._client, addr, header, timeout=wait + self._settings.request_timeout
                )
            except RequestCodeNotSupportedError:
                # Apache's proxy serves no NOTIFICATION (5.3.3, 5.5.0): see notifies()
                self._no_notification.add(broker_name)
                return None
            except (BrokerError, TransportError) as exc:
                log.debug("notification from %s failed: %s", broker_name, exc)
                await asyncio.sleep(min(wait, 1.0))
                return None
            return target if has else None

        pending = {asyncio.ensure_future(ask(t)) for t in targets}
        try:
            while pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for fut in done:
                    found = fut.result()
                    if found is not None:
                        return found
            return None
        finally:
            for fut in pending:
                fut.cancel()
            if pending:
                await asyncio.wait(pending)

    # -- settling -----------------------------------------------------------------------------

    def check(self, msg: ReceivedMessage) -> PoppedMessage:
        """``msg`` if it was popped by this group's client and its handle is still valid.

        Raises:
            InvalidReceiptHandleError: not popped by this consumer.
            ReceiptHandleExpiredError: its invisible time has passed.
        """
        if not isinstance(msg, PoppedMessage) or msg._owner is not self:
            raise InvalidReceiptHandleError(
                f"message {msg.msg_id} was not received by this consumer ({self._group})"
            )
        if msg._handle.visible_at_ms <= now_ms():
            raise ReceiptHandleExpiredError(
                f"the receipt handle of {msg.msg_id} expired at {msg.invisible_until.isoformat()}"
                ": the message may be delivered again"
            )
        return msg

    async def ack(self, msg: PoppedMessage) -> None:
        """ACK_MESSAGE of ``msg`` (checked with `check` first).

        Raises:
            InvalidReceiptHandleError, ReceiptHandleExpiredError: as `check`.
            BrokerError, TransportError: the broker refused or could not be reached.
        """
        addr, fields = await self._addressed(msg)
        await ack_message(self._client, addr, AckMessageRequestHeader(**fields))

    async def ack_quietly(self, msg: PoppedMessage) -> bool:
        """`ack`, logging a failure instead of raising it; whether it was acked."""
        try:
            await self.ack(msg)
        except (BrokerError, TransportError, InvalidReceiptHandleError) as exc:
            log.warning("ack of %s failed: %s", msg.msg_id, exc)
            return False
        return True

    async def ack_all(self, msgs: Iterable[PoppedMessage]) -> None:
        """Ack several messages, one BATCH_ACK_MESSAGE per broker (each checked first).

        Raises:
            As `ack` (before anything is sent when a handle is foreign or expired).
        """
        by_broker: dict[str, list[PoppedMessage]] = {}
        lite: list[PoppedMessage] = []
        for m in msgs:
            self.check(m)
            if m._lite_topic is not None:
                lite.append(m)  # a batch ack has no lite topic: one at a time (§12.8)
            else:
                by_broker.setdefault(m._handle.broker_name, []).append(m)
        for m in lite:
            await self.ack(m)
        for broker_name, popped in by_broker.items():
            if len(popped) > 1 and broker_name not in self._no_batch_ack:
                acks = batch_acks(self._group, [(self._wire_topic(p), p._handle) for p in popped])
                topic = popped[0]._popped_topic
                addr = await self._client.find_broker(broker_name, topic, master=True)
                body = BatchAckMessageRequestBody(broker_name=broker_name, acks=tuple(acks))
                try:
                    await batch_ack(self._client, addr, body)
                    continue
                except RequestCodeNotSupportedError:
                    # Apache's proxy serves ACK_MESSAGE but not BATCH_ACK_MESSAGE (5.3.3, 5.5.0)
                    self._no_batch_ack.add(broker_name)
            for msg in popped:
                await self.ack(msg)

    async def ack_received(self, msgs: Iterable[ReceivedMessage]) -> None:
        """What an application's ``ack``/``ack_all`` does: check every message (nothing is
        sent when one is foreign or expired), ack them (`ack_all`), trace them.

        Raises:
            As `ack_all`.
        """
        popped = [self.check(m) for m in msgs]
        await self.ack_all(popped)
        trace_acked(self._tracer, popped)

    def _wire_topic(self, msg: PoppedMessage) -> str:
        # BatchAck names the subscribed topic and marks the retry topic separately.
        return wrap_namespace(self._settings.namespace, msg.topic)

    async def change_invisible(self, msg: PoppedMessage, invisible_ms: int) -> None:
        """CHANGE_MESSAGE_INVISIBLETIME: ``msg`` becomes visible ``invisible_ms`` from now;
        its handle is renewed in place (the old one is spent).

        Raises:
            As `ack`.
        """
        addr, fields = await self._addressed(msg)
        header = ChangeInvisibleTimeRequestHeader(**fields, invisible_time=invisible_ms)
        answer = await change_invisible_time(self._client, addr, header)
        msg._handle = msg._handle.renewed(answer.pop_time, answer.invisible_time, answer.revive_qid)

    async def _addressed(self, msg: PoppedMessage) -> tuple[str, dict[str, Any]]:
        """Check ``msg`` (`check`); the master to send its ack or change to, and the
        header fields both requests share (Java's ``ackAsync`` / ``changePopInvisibleTimeAsync``:
        the topic popped from, the handle's queue and offset)."""
        self.check(msg)
        h = msg._handle
        addr = await self._client.find_broker(h.broker_name, msg._popped_topic, master=True)
        fields = {
            "consumer_group": self._group,
            "topic": msg._popped_topic,
            "queue_id": h.queue_id,
            "extra_info": h.text,
            "offset": h.offset,
            "broker_name": h.broker_name,
        }
        if msg._lite_topic is not None:
            fields["lite_topic"] = msg._lite_topic  # ackLite: the offset is the lite topic's
        return addr, fields


def duration_ms(seconds: float, name: str) -> int:
    """``seconds`` as a positive number of milliseconds (an invisible time, ...).

    Raises:
        ConfigurationError: ``seconds`` is not positive.
    """
    if not seconds > 0:
        raise ConfigurationError(f"{name} must be positive, not {seconds!r}")
    return max(1, int(seconds * 1000))


def trace_acked(tracer: TraceDispatcher | None, msgs: Iterable[PoppedMessage]) -> None:
    """With trace on, record acked messages as consumed: a SubBefore at their receipt (the
    handle's pop time, renewed by a change of invisible time) and a successful SubAfter now,
    as a push consumer's handler call records them. A message not acked comes back, and is
    traced when that delivery is acked."""
    if tracer is not None:
        now = now_ms()
        for m in msgs:
            tracer.append_consume(((m,), m._handle.pop_time, now, True, 0))


def _lite_topic_of(rec: MessageRecord) -> str | None:
    """The lite topic a popped lite record belongs to: its ``__LITE_TOPIC`` (what the proxy
    acks with), else the one its light message queue names."""
    named = rec.properties.get(LITE_TOPIC)
    if named:
        return named
    parts = parse_lite_queue(rec.properties.get(INNER_MULTI_DISPATCH, ""))
    return None if parts is None else parts[1]
