"""A FastAPI service: POST /orders publishes an event; a subscriber in the same process handles it.

    pip install "aiorocketmq[fastapi,prometheus]"     # the fastapi extra brings uvicorn
    AIOROCKET_NAMESRV=127.0.0.1:9876 uvicorn examples.fastapi_service:api

GET /healthz, /readyz (503 naming a stuck queue) and /metrics (Prometheus) come with it.
"""

from __future__ import annotations

import os
from typing import Annotated

from fastapi import Depends, FastAPI
from pydantic import BaseModel

from aiorocket import App, Producer, ReceivedMessage
from aiorocket.integrations.fastapi import health_router, metrics_router, producer_dependency

__all__ = ["OrderIn", "ProducerDep", "api", "handled", "rocket"]


class OrderIn(BaseModel):
    """An order as the API receives it."""

    id: int
    item: str
    quantity: int = 1


rocket = App(namesrv=os.environ.get("AIOROCKET_NAMESRV", "127.0.0.1:9876"))
api = FastAPI(title="orders", lifespan=rocket.lifespan)
api.include_router(health_router(rocket))
api.include_router(metrics_router(rocket))
#: orders the subscriber handled, newest last (a stand-in for real work)
handled: list[tuple[OrderIn, str]] = []


ProducerDep = Annotated[Producer, Depends(producer_dependency(rocket))]


@api.post("/orders", status_code=202)
async def create_order(order: OrderIn, producer: ProducerDep) -> dict[str, str]:
    """Publish an ``created`` event keyed by the order id."""
    result = await rocket.publish(
        "orders", order, tags="created", keys=[str(order.id)], sharding_key=str(order.id)
    )
    return {"msg_id": result.msg_id, "producer": producer.client_id}


@rocket.subscriber("orders", group="order-service", tags="created")
async def on_created(order: OrderIn, msg: ReceivedMessage) -> None:
    """Handle a created order (here: remember it)."""
    handled.append((order, msg.msg_id))
