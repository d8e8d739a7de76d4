"""Transactional messages: Java's ``TransactionMQProducer`` and
``DefaultMQProducerImpl.sendMessageInTransaction`` / ``checkTransactionState``.

A transactional send stores a *half message* (``TRAN_MSG=true``, ``PGROUP``; prepared sysFlag)
that consumers cannot see, runs the local transaction, then tells the broker that stored it to
commit or roll back (END_TRANSACTION, oneway). When that answer is lost or "unknown", the
broker later asks a producer of the group (CHECK_TRANSACTION_STATE), whose ``check`` decides.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiorocket._names import without_namespace
from aiorocket._protocol.codes import MessageSysFlag, RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from aiorocket._protocol.message import MessageRecord, decode_message
from aiorocket._protocol.msgid import parse_offset_msg_id
from aiorocket._protocol.properties import KEYS, MSG_REGION, PGROUP, TRAN_MSG, UNIQ_KEY
from aiorocket._remoting import Connection, Dispatcher, RequestHandler
from aiorocket.errors import ConfigurationError, RemoteProtocolError, RocketError
from aiorocket.models import Message, ReceivedMessage, SendResult, SendStatus
from aiorocket.settings import TransactionProducerSettings

from .checks import has_timer
from .producer import Producer
from .trace_hook import trace_end_transaction

__all__ = ["TransactionProducer", "TransactionSendResult", "TransactionState"]

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


@dataclass(frozen=True, slots=True)
class TransactionSendResult(SendResult):
    """A :class:`SendResult` of the half message plus what the local transaction decided
    (Java ``TransactionSendResult``).

    Attributes:
        state: the local transaction's outcome, as sent to the broker (``ROLLBACK`` when the
            half message was not stored with ``SEND_OK``).
        transaction_id: the transaction id (the message's ``UNIQ_KEY``).
    """

    state: TransactionState
    transaction_id: str


class TransactionProducer(Producer):
    """Sends transactional messages; also sends ordinary ones like :class:`Producer`.

    ::

        async def execute_local(msg: Message, arg: object) -> TransactionState:
            await save_order(arg)                 # raising counts as UNKNOWN
            return TransactionState.COMMIT

        async def check(msg: ReceivedMessage) -> TransactionState:
            return TransactionState.COMMIT if await order_exists(msg.keys[0]) else ...

        async with TransactionProducer(
            namesrv="127.0.0.1:9876", group="shop-tx", execute_local=execute_local, check=check
        ) as producer:
            result = await producer.send_in_transaction(Message("orders", b"{}"), arg=order)

    Settings (keyword arguments) are those of
    :class:`~aiorocket.settings.TransactionProducerSettings`. Every producer of a group must
    be able to answer ``check`` for any message of the group: the broker asks any live one.

    Raises:
        ConfigurationError: invalid settings (at construction).
    """

    _settings_class = TransactionProducerSettings

    def __init__(
        self,
        *,
        namesrv: str | Sequence[str],
        group: str,
        execute_local: ExecuteLocal,
        check: CheckLocal,
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
        """Start like :meth:`Producer.start`, then learn the brokers and heartbeat at once,
        so that check-backs can reach this producer before it has sent anything.

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
            ConfigurationError: the message has a ``message_group``, a ``lite_topic`` or timer
                properties:
                RocketMQ 5.x refuses a transactional message that is also a FIFO or a timer
                one ("Transactional message should not set messageGroup or
                deliveryTimestamp").
            RocketError: as :meth:`Producer.send` for the half message; nothing has been
                stored then and ``execute_local`` has not run.
        """
        if msg.message_group is not None or msg.lite_topic is not None or has_timer(msg.properties):
            # PublishingMessageImpl (rocketmq-clients): the message types exclude each other;
            # over remoting a 5.x broker would deliver the commit at the timer's time.
            raise ConfigurationError(
                "a transactional message cannot have a message_group, a lite_topic or a "
                "delivery time"
            )
        group = self._wire_group()
        result = await self._send_one(
            msg,
            None,
            None,
            None,
            0,
            timeout,
            oneway=False,
            extra={TRAN_MSG: "true", PGROUP: group},
            sys_flag=int(MessageSysFlag.TRANSACTION_PREPARED),
        )
        assert result is not None
        error: BaseException | None = None
        if result.status is SendStatus.SEND_OK:
            try:
                state = await self._execute_local(msg, arg)
                if not isinstance(state, TransactionState):
                    raise TypeError(f"execute_local returned {state!r}, not a TransactionState")
            except Exception as exc:
                log.warning("local transaction of %s failed: %r", result.msg_id, exc)
                error, state = exc, TransactionState.UNKNOWN
        else:
            # sendMessageInTransaction: a half message not stored SEND_OK is rolled back.
            state = TransactionState.ROLLBACK
        await self._end(result, state, error)
        if self.tracer is not None:
            self._trace_end(
                msg.topic,
                msg.tags,
                msg.keys,
                result.queue.broker_name,
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

    async def _end(
        self, result: SendResult, state: TransactionState, error: BaseException | None
    ) -> None:
        # DefaultMQProducerImpl.endTransaction: to the master of the broker that stored it.
        addr = self._client.master_address(result.queue.broker_name)
        try:
            commit_log_offset = parse_offset_msg_id(result.offset_msg_id)[2]
        except ValueError:
            log.error("cannot end transaction %s: bad offset id", result.msg_id)
            return
        if addr is None:
            log.error("cannot end transaction %s: broker address unknown", result.msg_id)
            return
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
        try:
            await self._client.end_transaction(addr, header, remark=remark)
        except RocketError as exc:
            log.warning(
                "transaction %s is %s locally but END_TRANSACTION failed: %s",
                result.msg_id,
                state.name,
                exc,
            )

    def _trace_end(
        self,
        topic: str,
        tags: str | None,
        keys: Sequence[str],
        broker: str,
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
            broker_addr=self._client.master_address(broker) or broker,
            msg_id=msg_id,
            transaction_id=transaction_id,
            state=state.value,
            from_check=from_check,
            region_id=region,
        )

    # -- check-back ---------------------------------------------------------------------------

    def _broker_requests(self) -> RequestHandler:
        dispatcher = Dispatcher()
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
