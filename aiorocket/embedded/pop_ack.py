"""ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151) and CHANGE_MESSAGE_INVISIBLETIME (200053):
Java's ``AckMessageProcessor`` and ``ChangeInvisibleTimeProcessor`` (docs/protocol.md §12.3).

An ack names the message by the topic it was popped from (a POP retry topic for a retried
one), its queue and offset, and its receipt handle (``extraInfo``: checkpoint start offset,
pop time, revive queue, …); a batch ack names a checkpoint and the offsets above its start
as bits. The ack is appended to the revive log and applied to the checkpoint; an ack whose
checkpoint is gone (acked already, revived after its invisible time, never popped) changes
nothing and is still answered SUCCESS, as Apache answers it: it can neither resurrect nor
duplicate a message.

Codes as Apache: TOPIC_NOT_EXIST (17) for an unknown topic, MESSAGE_ILLEGAL (13) for a queue
id outside the topic, NO_MESSAGE (208) for an offset outside the queue (and for a batch ack
without acks).

Ordered POP (revive queue 999, ``ackOrderly``): the ack marks the message in the queue's
batch and moves the group's offset to the first message not acked yet; an offset below the
group's offset is a late ack and changes nothing, one outside the batch is MESSAGE_ILLEGAL.

CHANGE_MESSAGE_INVISIBLETIME: a new checkpoint of the one message at its own offset, popped
now with the new invisible time, then an ack of the old one; the answer's ``popTime`` /
``invisibleTime`` / ``reviveQid`` make the client's new handle (``ReceiptHandle.renewed``) and
the old handle is spent. For a handle already spent no checkpoint is made (Apache would make
one, and deliver the message once more). Ordered: the message's next visible time in its
batch is moved; the answer keeps the pop time and gives the invisible time from it.
"""

from __future__ import annotations

from typing import Final, Protocol

from aiorocket._names import pop_retry_topic
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.pop import (
    POP_ORDER_REVIVE_QUEUE,
    AckMessageRequestHeader,
    BatchAckMessageRequestBody,
    ChangeInvisibleTimeRequestHeader,
    ChangeInvisibleTimeResponseHeader,
    ReceiptHandle,
)
from aiorocket._remoting import Connection
from aiorocket.embedded.context import BrokerContext, Processor, handles, peer_address
from aiorocket.embedded.pop_inflight import Checkpoint
from aiorocket.embedded.pop_service import PopContext
from aiorocket.embedded.store_results import PutResult
from aiorocket.errors import RemoteProtocolError

__all__ = ["AckProcessor", "LiteAcks"]

_RETRY_MARKS: Final = {"0": None, "1": False, "2": True}


def _real_topic(topic: str, group: str, retry: str) -> str:
    """``ExtraInfoUtil.getRealTopic``: the topic a batch ack's messages were popped from.

    Raises:
        RemoteProtocolError: an unknown retry mark.
    """
    if retry not in _RETRY_MARKS:
        raise RemoteProtocolError(f"getRetry fail, format is wrong: {retry!r}")
    v2 = _RETRY_MARKS[retry]
    return topic if v2 is None else pop_retry_topic(topic, group, v2=v2)


class LiteAcks(Protocol):
    """Where acks and changes of invisible time of lite messages (a ``liteTopic`` in the
    header, docs/protocol.md §12.8) go once the parent topic and queue passed the checks."""

    async def ack(
        self, conn: Connection, cmd: RemotingCommand, h: AckMessageRequestHeader
    ) -> RemotingCommand:
        """``ackLite``."""
        ...

    async def change_invisible(
        self, conn: Connection, cmd: RemotingCommand, h: ChangeInvisibleTimeRequestHeader
    ) -> RemotingCommand:
        """``processChangeInvisibleTimeForLite``."""
        ...


