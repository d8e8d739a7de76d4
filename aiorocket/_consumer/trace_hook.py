"""The consume hook that traces (Java ``ConsumeMessageTraceHookImpl``): a SubBefore record
before each handler call and a SubAfter record after it, queued on the consumer's
:class:`~aiorocket._trace.TraceDispatcher`."""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.hooks import ConsumeHook, ConsumeHookContext, run_after, run_before
from aiorocket._names import without_namespace
from aiorocket._protocol.msgid import UniqKeyGenerator
from aiorocket._protocol.properties import KEYS, MSG_REGION, TRACE_ON
from aiorocket._trace import TraceBean, TraceContext, TraceDispatcher, TraceType
from aiorocket.models import ConsumeStatus, MessageQueue, ReceivedMessage
from aiorocket.settings import ConsumerSettings

__all__ = ["ConsumeTraceHook", "install_trace", "trace_polled"]

#: ``ConsumeReturnType``'s ordinals, written as the SubAfter context code.
_RETURN_CODES = {"SUCCESS": 0, "TIME_OUT": 1, "EXCEPTION": 2, "RETURNNULL": 3, "FAILED": 4}


class ConsumeTraceHook:
    """Records SubBefore and SubAfter traces around every handler call.

    Args:
        dispatcher: where the records go.
        group: the consumer group, without namespace.
        namespace: the consumer's namespace (stripped from traced topics).
        ids: makes the request ids tying a SubBefore to its SubAfter.
    """

    def __init__(
        self,
        dispatcher: TraceDispatcher,
        *,
        group: str,
        namespace: str | None,
        ids: UniqKeyGenerator,
    ) -> None:
        self._dispatcher = dispatcher
        self._group = group
        self._namespace = namespace
        self._ids = ids

    def consume_before(self, ctx: ConsumeHookContext) -> None:
        """Queue a SubBefore record of the batch (messages with ``TRACE_ON=false`` are left
        out, as Java does)."""
        beans = []
        region: str | None = ""
        for msg in ctx.messages:
            props = msg.properties
            if props.get(TRACE_ON) == "false":
                continue
            region = props.get(MSG_REGION, "")
            beans.append(
                TraceBean(
                    topic=without_namespace(self._namespace, msg.topic),
                    msg_id=msg.msg_id,
                    tags=msg.tags,
                    keys=props.get(KEYS),
                    store_time=msg.store_timestamp,
                    body_length=len(msg.body),
                    retry_times=msg.reconsume_times,
                )
            )
        if not beans:
            return
        now = int(time.time() * 1000)
        trace = TraceContext(
            TraceType.SubBefore,
            timestamp=now,
            region_id=region,
            group=self._group,
            request_id=self._ids.next(now),
            beans=beans,
        )
        ctx.props["trace"] = trace
        self._dispatcher.append(trace)

    def consume_after(self, ctx: ConsumeHookContext) -> None:
        """Queue the SubAfter record: success, cost per message, return type."""
        before = ctx.props.get("trace")
        if not isinstance(before, TraceContext) or not ctx.messages:
            return
        now = int(time.time() * 1000)
        after = TraceContext(
            TraceType.SubAfter,
            # Java leaves the SubAfter's own creation time as its timestamp.
            timestamp=now,
            region_id=before.region_id,
            group=self._group,
            request_id=before.request_id,
            success=ctx.success,
            cost_ms=(now - before.timestamp) // len(ctx.messages),
            context_code=_RETURN_CODES.get(ctx.return_type, 0),
            beans=before.beans,
        )
        self._dispatcher.append(after)


def install_trace(
    client: ClientInstance, settings: ConsumerSettings, hooks: list[ConsumeHook]
) -> TraceDispatcher | None:
    """With ``settings.trace``: a dispatcher on ``client`` and its hook appended to
    ``hooks`` (Java ``DefaultMQPushConsumer(enableMsgTrace=true)``); else ``None``."""
    if not settings.trace:
        return None
    tracer = TraceDispatcher(
        client,
        group=settings.group,
        kind="CONSUME",
        trace_topic=settings.trace_topic,
        namespace=settings.namespace,
    )
    ids = UniqKeyGenerator(client.ip, os.getpid(), random.getrandbits(31))
    hooks.append(
        ConsumeTraceHook(tracer, group=settings.group, namespace=settings.namespace, ids=ids)
    )
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
