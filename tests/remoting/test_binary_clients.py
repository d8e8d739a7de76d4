"""Every kind of client with ``serialize_type="rocketmq"`` against the embedded broker, which
answers each request in its dialect (docs/protocol.md §1.2), held pulls included: the scenarios of
``tests/interop/binary_scenarios.py``, which the Java broker runs too."""

from __future__ import annotations

import pytest

from aiorocket.embedded import EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests.interop import binary_scenarios as sc

pytestmark = pytest.mark.broker(default_queues=4, delay_levels=FAST_DELAYS)


async def test_producer_and_queue_reader(broker: EmbeddedBroker) -> None:
    await sc.producer_reader_scenario(broker.address, "BinSend", answers=sc.Answers.BINARY)


async def test_push_consumer_concurrent_with_a_retry(broker: EmbeddedBroker) -> None:
    await sc.push_scenario(broker.address, "BinPush", answers=sc.Answers.BINARY)


async def test_push_consumer_orderly(broker: EmbeddedBroker) -> None:
    await sc.orderly_scenario(broker.address, "BinOrderly", answers=sc.Answers.BINARY)


async def test_pull_consumer_and_admin(broker: EmbeddedBroker) -> None:
    group = await sc.pull_consumer_scenario(broker.address, "BinPull", answers=sc.Answers.BINARY)
    await sc.admin_scenario(broker.address, "BinAdmin", group, sc.Answers.BINARY)
