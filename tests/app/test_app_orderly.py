"""Orderly subscribers of the app layer against the embedded broker over loopback TCP."""

from __future__ import annotations

import time
from collections import defaultdict

from pydantic import BaseModel

from aiorocket import App, DeadLetter, ReceivedMessage, ReconsumeLater, RetryPolicy
from aiorocket.embedded import EmbeddedBroker
from tests._harness.wait import wait_for
from tests.app.test_app import FAST

ORDERLY = {
    **FAST,
    "consume_from": "first",
    "suspend_delay": 0.1,
    "lock_renew_interval": 0.5,
    "lock_expiry": 2.0,
}


class Event(BaseModel):
    order: int
    seq: int


async def test_orderly_subscriber_keeps_order_through_retries_and_dead_letters(
    broker: EmbeddedBroker,
) -> None:
    app = App(namesrv=broker.address, consumer=ORDERLY)
    seen: dict[int, list[tuple[int, int]]] = defaultdict(list)
    times: dict[tuple[int, int], list[float]] = defaultdict(list)
    dlq: list[ReceivedMessage] = []

    @app.subscriber("order-events", group="fulfil", orderly=True, retry=RetryPolicy(max_attempts=3))
    async def fulfil(event: Event, msg: ReceivedMessage) -> None:
        seen[event.order].append((event.seq, msg.reconsume_times))
        times[event.order, event.seq].append(time.monotonic())
        if (event.order, event.seq) == (1, 2) and msg.reconsume_times == 0:
            raise ReconsumeLater("not yet")
        if (event.order, event.seq) == (2, 1) and msg.reconsume_times < 2:
            raise RuntimeError("flaky twice")
        if (event.order, event.seq) == (3, 3):
            raise RuntimeError("never works")  # gives up after 3 attempts
        if (event.order, event.seq) == (4, 0):
            raise DeadLetter("refused")

    @app.subscriber("%DLQ%fulfil", group="fulfil-dlq")
    async def read_dlq(body: bytes, msg: ReceivedMessage) -> None:
        dlq.append(msg)

    async with app:
        for seq in range(6):
            for order in range(5):
                if (order, seq) == (0, 3):
                    body: Event | bytes = b'{"order": "zero"}'  # invalid: dead-lettered
                else:
                    body = Event(order=order, seq=seq)
                await app.publish("order-events", body, sharding_key=f"order-{order}")
        await wait_for(
            lambda: sum(len(v) for v in seen.values()) >= 33 and len(dlq) == 3,
            timeout=10.0,
            what="sum((len(v) for v in seen.values())) >= 33 and len(dlq) == 3",
        )
        stats = app.statistics()

    seqs = seen.__getitem__
    assert [s for s, _ in seqs(0)] == [0, 1, 2, 4, 5]  # 3 was not valid
    assert seqs(1) == [(0, 0), (1, 0), (2, 0), (2, 1), (3, 0), (4, 0), (5, 0)]
    assert seqs(2) == [(0, 0), (1, 0), (1, 1), (1, 2), (2, 0), (3, 0), (4, 0), (5, 0)]
    assert seqs(3) == [(0, 0), (1, 0), (2, 0), (3, 0), (3, 1), (3, 2), (4, 0), (5, 0)]
    assert [s for s, _ in seqs(4)] == [0, 1, 2, 3, 4, 5]
    # A suspended message comes back after the suspend delay, in place.
    first, again = times[1, 2]
    assert again - first >= 0.09
    assert sorted(m.properties["DLQ_ORIGIN_TOPIC"] for m in dlq) == ["order-events"] * 3
    reasons = sorted(m.properties["AIOROCKET_DLQ_REASON"] for m in dlq)
    assert any("never works" in r for r in reasons)
    assert any("refused" in r for r in reasons)
    assert any("invalid body" in r for r in reasons)
    fulfil_stats = next(v for k, v in stats.items() if k.startswith("fulfil:"))
    assert fulfil_stats.dead_lettered == 3
    assert fulfil_stats.failed == 1 + 2 + 2


async def test_orderly_reconsume_later_delay_level_sets_the_suspend_time(
    broker: EmbeddedBroker,
) -> None:
    app = App(namesrv=broker.address, consumer=ORDERLY)
    times: list[float] = []

    @app.subscriber("ord-delay", group="ord-delay", orderly=True)
    async def handle(body: str, msg: ReceivedMessage) -> None:
        times.append(time.monotonic())
        if msg.reconsume_times == 0:
            raise ReconsumeLater("in a second", delay_level=1)

    async with app:
        await app.publish("ord-delay", "x", sharding_key="k")
        await wait_for(lambda: len(times) == 2, timeout=10, what="len(times) == 2")
    assert times[1] - times[0] >= 0.99  # delay level 1: one second, not the 0.1 s default
