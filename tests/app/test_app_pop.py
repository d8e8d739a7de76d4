"""An App whose subscribers read by POP (``consumer={"consume_mode": "pop"}``): two apps
sharing one group on a one-queue topic (its dead letters: ``test_app_namespace.py``)."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from aiorocket import Admin, App
from aiorocket.embedded import EmbeddedBroker
from tests._harness.wait import wait_for
from tests.app.test_app import FAST
from tests.consumer.test_push_pop import POP as PUSH_POP

#: the push consumer tests' POP settings, with the app tests' fast rebalance
POP = dict(FAST, **PUSH_POP)


class Order(BaseModel):
    id: int


async def test_pop_subscribers_share_a_one_queue_topic(broker: EmbeddedBroker) -> None:
    # One queue, two apps in one group: with pull one of them would hold the queue alone.
    async with Admin(namesrv=broker.address) as admin:
        await admin.create_topic("orders-pop", queues=1)
    seen: dict[str, list[int]] = {"a": [], "b": []}
    apps = []
    for name in ("a", "b"):
        app = App(namesrv=broker.address, consumer=dict(POP, pull_batch_size=4))

        @app.subscriber("orders-pop", group="billing-pop")
        async def bill(order: Order, name: str = name) -> None:
            seen[name].append(order.id)
            await asyncio.sleep(0.005)

        apps.append(app)
    async with apps[0], apps[1]:
        for i in range(200):
            await apps[0].publish("orders-pop", Order(id=i))
            if i % 10 == 9:
                await asyncio.sleep(0.02)
        await wait_for(
            lambda: len(seen["a"]) + len(seen["b"]) >= 200, timeout=20, what="200 orders"
        )
    assert sorted(seen["a"] + seen["b"]) == list(range(200))
    assert seen["a"]
    assert seen["b"]
