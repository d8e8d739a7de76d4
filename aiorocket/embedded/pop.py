"""POP_MESSAGE (200050) and NOTIFICATION (200054): Java's ``PopMessageProcessor`` and
``NotificationProcessor`` (docs/protocol.md §12.3).

A POP reads up to ``maxMsgNums`` messages from a queue (queue -1: every readable queue of the
topic, from a random one on) and from the group's POP retry topic: first with
``pop_from_retry_probability`` per cent, otherwise after the topic when it did not fill the
batch, so retried messages are never starved. The expression (``expType``/``exp``: TAG or
SQL92) filters both. Where the group has no offset the read starts per ``initMode``: MIN at
the queue's start, MAX at its last message (``getInitOffset``, or at 0 while the queue still
starts at 0, with ``new_group_offset_zero``, Apache's ``initPopOffsetByCheckMsgInMem``); a
retry topic always at its start.

Non-ordered: per queue read, a checkpoint (start offset, pop time, invisible time, offsets) is
appended to the revive log and the group's offset moves past what was read, all before the
answer. Ordered (``order=true``): a queue whose last batch is neither acked nor visible
again is skipped (``checkBlock``); the offset stays, the batch is recorded in the
ordered-POP table with each message's delivery count (``orderCountInfo``), and the retry
topic is not read. Filtered-out messages move the offset in both cases.

The answer: the stored records as a pull returns them (a record from a retry topic re-encoded
with the topic asked for and its ``POP_CK`` handle, as Apache does by default), ``popTime``,
``invisibleTime``, ``reviveQid`` (0; 999 for ordered), ``restNum`` and the
``startOffsetInfo`` / ``msgOffsetInfo`` / ``orderCountInfo`` strings of ``ExtraInfoUtil``.
Nothing found: the request is held until a message arrives for it or ``bornTime +
pollTime`` passes, then POLLING_TIMEOUT (210); too many held: POLLING_FULL (209).

NOTIFICATION answers ``hasMsg`` once the queue (or any, -1) or a retry topic holds a message
past the group's offset, held the same way (``pollingFull`` when refused).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Final

from aiorocket._names import RETRY_PREFIX, is_valid_name, now_ms
from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import decode_message, encode_message
from aiorocket._protocol.pop import (
    CONSUME_INIT_MODES,
    POP_ORDER_REVIVE_QUEUE,
    NotificationRequestHeader,
    NotificationResponseHeader,
    PopMessageRequestHeader,
    PopMessageResponseHeader,
    ReceiptHandle,
    format_offset_info,
    retry_mark,
)
from aiorocket._protocol.sql92 import EXPRESSION_TYPE_SQL92, Sql92Filter, compile_sql92
from aiorocket._protocol.tags import TagFilter, parse_tag_expression
from aiorocket._remoting import Connection
from aiorocket.embedded.assignment import AssignmentProcessor
from aiorocket.embedded.context import BrokerContext, Processor, handles, peer_address
from aiorocket.embedded.pop_ack import AckProcessor, LiteAcks
from aiorocket.embedded.pop_inflight import Checkpoint
from aiorocket.embedded.pop_order import OrderCount
from aiorocket.embedded.pop_polling import PollKey
from aiorocket.embedded.pop_revive import retry_topic_of
from aiorocket.embedded.pop_service import PopContext
from aiorocket.embedded.pull import read_matching
from aiorocket.embedded.store_results import GetResult, GetStatus, PutResult
from aiorocket.embedded.topics import TopicConfig
from aiorocket.errors import InvalidSelectorError, LocalProtocolError, RemoteProtocolError

__all__ = [
    "MAX_POP",
    "TOO_LATE_MS",
    "PopProcessor",
    "pop_offset",
    "pop_processors",
    "with_born_time",
]

#: ``PopMessageProcessor``: at most this many messages per POP (and per POP_LITE_MESSAGE)
MAX_POP: Final = 32
#: ``PopMessageRequestHeader.isTimeoutTooMuch``: a request older than its poll time plus this
#: is refused (the same rule for POP_LITE_MESSAGE)
TOO_LATE_MS: Final = 500
#: the ordinal of ``MQVersion`` V5_0_0_SNAPSHOT: a broker stamped below it is a 4.x one
_V5_0_0_SNAPSHOT: Final = 412
_MIN_MODE: Final = CONSUME_INIT_MODES.index("MIN")
#: store statuses after which a POP commits the offset the read moved to
_SKIPPED: Final = frozenset(
    {
        GetStatus.NO_MATCHED_MESSAGE,
        GetStatus.OFFSET_FOUND_NULL,
        GetStatus.MESSAGE_WAS_REMOVING,
        GetStatus.NO_MATCHED_LOGIC_QUEUE,
    }
)
#: store statuses after which the stored offset is corrected and the queue read again
_MISPLACED: Final = frozenset(
    {GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY, GetStatus.OFFSET_FOUND_NULL}
)

Filter = TagFilter | Sql92Filter
#: (topic, key, values) entries of an offset-info string
_Info = tuple[str, str, list[int]]


def pop_offset(ctx: BrokerContext, group: str, topic: str, queue_id: int, init_mode: int) -> int:
    """``getPopOffset``: the group's offset of the queue, else where a new group starts
    (``getInitOffset``, committed at once): ``init_mode`` MIN (and a retry topic) at the
    queue's start; MAX at its last message, or at 0 while the queue still starts at 0 (with
    ``new_group_offset_zero``, Apache's ``initPopOffsetByCheckMsgInMem``)."""
    offsets = ctx.offsets
    stored = offsets.query(group, topic, queue_id)
    if stored is not None:
        return stored
    store = ctx.store
    if init_mode == _MIN_MODE or topic.startswith(RETRY_PREFIX):
        offset = store.min_offset(topic, queue_id)
    elif ctx.config.new_group_offset_zero and store.min_offset(topic, queue_id) <= 0:
        offset = 0  # initPopOffsetByCheckMsgInMem: the head is still there
    else:
        offset = max(store.max_offset(topic, queue_id) - 1, 0)  # "pop last one"
    offsets.commit(group, topic, queue_id, offset)
    return offset


