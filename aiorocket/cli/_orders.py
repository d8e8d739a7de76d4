"""The orders app of ``aiorocket demo``: concurrent and orderly subscribers, retries, a DLQ.

* ``billing`` (concurrent) bills every ``created`` event. A few orders fail once or twice on
  purpose (a "payment gateway timeout") and succeed on redelivery through ``%RETRY%billing``;
  one poison order always fails and ends in ``%DLQ%billing`` after three attempts.
* ``fulfilment`` (orderly) receives every event of an order in sequence (created → paid →
  shipped), because the producer sends all events of one order with the order id as sharding
  key; it records any event that arrives out of sequence.
* ``status`` answers requests on ``order-status`` (request/reply): the status of an order as
  the ledger has it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from pydantic import BaseModel

from aiorocket import App, ReceivedMessage, ReconsumeLater, RetryPolicy

__all__ = [
    "EVENTS",
    "POISON_ORDER",
    "Ledger",
    "OrderEvent",
    "OrderStatus",
    "PaymentGatewayTimeout",
    "PoisonOrder",
    "StatusQuery",
    "build_app",
]

EVENTS = ("created", "paid", "shipped")
POISON_ORDER = 13


class OrderEvent(BaseModel):
    """One event in an order's life."""

    order_id: int
    seq: int  # 0 created, 1 paid, 2 shipped
    event: str
    amount_cents: int = 0


class StatusQuery(BaseModel):
    """A request for an order's status."""

    order_id: int


class OrderStatus(BaseModel):
    """The answer to a StatusQuery."""

    order_id: int
    billed: bool
    events_fulfilled: int


class PaymentGatewayTimeout(Exception):
    """A transient failure: retried through %RETRY%."""


class PoisonOrder(Exception):
    """A permanent failure: the retry policy sends the message to the DLQ."""


@dataclass
class Ledger:
    """What the subscribers saw, for the demo's summary."""

    billed: set[int] = field(default_factory=set)
    bill_attempts: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    next_seq: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    fulfilled_events: int = 0
    order_violations: int = 0
    redelivered_in_order: int = 0
    flaky_orders: frozenset[int] = frozenset()


def build_app(namesrv: str, ledger: Ledger, **settings: object) -> App:
    """Build the orders app against ``namesrv``, recording into ``ledger``."""
    app = App(namesrv=namesrv, **settings)
    app.publisher(
        "orders",
        OrderEvent,
        tags="created || paid || shipped",
        description="Every event of an order, sent with the order id as sharding key.",
    )
    app.publisher(
        "order-status",
        StatusQuery,
        reply=OrderStatus,
        description="Asks for an order's status; the status subscriber answers.",
    )

    @app.subscriber(
        "orders",
        group="billing",
        tags="created",
        # PoisonOrder is the demo's expected failure: one line when it is dead-lettered, not a
        # traceback that reads as a crash.
        retry=RetryPolicy(max_attempts=3, delay_level=1, expected=(PoisonOrder,)),
    )
    async def bill(event: OrderEvent, msg: ReceivedMessage) -> None:
        """Bill a created order; a flaky order fails twice first, the poison one always."""
        ledger.bill_attempts[event.order_id] += 1
        if event.order_id == POISON_ORDER:
            raise PoisonOrder(f"order {event.order_id} can never be billed")
        if event.order_id in ledger.flaky_orders and msg.reconsume_times < 2:
            raise ReconsumeLater("payment gateway timeout", delay_level=1)
        ledger.billed.add(event.order_id)

    @app.subscriber("orders", group="fulfilment", orderly=True)
    async def fulfil(event: OrderEvent) -> None:
        """Check that each order's events arrive in sequence."""
        expected = ledger.next_seq[event.order_id]
        if event.seq == expected:
            ledger.next_seq[event.order_id] = expected + 1
            ledger.fulfilled_events += 1
        elif event.seq < expected:
            ledger.redelivered_in_order += 1  # a replay after a hand-over: allowed, never a skip
        else:
            ledger.order_violations += 1

    @app.subscriber("order-status", group="status")
    async def status(query: StatusQuery) -> OrderStatus:
        """Answer a status request from the ledger."""
        return OrderStatus(
            order_id=query.order_id,
            billed=query.order_id in ledger.billed,
            events_fulfilled=ledger.next_seq[query.order_id],
        )

    return app
