"""Transactional messages: Java's ``TransactionMQProducer`` and
``DefaultMQProducerImpl.sendMessageInTransaction`` / ``checkTransactionState``.

A transactional send stores a *half message* (``TRAN_MSG=true``, ``PGROUP``; prepared sysFlag)
that consumers cannot see, runs the local transaction, then tells the broker that stored it to
commit or roll back (END_TRANSACTION, oneway). When that answer is lost or "unknown", the
broker later asks a producer of the group (CHECK_TRANSACTION_STATE), whose ``check`` decides.

The same steps apart (``prepare`` now, ``end`` later, maybe from another process) make a
two-phase commit: what identifies a half message (`PreparedMessage`) travels to whoever
decides, and END_TRANSACTION is then sent as a request, so its sender learns whether the broker
applied it.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiorocket._names import now_ms, without_namespace, wrap_namespace
from aiorocket._protocol.codes import MessageSysFlag, RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from aiorocket._protocol.message import MessageRecord, decode_message
from aiorocket._protocol.msgid import parse_offset_msg_id
from aiorocket._protocol.properties import (
    CHECK_IMMUNITY_TIME_IN_SECONDS,
    KEYS,
    MSG_REGION,
    PGROUP,
    TRAN_MSG,
    UNIQ_KEY,
)
from aiorocket._remoting import Connection, RequestHandler
from aiorocket.errors import (
    ClientClosedError,
    ConfigurationError,
    RemoteProtocolError,
    RocketError,
    broker_error,
)
from aiorocket.models import Message, ReceivedMessage, SendResult, SendStatus, validate_name
from aiorocket.settings import TransactionProducerSettings

from .checks import has_timer
from .producer import Producer
from .trace_hook import trace_end_transaction

__all__ = [
    "PreparedMessage",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionState",
]

log = logging.getLogger("aiorocket.producer")


class TransactionState(enum.Enum):
    """The outcome of a local transaction (Java ``LocalTransactionState``)."""

    #: deliver the message
    COMMIT = "COMMIT_MESSAGE"
    #: drop the message
    ROLLBACK = "ROLLBACK_MESSAGE"
    #: not decided yet: the broker checks back later
    UNKNOWN = "UNKNOW"


_END_TYPE = {
    TransactionState.COMMIT: int(MessageSysFlag.TRANSACTION_COMMIT),
    TransactionState.ROLLBACK: int(MessageSysFlag.TRANSACTION_ROLLBACK),
    TransactionState.UNKNOWN: 0,
}

#: ``execute_local(message, arg)``: run the local transaction of a stored half message.
ExecuteLocal = Callable[[Message, Any], Awaitable[TransactionState]]
#: ``check(message)``: the state of the transaction of a half message the broker asks about.
CheckLocal = Callable[[ReceivedMessage], Awaitable[TransactionState]]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransactionSendResult(SendResult):
    """A [`SendResult`][aiorocket.SendResult] of the half message plus what the local transaction
    decided (Java ``TransactionSendResult``).

    Attributes:
        state: the local transaction's outcome, as sent to the broker (``ROLLBACK`` when the
            half message was not stored with ``SEND_OK``).
        transaction_id: the transaction id (the message's ``UNIQ_KEY``).
    """

    state: TransactionState
    transaction_id: str


@dataclass(frozen=True, slots=True)
class PreparedMessage:
    """A stored half message: what [TransactionProducer.end][aiorocket.TransactionProducer.end]
    needs to commit or roll it back, from this process or any other (plain values: it pickles
    and travels as JSON). Made by
    [TransactionProducer.prepare][aiorocket.TransactionProducer.prepare].

    Attributes:
        group: the transaction's producer group as the broker knows it (``PGROUP``, with the
            namespace): END_TRANSACTION must name it, and the broker's checks go to a live
            producer of it.
        broker_name: the broker that stored the half message.
        queue_offset: its offset in the broker's half queue (Java's ``tranStateTableOffset``).
        commit_log_offset: its commit-log offset.
        msg_id: its ``UNIQ_KEY``, which the committed message keeps (also the transaction id).
        topic: the topic it is delivered to once committed (without the namespace).
        queue_id: the queue of ``topic`` it is delivered to.
        born_ms: when the producer sent it (ms since the epoch): the broker checks it back
            once it is older than the broker's transaction timeout or its ``check_after``.
    """

    group: str
    broker_name: str
    queue_offset: int
    commit_log_offset: int
    msg_id: str
    topic: str
    queue_id: int
    born_ms: int


class TransactionProducer(Producer):
    """Sends transactional messages; also sends ordinary ones like [`Producer`][aiorocket.Producer].

    ```python
    async def execute_local(msg: Message, arg: object) -> TransactionState:
        await save_order(arg)                 # raising counts as UNKNOWN
        return TransactionState.COMMIT

    async def check(msg: ReceivedMessage) -> TransactionState:
        return TransactionState.COMMIT if await order_exists(msg.keys[0]) else ...

    async with TransactionProducer(
        namesrv="127.0.0.1:9876", group="shop-tx", execute_local=execute_local, check=check
    ) as producer:
        result = await producer.send_in_transaction(Message("orders", b"{}"), arg=order)
    ```

    Settings (keyword arguments) are those of
    [`TransactionProducerSettings`][aiorocket.settings.TransactionProducerSettings]. Every producer
    of a group must
    be able to answer ``check`` for any message of the group: the broker asks any live one.

    A producer that only [prepares][aiorocket.TransactionProducer.prepare] and
    [ends][aiorocket.TransactionProducer.end] transactions needs no ``execute_local``; one
    whose group gets no checks (its halves name another group) needs no ``check`` (a check
    that reaches it anyway is logged and left unanswered: the broker asks again later).

    Raises:
        ConfigurationError: invalid settings (at construction).
    """

    _settings_class = TransactionProducerSettings

    def __init__(
        self,
        *,
        namesrv: str | Sequence[str],
        group: str,
        execute_local: ExecuteLocal | None = None,
        check: CheckLocal | None = None,
        **settings: Any,
    ) -> None:
        self._execute_local = execute_local
        self._check = check
        super().__init__(namesrv=namesrv, group=group, **settings)
        s = self.settings
        assert isinstance(s, TransactionProducerSettings)
        self._check_limit = asyncio.Semaphore(s.check_concurrency)
        self._check_backlog = s.check_backlog
        self._checks_pending = 0

    async def start(self) -> None:
        """Start like [`Producer.start`][aiorocket.Producer.start], then learn the brokers and
        heartbeat at once, so that check-backs can reach this producer before it has sent anything.

        Raises:
            ClientClosedError: the producer was closed before.
        """
        await super().start()
        # DefaultMQProducerImpl.start puts the create-topic key (TBW102) among the published
        # topics: its route names the brokers, which then get heartbeats carrying the group.
        try:
            await self._publish_info(self._wire_topic(self.settings.create_topic_key))
        except RocketError as exc:
            log.warning("no route for %s yet: %s", self.settings.create_topic_key, exc)

    async def send_in_transaction(
        self, msg: Message, arg: Any = None, *, timeout: float | None = None
    ) -> TransactionSendResult:
        """Store ``msg`` as a half message, run ``execute_local(msg, arg)``, then commit or
        roll it back on the broker that stored it.

        A delay level is ignored (as Java clears it). An exception in ``execute_local``
        counts as ``UNKNOWN`` (the broker checks back later); a failed END_TRANSACTION is
        logged, not raised — the check-back settles the transaction then.

        Raises:
            ConfigurationError: no ``execute_local`` was given, or the message has a
                ``message_group``, a ``lite_topic`` or timer properties: RocketMQ 5.x refuses
                a transactional message that is also a FIFO or a timer one ("Transactional
                message should not set messageGroup or deliveryTimestamp").
            RocketError: as [`Producer.send`][aiorocket.Producer.send] for the half message;
                nothing has been stored then and ``execute_local`` has not run.
        """
        execute_local = self._execute_local
        if execute_local is None:
            raise ConfigurationError("send_in_transaction needs the producer's execute_local")
        result = await self._send_half(msg, self._wire_group(), None, timeout)
        error: BaseException | None = None
        if result.status is SendStatus.SEND_OK:
            try:
                state = await execute_local(msg, arg)
                if not isinstance(state, TransactionState):
                    raise TypeError(f"execute_local returned {state!r}, not a TransactionState")
            except Exception as exc:
                log.warning("local transaction of %s failed: %r", result.msg_id, exc)
                error, state = exc, TransactionState.UNKNOWN
        else:
            # sendMessageInTransaction: a half message not stored SEND_OK is rolled back.
            state = TransactionState.ROLLBACK
        addr = await self._end(result, state, error)
        if self.tracer is not None:
            self._trace_end(
                msg.topic,
                msg.tags,
                msg.keys,
                addr or result.queue.broker_name,
                result.msg_id,
                result.msg_id,
                state,
                from_check=False,
                region=None,
            )
        return TransactionSendResult(
            status=result.status,
            msg_id=result.msg_id,
            offset_msg_id=result.offset_msg_id,
            queue=result.queue,
            queue_offset=result.queue_offset,
            state=state,
            transaction_id=result.msg_id,
        )

    async def _send_half(
        self, msg: Message, group: str, check_after: int | None, timeout: float | None
    ) -> SendResult:
        if msg.message_group is not None or msg.lite_topic is not None or has_timer(msg.properties):
            # PublishingMessageImpl (rocketmq-clients): the message types exclude each other;
            # over remoting a 5.x broker would deliver the commit at the timer's time.
            raise ConfigurationError(
                "a transactional message cannot have a message_group, a lite_topic or a "
                "delivery time"
            )
        extra = {TRAN_MSG: "true", PGROUP: group}
        if check_after is not None:
            extra[CHECK_IMMUNITY_TIME_IN_SECONDS] = str(check_after)
        result = await self._send_one(
            msg,
            None,
            None,
            None,
            0,
            timeout,
            oneway=False,
            extra=extra,
            sys_flag=int(MessageSysFlag.TRANSACTION_PREPARED),
        )
        assert result is not None
        return result

    async def prepare(
        self,
        msg: Message,
        *,
        group: str | None = None,
        check_after: int | None = None,
        timeout: float | None = None,
    ) -> PreparedMessage:
        """Store ``msg`` as a half message and return what identifies it; nothing more is sent
        (no local transaction runs). Commit or roll it back later with
        [end][aiorocket.TransactionProducer.end], from this producer or from any other
        process; until then consumers do not see it, and once it is older than the broker's
        transaction timeout the broker asks a live producer of ``group`` about it.

        Args:
            msg: the message (a delay level is ignored, as for a transactional send).
            group: the transaction's producer group (default: this producer's), which the
                broker's checks go to. A group that only answers checks (one process
                deciding for many senders) need not be the sender's.
            check_after: seconds before the broker may check it back at all (the
                ``CHECK_IMMUNITY_TIME_IN_SECONDS`` property; brokers use their transaction
                timeout when it is shorter). A RocketMQ 5 broker also refuses, past this age,
                an END_TRANSACTION that is not the answer to a check.
            timeout: as for [send][aiorocket.Producer.send].

        Raises:
            ConfigurationError: a ``message_group`` or timer properties (as
                [send_in_transaction][aiorocket.TransactionProducer.send_in_transaction]),
                or an invalid ``group`` or ``check_after``.
            RocketError: as [send][aiorocket.Producer.send]; nothing was stored then.
        """
        if check_after is not None and check_after < 0:
            raise ConfigurationError("check_after must be >= 0 seconds")
        wire = self._wire_group()
        if group is not None:
            validate_name(group, "producer group")
            wire = wrap_namespace(self.settings.namespace, group)
        born = now_ms()  # the header's born timestamp is taken a moment later
        result = await self._send_half(msg, wire, check_after, timeout)
        try:
            commit_log_offset = parse_offset_msg_id(result.offset_msg_id)[2]
        except ValueError:
            raise RemoteProtocolError(
                f"half message {result.msg_id}: unreadable offset id {result.offset_msg_id!r}"
            ) from None
        return PreparedMessage(
            group=wire,
            broker_name=result.queue.broker_name,
            queue_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            msg_id=result.msg_id,
            topic=result.queue.topic,
            queue_id=result.queue.queue_id,
            born_ms=born,
        )

    async def end(
        self, prepared: PreparedMessage, state: TransactionState, *, timeout: float | None = None
    ) -> None:
        """Commit or roll back a [prepared][aiorocket.TransactionProducer.prepare] half
        message, and wait until its broker says it did (END_TRANSACTION sent as a request,
        where a transactional send's own end is oneway).

        A half message must be committed at most once: a RocketMQ 4.9 broker delivers it again
        for every COMMIT it receives, including the answer to a later check of the same
        message. Whoever ends prepared messages must therefore answer their checks too (see
        the Spark sink's exactly-once mode for one way to arrange it).

        Raises:
            ConfigurationError: ``state`` is ``UNKNOWN``.
            BrokerError: the broker did not apply it: it no longer has the half message, the
                group or offsets do not match, or (RocketMQ 5, code 604) the half message is
                older than its ``check_after`` and only a check's answer may end it now.
            TransportError: no answer (the broker may or may not have applied it).
            ClientClosedError: the producer is closed or was never started.
        """
        if state is TransactionState.UNKNOWN:
            raise ConfigurationError("end() takes COMMIT or ROLLBACK, not UNKNOWN")
        if self._closed or not self._started:
            raise ClientClosedError("the producer is closed or not started")
        header = EndTransactionRequestHeader(
            producer_group=prepared.group,
            tran_state_table_offset=prepared.queue_offset,
            commit_log_offset=prepared.commit_log_offset,
            commit_or_rollback=_END_TYPE[state],
            from_transaction_check=False,
            msg_id=prepared.msg_id,
            transaction_id=prepared.msg_id,
        )
        client = self._client
        resp = await client.call_broker(
            prepared.broker_name,
            wrap_namespace(self.settings.namespace, prepared.topic),
            lambda addr: client.invoke(
                addr,
                RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext()),
                timeout=timeout,
            ),
            master=True,
            after_close=False,  # it may have been committed: a second COMMIT delivers again
        )
        if resp.code != ResponseCode.SUCCESS:
            raise broker_error(resp.code, resp.remark)

    async def checks_from(self, *topics: str) -> None:
        """Heartbeat the brokers of ``topics`` from now on, so that their transaction checks
        reach this producer before it has sent anything there (a producer heartbeats the
        brokers of the topics it knows; one that only answers checks knows none).

        Raises:
            TopicNotExistError: a topic has no route.
            RocketError: the name server could not be asked.
        """
        for topic in topics:
            await self._publish_info(self._wire_topic(topic))
        self._membership.wake_heartbeats()

    async def _end(
        self, result: SendResult, state: TransactionState, error: BaseException | None
    ) -> str | None:
        """END_TRANSACTION of a transactional send; the address it went to, ``None`` when it
        could not be sent (logged)."""
        # DefaultMQProducerImpl.endTransaction: to the master of the broker that stored it.
        try:
            commit_log_offset = parse_offset_msg_id(result.offset_msg_id)[2]
        except ValueError:
            log.error("cannot end transaction %s: bad offset id", result.msg_id)
            return None
        header = EndTransactionRequestHeader(
            producer_group=self._wire_group(),
            tran_state_table_offset=result.queue_offset,
            commit_log_offset=commit_log_offset,
            commit_or_rollback=_END_TYPE[state],
            from_transaction_check=False,
            msg_id=result.msg_id,
            transaction_id=result.msg_id,
        )
        remark = f"executeLocalTransactionBranch exception: {error!r}" if error else None
        client = self._client

        async def end_at(addr: str) -> str:
            await client.end_transaction(addr, header, remark=remark)
            return addr

        try:
            # (oneway: a closed connection raises before anything is written, so the retry
            # at a moved master cannot end it twice)
            return await client.call_broker(
                result.queue.broker_name,
                self._wire_topic(result.queue.topic),
                end_at,
                master=True,
            )
        except RocketError as exc:
            log.warning(
                "transaction %s is %s locally but END_TRANSACTION failed: %s",
                result.msg_id,
                state.name,
                exc,
            )
            return None

    def _trace_end(
        self,
        topic: str,
        tags: str | None,
        keys: Sequence[str],
        broker_addr: str,
        msg_id: str,
        transaction_id: str | None,
        state: TransactionState,
        *,
        from_check: bool,
        region: str | None,
    ) -> None:
        # DefaultMQProducerImpl.doExecuteEndTransactionHook, after both ends of a transaction.
        assert self.tracer is not None
        trace_end_transaction(
            self.tracer,
            group=self.settings.group,
            topic=topic,
            tags=tags,
            keys=" ".join(keys) if keys else None,
            broker_addr=broker_addr,
            msg_id=msg_id,
            transaction_id=transaction_id,
            state=state.value,
            from_check=from_check,
            region_id=region,
        )

    # -- check-back ---------------------------------------------------------------------------

    def _broker_requests(self) -> RequestHandler:
        dispatcher = self._dispatcher()
        dispatcher.register(RequestCode.CHECK_TRANSACTION_STATE, self._on_check)
        return dispatcher

    async def _on_check(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        # ClientRemotingProcessor.checkTransactionState -> checkTransactionState: oneway, so
        # nothing is answered; the verdict goes back as END_TRANSACTION on the same channel.
        try:
            header = CheckTransactionStateRequestHeader.from_ext(cmd.ext_fields)
            rec, _ = decode_message(cmd.body)
        except RemoteProtocolError as exc:
            log.warning("malformed CHECK_TRANSACTION_STATE from %s: %s", conn.peer, exc)
            return None
        group = rec.properties.get(PGROUP)
        if group != self._wire_group():
            log.debug("check of group %s is not for this producer (%s)", group, conn.peer)
            return None
        if self._check is None:
            log.warning("check of %s reached a producer without check(); not answered", rec)
            return None
        if self._checks_pending >= self._check_backlog:
            log.warning("check backlog full (%d); check of %s dropped", self._check_backlog, rec)
            return None
        self._checks_pending += 1
        try:
            async with self._check_limit:
                await self._answer_check(conn, header, rec.properties.get(UNIQ_KEY), rec)
        finally:
            self._checks_pending -= 1
        return None

    async def _answer_check(
        self,
        conn: Connection,
        header: CheckTransactionStateRequestHeader,
        uniq: str | None,
        rec: MessageRecord,
    ) -> None:
        topic = without_namespace(self.settings.namespace, rec.topic)
        msg = ReceivedMessage(rec, topic=topic, broker_name="")
        error: BaseException | None = None
        assert self._check is not None
        try:
            state = await self._check(msg)
            if not isinstance(state, TransactionState):
                raise TypeError(f"check returned {state!r}, not a TransactionState")
        except Exception as exc:
            log.warning("transaction check of %s failed: %r", uniq or header.msg_id, exc)
            error, state = exc, TransactionState.UNKNOWN
        end = EndTransactionRequestHeader(
            producer_group=self._wire_group(),
            tran_state_table_offset=header.tran_state_table_offset,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=_END_TYPE[state],
            from_transaction_check=True,
            msg_id=uniq or header.msg_id or "",
            transaction_id=header.transaction_id,
        )
        remark = f"checkLocalTransactionState Exception: {error!r}" if error else None
        if self.tracer is not None:
            keys = rec.properties.get(KEYS)
            self._trace_end(
                topic,
                msg.tags,
                keys.split(" ") if keys else (),
                f"{conn.peer[0]}:{conn.peer[1]}",
                uniq or header.msg_id or "",
                header.transaction_id,
                state,
                from_check=True,
                region=rec.properties.get(MSG_REGION),
            )
        try:
            await conn.send_oneway(
                RemotingCommand.request(
                    RequestCode.END_TRANSACTION, end.to_ext(), oneway=True, remark=remark
                )
            )
        except RocketError as exc:
            log.warning("cannot answer the check of %s: %s", uniq, exc)
