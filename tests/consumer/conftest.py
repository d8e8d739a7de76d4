"""Fixtures of the consumer tests: the broker's default configuration (8 queues, fast
retries), a producer, helpers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import encode_message
from aiorocket._remoting import Connection
from aiorocket.embedded.broker import EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.protocol import message_record

#: Consumer settings that keep tests quick.
FAST: dict[str, Any] = {
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 5.0,
}


#: The ``broker`` marker of this directory's tests that have none of their own.
CONSUMER_BROKER = pytest.mark.broker(default_queues=8, delay_levels=FAST_DELAYS)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark this directory's tests without a ``broker`` marker of their own (test, class or
    module) with :data:`CONSUMER_BROKER`; a module's marker replaces it whole."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and item.get_closest_marker("broker") is None:
            item.add_marker(CONSUMER_BROKER)


@pytest.fixture
async def producer(broker: EmbeddedBroker) -> AsyncIterator[Producer]:
    """A producer whose first send of a topic creates it with 8 queues, as the broker's own
    ``default_queues`` (Java ``defaultTopicQueueNums``)."""
    async with Producer(
        namesrv=broker.address, group="test-producer", default_topic_queue_nums=8
    ) as p:
        yield p


async def create_topic(broker: EmbeddedBroker, topic: str, queues: int = 8) -> None:
    """Create ``topic`` as an operator does (``mqadmin updateTopic``), for consumers that start
    before anything is sent: a route lookup creates nothing (docs/protocol.md §7.5)."""
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic(topic, queues=queues)


def push_consumer(
    broker: EmbeddedBroker, group: str, topic: str, **settings: Any
) -> rmq.PushConsumer:
    """A push consumer of ``group`` on ``broker`` subscribed to all of ``topic``: ``settings``
    over :data:`FAST`."""
    consumer = rmq.PushConsumer(group=group, namesrv=broker.address, **{**FAST, **settings})
    consumer.subscribe(topic)
    return consumer


def dlq_reader(
    broker: EmbeddedBroker, group: str, consumer_group: str
) -> tuple[rmq.PushConsumer, list[rmq.ReceivedMessage]]:
    """A consumer of ``group`` (not started) reading the DLQ of ``consumer_group``, and the
    list it appends what it reads to."""
    dlq: list[rmq.ReceivedMessage] = []
    reader = push_consumer(broker, group, f"%DLQ%{consumer_group}")

    @reader.listener
    async def read_dlq(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        dlq.extend(msgs)

    return reader, dlq


async def consume_directly(
    conn: Connection, group: str, topic: str, body: bytes
) -> RemotingCommand:
    """Send CONSUME_MESSAGE_DIRECTLY (309) for one stored record with ``body``, as a broker
    forwards an admin's request, and return the client's answer."""
    record = message_record(
        topic=topic,
        body=body,
        queue_offset=99,
        commit_log_offset=1,
        born_timestamp=1,
        born_port=1,
        store_timestamp=2,
        store_port=2,
    )
    return await conn.request(
        RemotingCommand.request(
            RequestCode.CONSUME_MESSAGE_DIRECTLY,
            {"consumerGroup": group, "msgId": "X", "brokerName": "broker-a"},
            encode_message(record),
        )
    )
