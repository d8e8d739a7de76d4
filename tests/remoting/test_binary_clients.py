"""Every kind of client with ``serialize_type="rocketmq"`` against the embedded broker, which
answers each request in its dialect (REMOTING.md §1.2), held pulls included: the scenarios of
``tests/interop/binary_scenarios.py``, which the Java broker runs too."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocket.embedded import BrokerConfig, EmbeddedBroker, parse_delay_levels
from tests.interop import binary_scenarios as sc


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    config = BrokerConfig(
        default_queues=4, delay_levels=parse_delay_levels(" ".join(["100ms"] * 18))
    )
    async with EmbeddedBroker(data_dir=tmp_path / "broker", config=config) as b:
        yield b


async def test_producer_and_queue_reader(broker: EmbeddedBroker) -> None:
    await sc.producer_reader_scenario(broker.address, "BinSend", answers=sc.Answers.BINARY)


async def test_push_consumer_concurrent_with_a_retry(broker: EmbeddedBroker) -> None:
    await sc.push_scenario(broker.address, "BinPush", answers=sc.Answers.BINARY)


async def test_push_consumer_orderly(broker: EmbeddedBroker) -> None:
    await sc.orderly_scenario(broker.address, "BinOrderly", answers=sc.Answers.BINARY)


async def test_pull_consumer_and_admin(broker: EmbeddedBroker) -> None:
    group = await sc.pull_consumer_scenario(broker.address, "BinPull", answers=sc.Answers.BINARY)
    await sc.admin_scenario(broker.address, "BinAdmin", group, sc.Answers.BINARY)
