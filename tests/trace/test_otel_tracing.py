"""OpenTelemetry tracing (``instrument_tracing``) on the embedded broker: span names, kinds and
attributes, the trace context carried in the message, batches' links, failures, pull-style
receives, and nothing at all when not instrumented."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import aiorocket as rmq
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.integrations.opentelemetry import instrument_tracing
from tests._harness.broker import FAST_DELAYS
from tests._harness.wait import wait_for
from tests.consumer.conftest import FAST

TOPIC = "OtelTopic"
POP: dict[str, Any] = {
    "consume_mode": "pop",
    "invisible_duration": 2.0,
    "pull_suspend_timeout": 1.0,
    "pull_timeout": 3.0,
}


pytestmark = pytest.mark.broker(
    default_queues=2, delay_levels=FAST_DELAYS, pop_revive_interval=0.05
)


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@pytest.mark.parametrize(
    "mode",
    [{}, {"orderly": True}, {"orderly": True, "order_by": "sharding_key"}, POP],
    ids=["concurrent", "orderly", "orderly-by-key", "pop"],
)
async def test_send_and_process_share_a_trace(
    broker: EmbeddedBroker,
    exporter: InMemorySpanExporter,
    provider: TracerProvider,
    mode: dict[str, Any],
) -> None:
    tracer = provider.get_tracer("test")
    seen: list[tuple[rmq.ReceivedMessage, trace.SpanContext]] = []
    consumer = rmq.PushConsumer(
        group="otel-cg", namesrv=broker.address, consume_from="first", **{**FAST, **mode}
    )
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: Any) -> None:
        # the handler runs with its process span current: its own spans are children
        with tracer.start_as_current_span("inside handler"):
            seen.append((msgs[0], trace.get_current_span().get_span_context()))

    instrument_tracing(consumer, tracer_provider=provider)
    producer = rmq.Producer(namesrv=broker.address, group="otel-pg")
    instrument_tracing(producer, tracer_provider=provider)
    async with producer, consumer:
        with tracer.start_as_current_span("request") as request:
            result = await producer.send(
                rmq.Message(TOPIC, b"hi", tags="TagA", keys=["k1", "k2"]), sharding_key="s1"
            )
        await wait_for(lambda: seen, timeout=20, what="the handler call")
    await wait_for(lambda: spans(exporter, f"process {TOPIC}"), timeout=5, what="process span")
    (send,) = spans(exporter, f"send {TOPIC}")
    (process,) = spans(exporter, f"process {TOPIC}")
    (inside,) = spans(exporter, "inside handler")
    trace_id = request.get_span_context().trace_id
    assert {send.context.trace_id, process.context.trace_id, inside.context.trace_id} == {trace_id}
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert process.parent is not None
    assert process.parent.span_id == send.context.span_id
    assert inside.parent is not None
    assert inside.parent.span_id == process.context.span_id
    assert [link.context.span_id for link in process.links] == [send.context.span_id]
    assert (send.kind, process.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert send.status.status_code is StatusCode.UNSET
    assert process.status.status_code is StatusCode.UNSET

    msg = seen[0][0]
    # W3C trace context in the user properties: the send span is the creation context
    version, tid, sid, _flags = msg.properties["traceparent"].split("-")
    assert (version, tid, sid) == ("00", f"{trace_id:032x}", f"{send.context.span_id:016x}")
    a = attrs(send)
    assert a["messaging.system"] == "rocketmq"
    assert a["messaging.destination.name"] == TOPIC
    assert a["messaging.operation.type"] == "send"
    assert a["messaging.operation"] == "publish"
    assert a["messaging.rocketmq.client_group"] == "otel-pg"
    assert a["messaging.message.id"] == result.msg_id
    assert a["messaging.rocketmq.message.keys"] == ("k1", "k2")
    assert a["messaging.rocketmq.message.tag"] == "TagA"
    assert a["messaging.rocketmq.message.type"] == "fifo"
    assert a["messaging.rocketmq.message.group"] == "s1"
    assert "messaging.batch.message_count" not in a
    assert "messaging.rocketmq.namespace" not in a
    b = attrs(process)
    assert b["messaging.system"] == "rocketmq"
    assert b["messaging.operation.type"] == "process"
    assert b["messaging.rocketmq.client_group"] == "otel-cg"
    assert b["messaging.consumer.group.name"] == "otel-cg"
    assert b["messaging.rocketmq.consumption_model"] == "clustering"
    assert b["messaging.message.id"] == result.msg_id == msg.msg_id
    assert b["messaging.rocketmq.message.tag"] == "TagA"
    assert b["messaging.rocketmq.message.keys"] == ("k1", "k2")


async def test_batch_send_creates_one_context_per_message(
    broker: EmbeddedBroker, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    got: list[rmq.ReceivedMessage] = []
    consumer = rmq.PushConsumer(
        group="otel-batch-cg",
        namesrv=broker.address,
        consume_from="first",
        consume_batch_size=8,
        **FAST,
    )
    consumer.subscribe(TOPIC)
    calls: list[int] = []

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        calls.append(len(msgs))
        got.extend(msgs)

    instrument_tracing(consumer, tracer_provider=provider)
    producer = rmq.Producer(namesrv=broker.address, group="otel-batch-pg")
    instrument_tracing(producer, tracer_provider=provider)
    async with producer:
        results = await producer.send_batch(
            [rmq.Message(TOPIC, f"b{i}".encode(), keys=[f"k{i}"]) for i in range(3)],
            queue=rmq.MessageQueue(TOPIC, "broker-a", 0),
        )
    creates = spans(exporter, f"create {TOPIC}")
    (send,) = spans(exporter, f"send {TOPIC}")
    assert len(creates) == 3
    assert send.kind is SpanKind.CLIENT
    assert all(c.kind is SpanKind.PRODUCER for c in creates)
    assert attrs(send)["messaging.batch.message_count"] == 3
    assert "messaging.message.id" not in attrs(send)
    assert {link.context.span_id for link in send.links} == {c.context.span_id for c in creates}
    ids = results[0].msg_id.split(",")
    assert [attrs(c)["messaging.message.id"] for c in creates] == ids
    async with consumer:
        await wait_for(lambda: len(got) == 3, timeout=20, what="the batch")
    by_id = {attrs(c)["messaging.message.id"]: c for c in creates}
    for m in got:
        create = by_id[m.msg_id]
        assert m.properties["traceparent"].split("-")[2] == f"{create.context.span_id:016x}"
    processes = spans(exporter, f"process {TOPIC}")
    assert sum(len(p.links) for p in processes) == 3
    linked = {link.context.span_id for p in processes for link in p.links}
    assert linked == {c.context.span_id for c in creates}
    for p in processes:
        n = len(p.links)
        if n > 1:
            assert attrs(p)["messaging.batch.message_count"] == n
            assert p.parent is None  # a batch has no single parent: links only


async def test_failed_handler_ends_its_span_with_an_error(
    broker: EmbeddedBroker, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    consumer = rmq.PushConsumer(
        group="otel-fail-cg", namesrv=broker.address, consume_from="first", **FAST
    )
    consumer.subscribe(TOPIC)
    attempts: list[int] = []

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        attempts.append(msgs[0].reconsume_times)
        if msgs[0].reconsume_times == 0:
            raise ValueError("boom")

    instrument_tracing(consumer, tracer_provider=provider)
    async with rmq.Producer(namesrv=broker.address, group="otel-fail-pg") as producer:
        await producer.send(rmq.Message(TOPIC, b"x"))
    async with consumer:
        await wait_for(lambda: len(attempts) == 2, timeout=20, what="the retry")
    await wait_for(lambda: len(spans(exporter, f"process {TOPIC}")) == 2, timeout=5, what="spans")
    failed, ok = spans(exporter, f"process {TOPIC}")
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs(failed)["error.type"] == "builtins.ValueError"
    (event,) = failed.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.message"] == "boom"
    assert ok.status.status_code is StatusCode.UNSET
    assert "error.type" not in attrs(ok)


async def test_pull_and_simple_consumers_record_receive_spans(
    broker: EmbeddedBroker, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    producer = rmq.Producer(namesrv=broker.address, group="otel-recv-pg")
    instrument_tracing(producer, tracer_provider=provider)
    async with producer:
        sent = [await producer.send(rmq.Message(TOPIC, f"r{i}".encode())) for i in range(4)]
    send_spans = {attrs(s)["messaging.message.id"]: s for s in spans(exporter, f"send {TOPIC}")}

    pull = rmq.PullConsumer(group="otel-pull", namesrv=broker.address, consume_from="first")
    pull.subscribe(TOPIC)
    instrument_tracing(pull, tracer_provider=provider)
    polled: list[rmq.ReceivedMessage] = []
    async with pull:
        while len(polled) < 4:
            polled.extend(await pull.poll(10, timeout=10))
    receives = spans(exporter, f"receive {TOPIC}")
    assert receives
    assert all(r.kind is SpanKind.CONSUMER for r in receives)
    assert sum(attrs(r)["messaging.batch.message_count"] for r in receives) == 4
    assert {link.context.span_id for r in receives for link in r.links} == {
        s.context.span_id for s in send_spans.values()
    }
    assert all(attrs(r)["messaging.operation.type"] == "receive" for r in receives)
    exporter.clear()

    simple = rmq.SimpleConsumer(
        group="otel-simple", namesrv=broker.address, consume_from="first", await_duration=2.0
    )
    simple.subscribe(TOPIC)
    instrument_tracing(simple, tracer_provider=provider)
    popped: list[rmq.PoppedMessage] = []
    async with simple:
        for _ in range(20):
            got = await simple.receive(16)
            popped.extend(got)
            if got:
                await simple.ack_all(got)
            if len(popped) >= 4:
                break
    assert sorted(m.msg_id for m in popped) == sorted(r.msg_id for r in sent)
    receives = spans(exporter, f"receive {TOPIC}")
    assert sum(len(r.links) for r in receives) == 4
    assert all(r.start_time is not None and r.end_time is not None for r in receives)
    assert all(attrs(r)["messaging.rocketmq.client_group"] == "otel-simple" for r in receives)


async def test_not_instrumented_records_and_injects_nothing(
    broker: EmbeddedBroker, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    previous = trace.get_tracer_provider()
    got: list[rmq.ReceivedMessage] = []
    consumer = rmq.PushConsumer(
        group="otel-off-cg", namesrv=broker.address, consume_from="first", **FAST
    )
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(msgs)

    tracer = provider.get_tracer("test")
    async with rmq.Producer(namesrv=broker.address, group="otel-off-pg") as producer, consumer:
        with tracer.start_as_current_span("request"):
            await producer.send(rmq.Message(TOPIC, b"quiet"))
            await producer.send_batch([rmq.Message(TOPIC, b"q1"), rmq.Message(TOPIC, b"q2")])
        await wait_for(lambda: len(got) == 3, timeout=20, what="the messages")
    assert [s.name for s in exporter.get_finished_spans()] == ["request"]
    assert all("traceparent" not in m.properties for m in got)
    assert trace.get_tracer_provider() is previous


async def test_a_message_carrying_a_context_keeps_it(
    broker: EmbeddedBroker, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    custom = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    producer = rmq.Producer(namesrv=broker.address, group="otel-custom-pg", namespace="ns1")
    instrument_tracing(producer, tracer_provider=provider)
    pull = rmq.PullConsumer(
        group="otel-custom", namesrv=broker.address, consume_from="first", namespace="ns1"
    )
    pull.subscribe(TOPIC)
    async with producer, pull:
        await producer.send(rmq.Message(TOPIC, b"c", properties={"traceparent": custom}))
        polled: list[rmq.ReceivedMessage] = []
        while not polled:
            polled = await pull.poll(1, timeout=10)
    assert polled[0].properties["traceparent"] == custom
    (send,) = spans(exporter, f"send {TOPIC}")
    assert [f"{link.context.span_id:016x}" for link in send.links] == ["b7ad6b7169203331"]
    assert attrs(send)["messaging.rocketmq.namespace"] == "ns1"
    assert attrs(send)["messaging.rocketmq.client_group"] == "otel-custom-pg"


async def test_instrument_tracing_refuses_other_objects() -> None:
    with pytest.raises(TypeError):
        instrument_tracing(object())  # type: ignore[arg-type]
    await asyncio.sleep(0)
