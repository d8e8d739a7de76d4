"""A FastAPI service: POST /orders publishes an event; a subscriber in the same process handles it.
GET /stock/{item} asks the stock worker (``examples/stock_worker.py``, another process) and
returns its answer (request/reply; 504 when no worker answers in time).

    pip install "aiorocketmq[fastapi,prometheus]"     # the fastapi extra brings uvicorn
    AIOROCKET_NAMESRV=127.0.0.1:9876 aiorocket run examples.stock_worker:app &
    AIOROCKET_NAMESRV=127.0.0.1:9876 uvicorn examples.fastapi_service:api

GET /healthz, /readyz (503 naming a stuck queue), /metrics (Prometheus) and the app's AsyncAPI
document (/asyncapi.json, /asyncapi.yaml) come with it.
"""

from __future__ import annotations

import os
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel

from aiorocket import App, Producer, ReceivedMessage
from aiorocket.errors import ReplyTimeoutError
from aiorocket.integrations.fastapi import (
    asyncapi_router,
    health_router,
    metrics_router,
    producer_dependency,
)
from examples.stock_worker import Stock, StockQuery

__all__ = ["OrderIn", "ProducerDep", "api", "handled", "rocket", "stock"]


class OrderIn(BaseModel):
    """An order as the API receives it."""

    id: int
    item: str
    quantity: int = 1


rocket = App(namesrv=os.environ.get("AIOROCKET_NAMESRV", "127.0.0.1:9876"))
api = FastAPI(title="orders", lifespan=rocket.lifespan)
api.include_router(health_router(rocket))
api.include_router(metrics_router(rocket))
api.include_router(asyncapi_router(rocket, title="orders service"))
rocket.publisher("orders", OrderIn, tags="created", description="A new order, from POST /orders.")
rocket.publisher("stock-queries", StockQuery, reply=Stock, description="GET /stock/{item} asks.")
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


@api.get("/stock/{item}")
async def stock(item: str) -> Stock:
    """Ask the stock worker how many ``item`` there are; 504 if no worker answers in 5 s."""
    try:
        answer: Stock = await rocket.request(
            "stock-queries", StockQuery(item=item), reply_model=Stock, timeout=5
        )
    except ReplyTimeoutError as exc:
        raise HTTPException(status_code=504, detail=str(exc)) from None
    return answer
