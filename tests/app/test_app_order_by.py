"""Orderly subscribers ordered by key (``order_by``) in the app layer, against the
embedded broker over loopback TCP."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest
from pydantic import BaseModel

from aiorocket import App, ReceivedMessage, ReconsumeLater
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ConfigurationError
from tests._harness.wait import wait_for
from tests.app.test_app_orderly import ORDERLY


class Step(BaseModel):
    account: str
    seq: int


async def test_keys_sharing_a_queue_run_concurrently_each_in_order(broker: EmbeddedBroker) -> None:
    """``order_by="sharding_key"``: the key ``publish`` got. 24 accounts over the topic's 8
    queues: each account's steps in order (a ``ReconsumeLater`` step comes again in place),
    one at a time, several accounts of a queue at once."""
    app = App(namesrv=broker.address, consumer=ORDERLY)
    seen: dict[str, list[int]] = defaultdict(list)
    running: dict[str, int] = defaultdict(int)
    per_queue: dict[int, int] = defaultdict(int)
    peak_key = peak_queue = 0

    @app.subscriber("accounts", group="ledger", orderly=True, order_by="sharding_key")
    async def post(step: Step, msg: ReceivedMessage) -> None:
        nonlocal peak_key, peak_queue
        if (step.account, step.seq) == ("acc-0", 3) and msg.reconsume_times == 0:
            raise ReconsumeLater("not yet")
        running[step.account] += 1
        per_queue[msg.queue_id] += 1
        peak_key = max(peak_key, running[step.account])
        peak_queue = max(peak_queue, per_queue[msg.queue_id])
        await asyncio.sleep(0.01)
        seen[step.account].append(step.seq)
        running[step.account] -= 1
        per_queue[msg.queue_id] -= 1

    accounts = [f"acc-{i}" for i in range(24)]
    async with app:
        for seq in range(10):
            for acc in accounts:
                await app.publish("accounts", Step(account=acc, seq=seq), sharding_key=acc)
        await wait_for(
            lambda: sum(map(len, seen.values())) == 240,
            timeout=30,
            what="sum(map(len, seen.values())) == 240",
        )
    assert all(seen[a] == list(range(10)) for a in accounts)
    assert peak_key == 1
    assert peak_queue > 1  # accounts of one queue side by side


async def test_order_by_needs_orderly_and_one_order_per_group() -> None:
    app = App(namesrv="127.0.0.1:9876")
    with pytest.raises(ConfigurationError, match="order_by needs orderly=True"):
        app.subscriber("t", group="g", order_by="sharding_key")

    def by_body(msg: ReceivedMessage) -> str | None:
        return None

    @app.subscriber("t1", group="g", orderly=True, order_by=by_body)
    async def one(body: bytes) -> None: ...

    with pytest.raises(ConfigurationError, match="mixes subscribers ordered by"):

        @app.subscriber("t2", group="g", orderly=True)
        async def two(body: bytes) -> None: ...