class AckProcessor(Processor):
    """Serves ACK_MESSAGE, BATCH_ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME.

    Args:
        ctx: the broker's store, topics, offsets and settings.
        pop: the POP state.
        lite: where requests naming a lite topic go (none: they are taken as plain POP ones).
    """

    def __init__(self, ctx: BrokerContext, pop: PopContext, lite: LiteAcks | None = None) -> None:
        super().__init__(ctx)
        self._pop = pop
        self._writer = ctx.writer
        self._lite = lite

    def _check_queue(
        self, conn: Connection, cmd: RemotingCommand, topic: str, queue_id: int
    ) -> RemotingCommand | None:
        cfg = self._topics.get(topic)
        if cfg is None:
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{topic}] not exist, apply first please!",
            )
        if not 0 <= queue_id < cfg.read_queue_nums:
            return cmd.make_response(
                ResponseCode.MESSAGE_ILLEGAL,
                remark=f"queueId[{queue_id}] is illegal, topic:[{topic}] topicConfig."
                f"readQueueNums:[{cfg.read_queue_nums}] consumer:[{peer_address(conn)}]",
            )
        return None

    async def _durable(self, put: PutResult | None) -> None:
        if put is not None:
            await self._writer.wait_durable(put)

    def _ack(self, ck: Checkpoint | None, offsets: list[int]) -> PutResult | None:
        """Append and apply the ack of those of ``offsets`` still in flight in ``ck``."""
        if ck is None:
            return None
        acked = ck.acked
        live = [o for o in offsets if (i := ck.index_of(o)) >= 0 and not acked >> i & 1]
        if not live:
            return None
        put = self._pop.revive_log.append_acks(ck, live)
        self._pop.inflight.ack(ck, live)
        return put

    def _ack_orderly(
        self,
        conn: Connection,
        cmd: RemotingCommand,
        topic: str,
        group: str,
        queue_id: int,
        offset: int,
        pop_time: int,
    ) -> RemotingCommand | None:
        """``ackOrderly``: None when done, or the MESSAGE_ILLEGAL answer."""
        stored = self._offsets.query(group, topic, queue_id)
        old = -1 if stored is None else stored
        if offset < old:
            return None  # acked already (the offset moved past it)
        now = self._clock.now_ms()
        orders = self._pop.orders
        next_offset = orders.commit_and_next(topic, group, queue_id, offset, pop_time, now)
        if next_offset > -1:
            self._offsets.commit(group, topic, queue_id, next_offset)
            if orders.blocked_until(None, topic, group, queue_id, now) is None:
                # the queue is free: a held ordered POP of it may go on
                for waiters in (self._pop.pops, self._pop.notifications):
                    waiters.wake(topic, group, queue_id)
                    waiters.wake(topic, group, -1)
            return None
        if next_offset == -1:
            return cmd.make_response(
                ResponseCode.MESSAGE_ILLEGAL,
                remark=f"offset is illegal, key:{topic}@{group}@{queue_id}, old:{old}, "
                f"commit:{offset}, next:{next_offset}, {peer_address(conn)}",
            )
        return None  # popped at another time: that batch is gone

    async def _orderly_durable(self) -> None:
        # With sync flush an ordered ack is on disk before it is answered, like an offset
        # update: the group's offset and the batch table are its state.
        if self._config.flush == "sync":
            await self._offsets.flush()
            await self._pop.orders.flush(self._clock.now_ms())

    @handles(RequestCode.ACK_MESSAGE)
    async def ack_message(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """ACK_MESSAGE: ack one popped message.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            RemoteProtocolError: a malformed receipt handle.
            OSError: the revive log cannot be appended to.
        """
        h = AckMessageRequestHeader.from_ext(cmd.ext_fields)
        refused = self._check_queue(conn, cmd, h.topic, h.queue_id)
        if refused is not None:
            return refused
        if h.lite_topic and self._lite is not None:
            return await self._lite.ack(conn, cmd, h)
        store = self._store
        lo, hi = store.min_offset(h.topic, h.queue_id), store.max_offset(h.topic, h.queue_id)
        if not lo <= h.offset <= hi:
            return cmd.make_response(
                ResponseCode.NO_MESSAGE,
                remark=f"offset is illegal, key:{h.topic}@{h.queue_id}, commit:{h.offset}, "
                f"store:{lo}~{hi}",
            )
        handle = ReceiptHandle.parse(h.extra_info)
        if handle.revive_qid == POP_ORDER_REVIVE_QUEUE:
            refused = self._ack_orderly(
                conn, cmd, h.topic, h.consumer_group, h.queue_id, h.offset, handle.pop_time
            )
            await self._orderly_durable()
            return refused or cmd.make_response(ResponseCode.SUCCESS)
        key = (h.consumer_group, h.topic, h.queue_id, handle.ck_offset, handle.pop_time)
        await self._durable(self._ack(self._pop.inflight.get(key), [h.offset]))
        return cmd.make_response(ResponseCode.SUCCESS)

    @handles(RequestCode.BATCH_ACK_MESSAGE)
    async def batch_ack(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """BATCH_ACK_MESSAGE: ack several checkpoints' messages (offsets outside their queue
        are left out, as Apache leaves them).

        Raises:
            RemoteProtocolError: a malformed body or retry mark.
            OSError: the revive log cannot be appended to.
        """
        body = BatchAckMessageRequestBody.from_json(cmd.body) if cmd.body else None
        if body is None or not body.acks:
            return cmd.make_response(ResponseCode.NO_MESSAGE)
        store = self._store
        refused: RemotingCommand | None = None
        last: PutResult | None = None
        orderly = False
        for ack in body.acks:
            group = ack.consumer_group
            topic = _real_topic(ack.topic, group, ack.retry)
            lo, hi = store.min_offset(topic, ack.queue_id), store.max_offset(topic, ack.queue_id)
            offsets = [o for o in (ack.start_offset + b for b in sorted(ack.bits)) if lo <= o <= hi]
            if ack.revive_queue_id == POP_ORDER_REVIVE_QUEUE:
                orderly = True
                for offset in offsets:
                    refused = (
                        self._ack_orderly(
                            conn, cmd, topic, group, ack.queue_id, offset, ack.pop_time
                        )
                        or refused
                    )
                continue
            key = (group, topic, ack.queue_id, ack.start_offset, ack.pop_time)
            last = self._ack(self._pop.inflight.get(key), offsets) or last
        await self._durable(last)
        if orderly:
            await self._orderly_durable()
        return refused or cmd.make_response(ResponseCode.SUCCESS)

    @handles(RequestCode.CHANGE_MESSAGE_INVISIBLETIME)
    async def change_invisible_time(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """CHANGE_MESSAGE_INVISIBLETIME: the message stays invisible ``invisibleTime`` ms
        from now, under a new handle.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            RemoteProtocolError: a malformed receipt handle.
            OSError: the revive log cannot be appended to.
        """
        h = ChangeInvisibleTimeRequestHeader.from_ext(cmd.ext_fields)
        refused = self._check_queue(conn, cmd, h.topic, h.queue_id)
        if refused is not None:
            return refused
        if h.lite_topic and self._lite is not None:
            return await self._lite.change_invisible(conn, cmd, h)
        store = self._store
        if (
            not store.min_offset(h.topic, h.queue_id)
            <= h.offset
            < store.max_offset(h.topic, h.queue_id)
        ):
            return cmd.make_response(ResponseCode.NO_MESSAGE)
        handle = ReceiptHandle.parse(h.extra_info)
        if handle.ordered:
            return await self._change_orderly(cmd, h, handle)
        group = h.consumer_group
        inflight = self._pop.inflight
        now = self._clock.now_ms()
        old = inflight.get((group, h.topic, h.queue_id, handle.ck_offset, handle.pop_time))
        i = -1 if old is None else old.index_of(h.offset)
        if old is not None and i >= 0 and not old.acked >> i & 1:
            pop_time = now
            while (group, h.topic, h.queue_id, h.offset, pop_time) in inflight:
                pop_time += 1  # one checkpoint per key: a second change within the same ms
            ck = Checkpoint(
                group=group,
                topic=h.topic,
                queue_id=h.queue_id,
                start_offset=h.offset,
                pop_time=pop_time,
                invisible_time=h.invisible_time,
                offsets=(h.offset,),
            )
            self._pop.revive_log.append_checkpoint(ck)
            inflight.add(ck)
            self._pop.revive.wake(ck.due)
            await self._durable(self._ack(old, [h.offset]))
            now = pop_time
        header = ChangeInvisibleTimeResponseHeader(
            pop_time=now, invisible_time=h.invisible_time, revive_qid=handle.revive_qid
        )
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext())

    async def _change_orderly(
        self, cmd: RemotingCommand, h: ChangeInvisibleTimeRequestHeader, handle: ReceiptHandle
    ) -> RemotingCommand:
        # processChangeInvisibleTimeForOrder; a message acked already (below the group's
        # offset) is answered with the header's zeros, as Java's primitive fields are
        stored = self._offsets.query(h.consumer_group, h.topic, h.queue_id)
        header = ChangeInvisibleTimeResponseHeader(pop_time=0, invisible_time=0, revive_qid=0)
        if stored is None or h.offset >= stored:
            visible_at = self._clock.now_ms() + h.invisible_time
            self._pop.orders.update_next_visible(
                h.topic, h.consumer_group, h.queue_id, h.offset, handle.pop_time, visible_at
            )
            if self._config.flush == "sync":
                await self._pop.orders.flush(self._clock.now_ms())
            header = ChangeInvisibleTimeResponseHeader(
                pop_time=handle.pop_time,
                invisible_time=visible_at - handle.pop_time,
                revive_qid=POP_ORDER_REVIVE_QUEUE,
            )
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields=header.to_ext())
