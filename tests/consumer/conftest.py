"""Fixtures of the consumer tests: an embedded broker over loopback TCP, a producer, helpers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from aiorocket._producer.producer import Producer
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import MessageRecord, encode_message
from aiorocket._remoting import Connection
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


async def consume_directly(
    conn: Connection, group: str, topic: str, body: bytes
) -> RemotingCommand:
    """Send CONSUME_MESSAGE_DIRECTLY (309) for one stored record with ``body``, as a broker
    forwards an admin's request, and return the client's answer."""
    record = MessageRecord(
        topic=topic,
        body=body,
        queue_id=0,
        flag=0,
        queue_offset=99,
        commit_log_offset=1,
        sys_flag=0,
        born_timestamp=1,
        born_host="127.0.0.1",
        born_port=1,
        store_timestamp=2,
        store_host="127.0.0.1",
        store_port=2,
        reconsume_times=0,
        prepared_transaction_offset=0,
        properties={},
    )
    return await conn.request(
        RemotingCommand.request(
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            {"consumerGroup": group, "msgId": "X", "brokerName": "broker-a"},
            encode_message(record),
        )
    )
