"""The orders app of ``aiorocket demo`` (its source ships in the package, so that the demo runs
from an installed wheel too): a concurrent billing subscriber with retries and a dead-letter
queue, and an orderly fulfilment subscriber that checks each order's event sequence.

Run it on its own against a broker::

    aiorocket broker --port 9876 &
    python -m examples.orders
"""

from __future__ import annotations

import asyncio
import os

from aiorocket.cli._orders import (
    EVENTS,
    Ledger,
    OrderEvent,
    OrderStatus,
    StatusQuery,
    build_app,
)

__all__ = [
    "EVENTS",
    "Ledger",
    "OrderEvent",
    "OrderStatus",
    "StatusQuery",
    "app",
    "build_app",
    "main",
]

#: the app as ``aiorocket asyncapi examples.orders:app`` and ``aiorocket run`` find it
app = build_app(os.environ.get("AIOROCKET_NAMESRV", "127.0.0.1:9876"), Ledger())


async def main(namesrv: str = "127.0.0.1:9876", orders: int = 100) -> None:
    """Publish ``orders`` orders and wait until fulfilment has seen every event."""
    ledger = Ledger()
    app = build_app(namesrv, ledger, consumer={"consume_from": "first"})
    async with app:
        for order_id in range(1, orders + 1):
            for seq, event in enumerate(EVENTS):
                await app.publish(
                    "orders",
                    OrderEvent(order_id=order_id, seq=seq, event=event),
                    tags=event,
                    sharding_key=str(order_id),
                )
        while ledger.fulfilled_events < orders * len(EVENTS):  # noqa: ASYNC110 - a counter
            await asyncio.sleep(0.1)
        status = await app.request(
            "order-status", StatusQuery(order_id=1), reply_model=OrderStatus, timeout=10
        )
    print(f"fulfilled {ledger.fulfilled_events} events, {ledger.order_violations} out of order")
    print(f"asked for order 1's status: {status}")


if __name__ == "__main__":
    asyncio.run(main())
