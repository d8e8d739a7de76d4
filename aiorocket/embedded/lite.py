"""Lite topics on the embedded broker (RocketMQ 5.5; docs/protocol.md §12.8):
LITE_SUBSCRIPTION_CTL (200071) and POP_LITE_MESSAGE (200070), Java's
``LiteSubscriptionCtlProcessor`` and ``PopLiteMessageProcessor``, and the lite branch of
ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME (``ackLite``,
``processChangeInvisibleTimeForLite``), which ``AckProcessor``
hands over when a request names a ``liteTopic``.

A lite topic's messages are indexed in its light message queue (LMQ) ``%LMQ%$<parent>$<lite>``,
queue 0, by the store's multi-dispatch. A group's offset of that queue does not move when it
is popped: the batch popped is recorded (ordered POP's table, in memory, as Apache keeps it),
blocks the lite topic for the group until every message of it is acked or visible again, and
acks move the offset to the first message not acked. Which lite topics a pop looks at is
``LiteRegistry``'s ready set: an LMQ is offered to a
subscriber when a message arrives in it, when it is subscribed while holding messages, when its
batch is acked in full, and when the batch's invisible time passes (Apache's
``QueueLevelConsumerOrderInfoLockManager``).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from typing import Final

from aiorocket._names import now_ms
from aiorocket._protocol.attributes import LITE_BIND_TOPIC, LITE_SUB_MODEL, MESSAGE_TYPE
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.lite import (
    POLICY_MAX,
    POLICY_MIN,
    LiteSubscriptionCtlRequestBody,
    LiteSubscriptionDTO,
    NotifyUnsubscribeLiteRequestHeader,
    OffsetOption,
    PopLiteMessageRequestHeader,
    PopLiteMessageResponseHeader,
    format_lite_order_counts,
    is_lite_queue,
    lite_queue_name,
    parse_lite_queue,
)
from aiorocket._protocol.pop import (
    CONSUME_INIT_MODES,
    POP_ORDER_REVIVE_QUEUE,
    AckMessageRequestHeader,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ReceiptHandle,
)
from aiorocket._remoting import Connection
from aiorocket.embedded.clock import TimerHandle
from aiorocket.embedded.context import BrokerContext, Processor, handles
from aiorocket.embedded.lite_registry import LiteClient, LiteQuotaExceeded, LiteRegistry
from aiorocket.embedded.pop import MAX_POP, TOO_LATE_MS, pop_offset, with_born_time
from aiorocket.embedded.pop_order import ConsumerOrderInfo
from aiorocket.embedded.store_results import GetStatus
from aiorocket.errors import ConnectionClosedError

__all__ = ["LiteProcessor", "LiteService"]

log = logging.getLogger("aiorocket.embedded")

_MAX_MODE: Final = CONSUME_INIT_MODES.index("MAX")
#: store statuses after which the group's offset is moved to where the read points
_MISPLACED: Final = frozenset(
    {
        GetStatus.OFFSET_TOO_SMALL,
        GetStatus.OFFSET_OVERFLOW_BADLY,
        GetStatus.OFFSET_FOUND_NULL,
        GetStatus.NO_MATCHED_MESSAGE,
        GetStatus.MESSAGE_WAS_REMOVING,
        GetStatus.NO_MATCHED_LOGIC_QUEUE,
    }
)


class LiteService:
    """The lite-topic state of one broker: subscriptions and ready lite topics, the batches in
    flight, and when each batch's lite topic is to be offered again.

    Args:
        ctx: the broker's collaborators.
    """

    def __init__(self, ctx: BrokerContext) -> None:
        self._ctx = ctx
        self.registry = LiteRegistry(max_subscriptions=ctx.config.max_lite_subscriptions)
        #: the batches popped, per (LMQ, group) (``MemoryConsumerOrderInfoManager``)
        self.orders = ConsumerOrderInfo(None)
        self._due: dict[tuple[str, str], TimerHandle] = {}

    def start(self) -> None:
        """Listen to the write path: an arrival in an LMQ is offered to its subscribers."""
        self._ctx.waiters.add_listener(self._on_arrival)

    def close(self) -> None:
        """Stop listening and forget the pending offers (idempotent)."""
        self._ctx.waiters.remove_listener(self._on_arrival)
        for handle in self._due.values():
            handle.cancel()
        self._due.clear()

    def _on_arrival(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        # NotifyMessageArrivingListener: an LMQ's arrival goes to the lite dispatcher alone.
        if queue_id == 0 and is_lite_queue(topic):
            self.registry.offer(topic)

    def offer_when_visible(self, lmq: str, group: str, at_ms: int) -> None:
        """Offer ``lmq`` to a subscriber of ``group`` again at ``at_ms``, when its batch stops
        blocking it unless acked (replaces an earlier time)."""
        key = (lmq, group)
        old = self._due.pop(key, None)
        if old is not None:
            old.cancel()
        clock = self._ctx.clock
        delay = max(at_ms - clock.now_ms(), 0) / 1000
        self._due[key] = clock.call_later(delay, self._offer_due, key)

    def _offer_due(self, key: tuple[str, str]) -> None:
        self._due.pop(key, None)
        self.registry.offer(key[0], key[1])

    def bind_topic(self, group: str) -> str | None:
        """The parent topic ``group`` is bound to (its ``lite.bind.topic``), or None."""
        cfg = self._ctx.subscriptions.get(group)
        return None if cfg is None else (cfg.attributes or {}).get(LITE_BIND_TOPIC)

    def group_attribute(self, group: str, name: str) -> str | None:
        """One attribute of ``group``, or None."""
        cfg = self._ctx.subscriptions.get(group)
        return None if cfg is None else (cfg.attributes or {}).get(name)

    def forget_queue(self, lmq: str) -> None:
        """``deleteLmq``: an expired LMQ is gone, and with it its subscriptions (no notice),
        batches, offsets and pending offers."""
        offsets = self._ctx.offsets
        groups = set(offsets.groups_of(lmq)) | {c.group for c in self.registry.subscribers(lmq)}
        self.registry.clean(lmq)
        offsets.remove_topic(lmq)
        for group in groups:
            self.orders.forget(lmq, group)
            handle = self._due.pop((lmq, group), None)
            if handle is not None:
                handle.cancel()

    def client_gone(self, client: LiteClient) -> None:
        """``onRemoveAll``: a forgotten client's ready LMQs go to the other subscribers of its
        group."""
        for lmq in client.ready:
            self.registry.offer(lmq, client.group, exclude=client.client_id)


@dataclass(slots=True)
class _Batch:
    """What one pass over a client's ready lite topics found."""

    pop_time: int
    records: list[bytes] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)


