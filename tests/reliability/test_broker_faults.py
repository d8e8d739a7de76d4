"""The embedded broker's fault hooks (fail_next, notify_rebalance, redeliver, drop_below), and
SYSTEM_BUSY answers: clients back off and recover."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from aiorocket import (
    Admin,
    ConcurrentContext,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    ReceivedMessage,
)
from aiorocket._client.instance import ClientInstance
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ConfigurationError, SystemBusyError
from aiorocket.settings import ClientSettings
from tests._harness.broker import FAST_DELAYS
from tests._harness.protocol import pull_header
from tests._harness.wait import wait_for
from tests.reliability.helpers import first_consumer

pytestmark = pytest.mark.broker(delay_levels=FAST_DELAYS)


async def test_fail_next_answers_the_code_and_the_producer_backs_off(
    broker: EmbeddedBroker,
) -> None:
    async with Producer(namesrv=broker.address, group="pg", retries=0) as p:
        await p.send(Message("Busy", b"warm-up"))
        broker.fail_next(RequestCode.SEND_MESSAGE_V2, ResponseCode.SYSTEM_BUSY)
        with pytest.raises(SystemBusyError):
            await p.send(Message("Busy", b"refused"))
        assert [(f.request_code, f.response_code) for f in broker.injected_failures] == [
            (RequestCode.SEND_MESSAGE_V2, ResponseCode.SYSTEM_BUSY)
        ]
        assert (await p.send(Message("Busy", b"ok"))).queue_offset >= 0  # used up
    async with Producer(namesrv=broker.address, group="pg", retries=2) as p:
        broker.fail_next(RequestCode.SEND_MESSAGE_V2, ResponseCode.SYSTEM_BUSY, times=2)
        result = await p.send(Message("Busy", b"third time lucky"))
    assert result.queue_offset >= 0
    busy = broker.injected_failures[1:]
    assert len(busy) == 2
    # backed off before asking again (50 ms, jittered down to half at most), not at once
    assert busy[1].at - busy[0].at >= 0.02
    with pytest.raises(ConfigurationError):
        broker.fail_next(RequestCode.SEND_MESSAGE_V2, ResponseCode.SUCCESS)


async def test_pulls_answered_system_busy_back_off_and_recover(broker: EmbeddedBroker) -> None:
    got: list[bytes] = []
    async with (
        # the first send creates the topic with one queue: one pull loop besides the retry one
        Producer(namesrv=broker.address, group="pg", default_topic_queue_nums=1) as producer,
    ):
        await producer.send(Message("BusyPull", b"first"))
        consumer = first_consumer(broker.address, "busy", rebalance_interval=1.0)
        consumer.subscribe("BusyPull")

        @consumer.listener
        async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
            got.extend(m.body for m in msgs)

        broker.fail_next(RequestCode.PULL_MESSAGE, ResponseCode.SYSTEM_BUSY, times=12)
        async with consumer:
            await wait_for(
                lambda: not broker._require_faults().armed, timeout=30, what="busy answers"
            )
            for i in range(5):
                await producer.send(Message("BusyPull", b"%d" % i))
            await wait_for(
                lambda: len(got) == 6, timeout=10, what="every message after the busy spell"
            )
            busy = broker.injected_failures
            assert consumer.statistics().pull_errors >= 12
    spread = busy[-1].at - busy[0].at
    # two pull loops (the topic's queue and the retry queue) sharing 12 refusals, each
    # waiting 0.05 s, 0.1 s, 0.2 s, ... (±20 %) after each: without a backoff they would come
    # within milliseconds
    assert spread >= 0.4, f"12 busy answers within {spread:.3f} s: no backoff"
    assert sorted(got) == sorted([b"first", *(b"%d" % i for i in range(5))])


async def test_notify_rebalance_makes_members_rebalance_at_once(broker: EmbeddedBroker) -> None:
    # the topic exists before the consumer starts: a consumer whose topic has no route knows
    # no broker to send its heartbeat to, so the broker would not know it either
    async with Admin(namesrv=broker.address) as admin:
        await admin.create_topic("Notified", queues=4)
    consumer = PushConsumer(group="nr", namesrv=broker.address, rebalance_interval=60.0)
    consumer.subscribe("Notified")

    @consumer.listener
    async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        return None

    async with consumer:
        before = consumer.statistics().rebalances
        assert await broker.notify_rebalance("nr") == 1
        await wait_for(
            lambda: consumer.statistics().rebalances > before, timeout=5, what="a rebalance"
        )
        assert await broker.notify_rebalance("nobody") == 0


async def test_redeliver_replays_one_queue_from_an_offset(broker: EmbeddedBroker) -> None:
    got: Counter[tuple[int, int]] = Counter()
    async with Producer(namesrv=broker.address, group="pg") as producer:
        for q in (0, 1):
            for i in range(5):
                await producer.send(
                    Message("Replay", b"%d-%d" % (q, i)),
                    queue=MessageQueue("Replay", "broker-a", q),
                )
        # Long polls and no periodic persistence: the broker's offsets stay behind what was
        # consumed, so a queue dropped without cause would be replayed from 0.
        consumer = first_consumer(
            broker.address,
            "replay",
            offset_persist_interval=60.0,
            rebalance_interval=0.25,
        )
        consumer.subscribe("Replay")

        @consumer.listener
        async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
            got.update((m.queue.queue_id, m.queue_offset) for m in msgs)

        async with consumer:
            await wait_for(lambda: len(got) == 10, timeout=10, what="first delivery")
            assert await broker.redeliver("Replay", 0, 2) == ["replay"]
            await wait_for(lambda: sum(got.values()) == 13, timeout=10, what="offsets 2..4 again")
            # Rebalances come and go (three more rounds): nothing else is replayed.
            rounds = consumer.statistics().rebalances + 3
            await wait_for(
                lambda: consumer.statistics().rebalances >= rounds, timeout=10, what="3 rounds"
            )
    assert got == Counter(
        {**{(q, i): 1 for q in (0, 1) for i in range(5)}, **{(0, i): 2 for i in (2, 3, 4)}}
    )
    with pytest.raises(ConfigurationError):
        await broker.redeliver("Replay", 9, 0)


async def test_drop_below_makes_old_offsets_out_of_range(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="pg") as producer:
        for i in range(10):
            await producer.send(
                Message("Dropped", b"%d" % i), queue=MessageQueue("Dropped", "broker-a", 0)
            )
    assert broker.drop_below("Dropped", 0, 6) == 6
    assert broker.drop_below("Dropped", 0, 99) == 10  # clamped to the queue's end
    with pytest.raises(ConfigurationError):
        broker.drop_below("Dropped", 1, 1)  # an empty queue
    client = ClientInstance(ClientSettings(namesrv=(broker.address,)))
    async with asyncio.TaskGroup() as tg:
        client.start(tg.create_task)
        try:
            await client.fetch_route("Dropped")
            header = pull_header(
                consumer_group="reader",
                topic="Dropped",
                queue_offset=3,
                sys_flag=0x4,  # (the subscription travels with the pull)
                subscription="*",
            )
            addr = await client.find_broker("broker-a", header.topic, master=True)
            resp = await client.pull_message(addr, header, timeout=5)
        finally:
            await client.close()
    assert int(resp.code) == ResponseCode.PULL_OFFSET_MOVED
    assert resp.header.next_begin_offset == 10
    assert resp.header.min_offset == 10
