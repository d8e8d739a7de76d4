"""A worker that answers requests: ``aiorocket run examples.stock_worker:app``.

Its ``stock`` subscriber returns a value, so each request on ``stock-queries`` (from
``App.request``, ``Producer.request`` or a Java ``DefaultMQProducer.request``) gets that
value as its reply; ``examples/fastapi_service.py``'s ``GET /stock/{item}`` asks it.
"""

from __future__ import annotations

from pydantic import BaseModel

from aiorocket import App

__all__ = ["STOCK", "Stock", "StockQuery", "app"]


class StockQuery(BaseModel):
    """How many of an item are in stock?"""

    item: str


class Stock(BaseModel):
    """The answer to a StockQuery."""

    item: str
    available: int


#: the worker's stand-in for a warehouse database
STOCK = {"lamp": 3, "chair": 12}

app = App()
app.publisher("stock-queries", StockQuery, reply=Stock, description="Asks the stock worker.")


@app.subscriber("stock-queries", group="stock-worker")
async def stock(query: StockQuery) -> Stock:
    """Answer a stock query from the warehouse table."""
    return Stock(item=query.item, available=STOCK.get(query.item, 0))
