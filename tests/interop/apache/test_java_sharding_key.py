"""Java producers as inputs of aiorocket consumers ordering by key.

``java/JKeyProducer.java`` sends numbered messages of several keys with the Apache RocketMQ
4.9.8 Java client's stock orderly selector (``SelectMessageQueueByHash``) to aiorocket's
embedded broker, either setting the ``__SHARDINGKEY`` user property (RocketMQ 5.x's message
group) or leaving the key in the message ``KEYS`` only. An aiorocket orderly consumer then
orders by ``"sharding_key"`` or by a callable reading the ``KEYS``: every key in send order, one
call per key at a time, and the keys sharing a queue side by side.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from tests.interop.apache.java_client import JavaClient
from tests.interop.apache.test_java_client_embedded import PY_CONSUMER
from tests.interop.harness import unique_name

#: how long a JVM may take to start and send on a busy 2-core machine
BOOT = 90.0
KEYS = 12
PER_KEY = 30


def key_from_keys(msg: rmq.ReceivedMessage) -> str | None:
    """The ordering key of a message that carries it in its ``KEYS`` only."""
    return msg.keys[0] if msg.keys else None


@pytest.mark.parametrize("mode", ["property", "selector"])
async def test_java_keyed_messages_are_consumed_in_order_per_key(
    broker: EmbeddedBroker, java_classes: Path, tmp_path: Path, mode: str
) -> None:
    topic = unique_name(f"jkey_{mode}")
    java = await JavaClient.run(
        java_classes,
        "JKeyProducer",
        broker.address,
        topic,
        str(KEYS),
        str(PER_KEY),
        mode,
        tmp=tmp_path / "java",
        timeout=BOOT,
    )
    sent = java.of("sent")
    assert len(sent) == KEYS * PER_KEY, java.diagnostics()
    assert {e["status"] for e in sent} == {"SEND_OK"}
    queue_of: dict[str, set[int]] = defaultdict(set)
    for e in sent:
        queue_of[e["key"]].add(e["queue"])
    assert all(len(q) == 1 for q in queue_of.values())  # the selector keeps a key's queue
    assert len({q for qs in queue_of.values() for q in qs}) < KEYS  # keys share queues

    seqs: dict[str, list[int]] = defaultdict(list)
    running: dict[str | None, int] = defaultdict(int)
    per_queue: dict[int, int] = defaultdict(int)
    peaks = {"key": 0, "queue": 0}
    wrong: list[str] = []
    consumer = rmq.PushConsumer(
        group=unique_name("jkey_group"),
        namesrv=broker.address,
        orderly=True,
        order_by="sharding_key" if mode == "property" else key_from_keys,
        **PY_CONSUMER,
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        running[ctx.key] += 1
        per_queue[ctx.queue.queue_id] += 1
        peaks["key"] = max(peaks["key"], running[ctx.key])
        peaks["queue"] = max(peaks["queue"], per_queue[ctx.queue.queue_id])
        await asyncio.sleep(0.005)
        for m in msgs:
            key, n = m.body.decode().split(":")
            if ctx.key != key or (mode == "property") != (m.properties.get("__SHARDINGKEY") == key):
                wrong.append(f"{m.body!r} in a call of {ctx.key!r}: {m.properties}")
            seqs[key].append(int(n))
        running[ctx.key] -= 1
        per_queue[ctx.queue.queue_id] -= 1

    async with consumer:
        deadline = asyncio.get_running_loop().time() + 60
        while sum(map(len, seqs.values())) < KEYS * PER_KEY:
            assert asyncio.get_running_loop().time() < deadline, "not every message arrived"
            await asyncio.sleep(0.05)
    assert not wrong, wrong[:5]
    assert sorted(seqs) == sorted(f"k{i}" for i in range(KEYS))
    assert all(seq == list(range(PER_KEY)) for seq in seqs.values()), seqs
    assert peaks["key"] == 1
    assert peaks["queue"] > 1  # keys of one queue ran side by side
