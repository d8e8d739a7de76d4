"""Transactional (half) messages: Java's ``TransactionalMessageServiceImpl``,
``TransactionalMessageBridge``, ``TransactionalMessageCheckService`` and
``EndTransactionProcessor``.

A message sent with ``TRAN_MSG=true`` is stored as a *half message* in
``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0, its real topic and queue kept in ``REAL_TOPIC`` /
``REAL_QID`` and the prepared bit cleared from its sysFlag, so no consumer of the real topic
sees it. END_TRANSACTION (37) then either writes it to its real topic (commit) or not
(rollback); both record an *op message* (tag ``d``, body = the half message's queue offset) in
``RMQ_SYS_TRANS_OP_HALF_TOPIC``. Everything is in the store, so a restart loses nothing.

A periodic check walks the half queue from the progress offset of the system group
``CID_RMQ_SYS_TRANS``, skipping halves an op message resolved. A half older than
``transaction_timeout`` (or its ``CHECK_IMMUNITY_TIME_IN_SECONDS``) is put back at the queue's
end with ``TRANSACTION_CHECK_TIMES`` + 1 and CHECK_TRANSACTION_STATE (39) is sent for that copy
to a live producer channel of its ``PGROUP``; after ``transaction_check_max`` checks it is
moved to ``TRANS_CHECK_MAX_TIME_TOPIC`` instead. Progress offsets live in the consumer-offset
table, which the broker persists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import random
from collections import OrderedDict
from collections.abc import Iterator

from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import MessageSysFlag, RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    CheckTransactionStateRequestHeader,
    EndTransactionRequestHeader,
)
from aiorocket._protocol.message import MessageRecord, decode_message, encode_message
from aiorocket._protocol.msgid import make_offset_msg_id
from aiorocket._remoting import Connection
from aiorocket.embedded.context import BrokerContext, Processor, handles
from aiorocket.embedded.store_results import GetStatus, PutResult
from aiorocket.embedded.topics import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC, is_valid_name
from aiorocket.embedded.writer import broker_record, copy_record, reset_transaction_value
from aiorocket.errors import ClientClosedError, ConnectionClosedError, RemoteProtocolError

__all__ = ["SYSTEM_GROUP", "TransactionService"]

log = logging.getLogger("aiorocket.embedded")

#: ``MixAll.CID_SYS_RMQ_TRANS``: the group whose offsets record the check's progress.
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"
#: ``TransactionalMessageUtil.REMOVETAG``: the tag of op messages.
REMOVE_TAG = "d"

_COMMIT = int(MessageSysFlag.TRANSACTION_COMMIT)
_ROLLBACK = int(MessageSysFlag.TRANSACTION_ROLLBACK)
_BATCH = 32
#: transaction ids remembered as ended, to ignore a second END of the same transaction
_ENDED_MAX = 100_000


class TransactionService(Processor):
    """END_TRANSACTION and the periodic check-back.

    Args:
        ctx: the broker's writer (finals, ops, put-back and discarded halves), topic table
            (real topics are created if missing, the check-max topic on first discard),
            producer channels (check-backs go to them), offset table (the check's progress),
            ``transaction_*`` settings, advertised address, and task spawner (each
            check-back is sent as a broker task).
    """

    def __init__(self, ctx: BrokerContext) -> None:
        super().__init__(ctx)
        self._writer = ctx.writer
        self._store_address = ctx.store_address
        # Transactions ended since start, by UNIQ_KEY (bounded): a second commit of the same
        # transaction — a check-back answered after the producer's own late END, or two
        # check-backs of one half both answered — only records its op, so a message is not
        # delivered twice. Java lets that race duplicate the message; this is an addition.
        self._ended: OrderedDict[str, None] = OrderedDict()
        #: check-backs sent so far
        self.checks_sent = 0
        #: halves moved to ``TRANS_CHECK_MAX_TIME_TOPIC`` so far
        self.discarded = 0

    # -- END_TRANSACTION ----------------------------------------------------------------------

    @handles(RequestCode.END_TRANSACTION)
    async def end_transaction(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand | None:
        """END_TRANSACTION (37): commit (store in the real topic) or roll back a half message;
        an "unknown" end is only logged (``EndTransactionProcessor``).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the sync flush failed.
        """
        h = EndTransactionRequestHeader.from_ext(cmd.ext_fields)
        kind = h.commit_or_rollback
        origin = "check of" if h.from_transaction_check else "end by"
        if kind not in (_COMMIT, _ROLLBACK):
            if kind == 0:
                log.info(
                    "%s producer %s: transaction %s still unknown (%s)",
                    origin,
                    conn.peer,
                    h.transaction_id,
                    cmd.remark or "",
                )
            return None
        half = self._half_at(h.commit_log_offset)
        refusal = _check_prepared(half, h)
        if refusal is not None:
            log.warning("END_TRANSACTION from %s refused: %s (%s)", conn.peer, refusal, h)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=refusal)
        assert half is not None
        last: PutResult | None = None
        uniq = half.properties.get(mp.UNIQ_KEY)
        repeated = uniq is not None and uniq in self._ended
        try:
            if repeated:
                log.info("transaction %s already ended; %s ignored", uniq, h.msg_id)
            elif kind == _COMMIT:
                final = self._final_of(half, h.commit_log_offset)
                if final is None:
                    return cmd.make_response(
                        ResponseCode.SYSTEM_ERROR, remark="the half message has no real topic"
                    )
                self._writer.store_message(final)
            else:
                log.info("%s producer %s: transaction %s rolled back", origin, conn.peer, h.msg_id)
            # No await between the final message and its op: a check pass never sees one
            # without the other.
            last = self._put_op(half)
        except (OSError, ClientClosedError) as exc:
            log.error("cannot end transaction %s: %s", h.msg_id, exc)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=f"store error: {exc}")
        if uniq is not None:
            self._ended[uniq] = None
            if len(self._ended) > _ENDED_MAX:
                self._ended.popitem(last=False)
        await self._writer.wait_durable(last)
        return cmd.make_response(ResponseCode.SUCCESS)

    def _half_at(self, commit_log_offset: int) -> MessageRecord | None:
        raw = self._writer.store.read_at(commit_log_offset)
        if raw is None:
            return None
        try:
            rec, _ = decode_message(raw, decompress=False)
        except RemoteProtocolError:
            return None
        return rec

    def _final_of(self, half: MessageRecord, commit_log_offset: int) -> MessageRecord | None:
        # EndTransactionProcessor.endMessageTransaction: the properties string is rendered
        # before REAL_TOPIC/REAL_QID are cleared from the map, so the stored copy keeps them
        # (and TRAN_MSG, PGROUP), as a 4.9 broker stores it.
        props = dict(half.properties)
        topic = props.get(mp.REAL_TOPIC)
        try:
            qid = int(props.get(mp.REAL_QID, ""))
        except ValueError:
            return None
        if topic is None or not is_valid_name(topic) or qid < 0:
            return None
        if self._topics.get(topic) is None:
            self._topics.ensure(topic, max(qid + 1, self._config.default_queues))
        real = self._copy(half, topic, qid, properties=props)
        real.sys_flag = reset_transaction_value(half.sys_flag, _COMMIT)
        real.prepared_transaction_offset = commit_log_offset
        return real

    def _put_op(self, half: MessageRecord) -> PutResult:
        # TransactionalMessageBridge.putOpMessage: tag "d", body = the half's queue offset,
        # in the op queue of the half's queue id.
        op = broker_record(
            OP_TOPIC,
            str(half.queue_offset).encode(),
            self._store_address(),
            properties={mp.TAGS: REMOVE_TAG, mp.WAIT: "true"},
            queue_id=half.queue_id,
        )
        return self._writer.store_message(op)

    # -- check-back ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Check pending halves every ``transaction_check_interval`` until cancelled."""
        while True:
            await self._clock.sleep(self._config.transaction_check_interval)
            try:
                self.check()
            except (OSError, ClientClosedError) as exc:
                log.error("transaction check failed: %s", exc)
            except Exception:
                log.exception("transaction check failed")

    def check(self) -> int:
        """One pass over the half queue (``TransactionalMessageServiceImpl.check``); returns
        how many check-backs were sent. Synchronous: no op can be written during a pass.

        Raises:
            OSError: a store read or write failed.
        """
        store = self._writer.store
        half_max = store.max_offset(HALF_TOPIC, 0)
        if half_max == 0:
            return 0
        offsets = self._offsets
        half_start = max(
            offsets.query(SYSTEM_GROUP, HALF_TOPIC, 0) or 0, store.min_offset(HALF_TOPIC, 0)
        )
        op_start = max(offsets.query(SYSTEM_GROUP, OP_TOPIC, 0) or 0, store.min_offset(OP_TOPIC, 0))
        # fillOpRemoveMap: ops of halves already passed only move the op progress along.
        removed: dict[int, int] = {}
        done: list[int] = []
        for op_qo, op in self._read(OP_TOPIC, op_start, store.max_offset(OP_TOPIC, 0)):
            try:
                half_qo = int(op.body.decode())
            except ValueError:
                done.append(op_qo)
                continue
            if half_qo < half_start:
                done.append(op_qo)
            else:
                removed[half_qo] = op_qo
        config = self._config
        timeout_ms = int(config.transaction_timeout * 1000)
        now = self._clock.now_ms()
        sent = 0
        next_half = half_start
        # Only the halves present when the pass starts: put-back copies wait for the next.
        for qo, half in self._read(HALF_TOPIC, half_start, half_max):
            if qo in removed:
                done.append(removed.pop(qo))
                next_half = qo + 1
                continue
            props = half.properties
            try:
                times = int(props.get(mp.TRANSACTION_CHECK_TIMES, "0"))
            except ValueError:
                times = 0
            if times >= config.transaction_check_max:
                self._discard(half, times)
                next_half = qo + 1
                continue
            age = now - half.born_timestamp
            immunity = timeout_ms
            immunity_text = props.get(mp.CHECK_IMMUNITY_TIME_IN_SECONDS)
            if immunity_text is not None:
                immunity = _immunity_ms(immunity_text, timeout_ms)
                if age < immunity:
                    # checkPrepareQueueOffset: an immune half is put back (remembering its
                    # first offset) so that the halves after it are checked meanwhile.
                    first = props.get(mp.TRAN_PREPARED_QUEUE_OFFSET)
                    first_qo = int(first) if first is not None and first.isdigit() else None
                    if first_qo is not None and first_qo in removed:
                        done.append(removed.pop(first_qo))
                    else:
                        if first_qo is None:
                            props[mp.TRAN_PREPARED_QUEUE_OFFSET] = str(qo)
                        self._put_back(half)
                    next_half = qo + 1
                    continue
            elif 0 <= age < immunity:
                break  # the rest is younger still
            props[mp.TRANSACTION_CHECK_TIMES] = str(times + 1)
            copy = self._put_back(half)
            self._send_check(copy)
            sent += 1
            next_half = qo + 1
        offsets.commit(SYSTEM_GROUP, HALF_TOPIC, 0, next_half)
        offsets.commit(SYSTEM_GROUP, OP_TOPIC, 0, _op_progress(op_start, done))
        return sent

    def unresolved(self) -> int:
        """How many half messages (put-back copies included) wait for an end: stored at or
        after the check's progress and without an op message (for inspection and tests).

        Raises:
            OSError: a store read failed.
        """
        store = self._writer.store
        half_start = max(
            self._offsets.query(SYSTEM_GROUP, HALF_TOPIC, 0) or 0, store.min_offset(HALF_TOPIC, 0)
        )
        op_start = max(
            self._offsets.query(SYSTEM_GROUP, OP_TOPIC, 0) or 0, store.min_offset(OP_TOPIC, 0)
        )
        ended = {
            op.body.decode()
            for _, op in self._read(OP_TOPIC, op_start, store.max_offset(OP_TOPIC, 0))
        }
        half_max = store.max_offset(HALF_TOPIC, 0)
        return sum(str(qo) not in ended for qo, _ in self._read(HALF_TOPIC, half_start, half_max))

    def _read(self, topic: str, start: int, end: int) -> Iterator[tuple[int, MessageRecord]]:
        store = self._writer.store
        offset = start
        while offset < end:
            result = store.get(topic, 0, offset, max_msgs=_BATCH)
            if result.status is not GetStatus.FOUND:
                if result.next_begin_offset <= offset:
                    return
                offset = result.next_begin_offset  # removed by retention: skip ahead
                continue
            for raw, qo in zip(result.messages, result.queue_offsets, strict=True):
                if qo >= end:
                    return
                try:
                    rec, _ = decode_message(raw, decompress=False)
                except RemoteProtocolError as exc:
                    log.error("unreadable message at %s:%d skipped: %s", topic, qo, exc)
                    continue
                yield qo, rec
            offset = result.next_begin_offset

    def _copy(
        self,
        half: MessageRecord,
        topic: str,
        queue_id: int,
        *,
        properties: dict[str, str] | None = None,
    ) -> MessageRecord:
        """A new record of ``half`` for ``topic``/``queue_id``, stored by this broker (with
        ``half``'s properties copied unless others are given)."""
        props = dict(half.properties) if properties is None else properties
        return copy_record(half, topic, queue_id, self._store_address(), properties=props)

    def _put_back(self, half: MessageRecord) -> MessageRecord:
        # putBackHalfMsgQueue / renewHalfMessageInner: the same half at the queue's end; the
        # check-back names this copy, whose offsets END_TRANSACTION will carry.
        copy = self._copy(half, HALF_TOPIC, half.queue_id)
        result = self._writer.store_message(copy)
        copy.queue_offset = result.queue_offset
        copy.commit_log_offset = result.commit_log_offset
        copy.store_timestamp = result.store_timestamp
        return copy

    def _discard(self, half: MessageRecord, times: int) -> None:
        # DefaultTransactionalMessageCheckListener.resolveDiscardMsg (4.9).
        log.error(
            "half message %s of group %s checked %d times, discarded into %s",
            half.properties.get(mp.UNIQ_KEY),
            half.properties.get(mp.PGROUP),
            times,
            CHECK_MAX_TOPIC,
        )
        self._topics.ensure(CHECK_MAX_TOPIC, 1)
        self._writer.store_message(self._copy(half, CHECK_MAX_TOPIC, 0))
        self.discarded += 1

    def _send_check(self, half: MessageRecord) -> None:
        # AbstractTransactionalMessageCheckListener.sendCheckMessage: the message goes with
        # its real topic and queue; ProducerManager.getAvailableChannel picks a live channel.
        group = half.properties.get(mp.PGROUP, "")
        live = [
            c.channel
            for c in self._groups.producer_channels(group)
            if isinstance(c.channel, Connection) and not c.channel.is_closed
        ]
        if not live:
            log.warning("no live producer of group %s to check %s", group, _uniq(half))
            return
        conn = random.choice(live)
        uniq = half.properties.get(mp.UNIQ_KEY)
        header = CheckTransactionStateRequestHeader(
            tran_state_table_offset=half.queue_offset,
            commit_log_offset=half.commit_log_offset,
            msg_id=uniq,
            transaction_id=uniq,
            offset_msg_id=make_offset_msg_id(
                half.store_host, half.store_port, half.commit_log_offset
            ),
        )
        sent = dataclasses.replace(
            half,
            topic=half.properties.get(mp.REAL_TOPIC, half.topic),
            queue_id=_int(half.properties.get(mp.REAL_QID), half.queue_id),
        )
        cmd = RemotingCommand.request(
            RequestCode.CHECK_TRANSACTION_STATE,
            header.to_ext(),
            encode_message(sent),
            oneway=True,
        )
        self.checks_sent += 1
        log.info("checking transaction %s with producer %s of group %s", uniq, conn.peer, group)
        self._ctx.spawn(_send_oneway(conn, cmd), "aiorocket-transaction-check")


async def _send_oneway(conn: Connection, cmd: RemotingCommand) -> None:
    with contextlib.suppress(ConnectionClosedError):
        await conn.send_oneway(cmd)


def _check_prepared(half: MessageRecord | None, h: EndTransactionRequestHeader) -> str | None:
    # EndTransactionProcessor.checkPrepareMessage, plus: it must be a half message at all.
    if half is None or half.topic != HALF_TOPIC:
        return "Find prepared transaction message failed"
    if half.properties.get(mp.PGROUP) != h.producer_group:
        return "The producer group wrong"
    if half.queue_offset != h.tran_state_table_offset:
        return "The transaction state table offset wrong"
    if half.commit_log_offset != h.commit_log_offset:
        return "The commit log offset wrong"
    return None


def _immunity_ms(text: str, default_ms: int) -> int:
    # TransactionalMessageServiceImpl.getImmunityTime: seconds; malformed -> the timeout.
    try:
        seconds = int(text)
    except ValueError:
        return default_ms
    return seconds * 1000 if seconds >= 0 else default_ms


def _op_progress(start: int, done: list[int]) -> int:
    # calculateOpOffset: advance over the contiguous run of consumed op offsets.
    offset = start
    for qo in sorted(done):
        if qo == offset:
            offset += 1
        elif qo > offset:
            break
    return offset


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _uniq(rec: MessageRecord) -> str:
    return rec.properties.get(mp.UNIQ_KEY, str(rec.commit_log_offset))
