"""The send hook that traces (Java ``SendMessageTraceHookImpl``): one Pub record per
successful send, queued on the producer's `TraceDispatcher`; and the
EndTransaction record (``EndTransactionTraceHookImpl``)."""

from __future__ import annotations

import time

from aiorocket._producer.hooks import SendHookContext
from aiorocket._trace import MessageType, TraceBean, TraceContext, TraceDispatcher, TraceType
from aiorocket.models import SendStatus

__all__ = ["SendTraceHook", "trace_end_transaction"]

_TYPES = {
    "Normal": MessageType.Normal_Msg,
    "Trans": MessageType.Trans_Msg_Half,
    "Delay": MessageType.Delay_Msg,
    "Order": MessageType.Order_Msg,
}


class SendTraceHook:
    """Records a Pub trace for every send the broker answered with trace on."""

    def __init__(self, dispatcher: TraceDispatcher) -> None:
        self._dispatcher = dispatcher

    def send_before(self, ctx: SendHookContext) -> None:
        """Start the record (the trace topic's own messages are never traced)."""
        msg = ctx.message
        if self._dispatcher.is_trace_topic(msg.topic):
            return
        bean = TraceBean(
            topic=msg.topic,
            tags=msg.tags,
            # Message.getKeys(): the KEYS property, null without keys.
            keys=" ".join(msg.keys) if msg.keys else None,
            store_host=ctx.broker_addr,
            body_length=len(msg.body),
            msg_type=_TYPES.get(ctx.msg_type, MessageType.Normal_Msg),
        )
        ctx.props["trace"] = TraceContext(
            TraceType.Pub, timestamp=ctx.started, group=ctx.group, beans=[bean]
        )

    def send_after(self, ctx: SendHookContext) -> None:
        """Finish and queue the record: only with a result, a region and trace on (Java
        skips the others)."""
        trace = ctx.props.get("trace")
        result = ctx.result
        if not isinstance(trace, TraceContext) or result is None:
            return
        if ctx.region_id is None or ctx.trace_on is False:
            return
        bean = trace.beans[0]
        trace.cost_ms = ctx.cost_ms
        trace.success = result.status is SendStatus.SEND_OK
        trace.region_id = ctx.region_id
        bean.msg_id = result.msg_id
        bean.offset_msg_id = result.offset_msg_id
        bean.store_time = trace.timestamp + ctx.cost_ms // 2
        self._dispatcher.append(trace)


def trace_end_transaction(
    dispatcher: TraceDispatcher,
    *,
    group: str,
    topic: str,
    tags: str | None,
    keys: str | None,
    broker_addr: str,
    msg_id: str,
    transaction_id: str | None,
    state: str,
    from_check: bool,
    region_id: str | None,
) -> None:
    """Queue an EndTransaction record (Java ``EndTransactionTraceHookImpl``); ``state`` is
    Java's ``LocalTransactionState`` name."""
    if dispatcher.is_trace_topic(topic):
        return
    bean = TraceBean(
        topic=topic,
        msg_id=msg_id,
        tags=tags,
        keys=keys,
        store_host=broker_addr,
        msg_type=MessageType.Trans_msg_Commit,
        transaction_id=transaction_id,
        transaction_state=state,
        from_transaction_check=from_check,
    )
    dispatcher.append(
        TraceContext(
            TraceType.EndTransaction,
            timestamp=int(time.time() * 1000),
            # MixAll.DEFAULT_TRACE_REGION_ID when the message carries none
            region_id=region_id or "DefaultRegion",
            group=group,
            beans=[bean],
        )
    )
