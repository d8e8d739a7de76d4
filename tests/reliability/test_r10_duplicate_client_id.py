"""R10 (docs/reliability.md): two live instances forced to one client id (the same
``instance_name`` on one host). Java's allocation keeps the duplicate in the sorted id list:
both instances take the first copy's share and the second copy's share has no owner.

Pass when: the duplicate is detected (logged, naming ``instance_name``) and disambiguated (the
members end with different ids), every queue has exactly one owner, and every message is
delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import pytest

from aiorocket import Message, Producer, PushConsumer
from aiorocket.embedded import EmbeddedBroker
from tests._harness.consume import collect_bodies
from tests._harness.wait import wait_for
from tests.reliability.helpers import first_consumer

TOPIC = "R10"
QUEUES = 8


def member(broker: EmbeddedBroker, got: Counter[bytes]) -> PushConsumer:
    consumer = first_consumer(
        broker.address,
        "r10",
        instance_name="same",
        rebalance_interval=0.2,
    )
    return collect_bodies(consumer, TOPIC, got.update)


def owned(consumer: PushConsumer) -> set[int]:
    return {mq.queue_id for mq in consumer.statistics().queues if mq.topic == TOPIC}


@pytest.mark.parametrize("start", ["one after the other", "at the same time"])
async def test_r10_two_instances_with_one_client_id(
    broker: EmbeddedBroker, start: str, caplog: pytest.LogCaptureFixture
) -> None:
    got: Counter[bytes] = Counter()
    caplog.set_level(logging.WARNING, logger="aiorocket.consumer")
    async with (
        # the first send creates the topic with QUEUES queues
        Producer(namesrv=broker.address, group="r10p", default_topic_queue_nums=QUEUES) as producer,
    ):
        for i in range(QUEUES * 10):
            await producer.send(Message(TOPIC, b"%d" % i))
        a, b = member(broker, got), member(broker, got)
        try:
            if start == "at the same time":
                await asyncio.gather(a.start(), b.start())
            else:
                await a.start()
                await b.start()
            assert a.client_id.split("#~")[0] == b.client_id.split("#~")[0]  # one host

            def shared_out() -> bool:
                qa, qb = owned(a), owned(b)
                return not qa & qb and len(qa | qb) == QUEUES and bool(qa) and bool(qb)

            await wait_for(shared_out, timeout=15, what="every queue owned once")
            await wait_for(lambda: len(got) == QUEUES * 10, timeout=15, what="every message")
            assert a.client_id != b.client_id
            if start == "one after the other":
                # the newcomer saw the id taken before joining: the running member (and the
                # orderly locks it may hold under that id) is left alone
                assert a.client_id.endswith("@same")
            # Rebalances go on (three more rounds each): the split stays.
            ra, rb = a.statistics().rebalances, b.statistics().rebalances
            await wait_for(
                lambda: a.statistics().rebalances >= ra + 3 and b.statistics().rebalances >= rb + 3,
                timeout=15,
                what="three more rebalance rounds each",
            )
            assert shared_out()
        finally:
            await a.close()
            await b.close()
    warnings = [r.getMessage() for r in caplog.records if "another live instance" in r.message]
    assert warnings, "the duplicate was not reported"
    assert "'same'" in warnings[0]
    assert set(got) == {b"%d" % i for i in range(QUEUES * 10)}
