"""The embedded broker on a `ManualClock`: what it does when time passes (a delay level, a
timer message, a transaction check, a POP invisible time) happens when the clock is advanced,
not before, however long the wait."""

from __future__ import annotations

import asyncio

import aiorocket as rmq
from aiorocket.embedded import BrokerConfig, EmbeddedBroker, ManualClock
from tests._harness.wait import wait_for

HOUR = 3600.0


async def test_an_hour_long_delay_and_timer_come_due_when_advanced() -> None:
    clock = ManualClock()
    config = BrokerConfig(delay_levels=(HOUR,))
    async with (
        EmbeddedBroker(config=config, clock=clock) as broker,
        rmq.Producer(namesrv=broker.address, group="clock-p", default_topic_queue_nums=1) as p,
    ):
        await p.send(rmq.Message("Later", b"level"), delay_level=1)
        await p.send(rmq.Message("Later", b"timer"), deliver_after=HOUR)
        await clock.advance(HOUR - 30)  # (real time runs on too: a margin for a slow machine)
        assert broker.store.max_offset("Later", 0) == 0
        await clock.advance(60)
        assert broker.store.max_offset("Later", 0) == 2
        assert broker.timers.delivered == 1


async def test_a_transaction_is_checked_once_older_than_its_timeout_on_the_clock() -> None:
    clock = ManualClock()
    config = BrokerConfig(transaction_timeout=HOUR, transaction_check_interval=HOUR / 6)
    checked: list[bytes] = []

    async def check(msg: rmq.ReceivedMessage) -> rmq.TransactionState:
        checked.append(msg.body)
        return rmq.TransactionState.COMMIT

    async def unknown(*_: object) -> rmq.TransactionState:
        return rmq.TransactionState.UNKNOWN

    async with (
        EmbeddedBroker(config=config, clock=clock) as broker,
        rmq.TransactionProducer(
            namesrv=broker.address, group="clock-tx", execute_local=unknown, check=check
        ) as producer,
    ):
        result = await producer.send_in_transaction(rmq.Message("Tx", b"maybe"))
        await clock.advance(HOUR * 5 / 6)  # five check rounds: the half is not old enough
        await asyncio.sleep(0.2)  # a check request sent meanwhile would be answered by now
        assert checked == []
        assert broker.store.max_offset("Tx", result.queue.queue_id) == 0
        await clock.advance(HOUR / 3)  # two more rounds: the second finds it due
        await wait_for(lambda: checked == [b"maybe"], timeout=5, what="the check")
        await wait_for(
            lambda: broker.store.max_offset("Tx", result.queue.queue_id) == 1,
            timeout=5,
            what="the committed message",
        )


async def test_an_unacked_pop_is_revived_when_its_invisible_time_passes_on_the_clock() -> None:
    clock = ManualClock()
    async with (
        EmbeddedBroker(clock=clock) as broker,
        rmq.Producer(namesrv=broker.address, group="clock-p", default_topic_queue_nums=1) as p,
    ):
        await p.send(rmq.Message("Popped", b"x"))
        consumer = rmq.SimpleConsumer(
            group="clock-g",
            namesrv=broker.address,
            consume_from="first",
            invisible_duration=HOUR,
            await_duration=1.0,
        )
        consumer.subscribe("Popped")
        async with consumer:
            [first] = await consumer.receive(1)
            assert broker.pop_in_flight == 1
            await clock.advance(HOUR - 30)
            assert broker.pop_revived == 0
            await clock.advance(60)
            assert broker.pop_revived == 1
            [again] = await consumer.receive(1)
            assert (again.body, again.reconsume_times) == (first.body, 1)
            await consumer.ack(again)
