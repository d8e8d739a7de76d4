"""The pull-expired watchdog (Java ``ProcessQueue.isPullExpired``, checked by each rebalance):
a pull task silent for twice ``pull_timeout`` outside a legitimate wait is restarted and
logged, instead of leaving its queue undelivered until a crash."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from aiorocket import (
    Admin,
    ConcurrentContext,
    Message,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from aiorocket.embedded import EmbeddedBroker
from tests._harness.wait import wait_for
from tests.reliability.helpers import first_consumer

TOPIC = "Watchdog"


async def test_a_silent_pull_task_is_restarted(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="aiorocket.consumer")
    got: list[bytes] = []
    async with (
        # the first send creates the topic with one queue
        Producer(namesrv=broker.address, group="wp", default_topic_queue_nums=1) as producer,
    ):
        await producer.send(Message(TOPIC, b"before"))
        consumer = first_consumer(
            broker.address,
            "watchdog",
            pull_suspend_timeout=0.1,
            pull_timeout=0.3,  # silent for more than 0.6 s: restarted
            rebalance_interval=0.3,
        )
        consumer.subscribe(TOPIC)

        @consumer.listener
        async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
            got.extend(m.body for m in msgs)

        async with consumer:
            await wait_for(lambda: got == [b"before"], timeout=10, what="the first message")
            client = consumer._client
            real = client.pull_prepared
            lost: list[str] = []

            async def pull_prepared(*args: Any, **kwargs: Any) -> Any:
                task = asyncio.current_task()
                name = task.get_name() if task is not None else ""
                if not lost and TOPIC in name and "%RETRY%" not in name:
                    # a pull whose answer never comes and that never times out (a lost
                    # callback, a bug): its task would stay silent for ever
                    lost.append(name)
                    await asyncio.Event().wait()
                return await real(*args, **kwargs)

            client.pull_prepared = pull_prepared  # type: ignore[method-assign]
            await wait_for(lambda: bool(lost), timeout=5, what="a pull lost")
            await producer.send(Message(TOPIC, b"after"))
            took = await wait_for(
                lambda: b"after" in got, timeout=10, what="delivery after the restart"
            )
            assert consumer.statistics().pull_restarts == 1
            await asyncio.sleep(0.9)  # healthy pull loops are never restarted
            assert consumer.statistics().pull_restarts == 1
    assert got == [b"before", b"after"]
    assert took < 5.0
    logged = [r.getMessage() for r in caplog.records if "silent" in r.message]
    assert len(logged) == 1
    assert "restarting it at offset 1" in logged[0]


async def test_flow_control_and_pauses_are_not_silence(broker: EmbeddedBroker) -> None:
    release = asyncio.Event()
    got: list[bytes] = []
    async with (
        # the first send creates the topic with one queue
        Producer(namesrv=broker.address, group="wp", default_topic_queue_nums=1) as producer,
    ):
        for i in range(5):
            await producer.send(Message(TOPIC, b"%d" % i))
        consumer = first_consumer(
            broker.address,
            "watchdog-fc",
            pull_suspend_timeout=0.1,
            pull_timeout=0.25,
            rebalance_interval=0.3,
            pull_batch_size=1,
            pull_threshold_for_queue=1,  # one cached message stops the pulls
        )
        consumer.subscribe(TOPIC)

        @consumer.listener
        async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
            await release.wait()
            got.extend(m.body for m in msgs)

        async with consumer:
            await asyncio.sleep(0.9)  # the queue waits for capacity, far past 2 × pull_timeout
            consumer.pause()
            release.set()
            await asyncio.sleep(0.9)  # paused, as long
            consumer.resume()
            await wait_for(lambda: len(got) == 5, timeout=10, what="every message")
            assert consumer.statistics().pull_restarts == 0


async def test_a_pull_task_not_started_yet_is_not_silent(broker: EmbeddedBroker) -> None:
    """A rebalance round may add a queue and the next round run before its new pull task ran
    once (an uncontended lock does not yield): that task is young, not silent."""
    async with Admin(namesrv=broker.address) as admin:
        await admin.create_topic(TOPIC, queues=1)
    consumer = PushConsumer(
        group="watchdog-young",
        namesrv=broker.address,
        pull_suspend_timeout=0.1,
        pull_timeout=0.25,
        rebalance_interval=60.0,
    )
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        return None

    async with consumer:
        [mq] = [q for q in consumer.statistics().queues if q.topic == TOPIC]
        await asyncio.sleep(0.75)  # longer than 2 × pull_timeout since the consumer began
        await consumer._queues.stop_queue(mq)
        consumer._queues.start_queue(mq, 0)
        consumer._queues.restart_silent_pulls()  # at once, as the next round would
        assert consumer.statistics().pull_restarts == 0
