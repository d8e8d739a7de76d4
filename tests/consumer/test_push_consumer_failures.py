"""Push consumer: a handler's unexpected error and a handler over the consume timeout."""

from __future__ import annotations

import asyncio

import pytest

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message
from tests._harness.wait import wait_for

from .conftest import FAST


class Bug(BaseException):
    """Stands for a programming error the consumer does not expect."""


async def test_an_unexpected_error_crashes_the_consumer_loudly(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    await producer.send(Message("Crash", b"boom"))
    consumer = rmq.PushConsumer(group="crash", namesrv=broker.address, **FAST)
    consumer.subscribe("Crash")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        raise Bug("not an ordinary handler failure")

    async def start_and_wait() -> None:
        # The bug may strike during start-up (then start() raises it) or just after.
        await consumer.start()
        await asyncio.wait_for(consumer.wait_closed(), 10)

    with pytest.raises(BaseExceptionGroup) as info:
        await start_and_wait()
    assert info.value.subgroup(Bug) is not None
    await consumer.close()  # already stopped: a no-op

    await producer.send(Message("Crash2", b"boom"))
    late = rmq.PushConsumer(group="crash2", namesrv=broker.address, **FAST)
    late.subscribe("Crash2")
    gate = asyncio.Event()

    @late.listener
    async def handle_late(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        await gate.wait()
        raise Bug("after start-up")

    await late.start()
    gate.set()
    with pytest.raises(BaseExceptionGroup) as info:
        await asyncio.wait_for(late.wait_closed(), 10)
    assert info.value.subgroup(Bug) is not None


async def test_a_handler_over_the_consume_timeout_is_sent_back(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = rmq.MessageQueue("Stuck", "broker-a", 0)
    await producer.send(Message("Stuck", b"stuck"), queue=queue)
    await producer.send(Message("Stuck", b"next"), queue=queue)
    calls: list[tuple[bytes, int]] = []
    release = asyncio.Event()
    consumer = rmq.PushConsumer(group="stuck", namesrv=broker.address, consume_timeout=0.3, **FAST)
    consumer.subscribe("Stuck")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        m = msgs[0]
        calls.append((m.body, m.reconsume_times))
        if m.body == b"stuck" and m.reconsume_times == 0:
            await release.wait()

    async with consumer:
        await wait_for(lambda: (b"stuck", 1) in calls, timeout=5, what="the send-back")
        assert consumer.statistics().queues[queue].committed_offset == 2
        release.set()
        await asyncio.sleep(0.2)
    assert sorted(calls) == [(b"next", 0), (b"stuck", 0), (b"stuck", 1)]
