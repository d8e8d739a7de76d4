"""Fixtures of the consumer tests: an embedded broker over loopback TCP, a producer, helpers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.embedded.config import BrokerConfig, parse_delay_levels

#: Every delay level at 100 ms, so retries (level 3 + reconsume times) come back fast.
FAST_DELAYS = parse_delay_levels(" ".join(["100ms"] * 18))

#: Consumer settings that keep tests quick.
FAST: dict[str, Any] = {
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 5.0,
}


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    config = BrokerConfig(default_queues=8, delay_levels=FAST_DELAYS)
    async with EmbeddedBroker(data_dir=tmp_path / "broker", config=config) as b:
        yield b


@pytest.fixture
async def producer(broker: EmbeddedBroker) -> AsyncIterator[Producer]:
    async with Producer(namesrv=broker.address, group="test-producer") as p:
        yield p


async def wait_for(
    cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition"
) -> float:
    """Poll ``cond`` every 10 ms; returns the seconds it took.

    Raises:
        AssertionError: not true within ``timeout``.
    """
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.01)
    return time.monotonic() - start


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    """Await ``check`` every 50 ms until it returns True.

    Raises:
        AssertionError: it did not within ``timeout``.
    """
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.05)
