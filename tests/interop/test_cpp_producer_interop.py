"""aiorocket's producer read by the Apache C++ PushConsumer.

Messages go from :class:`aiorocket._producer.producer.Producer` over TCP to the embedded broker,
and from there to the C++ client running in a subprocess (``cpp_peer.py``), which must see
bodies, tags, keys and properties exactly as sent, and delayed messages only after their delay.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from aiorocket._producer.producer import Producer
from aiorocket.embedded import EmbeddedBroker
from aiorocket.embedded.config import parse_delay_levels
from aiorocket.models import Message
from tests.interop.cpp_peer import build_message
from tests.interop.harness import (
    Event,
    cpp_consumer,
    create_topics,
    delivery_mismatches,
    require_cpp_client,
    unique_name,
)

#: levels 1..3 shortened to sub-second delays; the rest keep the usual table's shape
DELAYS = "200ms 400ms 800ms 2s 3s"

pytestmark = [pytest.mark.interop, pytest.mark.broker(delay_levels=parse_delay_levels(DELAYS))]


@pytest.fixture(autouse=True)
def _cpp_client() -> None:
    require_cpp_client()


def to_message(topic: str, spec: dict[str, Any], **extra: Any) -> Message:
    """The aiorocket message for a :func:`build_message` description."""
    return Message(
        topic,
        spec["body"].encode("utf-8"),
        tags=spec["tags"],
        keys=spec["keys"].split(" "),
        properties=spec["properties"],
        **extra,
    )


async def test_aiorocket_messages_reach_cpp_consumer_intact(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Round-robin, keyed, large (compressed), batched and oneway sends all arrive intact."""
    topic = unique_name("py2cpp")
    group = unique_name("py2cpp_group")
    run_id = "py"
    plain = [build_message(run_id, i, key_count=8) for i in range(200)]
    keyed = [build_message(run_id, i, key_count=8) for i in range(200, 300)]
    # Above the 4 KiB threshold, so aiorocket compresses these (sysFlag 0x1).
    large = [build_message(run_id, i, key_count=8, body_size=20_000) for i in range(300, 310)]
    batched = [build_message(run_id, i, key_count=8) for i in range(310, 350)]
    oneway = [build_message(run_id, i, key_count=8) for i in range(350, 400)]
    specs = {s["id"]: {**s, "topic": topic} for s in [*plain, *keyed, *large, *batched, *oneway]}
    await create_topics(broker.address, topic)

    async with (
        Producer(namesrv=broker.address, group=unique_name("py_producer")) as producer,
        cpp_consumer(broker.address, topic, group, len(specs), tmp_path / "consumer") as consumer,
    ):
        results = await asyncio.gather(*(producer.send(to_message(topic, s)) for s in plain))
        key_queues: dict[str, set[int]] = {}
        for s in keyed:
            r = await producer.send(to_message(topic, s), sharding_key=s["key"])
            key_queues.setdefault(s["key"], set()).add(r.queue.queue_id)
        results += [await producer.send(to_message(topic, s)) for s in large]
        await producer.send_batch([to_message(topic, s) for s in batched])
        for s in oneway:
            await producer.send_oneway(to_message(topic, s))
        await consumer.wait_exit(60)

    deliveries = consumer.of("msg")
    assert {d["id"] for d in deliveries} == set(specs)
    bad = {d["id"]: delivery_mismatches(specs[d["id"]], d) for d in deliveries}
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"{len(bad)} deliveries differ, e.g. {list(bad.items())[:3]}"

    # The UNIQ_KEY aiorocket reported is the id the C++ client shows, at the same position.
    by_id = {d["id"]: d for d in deliveries if d["first"]}
    for spec, result in zip([*plain, *large], results, strict=True):
        d = by_id[spec["id"]]
        assert d["msg_id"] == result.msg_id
        assert (d["queue"], d["offset"]) == (result.queue.queue_id, result.queue_offset)
    for s in keyed:
        assert key_queues[s["key"]] == {by_id[s["id"]]["queue"]}
    assert all(len(q) == 1 for q in key_queues.values())
    assert all(by_id[s["id"]]["body_len"] == len(s["body"].encode()) for s in large)


async def test_delayed_message_arrives_after_its_delay(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Delay levels 1-3 (shortened) are honoured: each message arrives after its delay, in
    delay order, intact and on its own topic; an undelayed message sent alongside is first."""
    topic = unique_name("py2cpp_delay")
    group = unique_name("py2cpp_delay_group")
    levels = parse_delay_levels(DELAYS)
    specs = [{**build_message("delay", i, key_count=1), "topic": topic} for i in range(5)]
    warmup, now, *delayed = specs  # delayed: levels 3, 2, 1 (sent longest first)
    delay_of = {s["id"]: 3 - i for i, s in enumerate(delayed)}
    await create_topics(broker.address, topic)

    async with (
        Producer(namesrv=broker.address, group=unique_name("py_delay_producer")) as producer,
        cpp_consumer(broker.address, topic, group, len(specs), tmp_path / "consumer") as consumer,
    ):
        # The consumer only measures a delay once it is pulling; wait until it demonstrably is.
        await producer.send(to_message(topic, warmup))
        await consumer.wait_distinct(1, 45)

        sent_at: dict[str, float] = {}
        for s in delayed:
            sent_at[s["id"]] = time.time()
            await producer.send(to_message(topic, s, delay_level=delay_of[s["id"]]))
        sent_at[now["id"]] = time.time()
        await producer.send(to_message(topic, now))
        await consumer.wait_exit(30)

    firsts: dict[str, Event] = {}
    for d in consumer.of("msg"):
        firsts.setdefault(d["id"], d)
    assert set(firsts) == {s["id"] for s in specs}
    for s in specs:
        problems = delivery_mismatches(s, firsts[s["id"]])
        assert not problems, f"{s['id']}: {problems}"
    for s in delayed:
        d = firsts[s["id"]]
        waited = d["delivered_at"] - sent_at[s["id"]]
        delay = levels[delay_of[s["id"]] - 1]
        # A little slack below for clock granularity; above, the schedule tick plus a pull.
        assert delay - 0.05 <= waited <= delay + 2.0, f"level {delay_of[s['id']]}: {waited:.3f}s"
        assert d["reconsume_times"] == 0
    arrival = sorted([now, *delayed], key=lambda s: firsts[s["id"]]["delivered_at"])
    assert [s["id"] for s in arrival] == [now["id"], *(s["id"] for s in reversed(delayed))]
