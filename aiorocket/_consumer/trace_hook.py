"""The consume hook that traces (Java ``ConsumeMessageTraceHookImpl``): a SubBefore record
before each handler call and a SubAfter record after it, queued on the consumer's
`TraceDispatcher`."""

from __future__ import annotations

import time
from collections.abc import Sequence

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.hooks import ConsumeHook, ConsumeHookContext, run_after, run_before
from aiorocket._trace import TraceDispatcher
from aiorocket.models import ConsumeStatus, MessageQueue, ReceivedMessage
from aiorocket.settings import ConsumerSettings

__all__ = ["ConsumeTraceHook", "install_trace", "trace_dispatcher", "trace_polled"]

#: ``ConsumeReturnType``'s ordinals, written as the SubAfter context code.
_RETURN_CODES = {"SUCCESS": 0, "TIME_OUT": 1, "EXCEPTION": 2, "RETURNNULL": 3, "FAILED": 4}


class ConsumeTraceHook:
    """Records SubBefore and SubAfter traces around every handler call.

    Args:
        dispatcher: where the records go (it knows the group and namespace).
    """

    def __init__(self, dispatcher: TraceDispatcher) -> None:
        self._dispatcher = dispatcher

    def consume_before(self, ctx: ConsumeHookContext) -> None:
        """Note when the handler call started (its SubBefore record's time)."""
        ctx.props["trace"] = int(time.time() * 1000)

    def consume_after(self, ctx: ConsumeHookContext) -> None:
        """Queue the call's SubBefore and SubAfter records: success, cost per message,
        return type. They are encoded when the dispatcher sends them (messages with
        ``TRACE_ON=false`` left out, as Java does), which keeps the handler path cheap;
        unlike Java, a call that never ends therefore leaves no SubBefore either."""
        started = ctx.props.get("trace")
        if not isinstance(started, int) or not ctx.messages:
            return
        code = _RETURN_CODES.get(ctx.return_type, 0)
        now = int(time.time() * 1000)
        self._dispatcher.append_consume((ctx.messages, started, now, ctx.success, code))


def trace_dispatcher(client: ClientInstance, settings: ConsumerSettings) -> TraceDispatcher | None:
    """With ``settings.trace``: a consume-trace dispatcher on ``client``; else ``None``."""
    if not settings.trace:
        return None
    return TraceDispatcher(
        client,
        group=settings.group,
        kind="CONSUME",
        trace_topic=settings.trace_topic,
        namespace=settings.namespace,
    )


def install_trace(
    client: ClientInstance, settings: ConsumerSettings, hooks: list[ConsumeHook]
) -> TraceDispatcher | None:
    """With ``settings.trace``: a dispatcher on ``client`` and its hook appended to
    ``hooks`` (Java ``DefaultMQPushConsumer(enableMsgTrace=true)``); else ``None``."""
    tracer = trace_dispatcher(client, settings)
    if tracer is not None:
        hooks.append(ConsumeTraceHook(tracer))
    return tracer


def trace_polled(
    hooks: Sequence[ConsumeHook], group: str, msgs: list[ReceivedMessage]
) -> list[ReceivedMessage]:
    """Run ``hooks`` over messages a pull consumer hands out, per queue, as consumed
    successfully at once (Java ``DefaultLitePullConsumerImpl.poll``); returns ``msgs``."""
    if hooks and msgs:
        by_queue: dict[MessageQueue, list[ReceivedMessage]] = {}
        for m in msgs:
            by_queue.setdefault(m.queue, []).append(m)
        for mq, batch in by_queue.items():
            ctx = ConsumeHookContext(group, mq, batch)
            run_before(hooks, ctx)
            ctx.status, ctx.success, ctx.return_type = (
                ConsumeStatus.CONSUME_SUCCESS,
                True,
                "SUCCESS",
            )
            run_after(hooks, ctx)
    return msgs
