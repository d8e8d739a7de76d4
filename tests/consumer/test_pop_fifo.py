"""FIFO message groups over ordered POP (RocketMQ 5.x) against the embedded broker: messages
sent with ``message_group`` reach four orderly POP consumers of one group in order per group,
and a failing message holds back only its own queue until it is retried."""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded.broker import EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.wait import wait_for
from tests.consumer.conftest import push_consumer

TOPIC = "FifoPop"
GROUPS = 20
PER_GROUP = 100
ORDERED_POP: dict[str, Any] = {
    "consume_mode": "pop",
    "orderly": True,
    "consume_from": "first",
    "invisible_duration": 2.0,
    "suspend_delay": 0.2,
    "pull_suspend_timeout": 1.0,
    "pull_timeout": 3.0,
}


pytestmark = pytest.mark.broker(
    default_queues=4, delay_levels=FAST_DELAYS, pop_revive_interval=0.05
)


async def send_groups(broker: EmbeddedBroker, groups: int, per_group: int) -> None:
    async with rmq.Producer(namesrv=broker.address, group="fifo-producer") as p:
        for i in range(per_group):  # interleaved, each group's messages sent in order
            await asyncio.gather(
                *(
                    p.send(rmq.Message(TOPIC, f"{g}:{i}", message_group=f"order-{g}"))
                    for g in range(groups)
                )
            )


def _parse(msg: rmq.ReceivedMessage) -> tuple[int, int]:
    g, i = msg.body.decode().split(":")
    return int(g), int(i)


async def test_four_consumers_keep_each_group_in_order(broker: EmbeddedBroker) -> None:
    await send_groups(broker, GROUPS, PER_GROUP)
    handled: dict[int, list[int]] = defaultdict(list)
    members = []
    for _k in range(4):
        c = push_consumer(broker, "fifo-g", TOPIC, **ORDERED_POP)

        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
            for m in msgs:
                g, i = _parse(m)
                handled[g].append(i)
            await asyncio.sleep(0)

        c.register_listener(handle)
        members.append(c)
    async with members[0], members[1], members[2], members[3]:
        await wait_for(
            lambda: sum(len(v) for v in handled.values()) >= GROUPS * PER_GROUP,
            timeout=60,
            what="every message",
        )
    inversions = sum(1 for seq in handled.values() for a, b in itertools.pairwise(seq) if b < a)
    assert inversions == 0
    assert all(handled[g] == list(range(PER_GROUP)) for g in range(GROUPS))


async def test_a_failing_message_holds_back_only_its_queue(broker: EmbeddedBroker) -> None:
    await send_groups(broker, 8, 20)
    handled: list[tuple[int, int, int]] = []  # (group, number, attempt)
    failures = 0
    consumer = push_consumer(broker, "fifo-fail", TOPIC, **ORDERED_POP)

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext
    ) -> rmq.OrderlyStatus | None:
        nonlocal failures
        for m in msgs:
            g, i = _parse(m)
            if (g, i) == (0, 5) and failures < 2:
                failures += 1
                return rmq.OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
            handled.append((g, i, m.reconsume_times))
        return None

    async with consumer:
        await wait_for(lambda: len(handled) >= 160, timeout=30, what="every message")
    group0 = [i for g, i, _ in handled if g == 0]
    assert group0 == list(range(20))  # 5 retried, in place, before 6
    attempt = next(a for g, i, a in handled if (g, i) == (0, 5))
    assert attempt == 2  # delivered twice before: the broker counts ordered deliveries
    # While group 0's queue waited, the other queues went on.
    where = next(k for k, (g, i, _) in enumerate(handled) if (g, i) == (0, 5))
    others_before = {g for g, _, _ in handled[:where] if g != 0}
    assert len(set(others_before)) >= 3
