"""A namespaced App: its dead letters land where RocketMQ puts a namespaced group's (reading
by pull or by POP)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from aiorocket import App, QueueReader, ReceivedMessage
from aiorocket.embedded import EmbeddedBroker
from tests._harness.wait import wait_for
from tests.app.test_app import FAST
from tests.app.test_app_pop import POP


class Order(BaseModel):
    id: int


async def _read_all(reader: QueueReader, topic: str) -> list[ReceivedMessage]:
    out: list[ReceivedMessage] = []
    for mq in await reader.queues(topic):
        end = await reader.max_offset(mq)
        out += [m async for m in reader.read_range(mq, 0, end)]
    return out


@pytest.mark.parametrize("consumer", [dict(FAST, consume_from="first"), POP], ids=["pull", "pop"])
async def test_a_namespaced_apps_dead_letters_land_in_the_groups_dlq(
    broker: EmbeddedBroker, consumer: dict[str, Any]
) -> None:
    # Java's NamespaceUtil: the DLQ of group `billing` in namespace `tenant` is
    # %DLQ%tenant%billing (not tenant%%DLQ%billing); by pull or by POP alike.
    app = App(namesrv=broker.address, namespace="tenant", consumer=consumer)
    seen: list[Order] = []

    @app.subscriber("orders-ns", group="billing")
    async def bill(order: Order) -> None:
        seen.append(order)

    async with app:
        await app.publish("orders-ns", b'{"id": "not a number"}')
        await app.publish("orders-ns", Order(id=2))
        await wait_for(
            lambda: any(s.dead_lettered for s in app.statistics().values()) and bool(seen),
            timeout=10.0,
            what="a dead letter",
        )
    async with QueueReader(namesrv=broker.address) as reader:
        dead = await _read_all(reader, "%DLQ%tenant%billing")
    assert [m.body for m in dead] == [b'{"id": "not a number"}']
    assert dead[0].properties["DLQ_ORIGIN_TOPIC"] == "orders-ns"
