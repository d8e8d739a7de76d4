"""The Apache C++ client's orderly sends read by aiorocket's orderly consumer.

The C++ producer (``cpp_peer.py produce --mode orderly``) sends numbered messages with
``send_orderly``, its queue selector mapping each order key to one queue; two aiorocket
orderly consumers (the second joins halfway, taking queues over through the broker locks)
must deliver each key's messages in send order: every message at least once, first
deliveries in order, and re-deliveries only as a replayed suffix.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from tests._harness.orderly import check_sequence
from tests.interop.harness import require_cpp_client, run_peer, unique_name

pytestmark = pytest.mark.interop

COUNT = 600
KEYS = 12
#: consumer settings that keep the test short
FAST: dict[str, Any] = {
    "consume_from": "first",
    "rebalance_interval": 0.5,
    "route_refresh_interval": 0.5,
    "lock_renew_interval": 0.5,
    "lock_expiry": 2.0,
    "unlock_delay": 0.2,
    "pull_suspend_timeout": 1.0,
    "shutdown_grace": 5.0,
}


@pytest.fixture(autouse=True)
def _cpp_client() -> None:
    require_cpp_client()


def orderly_consumer(
    broker: EmbeddedBroker,
    topic: str,
    group: str,
    name: str,
    seen: list[tuple[str, str, int, int]],
) -> rmq.PushConsumer:
    consumer = rmq.PushConsumer(group=group, namesrv=broker.address, orderly=True, **FAST)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        seen.extend(
            (name, m.properties["okey"], int(m.properties["kseq"]), m.queue_id) for m in msgs
        )
        await asyncio.sleep(0.002)

    return consumer


async def test_cpp_orderly_sends_keep_per_key_order_in_the_orderly_consumer(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = unique_name("cpp_orderly_to_py")
    group = unique_name("py_orderly_group")
    seen: list[tuple[str, str, int, int]] = []
    args = [
        "produce",
        *("--namesrv", broker.address, "--topic", topic, "--count", str(COUNT)),
        *("--mode", "orderly", "--key-count", str(KEYS), "--run-id", "ord", "--rate", "300"),
    ]
    first = orderly_consumer(broker, topic, group, "first", seen)
    second = orderly_consumer(broker, topic, group, "second", seen)
    async with run_peer("orderly-producer", args, home=tmp_path / "producer") as producer:
        await producer.wait_event("sent", 30)  # the topic exists from here on
        async with first:
            await producer.wait_until(lambda p: len(p.of("sent")) >= COUNT // 2, 30)
            async with second:
                await producer.wait_exit(60)
                expected = {(e["key"], e["kseq"]) for e in producer.of("sent")}
                assert len(expected) == COUNT
                deadline = asyncio.get_running_loop().time() + 30
                while {(k, n) for _, k, n, _ in seen} != expected:
                    assert asyncio.get_running_loop().time() < deadline, "not all delivered"
                    await asyncio.sleep(0.1)
                held_second = len(second.statistics().queues)

    sent = producer.of("sent")
    queue_of = {e["key"]: e["queue"] for e in sent}
    assert held_second > 0, "the second consumer never took a queue"
    by_key: dict[str, list[int]] = defaultdict(list)
    for _, key, n, queue_id in seen:
        assert queue_id == queue_of[key], "a key's message arrived from another queue"
        by_key[key].append(n)
    assert len(by_key) == KEYS
    for key, seq in by_key.items():
        check_sequence(key, seq)
        firsts = list(dict.fromkeys(seq))
        assert firsts == list(range(COUNT // KEYS)), f"{key}: first deliveries out of order"
