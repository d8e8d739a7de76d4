"""The app layer against the embedded broker over real loopback TCP."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from aiorocket import App, DeadLetter, ReceivedMessage, ReconsumeLater, RetryPolicy
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ClientClosedError, ConfigurationError
from tests._harness.wait import wait_for

# Short timers so tests do not wait for production intervals.
FAST = {
    "rebalance_interval": 0.5,
    "offset_persist_interval": 0.2,
    "heartbeat_interval": 1.0,
    "pull_suspend_timeout": 1.0,
    "shutdown_grace": 2.0,
}


class Order(BaseModel):
    id: int
    item: str


pytestmark = pytest.mark.broker(delay_levels=(0.1, 0.2, 0.3, 0.4, 0.5))


def make_app(broker: EmbeddedBroker) -> App:
    return App(namesrv=broker.address, consumer=dict(FAST, consume_from="first"))


async def test_typed_bodies_and_the_raw_message(broker: EmbeddedBroker) -> None:
    app = make_app(broker)
    got: dict[str, list[object]] = {"model": [], "text": [], "json": [], "bytes": []}

    @app.subscriber("typed", group="g-model", tags="model")
    async def on_model(order: Order, msg: ReceivedMessage) -> None:
        got["model"].append((order, msg.tags, msg.reconsume_times))

    @app.subscriber("typed", group="g-text", tags="text")
    async def on_text(body: str) -> None:
        got["text"].append(body)

    @app.subscriber("typed", group="g-json", tags="json")
    async def on_json(body: dict[str, int]) -> None:
        got["json"].append(body)

    @app.subscriber("typed", group="g-bytes", tags="bytes")
    async def on_bytes(body: bytes) -> None:
        got["bytes"].append(body)

    async with app:
        await app.publish("typed", Order(id=1, item="book"), tags="model")
        await app.publish("typed", "héllo", tags="text")
        await app.publish("typed", {"a": 1}, tags="json")
        await app.publish("typed", b"\x00\x01", tags="bytes")
        await wait_for(lambda: all(got.values()), timeout=10.0, what="all(got.values())")
    assert got["model"] == [(Order(id=1, item="book"), "model", 0)]
    assert got["text"] == ["héllo"]
    assert got["json"] == [{"a": 1}]
    assert got["bytes"] == [b"\x00\x01"]


async def test_invalid_body_goes_to_the_dlq_without_burning_retries(broker: EmbeddedBroker) -> None:
    app = make_app(broker)
    calls: list[Order] = []
    dlq: list[ReceivedMessage] = []

    @app.subscriber("orders-q", group="billing")
    async def bill(order: Order) -> None:
        calls.append(order)

    @app.subscriber("%DLQ%billing", group="dlq-reader")
    async def read_dlq(body: bytes, msg: ReceivedMessage) -> None:
        dlq.append(msg)

    async with app:
        await app.publish("orders-q", b'{"id": "not a number"}', tags="x")
        await app.publish("orders-q", Order(id=2, item="pen"))
        await wait_for(
            lambda: bool(dlq) and bool(calls), timeout=10.0, what="bool(dlq) and bool(calls)"
        )
        stats = app.statistics()
    assert calls == [Order(id=2, item="pen")]
    (dead,) = dlq
    assert dead.body == b'{"id": "not a number"}'
    assert "does not validate as Order" in dead.properties["AIOROCKET_DLQ_REASON"]
    assert dead.properties["DLQ_ORIGIN_TOPIC"] == "orders-q"
    assert dead.properties["TAGS"] == "x"
    bill_stats = next(v for k, v in stats.items() if k.startswith("billing:"))
    assert bill_stats.dead_lettered == 1
    assert bill_stats.failed == 0  # no retry was burnt


async def test_retry_policy_by_exception_class_and_reconsume_later(broker: EmbeddedBroker) -> None:
    app = make_app(broker)
    attempts: dict[str, list[int]] = {}
    dlq: list[str] = []

    class Fatal(Exception):
        pass

    @app.subscriber(
        "jobs", group="workers", retry=RetryPolicy(max_attempts=3, dead_letter_on=[Fatal])
    )
    async def work(body: str, msg: ReceivedMessage) -> None:
        attempts.setdefault(body, []).append(msg.reconsume_times)
        if body == "fatal":
            raise Fatal("cannot ever work")
        if body == "flaky" and msg.reconsume_times < 1:
            raise ReconsumeLater("later", delay_level=1)
        if body == "always":
            raise RuntimeError("boom")
        if body == "give-up":
            raise DeadLetter("no point")

    @app.subscriber("%DLQ%workers", group="dlq-reader")
    async def read_dlq(body: str) -> None:
        dlq.append(body)

    async with app:
        for body in ("ok", "flaky", "fatal", "always", "give-up"):
            await app.publish("jobs", body)
        await wait_for(
            lambda: len(dlq) == 3 and len(attempts.get("flaky", [])) == 2,
            timeout=20,
            what="len(dlq) == 3 and len(attempts.get('flaky', [])) == 2",
        )
    assert attempts["ok"] == [0]
    assert attempts["flaky"] == [0, 1]  # redelivered through %RETRY%workers
    assert attempts["fatal"] == [0]  # dead-lettered at once by exception class
    assert attempts["give-up"] == [0]
    assert attempts["always"] == [0, 1, 2]  # max_attempts=3
    assert sorted(dlq) == ["always", "fatal", "give-up"]


async def test_batch_handler(broker: EmbeddedBroker) -> None:
    app = App(namesrv=broker.address, consumer=dict(FAST, consume_from="first", pull_batch_size=32))
    batches: list[list[Order]] = []

    @app.subscriber("batched", group="bulk", batch=True, batch_size=16)
    async def load(orders: list[Order], msgs: list[ReceivedMessage]) -> None:
        assert len(orders) == len(msgs)
        batches.append(orders)

    async with app:
        await app.producer.send_batch(
            [
                __import__("aiorocket").Message("batched", Order(id=i, item="x").model_dump_json())
                for i in range(100)
            ]
        )
        await wait_for(
            lambda: sum(len(b) for b in batches) >= 100,
            timeout=10.0,
            what="sum((len(b) for b in batches)) >= 100",
        )
    assert sorted(o.id for b in batches for o in b) == list(range(100))
    assert max(len(b) for b in batches) > 1
    assert all(len(b) <= 16 for b in batches)


async def test_subscribers_sharing_a_group_share_one_consumer(broker: EmbeddedBroker) -> None:
    app = make_app(broker)
    seen: list[str] = []

    @app.subscriber("shared", group="one", tags="a")
    async def on_a(body: str) -> None:
        seen.append(f"a:{body}")

    @app.subscriber("shared", group="one", tags="b")
    async def on_b(body: str) -> None:
        seen.append(f"b:{body}")

    async with app:
        assert len(app.consumers()) == 1
        await app.publish("shared", "1", tags="a")
        await app.publish("shared", "2", tags="b")
        await app.publish("shared", "3", tags="c")  # nobody subscribed to c
        await wait_for(lambda: len(seen) == 2, timeout=10.0, what="len(seen) == 2")
        await asyncio.sleep(0.3)
    assert sorted(seen) == ["a:1", "b:2"]


def test_declaration_errors() -> None:
    app = App(namesrv="127.0.0.1:9876")

    with pytest.raises(ConfigurationError):

        @app.subscriber("t", group="g")  # type: ignore[type-var]
        def not_async(body: bytes) -> None: ...

    with pytest.raises(ConfigurationError):

        @app.subscriber("t", group="g")
        async def bad_type(body: set[int]) -> None: ...

    @app.subscriber("t", group="g", tags="a")
    async def first(body: bytes) -> None: ...

    with pytest.raises(ConfigurationError):

        @app.subscriber("t", group="g", tags="a || b")
        async def overlapping(body: bytes) -> None: ...

    with pytest.raises(ConfigurationError):

        @app.subscriber("u", group="g", orderly=True)
        async def mixed(body: bytes) -> None: ...

    with pytest.raises(ConfigurationError):
        App(namesrv="127.0.0.1:9876", no_such_setting=1)
    with pytest.raises(ClientClosedError):
        _ = app.producer


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOROCKET_NAMESRV", "10.1.2.3:9876")
    monkeypatch.setenv("AIOROCKET_PRODUCER_GROUP", "from-env")
    app = App()
    assert app.settings.namesrv == "10.1.2.3:9876"
    assert app.settings.producer_group == "from-env"
    assert App(namesrv="127.0.0.1:1").settings.namesrv == "127.0.0.1:1"