class LiteProcessor(Processor):
    """Serves LITE_SUBSCRIPTION_CTL and POP_LITE_MESSAGE, and the lite acks and changes of
    invisible time ``AckProcessor`` passes on.

    Args:
        ctx: the broker's store, topics, groups, offsets and settings.
        lite: the lite-topic state.
    """

    def __init__(self, ctx: BrokerContext, lite: LiteService) -> None:
        super().__init__(ctx)
        self._lite = lite
        self._registry = lite.registry
        self._orders = lite.orders

    # -- LITE_SUBSCRIPTION_CTL ----------------------------------------------------------------

    @handles(RequestCode.LITE_SUBSCRIPTION_CTL)
    async def subscription_ctl(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """LITE_SUBSCRIPTION_CTL: apply each entry of the body (docs/protocol.md §12.8).

        Raises:
            RemoteProtocolError: the body is not a ``LiteSubscriptionCtlRequestBody``.
        """
        if not cmd.body:
            return cmd.make_response(ResponseCode.ILLEGAL_OPERATION, remark="Request body is null.")
        body = LiteSubscriptionCtlRequestBody.from_json(cmd.body)
        if not body.subscription_set:
            return cmd.make_response(
                ResponseCode.ILLEGAL_OPERATION, remark="LiteSubscriptionCtlRequestBody is empty."
            )
        try:
            for dto in body.subscription_set:
                if dto.client_id.strip() and dto.group.strip() and dto.topic.strip():
                    self._apply(conn, dto)
        except LiteQuotaExceeded as exc:
            return cmd.make_response(ResponseCode.LITE_SUBSCRIPTION_QUOTA_EXCEEDED, remark=str(exc))
        except _Refused as exc:
            return cmd.make_response(ResponseCode.ILLEGAL_OPERATION, remark=str(exc))
        return cmd.make_response(ResponseCode.SUCCESS)

    def _apply(self, conn: Connection, dto: LiteSubscriptionDTO) -> None:
        lmqs = [lite_queue_name(dto.topic, t) for t in dto.lite_topic_set]
        lmqs = [q for q in lmqs if is_lite_queue(q)]  # others can never hold a message here
        registry = self._registry
        action = dto.action
        if action in ("PARTIAL_ADD", "COMPLETE_ADD"):
            self._check_consume_enable(dto.group)
        if action == "PARTIAL_ADD":
            added = registry.add(dto.client_id, dto.group, dto.topic, lmqs, conn)
            for lmq in lmqs:
                if self._lite.group_attribute(dto.group, LITE_SUB_MODEL) == "Exclusive":
                    self._exclude_others(dto.client_id, dto.group, lmq)
                self._reset(lmq, dto.group, dto.offset_option)
            self._registered(dto.group, added)
        elif action == "PARTIAL_REMOVE":
            removed = registry.remove(dto.client_id, lmqs)
            if self._lite.group_attribute(dto.group, "lite.sub.reset.offset.unsubscribe") == "true":
                for lmq in removed:
                    self._reset(lmq, dto.group, OffsetOption("POLICY", POLICY_MIN))
        elif action == "COMPLETE_ADD":
            added = registry.replace(dto.client_id, dto.group, dto.topic, lmqs, conn)
            self._registered(dto.group, added)
        elif action == "COMPLETE_REMOVE":
            gone = registry.drop(dto.client_id)
            if gone is not None:
                self._lite.client_gone(gone)

    def _check_consume_enable(self, group: str) -> None:
        cfg = self._ctx.subscriptions.get(group)
        if cfg is not None and not cfg.consume_enable:
            raise _Refused(
                "java.lang.IllegalStateException: Consumer group is not allowed to consume."
            )

    def _registered(self, group: str, lmqs: list[str]) -> None:
        # LiteCtlListenerImpl.onRegister: a new subscription to an LMQ holding messages.
        for lmq in lmqs:
            if self._store.max_offset(lmq, 0) > 0:
                self._registry.offer(lmq, group)

    def _exclude_others(self, client_id: str, group: str, lmq: str) -> None:
        # excludeClientByLmqName: in an exclusive group a lite topic has one subscriber.
        reset = self._lite.group_attribute(group, "lite.sub.reset.offset.exclusive") == "true"
        for other in self._registry.others_in_group(lmq, group, client_id):
            self._registry.remove(other.client_id, [lmq])
            self._notify_unsubscribed(other, lmq)
            if reset:
                self._reset(lmq, group, OffsetOption("POLICY", POLICY_MIN))

    def _notify_unsubscribed(self, client: LiteClient, lmq: str) -> None:
        parts = parse_lite_queue(lmq)
        channel = client.channel
        if parts is None or not isinstance(channel, Connection) or channel.is_closed:
            return
        header = NotifyUnsubscribeLiteRequestHeader(
            lite_topic=parts[1], consumer_group=client.group, client_id=client.client_id
        )
        cmd = RemotingCommand.request(
            RequestCode.NOTIFY_UNSUBSCRIBE_LITE, header.to_ext(), oneway=True
        )
        self._ctx.spawn(_send_oneway(channel, cmd), "aiorocket-lite-notify")

    def _reset(self, lmq: str, group: str, option: OffsetOption | None) -> None:
        """``resetOffset``: move the group's offset of ``lmq`` per ``option`` (its batch goes)."""
        if option is None:
            return
        current = self._offsets.query(group, lmq, 0)
        target: int | None = None
        if option.type == "POLICY":
            if option.value == POLICY_MIN:
                target = 0
            elif option.value == POLICY_MAX:
                target = self._store.max_offset(lmq, 0)
        elif option.type == "OFFSET":
            target = option.value
        elif option.type == "TAIL_N" and current is not None:
            target = max(0, current - option.value)
        if target is not None and target != current:
            self._offsets.commit(group, lmq, 0, target)
            self._orders.forget(lmq, group)

    # -- POP_LITE_MESSAGE ---------------------------------------------------------------------

    def _pre_check(
        self, cmd: RemotingCommand, h: PopLiteMessageRequestHeader
    ) -> RemotingCommand | None:
        host = self._ctx.address().rpartition(":")[0]
        if now_ms() - h.born_time - h.poll_time > TOO_LATE_MS:
            return _refuse(
                cmd,
                ResponseCode.POLLING_TIMEOUT,
                f"the broker[{host}] pop message is timeout too much",
            )
        if h.max_msg_num > MAX_POP:
            return _refuse(
                cmd,
                ResponseCode.INVALID_PARAMETER,
                f"the broker[{host}] pop message's num is greater than 32",
            )
        cfg = self._topics.get(h.topic)
        if cfg is None:
            return _refuse(
                cmd,
                ResponseCode.TOPIC_NOT_EXIST,
                f"topic [{h.topic}] not exist, apply first please!",
            )
        if not cfg.readable:
            return _refuse(
                cmd,
                ResponseCode.NO_PERMISSION,
                f"the topic [{h.topic}] peeking message is forbidden",
            )
        if cfg.attributes.get(MESSAGE_TYPE) != "LITE":
            return _refuse(
                cmd, ResponseCode.INVALID_PARAMETER, f"the topic [{h.topic}] message type not match"
            )
        group = self._ctx.subscriptions.get(h.consumer_group)
        if group is not None and not group.consume_enable:
            return _refuse(
                cmd,
                ResponseCode.NO_PERMISSION,
                f"subscription group no permission, {h.consumer_group}",
            )
        if self._lite.bind_topic(h.consumer_group) != h.topic:
            return _refuse(
                cmd,
                ResponseCode.INVALID_PARAMETER,
                f"subscription bind topic not match, {h.consumer_group}",
            )
        return None

    @handles(RequestCode.POP_LITE_MESSAGE)
    async def pop_lite_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """POP_LITE_MESSAGE: pop from the client's ready lite topics, or hold until one is
        offered to it (docs/protocol.md §12.8).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the store failed.
        """
        h = PopLiteMessageRequestHeader.from_ext(with_born_time(cmd))
        refused = self._pre_check(cmd, h)
        if refused is not None:
            return refused
        config = self._config
        deadline = min(h.born_time, now_ms()) + h.poll_time
        registry = self._registry
        while True:
            batch = self._pop_once(h)
            if batch.records:
                self._ctx.stats.got(h.consumer_group, h.topic, len(batch.records))
                return cmd.make_response(
                    ResponseCode.SUCCESS,
                    remark=GetStatus.FOUND.value,
                    ext_fields=_header(h, batch, format_lite_order_counts(batch.counts)),
                    body=b"".join(batch.records),
                )
            now = now_ms()
            if h.poll_time <= 0 or now >= deadline:
                return _not_found(cmd, h, batch, ResponseCode.POLLING_TIMEOUT)
            if (
                registry.held >= config.pop_max_polling
                or registry.held_by(h.client_id) > config.pop_max_polling_per_queue
            ):
                return _not_found(cmd, h, batch, ResponseCode.POLLING_FULL)
            await registry.wait(h.client_id, (deadline - now) / 1000)

    def _pop_once(self, h: PopLiteMessageRequestHeader) -> _Batch:
        """``popByClientId``: each ready LMQ once, until ``maxMsgNum``; synchronous, so no
        other request interleaves with an LMQ's read and batch."""
        batch = _Batch(self._clock.now_ms())
        seen: set[str] = set()
        for lmq in self._registry.ready(h.client_id):
            if len(batch.records) >= h.max_msg_num:
                break
            if lmq in seen:
                continue
            seen.add(lmq)
            self._registry.taken(h.client_id, lmq)
            self._pop_queue(batch, h, lmq)
        return batch

    def _pop_queue(self, batch: _Batch, h: PopLiteMessageRequestHeader, lmq: str) -> None:
        group = h.consumer_group
        now = batch.pop_time
        if self._orders.blocked_until(h.attempt_id, lmq, group, 0, now) is not None:
            return  # offered again when its batch is acked or visible again
        offset = pop_offset(self._ctx, group, lmq, 0, _MAX_MODE)
        wanted = h.max_msg_num - len(batch.records)
        result = self._store.get(
            lmq, 0, offset, max_msgs=wanted, max_bytes=self._config.max_pull_bytes
        )
        if not result.messages and result.status in _MISPLACED:
            # PopLiteMessageProcessor.getMessage: correct the offset, read again
            offset = result.next_begin_offset
            self._offsets.commit(group, lmq, 0, offset)
            result = self._store.get(
                lmq, 0, offset, max_msgs=wanted, max_bytes=self._config.max_pull_bytes
            )
        if not result.messages:
            return
        popped = list(result.queue_offsets)
        self._orders.update(h.attempt_id, lmq, group, 0, now, h.invisible_time, popped, now)
        info = self._orders.get(lmq, group, 0)
        consumed = {} if info is None else info.consumed
        batch.counts += [consumed.get(o, 0) for o in popped]
        batch.records += result.messages
        self._lite.offer_when_visible(lmq, group, now + h.invisible_time)

    # -- acks and changes of invisible time (from AckProcessor) -------------------------------

    async def ack(
        self, conn: Connection, cmd: RemotingCommand, h: AckMessageRequestHeader
    ) -> RemotingCommand:
        """``ackLite``: ACK_MESSAGE of a popped lite message (the parent's checks done).

        Raises:
            RemoteProtocolError: a malformed receipt handle.
        """
        assert h.lite_topic is not None
        group = h.consumer_group
        if self._lite.bind_topic(group) != h.topic:
            return _refuse(
                cmd, ResponseCode.INVALID_PARAMETER, "group type or bind topic not match."
            )
        lmq = lite_queue_name(h.topic, h.lite_topic)
        if h.offset > self._store.max_offset(lmq, 0):
            return _refuse(cmd, ResponseCode.NO_MESSAGE, "ack offset illegal.")
        handle = ReceiptHandle.parse(h.extra_info)
        if h.queue_id != 0 or handle.revive_qid != POP_ORDER_REVIVE_QUEUE:
            return _refuse(cmd, ResponseCode.INVALID_PARAMETER, "ack queue illegal.")
        stored = self._offsets.query(group, lmq, 0)
        if (stored is not None and h.offset < stored) or self._orders.get(lmq, group, 0) is None:
            # late (acked already), or its batch is gone (a restart, a reset): nothing to do
            return cmd.make_response(ResponseCode.SUCCESS)
        now = self._clock.now_ms()
        next_offset = self._orders.commit_and_next(lmq, group, 0, h.offset, handle.pop_time, now)
        if next_offset == -1:
            return _refuse(cmd, ResponseCode.MESSAGE_ILLEGAL, "ack offset illegal.")
        if next_offset > -1:
            self._offsets.commit(group, lmq, 0, next_offset)
            if self._orders.blocked_until(None, lmq, group, 0, now) is None:
                self._registry.offer(lmq, group)
            if self._config.flush == "sync":
                await self._offsets.flush()
        return cmd.make_response(ResponseCode.SUCCESS)

    async def change_invisible(
        self, conn: Connection, cmd: RemotingCommand, h: ChangeInvisibleTimeRequestHeader
    ) -> RemotingCommand:
        """``processChangeInvisibleTimeForLite`` (the parent's checks done).

        Raises:
            RemoteProtocolError: a malformed receipt handle.
        """
        assert h.lite_topic is not None
        group = h.consumer_group
        lmq = lite_queue_name(h.topic, h.lite_topic)
        if h.offset > self._store.max_offset(lmq, 0):
            return cmd.make_response(ResponseCode.NO_MESSAGE)
        handle = ReceiptHandle.parse(h.extra_info)
        stored = self._offsets.query(group, lmq, 0)
        header = ChangeInvisibleTimeResponseHeader(pop_time=0, invisible_time=0, revive_qid=0)
        if stored is None or h.offset >= stored:
            visible_at = self._clock.now_ms() + h.invisible_time
            info = self._orders.get(lmq, group, 0)
            offsets = info.offsets if h.suspend and info is not None else [h.offset]
            for offset in offsets:
                self._orders.update_next_visible(lmq, group, 0, offset, handle.pop_time, visible_at)
            self._lite.offer_when_visible(lmq, group, visible_at)
            header = ChangeInvisibleTimeResponseHeader(
                pop_time=handle.pop_time,
                invisible_time=visible_at - handle.pop_time,
                revive_qid=handle.revive_qid,
            )
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext())


class _Refused(Exception):
    """A subscription change the broker refuses (answered ILLEGAL_OPERATION)."""


def _refuse(cmd: RemotingCommand, code: int, remark: str) -> RemotingCommand:
    return cmd.make_response(code, remark=remark)


def _header(h: PopLiteMessageRequestHeader, batch: _Batch, counts: str | None) -> dict[str, str]:
    return PopLiteMessageResponseHeader(
        pop_time=batch.pop_time,
        invisible_time=h.invisible_time,
        revive_qid=POP_ORDER_REVIVE_QUEUE,
        order_count_info=counts,
    ).to_ext()


def _not_found(
    cmd: RemotingCommand, h: PopLiteMessageRequestHeader, batch: _Batch, code: int
) -> RemotingCommand:
    # The Java client decodes the header (popTime, invisibleTime, reviveQid) of every answer.
    return cmd.make_response(
        code, remark=GetStatus.NO_MESSAGE_IN_QUEUE.value, ext_fields=_header(h, batch, None)
    )


async def _send_oneway(conn: Connection, cmd: RemotingCommand) -> None:
    # Broker2Client.notifyUnsubscribeLite: oneway, a failure only logged.
    with contextlib.suppress(ConnectionClosedError):
        await conn.send_oneway(cmd)