def with_born_time(cmd: RemotingCommand) -> dict[str, str]:
    """The request's fields with ``bornTime`` set to now when absent or 0, as the Java
    processors fill it before decoding."""
    ext = cmd.ext_fields
    if ext.get("bornTime") in (None, "", "0"):
        return {**ext, "bornTime": str(now_ms())}
    return ext


def _refuse(cmd: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    return cmd.make_response(code, remark=remark)


@dataclass(slots=True)
class _Batch:
    """What one pass over the queues of a POP found."""

    pop_time: int
    records: list[bytes] = field(default_factory=list)
    starts: list[_Info] = field(default_factory=list)
    offsets: list[_Info] = field(default_factory=list)
    counts: list[OrderCount] = field(default_factory=list)
    rest: int = 0
    #: the earliest time a blocked ordered queue frees (ms), if one was skipped
    retry_at: int | None = None
    last_put: PutResult | None = None

    def blocked(self, until: int) -> None:
        self.retry_at = until if self.retry_at is None else min(self.retry_at, until)


class PopProcessor(Processor):
    """Serves POP_MESSAGE and NOTIFICATION.

    Args:
        ctx: the broker's store, topics, offsets, settings and statistics.
        pop: the POP state (checkpoints, revive log, ordered-POP table, held requests).
    """

    def __init__(self, ctx: BrokerContext, pop: PopContext) -> None:
        super().__init__(ctx)
        self._pop = pop
        self._writer = ctx.writer
        self._random = random.Random()

    # -- shared checks -----------------------------------------------------------------------

    def _check(
        self, conn: Connection, cmd: RemotingCommand, topic: str, group: str, queue_id: int
    ) -> TopicConfig | RemotingCommand:
        cfg = self._topics.get(topic)
        if cfg is None:
            return _refuse(
                cmd, ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist, apply first please!"
            )
        if not cfg.readable:
            return _refuse(
                cmd, ResponseCode.NO_PERMISSION, f"the topic[{topic}] peeking message is forbidden"
            )
        if queue_id >= cfg.read_queue_nums:
            return _refuse(
                cmd,
                ResponseCode.INVALID_PARAMETER,
                f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig.readQueueNums:"
                f"[{cfg.read_queue_nums}] consumer:[{peer_address(conn)}]",
            )
        # The retry topic must be a valid name too, or a revive could never store it.
        if not is_valid_name(group) or not is_valid_name(retry_topic_of(topic, group)):
            return _refuse(
                cmd, ResponseCode.SYSTEM_ERROR, f"the consumer group[{group}] is illegal"
            )
        sub = self._ctx.subscriptions.get(group)
        if sub is not None and not sub.consume_enable:
            return _refuse(
                cmd, ResponseCode.NO_PERMISSION, f"subscription group no permission, {group}"
            )
        return cfg

    @staticmethod
    def _filter(cmd: RemotingCommand, h: PopMessageRequestHeader) -> Filter | RemotingCommand:
        if not h.exp:
            return parse_tag_expression(None)
        expression_type = (h.exp_type or "TAG").upper()
        if expression_type == "TAG":
            return parse_tag_expression(h.exp)
        if expression_type == EXPRESSION_TYPE_SQL92:
            try:
                return compile_sql92(h.exp)
            except InvalidSelectorError:
                pass
        return _refuse(
            cmd, ResponseCode.SUBSCRIPTION_PARSE_FAILED, "parse the consumer's subscription failed"
        )

    def _pop_offset(self, topic: str, group: str, queue_id: int, init_mode: int) -> int:
        return pop_offset(self._ctx, group, topic, queue_id, init_mode)

    # -- POP_MESSAGE -------------------------------------------------------------------------

    @handles(RequestCode.POP_MESSAGE)
    async def pop_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """POP_MESSAGE: pop, or hold until something arrives (see the module docs).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the store failed.
        """
        h = PopMessageRequestHeader.from_ext(with_born_time(cmd))
        host = self._ctx.address().rpartition(":")[0]
        started = now_ms()
        if started - h.born_time - h.poll_time > TOO_LATE_MS:
            return _refuse(
                cmd,
                ResponseCode.POLLING_TIMEOUT,
                f"the broker[{host}] pop message is timeout too much",
            )
        if h.max_msg_nums > MAX_POP:
            return _refuse(
                cmd,
                ResponseCode.INVALID_PARAMETER,
                f"the broker[{host}] pop message's num is greater than 32",
            )
        if not self._config.timer_wheel_enable:
            return _refuse(
                cmd,
                ResponseCode.SYSTEM_ERROR,
                f"the broker[{host}] pop message is forbidden because timerWheelEnable is false",
            )
        checked = self._check(conn, cmd, h.topic, h.consumer_group, h.queue_id)
        if isinstance(checked, RemotingCommand):
            return checked
        filt = self._filter(cmd, h)
        if isinstance(filt, RemotingCommand):
            return filt
        group = h.consumer_group
        keys: list[PollKey] = [(h.topic, group, h.queue_id)]
        if not h.order:
            keys.append((retry_topic_of(h.topic, group), group, -1))
        matches = None if isinstance(filt, Sql92Filter) or filt.match_all else filt.matches_code
        deadline = min(h.born_time, started) + h.poll_time
        pops = self._pop.pops
        while True:
            batch = self._pop_once(h, checked, filt)
            if batch.records:
                return await self._found(cmd, h, batch)
            now = now_ms()
            if h.poll_time <= 0 or now >= deadline:
                return self._not_found(cmd, h, batch, ResponseCode.POLLING_TIMEOUT)
            if pops.full(keys):
                return self._not_found(cmd, h, batch, ResponseCode.POLLING_FULL)
            # The hold is real time (the client waits for the answer), the retry time is
            # the broker clock's: only the difference carries over.
            retry_in = None if batch.retry_at is None else batch.retry_at - batch.pop_time
            until = deadline if retry_in is None else min(deadline, now + retry_in)
            await pops.wait(keys, matches=matches, timeout=max(until - now, 1) / 1e3)

    def _header(self, h: PopMessageRequestHeader, batch: _Batch) -> dict[str, str]:
        return PopMessageResponseHeader(
            pop_time=batch.pop_time,
            invisible_time=h.invisible_time,
            revive_qid=POP_ORDER_REVIVE_QUEUE if h.order else 0,
            rest_num=batch.rest,
            start_offset_info=format_offset_info(batch.starts),
            msg_offset_info=format_offset_info(batch.offsets),
            order_count_info=format_offset_info(batch.counts) if h.order and batch.counts else None,
        ).to_ext()

    def _not_found(
        self, cmd: RemotingCommand, h: PopMessageRequestHeader, batch: _Batch, code: int
    ) -> RemotingCommand:
        return cmd.make_response(
            code, remark=GetStatus.NO_MESSAGE_IN_QUEUE.value, ext_fields=self._header(h, batch)
        )

    async def _found(
        self, cmd: RemotingCommand, h: PopMessageRequestHeader, batch: _Batch
    ) -> RemotingCommand:
        if batch.rest > 0:
            # Apache wakes another held request of the queue: more is there.
            self._pop.pops.wake(h.topic, h.consumer_group, h.queue_id)
        self._ctx.stats.got(h.consumer_group, h.topic, len(batch.records))
        if batch.last_put is not None:
            await self._writer.wait_durable(batch.last_put)
        return cmd.make_response(
            ResponseCode.SUCCESS,
            remark=GetStatus.FOUND.value,
            ext_fields=self._header(h, batch),
            body=b"".join(batch.records),
        )

    def _pop_once(self, h: PopMessageRequestHeader, cfg: TopicConfig, filt: Filter) -> _Batch:
        """One pass over the queues (``popMsgFromTopic`` / ``popMsgFromQueue``); synchronous,
        so no other request interleaves with a queue's read, checkpoint and offset."""
        batch = _Batch(self._clock.now_ms())
        config = self._config
        start = self._random.randrange(100)
        # PopMessageProcessor (5.4+): a PRIORITY topic is read from its highest queue down
        # (priorityOrderAsc: the queue id is the priority), the retry topic first only with
        # popFromRetryProbabilityForPriority (docs/protocol.md §12.6).
        by_priority = config.priorities_enabled and cfg.message_type == "PRIORITY" and not h.order
        chance = (
            config.pop_from_retry_probability_for_priority
            if by_priority
            else config.pop_from_retry_probability
        )
        retry_first = not h.order and start < chance
        if by_priority:
            start = 0
        retries = [] if h.order else [retry_topic_of(h.topic, h.consumer_group)]
        if retry_first:
            self._pop_retries(batch, h, retries, filt, start)
        if h.queue_id < 0:
            n = cfg.read_queue_nums
            for i in range(n):
                index = n - 1 - i if config.priorities_enabled and config.priority_order_asc else i
                self._pop_queue(batch, h, h.topic, (index + start) % n, filt, retry=False)
        else:
            self._pop_queue(batch, h, h.topic, h.queue_id, filt, retry=False)
        if not retry_first:
            self._pop_retries(batch, h, retries, filt, start)
        return batch

    def _pop_retries(
        self,
        batch: _Batch,
        h: PopMessageRequestHeader,
        retries: list[str],
        filt: Filter,
        start: int,
    ) -> None:
        for topic in retries:
            cfg = self._topics.get(topic)
            if cfg is None:
                continue
            n = cfg.read_queue_nums
            for i in range(n):
                self._pop_queue(batch, h, topic, (start + i) % n, filt, retry=True)

    def _read(self, topic: str, queue_id: int, offset: int, n: int, filt: Filter) -> GetResult:
        config = self._config
        if isinstance(filt, Sql92Filter):
            return read_matching(
                self._store, topic, queue_id, offset, n, config.max_pull_bytes, filt
            )
        return self._store.get(
            topic,
            queue_id,
            offset,
            max_msgs=n,
            max_bytes=config.max_pull_bytes,
            matches=None if filt.match_all else filt.matches_code,
        )

    def _pop_queue(
        self,
        batch: _Batch,
        h: PopMessageRequestHeader,
        topic: str,
        queue_id: int,
        filt: Filter,
        *,
        retry: bool,
    ) -> None:
        group = h.consumer_group
        store = self._store
        wanted = h.max_msg_nums - len(batch.records)
        if wanted <= 0:
            stored = self._offsets.query(group, topic, queue_id)
            if stored is None:
                stored = store.min_offset(topic, queue_id)
            batch.rest += max(store.max_offset(topic, queue_id) - stored, 0)
            return
        if h.order:
            until = self._pop.orders.blocked_until(
                h.attempt_id, topic, group, queue_id, batch.pop_time
            )
            if until is not None:
                batch.blocked(until)
                return
        offset = self._pop_offset(topic, group, queue_id, h.init_mode)
        result = self._read(topic, queue_id, offset, wanted, filt)
        if result.status in _MISPLACED:
            # the stored offset is outside the queue: take where the read points, read again
            offset = result.next_begin_offset
            self._offsets.commit(group, topic, queue_id, offset)
            result = self._read(topic, queue_id, offset, wanted, filt)
        batch.rest += max(result.max_offset - result.next_begin_offset, 0)
        if not result.messages:
            if result.status in _SKIPPED and result.next_begin_offset > offset:
                self._offsets.commit(group, topic, queue_id, result.next_begin_offset)
            return
        popped = list(result.queue_offsets)
        pop = self._pop
        if h.order:
            batch.counts += pop.orders.update(
                h.attempt_id,
                topic,
                group,
                queue_id,
                batch.pop_time,
                h.invisible_time,
                popped,
                batch.pop_time,
            )
            self._offsets.commit(group, topic, queue_id, offset)
        else:
            ck = Checkpoint(
                group=group,
                topic=topic,
                queue_id=queue_id,
                start_offset=offset,
                pop_time=batch.pop_time,
                invisible_time=h.invisible_time,
                offsets=tuple(popped),
            )
            batch.last_put = pop.revive_log.append_checkpoint(ck)
            pop.inflight.add(ck)
            pop.revive.wake(ck.due)
            self._offsets.commit(group, topic, queue_id, result.next_begin_offset)
        batch.starts.append((topic, str(queue_id), [offset]))
        batch.offsets.append((topic, str(queue_id), popped))
        if retry and not self._config.pop_response_return_actual_retry_topic:
            batch.records += [
                self._as_asked(raw, h, topic, queue_id, offset, batch.pop_time)
                for raw in result.messages
            ]
        else:
            batch.records += result.messages

    def _as_asked(
        self,
        raw: bytes,
        h: PopMessageRequestHeader,
        retry_topic: str,
        queue_id: int,
        ck_offset: int,
        pop_time: int,
    ) -> bytes:
        """A record of a retry topic as Apache answers it by default: the topic asked for, and
        its receipt handle in ``POP_CK`` (the retry mark tells the client where to ack)."""
        try:
            rec, _ = decode_message(raw, decompress=False)
            rec.properties[mp.POP_CK] = ReceiptHandle(
                ck_offset,
                pop_time,
                h.invisible_time,
                0,
                retry_mark(retry_topic),
                self._config.broker_name,
                queue_id,
                rec.queue_offset,
            ).text
            rec.topic = h.topic
            return encode_message(rec)
        except (RemoteProtocolError, LocalProtocolError):
            return raw  # answered as stored rather than not at all

    # -- NOTIFICATION ------------------------------------------------------------------------

    @handles(RequestCode.NOTIFICATION)
    async def notification(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """NOTIFICATION: whether the group has a message to pop, held until it has or the
        poll time passes.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
        """
        h = NotificationRequestHeader.from_ext(with_born_time(cmd))
        checked = self._check(conn, cmd, h.topic, h.consumer_group, h.queue_id)
        if isinstance(checked, RemotingCommand):
            return checked
        group = h.consumer_group
        retries = [retry_topic_of(h.topic, group)]
        keys: list[PollKey] = [(h.topic, group, h.queue_id), *((t, group, -1) for t in retries)]
        started = now_ms()
        deadline = min(h.born_time, started) + h.poll_time
        waiters = self._pop.notifications
        while True:
            found, retry_in = self._has_message(h, checked, retries)
            now = now_ms()
            if found or h.poll_time <= 0 or now >= deadline:
                return self._notified(cmd, found)
            if waiters.full(keys):
                return self._notified(cmd, False, polling_full=True)
            until = deadline if retry_in is None else min(deadline, now + retry_in)
            await waiters.wait(keys, matches=None, timeout=max(until - now, 1) / 1e3)

    @staticmethod
    def _notified(
        cmd: RemotingCommand, has_msg: bool, *, polling_full: bool = False
    ) -> RemotingCommand:
        header = NotificationResponseHeader(has_msg=has_msg, polling_full=polling_full)
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext())

    def _has_message(
        self, h: NotificationRequestHeader, cfg: TopicConfig, retries: list[str]
    ) -> tuple[bool, int | None]:
        """``hasMsgFromTopic``: a queue with messages past the group's offset (its start when
        none is stored), skipping ordered queues that are blocked; and in how many ms (of
        the broker clock) the earliest blocked one frees."""
        retry_at: int | None = None
        now = self._clock.now_ms()
        queues: list[tuple[str, int]] = []
        if h.queue_id < 0:
            queues += [(h.topic, q) for q in range(cfg.read_queue_nums)]
        else:
            queues.append((h.topic, h.queue_id))
        for topic in retries:
            retry_cfg = self._topics.get(topic)
            if retry_cfg is not None:
                queues += [(topic, q) for q in range(retry_cfg.read_queue_nums)]
        store = self._store
        for topic, queue_id in queues:
            if h.order:
                until = self._pop.orders.blocked_until(
                    h.attempt_id, h.topic, h.consumer_group, queue_id, now
                )
                if until is not None:
                    retry_at = until if retry_at is None else min(retry_at, until)
                    continue
            offset = self._offsets.query(h.consumer_group, topic, queue_id)
            if offset is None:
                offset = store.min_offset(topic, queue_id)
            if store.max_offset(topic, queue_id) > offset:
                return True, None
        return False, None if retry_at is None else retry_at - now


def pop_processors(
    ctx: BrokerContext, pop: PopContext, lite: LiteAcks | None = None
) -> tuple[Processor, ...]:
    """The processors of the 5.x POP and assignment codes (acks naming a lite topic go to
    ``lite``); none when the broker answers as a 4.x one (``remoting_version`` below 412),
    which does not know these codes."""
    if ctx.config.remoting_version < _V5_0_0_SNAPSHOT:
        return ()
    return (PopProcessor(ctx, pop), AckProcessor(ctx, pop, lite), AssignmentProcessor(ctx))
