"""OpenTelemetry tracing of sends and handler calls (the messaging semantic conventions).

Spans, all with ``messaging.system = "rocketmq"``:

* ``send <topic>`` (PRODUCER) per [`send`][aiorocket.Producer.send] / ``send_oneway`` call,
  from the arguments' check to the broker's answer, retries included. Its context is the
  message's creation context, injected into the message's properties before they are encoded.
* ``send_batch``: one ``create <topic>`` span (PRODUCER) per message, whose context goes into
  that message, and one ``send <topic>`` span (CLIENT, ``messaging.batch.message_count``)
  linking them: the conventions' batch shape, so each consumer span finds its own message.
* ``process <topic>`` (CONSUMER) per handler call of a push consumer (every consume mode,
  hence every [`App`][aiorocket.app.App] subscriber): for one message its parent is the
  message's creation context, for a batch it links every message's one; the handler runs with
  the span current, so what it calls joins the trace. A failed call (raised, returned a
  failure, timed out) ends it with ERROR status, ``error.type`` and the recorded exception.
* ``receive <topic>`` (CONSUMER) per [`poll`][aiorocket.PullConsumer.poll] /
  [`receive`][aiorocket.SimpleConsumer.receive] returning messages, from the call to its return,
  linking every message's creation context.

A message that already carries a trace context (a copy of a consumed message, or one the
caller injected) keeps it: the span links to it instead (the conventions' "custom creation
context"). The attribute names are those the OpenTelemetry Java agent's RocketMQ
instrumentation writes (``messaging.rocketmq.*``, ``messaging.operation``), plus the newer
``messaging.operation.type`` / ``messaging.operation.name``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode, Tracer, TracerProvider

from aiorocket import __version__
from aiorocket._consumer import PushConsumer
from aiorocket._consumer.hooks import ConsumeHookContext, ReceiveHookContext
from aiorocket._consumer.pull_consumer import PullConsumer
from aiorocket._consumer.simple_consumer import SimpleConsumer
from aiorocket._names import without_namespace
from aiorocket._producer.hooks import SendCallContext
from aiorocket._producer.producer import Producer
from aiorocket._protocol.properties import (
    DELAY,
    SHARDING_KEY,
    TIMER_DELIVER_MS,
    TRAN_MSG,
    UNIQ_KEY,
)
from aiorocket.app import App
from aiorocket.models import Message, ReceivedMessage

__all__ = ["instrument_tracing"]

#: the instrumentation scope's name
SCOPE = "aiorocket"
_SPAN = "otel.span"
_TOKEN = "otel.token"


def instrument_tracing(
    target: App | Producer | PushConsumer | PullConsumer | SimpleConsumer,
    *,
    tracer_provider: TracerProvider | None = None,
) -> None:
    """Trace ``target``'s sends and handler calls (see the module docs); call it before the
    target starts. An [`App`][aiorocket.app.App] gets both: its producer and every subscriber's
    consumer.

    Args:
        target: what to trace.
        tracer_provider: where spans go (default: the global provider, also when it is set
            after this call).

    Raises:
        ConfigurationError: the target was started already.
        TypeError: ``target`` is none of the above.
    """
    # Without a provider: the global one's proxy, which follows a provider set later.
    tracer = trace.get_tracer(SCOPE, __version__, tracer_provider)
    if isinstance(target, App):
        namespace = target.settings.namespace
        target.register_hook(SendTracing(tracer, namespace))
        target.register_hook(ConsumeTracing(tracer, namespace))
    elif isinstance(target, Producer):
        target.register_hook(SendTracing(tracer, target.settings.namespace))
    elif isinstance(target, PushConsumer | PullConsumer | SimpleConsumer):
        s = target.settings
        target.register_hook(ConsumeTracing(tracer, s.namespace, s.message_model))
    else:
        raise TypeError(f"cannot trace {target!r}: not an App, a producer or a consumer")


class _Tracing:
    """What the producer and consumer sides share: the tracer and the common attributes."""

    def __init__(self, tracer: Tracer, namespace: str | None) -> None:
        self._tracer = tracer
        self._namespace = namespace

    def _common(self, operation: str, old_operation: str, group: str) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            "messaging.system": "rocketmq",
            "messaging.operation.type": operation,
            "messaging.operation.name": operation,
            # the name of semantic conventions 1.24, which the Java agent still writes
            "messaging.operation": old_operation,
            "messaging.rocketmq.client_group": without_namespace(self._namespace, group),
        }
        if self._namespace:
            attrs["messaging.rocketmq.namespace"] = self._namespace
        return attrs


def _creation_link(props: Mapping[str, str]) -> Link | None:
    """A link to the trace context ``props`` carry, if they carry one."""
    fields = propagate.get_global_textmap().fields
    if not any(f in props for f in fields):
        return None
    sc = trace.get_current_span(propagate.extract(props)).get_span_context()
    return Link(sc) if sc.is_valid else None


def _message_attrs(attrs: dict[str, Any], msg: Message | ReceivedMessage, msg_id: str) -> None:
    attrs["messaging.message.id"] = msg_id
    if msg.keys:
        attrs["messaging.rocketmq.message.keys"] = list(msg.keys)
    if msg.tags:
        attrs["messaging.rocketmq.message.tag"] = msg.tags


def _fail(span: Span, exc: BaseException | None, error_type: str) -> None:
    """End-of-span error marks (the conventions' ``error.type``: the exception's qualified
    type, else a RocketMQ return type)."""
    if exc is not None:
        error_type = f"{type(exc).__module__}.{type(exc).__qualname__}"
        span.record_exception(exc)
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR, str(exc) if exc is not None else error_type))


class SendTracing(_Tracing):
    """The producer's call-level send hook making the send spans."""

    def send_prepare(self, call: SendCallContext) -> None:
        """Start the span(s) and inject the creation contexts into the properties."""
        tracer = self._tracer
        topic = call.topic
        parent = context.get_current()
        attrs = self._common("send", "publish", call.group)
        attrs["messaging.destination.name"] = topic
        if not call.batch:
            props = call.properties[0]
            msg = call.messages[0]
            _message_attrs(attrs, msg, props[UNIQ_KEY])
            attrs["messaging.rocketmq.message.type"] = _message_type(props)
            if DELAY in props:
                attrs["messaging.rocketmq.message.delay_time_level"] = int(props[DELAY])
            if TIMER_DELIVER_MS in props:
                attrs["messaging.rocketmq.message.delivery_timestamp"] = int(
                    props[TIMER_DELIVER_MS]
                )
            if SHARDING_KEY in props:
                attrs["messaging.rocketmq.message.group"] = props[SHARDING_KEY]
            custom = _creation_link(props)
            span = tracer.start_span(
                f"send {topic}",
                parent,
                kind=SpanKind.PRODUCER,
                attributes=attrs,
                links=[custom] if custom is not None else None,
            )
            if custom is None:
                # the send span's context is the message's creation context
                propagate.inject(props, trace.set_span_in_context(span, parent))
            call.props[_SPAN] = span
            return
        links = []
        for msg, props in zip(call.messages, call.properties, strict=True):
            link = _creation_link(props)
            if link is None:
                create_attrs = self._common("create", "create", call.group)
                create_attrs["messaging.destination.name"] = topic
                _message_attrs(create_attrs, msg, props[UNIQ_KEY])
                create = tracer.start_span(
                    f"create {topic}", parent, kind=SpanKind.PRODUCER, attributes=create_attrs
                )
                create.end()
                propagate.inject(props, trace.set_span_in_context(create, parent))
                link = Link(create.get_span_context())
            links.append(link)
        attrs["messaging.batch.message_count"] = len(call.messages)
        # CLIENT: its context is no message's creation context (the create spans' are).
        call.props[_SPAN] = tracer.start_span(
            f"send {topic}", parent, kind=SpanKind.CLIENT, attributes=attrs, links=links
        )

    def send_done(self, call: SendCallContext) -> None:
        """End the send span with the outcome."""
        span = call.props.pop(_SPAN, None)
        if not isinstance(span, Span):
            return
        if call.exception is not None:
            _fail(span, call.exception, "")
        span.end()


