"""What brokers ask a consumer (Java ``ClientRemotingProcessor``), answered once for the push
and the pull consumer.

Every member answers GET_CONSUMER_RUNNING_INFO (``mqadmin consumerStatus``) and, in a group,
NOTIFY_CONSUMER_IDS_CHANGED (rebalance now). RESET_CONSUMER_CLIENT_OFFSET and
CONSUME_MESSAGE_DIRECTLY are push-consumer requests (``MQClientInstance`` answers them only
for ``DefaultMQPushConsumerImpl``): a pull consumer answers them with code 3 (no handler).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, cast

from aiorocket._client.pull import to_received
from aiorocket._consumer.consume_concurrently import Handler
from aiorocket._consumer.consume_orderly import OrderlyHandler
from aiorocket._consumer.context import ConsumerContext
from aiorocket._consumer.key_order import key_function, safe_key
from aiorocket._consumer.queue_table import PushQueues, QueueTable
from aiorocket._names import is_retry_topic
from aiorocket._protocol.bodies import (
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ProcessQueueInfo,
    ResetOffsetBody,
    TopicConsumeStatus,
)
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    ConsumeMessageDirectlyResultRequestHeader,
    GetConsumerRunningInfoRequestHeader,
    ResetOffsetRequestHeader,
)
from aiorocket._protocol.message import decode_message
from aiorocket._remoting import Connection, Dispatcher
from aiorocket.models import (
    ConcurrentContext,
    ConsumeStatus,
    MessageQueue,
    OrderlyContext,
    OrderlyStatus,
)

__all__ = ["BrokerRequests", "PushRequests"]

log = logging.getLogger("aiorocket.consumer")

_MIB = 1024 * 1024
_CLIENT_VERSION = "V4_9_8"
#: CONSUME_MESSAGE_DIRECTLY results of an orderly handler (Java ``CMResult``)
_DIRECT_ORDERLY: dict[OrderlyStatus | None, str] = {
    None: "CR_SUCCESS",
    OrderlyStatus.SUCCESS: "CR_SUCCESS",
    OrderlyStatus.COMMIT: "CR_COMMIT",
    OrderlyStatus.ROLLBACK: "CR_ROLLBACK",
    OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT: "CR_LATER",
}


class BrokerRequests:
    """The requests every consumer answers.

    Args:
        ctx: the consumer's parts.
        queues: its queue table (the running info's queue rows).
        properties: running-info properties of this kind of consumer, added to the common
            ones.
        topic_status: whether the running info has a consume-status row per subscribed topic
            (``DefaultMQPushConsumerImpl.consumerRunningInfo``; a lite pull consumer has none).
    """

    def __init__(
        self,
        ctx: ConsumerContext,
        queues: QueueTable[Any],
        *,
        properties: Mapping[str, str],
        topic_status: bool = False,
    ) -> None:
        self._ctx = ctx
        self._queues = queues
        self._properties = dict(properties)
        self._topic_status = topic_status

    def register(self, dispatcher: Dispatcher, *, grouped: bool) -> None:
        """Answer these requests through ``dispatcher`` (the client's, made before it);
        ``grouped``: the member shares its group's queues (rebalances when the group
        changes)."""
        if grouped:
            dispatcher.register(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, self._on_ids_changed)
        dispatcher.register(RequestCode.GET_CONSUMER_RUNNING_INFO, self._on_running_info)

    async def _on_ids_changed(self, conn: Connection, cmd: RemotingCommand) -> None:
        log.debug("consumer ids of %s changed; rebalancing now", self._ctx.group)
        self._ctx.wake_rebalance()

    async def _on_running_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = GetConsumerRunningInfoRequestHeader.from_ext(cmd.ext_fields)
        if header.consumer_group != self._ctx.group:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"The Consumer Group <{header.consumer_group}> not exist in this consumer",
            )
        return cmd.make_response(ResponseCode.SUCCESS, body=self.running_info().to_json())

    def running_info(self) -> ConsumerRunningInfo:
        """The consumer's settings, subscriptions, queue caches and (push) topic rates."""
        ctx = self._ctx
        s = ctx.settings
        props = {
            name: str(value)
            for name, value in s.model_dump().items()
            if name not in ("secret_key", "access_key", "allocation") and value is not None
        }
        props.update(
            {
                "PROP_NAMESERVER_ADDR": ";".join(s.namesrv),
                "PROP_CONSUME_TYPE": ctx.consume_type,
                "PROP_CLIENT_VERSION": _CLIENT_VERSION,
                "PROP_CONSUMER_START_TIMESTAMP": str(ctx.start_wall),
                **self._properties,
            }
        )
        wall = time.time() - asyncio.get_running_loop().time()
        mq_table = {}
        for mq, entry in self._queues.entries.items():
            pq = entry.pq
            snap = pq.snapshot()
            mq_table[mq] = ProcessQueueInfo(
                commit_offset=ctx.offsets.read(mq),
                cached_msg_min_offset=max(snap.min_offset, 0),
                cached_msg_max_offset=max(snap.max_offset, 0),
                cached_msg_count=snap.cached_count,
                cached_msg_size_in_mib=snap.cached_bytes // _MIB,
                dropped=snap.dropped,
                locked=pq.locked,
                last_lock_timestamp=int((pq.last_lock_time + wall) * 1000) if pq.locked else 0,
                last_pull_timestamp=int((snap.last_pull_time + wall) * 1000),
                last_consume_timestamp=int((snap.last_consume_time + wall) * 1000),
            )
        status: dict[str, TopicConsumeStatus] = {}
        if self._topic_status:
            # A row for every subscribed topic (mqadmin consumerStatus lists them all), zeros
            # until it has statistics.
            status = {topic: TopicConsumeStatus() for topic in ctx.subscriptions}
            now = asyncio.get_running_loop().time()
            for topic, t in ctx.stats.topic_statistics(now).items():
                status[topic] = TopicConsumeStatus(
                    pull_rt=t.pull_rt_ms,
                    pull_tps=t.pull_tps,
                    consume_rt=t.consume_rt_ms,
                    consume_ok_tps=t.consume_ok_tps,
                    consume_failed_tps=t.consume_failed_tps,
                    consume_failed_msgs=t.consumed_failed_total,
                )
        return ConsumerRunningInfo(
            properties=props,
            subscriptions=tuple(sub.data() for sub in ctx.subscriptions.values()),
            mq_table=mq_table,
            status_table=status,
        )


class PushRequests(BrokerRequests):
    """`BrokerRequests` plus the push consumer's own: offset resets and
    consuming one message directly with the handler."""

    def __init__(
        self,
        ctx: ConsumerContext,
        queues: PushQueues,
        *,
        handler: Handler | OrderlyHandler,
        orderly: bool,
    ) -> None:
        super().__init__(
            ctx,
            queues,
            properties={
                "PROP_THREADPOOL_CORE_SIZE": str(ctx.settings.concurrency),
                "PROP_CONSUMEORDERLY": "true" if orderly else "false",
            },
            topic_status=True,
        )
        self._push_queues = queues
        self._handler = handler
        self._orderly = orderly

    def register(self, dispatcher: Dispatcher, *, grouped: bool) -> None:
        """The common requests, offset resets and CONSUME_MESSAGE_DIRECTLY."""
        super().register(dispatcher, grouped=grouped)
        dispatcher.register(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, self._on_reset_offset)
        dispatcher.register(RequestCode.CONSUME_MESSAGE_DIRECTLY, self._on_consume_directly)

    async def _on_reset_offset(self, conn: Connection, cmd: RemotingCommand) -> None:
        header = ResetOffsetRequestHeader.from_ext(cmd.ext_fields)
        group = self._ctx.group
        if header.group != group or not cmd.body:
            return
        table = ResetOffsetBody.from_json(cmd.body).offset_table
        log.warning("broker resets offsets of %s for %s", header.topic, group)
        await self._push_queues.reset_offsets(header.topic, table)

    async def _on_consume_directly(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        header = ConsumeMessageDirectlyResultRequestHeader.from_ext(cmd.ext_fields)
        s = self._ctx.settings
        rec, _ = decode_message(cmd.body)
        broker_name = header.broker_name or ""
        msgs = to_received(
            [rec],
            broker_name=broker_name,
            tag_filter=None,
            retry_queue=is_retry_topic(rec.topic),
            namespace=s.namespace,
        )
        mq = MessageQueue(rec.topic, broker_name, rec.queue_id)
        started = time.monotonic()
        remark = None
        auto_commit = True
        try:
            if self._orderly:
                # ConsumeMessageOrderlyService.consumeMessageDirectly
                suspend_ms = round(s.suspend_delay * 1000)
                key_of = key_function(s.order_by)
                if key_of is None:
                    octx = OrderlyContext(mq, suspend_millis=suspend_ms)
                else:
                    octx = OrderlyContext._for_key(mq, safe_key(key_of, msgs[0]), suspend_ms)
                ostatus = await cast(OrderlyHandler, self._handler)(msgs, octx)
                auto_commit = octx.auto_commit
                result = _DIRECT_ORDERLY.get(ostatus, "CR_LATER")
            else:
                ctx = ConcurrentContext(mq)
                status = await cast(Handler, self._handler)(msgs, ctx)
                ok = status in (None, ConsumeStatus.CONSUME_SUCCESS)
                result = "CR_SUCCESS" if ok else "CR_LATER"
        except Exception as exc:
            result = "CR_THROW_EXCEPTION"
            remark = f"{type(exc).__name__}: {exc}"
        body = ConsumeMessageDirectlyResult(
            order=self._orderly,
            auto_commit=auto_commit,
            consume_result=result,
            remark=remark,
            spent_time_mills=int((time.monotonic() - started) * 1000),
        )
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())
