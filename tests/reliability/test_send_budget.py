"""``send_timeout`` is the budget of a whole ``send_batch`` call, as of a whole ``send``
(retries included, Java ``sendMsgTimeout``), however many sub-batches the size cap makes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aiorocket import Message, Producer
from aiorocket.errors import RequestTimeoutError

from .helpers import broker_behind_proxy


async def test_send_batch_keeps_to_one_budget_over_its_sub_batches(tmp_path: Path) -> None:
    async with (
        broker_behind_proxy(tmp_path) as (broker, proxy),
        Producer(
            namesrv=broker.address, group="bp", send_timeout=1.0, max_message_size=1024
        ) as producer,
    ):
        msgs = [Message("Budget", b"x" * 400) for _ in range(10)]  # 5 sub-batches of 2
        assert len(await producer.send_batch(msgs)) == 5
        proxy.delay(0.15)  # each sub-batch now takes at least 0.3 s: 1.5 s for the five
        t0 = time.monotonic()
        with pytest.raises(RequestTimeoutError) as caught:
            await producer.send_batch(msgs)
        took = time.monotonic() - t0
    assert took <= 1.0 + 0.5, f"send_batch took {took:.2f} s for a 1 s budget"
    assert "sub-batches were stored before this one" in "".join(caught.value.__notes__)
