"""One trace from an HTTP request to the handler: a FastAPI route (instrumented by
opentelemetry-instrumentation-fastapi) publishes through an :class:`~aiorocket.App` whose
subscriber handles the message, on the embedded broker."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.instrumentation.fastapi")

import httpx
from fastapi import FastAPI
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import aiorocket as rmq
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.integrations.opentelemetry import instrument_tracing
from tests._harness.wait import wait_for

CONSUMER = {"rebalance_interval": 0.5, "pull_suspend_timeout": 1.0, "consume_from": "first"}


def only(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    (span,) = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


async def test_request_send_and_handler_share_one_trace(
    broker: EmbeddedBroker, exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    tracer = provider.get_tracer("test")
    rocket = rmq.App(namesrv=broker.address, consumer=CONSUMER)
    handled: list[str] = []

    @rocket.subscriber("OtelOrders", group="otel-app")
    async def on_order(order: dict[str, Any], msg: rmq.ReceivedMessage) -> None:
        if order["id"] < 0:
            raise ValueError("a negative order")
        with tracer.start_as_current_span("charge card"):
            handled.append(msg.msg_id)

    api = FastAPI()

    @api.post("/orders")
    async def create(order: dict[str, Any]) -> dict[str, str]:
        result = await rocket.publish("OtelOrders", order)
        return {"msg_id": result.msg_id}

    FastAPIInstrumentor.instrument_app(api, tracer_provider=provider)
    instrument_tracing(rocket, tracer_provider=provider)
    transport = httpx.ASGITransport(app=api)
    async with rocket, httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        posted = await client.post("/orders", json={"id": 7})
        assert posted.status_code == 200, posted.text
        msg_id = posted.json()["msg_id"]
        await wait_for(lambda: handled == [msg_id], timeout=20, what="the handler")
        failed = await client.post("/orders", json={"id": -1})
        assert failed.status_code == 200, failed.text
        bad_id = failed.json()["msg_id"]
        await wait_for(
            lambda: any(
                s.name == "process OtelOrders"
                and (s.attributes or {}).get("messaging.message.id") == bad_id
                for s in exporter.get_finished_spans()
            ),
            timeout=20,
            what="the failed handler's span",
        )
    finished = exporter.get_finished_spans()
    request = next(
        s
        for s in finished
        if s.kind is SpanKind.SERVER
        and s.name == "POST /orders"
        and any(
            x.name == "send OtelOrders"
            and x.parent is not None
            and x.parent.span_id == s.context.span_id
            and (x.attributes or {}).get("messaging.message.id") == msg_id
            for x in finished
        )
    )
    send = next(
        s
        for s in finished
        if s.name == "send OtelOrders"
        and (s.attributes or {}).get("messaging.message.id") == msg_id
    )
    process = next(
        s
        for s in finished
        if s.name == "process OtelOrders"
        and (s.attributes or {}).get("messaging.message.id") == msg_id
    )
    charge = only(exporter, "charge card")
    trace_id = request.context.trace_id
    assert {send.context.trace_id, process.context.trace_id, charge.context.trace_id} == {trace_id}
    # request -> send -> process -> what the handler does
    assert send.parent is not None
    assert send.parent.span_id == request.context.span_id
    assert process.parent is not None
    assert process.parent.span_id == send.context.span_id
    assert charge.parent is not None
    assert charge.parent.span_id == process.context.span_id
    assert send.kind is SpanKind.PRODUCER
    assert process.kind is SpanKind.CONSUMER
    assert (process.attributes or {})["messaging.rocketmq.client_group"] == "otel-app"

    bad = [
        s
        for s in finished
        if s.name == "process OtelOrders"
        and (s.attributes or {}).get("messaging.message.id") == bad_id
    ]
    # the app caught the handler's error and asked for a retry: the call failed
    assert bad[0].status.status_code is StatusCode.ERROR
    assert (bad[0].attributes or {})["error.type"] == "FAILED"
    assert bad[0].context.trace_id != trace_id  # another request, another trace