class ConsumeTracing(_Tracing):
    """The consumers' hook making the process and receive spans."""

    def __init__(self, tracer: Tracer, namespace: str | None, model: str | None = None) -> None:
        super().__init__(tracer, namespace)
        self._model = model

    def _consumer_attrs(
        self, operation: str, old_operation: str, group: str, msgs: Sequence[ReceivedMessage]
    ) -> tuple[str, dict[str, Any]]:
        attrs = self._common(operation, old_operation, group)
        attrs["messaging.consumer.group.name"] = attrs["messaging.rocketmq.client_group"]
        if self._model is not None:
            attrs["messaging.rocketmq.consumption_model"] = self._model
        topics = {m.topic for m in msgs}
        name = operation
        if len(topics) == 1:
            topic = topics.pop()
            attrs["messaging.destination.name"] = topic
            name = f"{operation} {topic}"
        return name, attrs

    def consume_before(self, ctx: ConsumeHookContext) -> None:
        """Start the process span and make it current for the handler."""
        msgs = ctx.messages
        if not msgs:
            return
        name, attrs = self._consumer_attrs("process", "process", ctx.group, msgs)
        current = context.get_current()
        if len(msgs) == 1:
            msg = msgs[0]
            _message_attrs(attrs, msg, msg.msg_id)
            # one extraction: the parent, and the link the conventions also ask for
            parent = propagate.extract(msg.properties, current)
            sc = trace.get_current_span(parent).get_span_context()
            links = [Link(sc)] if sc.is_valid and sc.is_remote else []
        else:
            attrs["messaging.batch.message_count"] = len(msgs)
            parent = current
            links = [link for link in map(_creation_link, (m.properties for m in msgs)) if link]
        span = self._tracer.start_span(
            name, parent, kind=SpanKind.CONSUMER, attributes=attrs, links=links
        )
        ctx.props[_SPAN] = span
        # Same task as the handler and consume_after (see aiorocket._consumer.hooks).
        ctx.props[_TOKEN] = context.attach(trace.set_span_in_context(span, parent))

    def consume_after(self, ctx: ConsumeHookContext) -> None:
        """End the process span with the handler's outcome and restore the context."""
        span = ctx.props.pop(_SPAN, None)
        token = ctx.props.pop(_TOKEN, None)
        if not isinstance(span, Span):
            return
        if not ctx.success:
            _fail(span, ctx.exception, ctx.return_type or "FAILED")
        span.end()
        if token is not None:
            context.detach(token)  # type: ignore[arg-type]

    def received(self, ctx: ReceiveHookContext) -> None:
        """Record the receive span of a poll / receive call."""
        msgs = ctx.messages
        name, attrs = self._consumer_attrs("receive", "receive", ctx.group, msgs)
        attrs["messaging.batch.message_count"] = len(msgs)
        links = [link for link in map(_creation_link, (m.properties for m in msgs)) if link]
        span = self._tracer.start_span(
            name,
            context.get_current(),
            kind=SpanKind.CONSUMER,
            attributes=attrs,
            links=links,
            start_time=ctx.started_ns,
        )
        span.end()


def _message_type(props: Mapping[str, str]) -> str:
    # the conventions' messaging.rocketmq.message.type values
    if props.get(TRAN_MSG) == "true":
        return "transaction"
    if DELAY in props or TIMER_DELIVER_MS in props:
        return "delay"
    if SHARDING_KEY in props:
        return "fifo"
    return "normal"
