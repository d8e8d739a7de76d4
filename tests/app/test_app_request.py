"""App request/reply against the embedded broker: ``App.request`` and subscribers whose
handler returns a value; the FastAPI example's route asking the stock worker."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from aiorocket import Admin, App, Message, ReceivedMessage
from aiorocket.app.decoding import BodyDecodeError
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ReplyTimeoutError
from tests._harness.wait import wait_for

CONSUMER: dict[str, Any] = {
    "rebalance_interval": 0.5,
    "pull_suspend_timeout": 0.5,
    "consume_from": "first",
    "shutdown_grace": 1.0,
}


class Quote(BaseModel):
    item: str


class Price(BaseModel):
    item: str
    cents: int


@pytest.fixture
async def broker(broker: EmbeddedBroker) -> EmbeddedBroker:
    async with Admin(namesrv=broker.address) as admin:
        for topic in ("quotes", "silent", "stock-queries"):
            await admin.create_topic(topic, queues=2)
    return broker


def pricing_app(namesrv: str, seen: list[tuple[str, bool]]) -> App:
    app = App(namesrv=namesrv, **CONSUMER)

    @app.subscriber("quotes", group="pricing")
    async def price(quote: Quote, msg: ReceivedMessage) -> Price:
        seen.append((quote.item, "CORRELATION_ID" in msg.properties))
        return Price(item=quote.item, cents=len(quote.item) * 100)

    @app.subscriber("silent", group="silent")
    async def ignore(body: bytes) -> None:
        seen.append((body.decode(), False))

    return app


async def test_a_returning_handler_answers_app_request(broker: EmbeddedBroker) -> None:
    seen: list[tuple[str, bool]] = []
    async with pricing_app(broker.address, seen) as app:
        price = await app.request("quotes", Quote(item="lamp"), reply_model=Price, timeout=10)
        assert price == Price(item="lamp", cents=400)
        raw = await app.request("quotes", {"item": "desk"}, timeout=10)  # bytes by default
        assert raw == b'{"item":"desk","cents":400}'
        with pytest.raises(BodyDecodeError, match="not valid JSON for list"):
            await app.request("quotes", Quote(item="x"), reply_model=list[int], timeout=10)
        # a plain publish is handled as before: the returned value goes nowhere
        await app.publish("quotes", Quote(item="sofa"))
        await wait_for(lambda: ("sofa", False) in seen, timeout=10, what="the publish")
        assert app.producer.unmatched_replies == 0
        assert app.statistics()["pricing:quotes:price"].handled == 4


async def test_a_handler_returning_nothing_leaves_the_request_unanswered(
    broker: EmbeddedBroker,
) -> None:
    seen: list[tuple[str, bool]] = []
    async with pricing_app(broker.address, seen) as app:
        with pytest.raises(ReplyTimeoutError, match="silent"):
            await app.request("silent", "hello?", timeout=1.5)
    assert seen == [("hello?", False)]


async def test_a_java_style_request_from_a_producer_gets_the_typed_answer(
    broker: EmbeddedBroker,
) -> None:
    async with pricing_app(broker.address, []) as app:
        reply = await app.producer.request(Message("quotes", b'{"item":"ab"}'), timeout=10)
    assert Price.model_validate_json(reply.body) == Price(item="ab", cents=200)


async def test_the_fastapi_route_asks_the_stock_worker(
    broker: EmbeddedBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOROCKET_NAMESRV", broker.address)
    monkeypatch.setenv("AIOROCKET_CONSUMER", '{"rebalance_interval": 0.5}')
    import examples.fastapi_service as service
    import examples.stock_worker as worker

    worker = importlib.reload(worker)
    service = importlib.reload(service)
    transport = httpx.ASGITransport(app=service.api)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        service.api.router.lifespan_context(service.api),
    ):
        async with worker.app:
            answer = await client.get("/stock/lamp")
            assert answer.status_code == 200, answer.text
            assert answer.json() == {"item": "lamp", "available": 3}
        # the worker is gone: nobody answers
        late = await client.get("/stock/chair", timeout=30)
        assert late.status_code == 504
        assert "no reply came within 5 s" in late.json()["detail"]
        doc = (await client.get("/asyncapi.json")).json()
        assert doc["info"]["title"] == "orders service"
        assert "reply" in doc["operations"]["publish_stock-queries"]
        assert (await client.get("/asyncapi.yaml")).text.startswith('asyncapi: "3.0.0"')
