"""What lite-topic tests share (docs/protocol.md §12.8): a LITE parent topic with its bound
group, lite messages sent in order per lite topic, a receive loop, and the acceptance scenario
of issue 38 run against any name server (the embedded broker's, Apache 5.5's)."""

from __future__ import annotations

import asyncio
import random
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.errors import UnsupportedFeatureError

__all__ = [
    "by_lite_topic",
    "check_lite_refused",
    "create_lite_parent",
    "lite_acceptance",
    "lite_consumer",
    "receive_until",
    "send_lite",
]


async def create_lite_parent(namesrv: str, topic: str, group: str, *, queues: int = 4) -> None:
    """Create ``topic`` as a LITE topic and ``group`` bound to it, on every master."""
    async with rmq.Admin(namesrv=namesrv) as admin:
        await admin.create_topic(topic, queues=queues, message_type="LITE")
        await admin.create_group(group, lite_bind_topic=topic)


def lite_consumer(namesrv: str, group: str, topic: str, **settings: Any) -> rmq.LiteConsumer:
    """A lite consumer waiting 2 s per receive (``settings`` override)."""
    return rmq.LiteConsumer(
        group=group, namesrv=namesrv, topic=topic, **{"await_duration": 2.0, **settings}
    )


async def check_lite_refused(namesrv: str, topic: str, group: str) -> None:
    """On a broker older than 5.5: a lite consumer of ``group`` on ``topic`` (created here, a
    plain topic of 2 queues) does not start, and says lite topics need 5.5+."""
    async with rmq.Admin(namesrv=namesrv) as admin:
        await admin.create_topic(topic, queues=2)
    c = lite_consumer(namesrv, group, topic)
    with pytest.raises(UnsupportedFeatureError, match=r"lite topics need RocketMQ 5\.5\+"):
        await c.start()
    await c.close()


async def send_lite(
    producer: rmq.Producer, topic: str, lite_topics: Iterable[str], per_topic: int, tag: str
) -> dict[str, list[bytes]]:
    """Send ``per_topic`` messages ``<lite>:<tag>:<k>`` to each lite topic, one after the
    other within a lite topic (so its order is ``k``), lite topics 100 at a time; returns the
    bodies by lite topic."""
    sent: dict[str, list[bytes]] = {}

    async def one(lite: str) -> None:
        bodies = [f"{lite}:{tag}:{k}".encode() for k in range(per_topic)]
        for body in bodies:
            await producer.send(rmq.Message(topic, body, lite_topic=lite))
        sent[lite] = bodies

    names = list(lite_topics)
    for i in range(0, len(names), 100):
        await asyncio.gather(*(one(lite) for lite in names[i : i + 100]))
    return sent


async def receive_until(
    consumer: rmq.LiteConsumer, want: int, *, timeout: float
) -> list[rmq.PoppedMessage]:
    """Receive (and ack) until ``want`` messages came or ``timeout`` seconds passed; all of
    them, in the order received."""
    got: list[rmq.PoppedMessage] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msgs = await consumer.receive(32)
        if msgs:
            await consumer.ack_all(msgs)
            got.extend(msgs)
    return got


def by_lite_topic(msgs: Sequence[rmq.ReceivedMessage]) -> dict[str, list[bytes]]:
    """The bodies received per lite topic, in the order received."""
    out: dict[str, list[bytes]] = defaultdict(list)
    for m in msgs:
        assert m.lite_topic is not None, m
        out[m.lite_topic].append(m.body)
    return dict(out)


async def lite_acceptance(
    namesrv: str,
    topic: str,
    group: str,
    *,
    lite_topics: int = 1000,
    per_topic: int = 10,
    subscribed: int = 100,
    timeout: float = 180.0,
) -> None:
    """Issue 38's acceptance: ``lite_topics`` lite topics x ``per_topic`` messages; a lite
    consumer subscribed to ``subscribed`` of them while running gets exactly their messages
    (each lite topic's in order); after it unsubscribes half of them, their new messages do
    not arrive while the other half's do.

    Raises:
        AssertionError: a message is missing, duplicated, out of order or unexpected.
    """
    await create_lite_parent(namesrv, topic, group, queues=8)
    names = [f"conv-{i:04d}" for i in range(lite_topics)]
    chosen = sorted(random.Random(38).sample(names, subscribed))
    async with (
        rmq.Producer(namesrv=namesrv, group=f"{group}-p") as producer,
        lite_consumer(namesrv, group, topic) as consumer,
    ):
        sent = await send_lite(producer, topic, names, per_topic, "a")
        for i in range(0, len(chosen), 25):  # at run time, in several requests
            await consumer.subscribe_lite(*chosen[i : i + 25])
        assert consumer.lite_topics == set(chosen)
        want = subscribed * per_topic
        got = await receive_until(consumer, want, timeout=timeout)
        assert len(got) == want, f"{len(got)} of {want} received"
        assert by_lite_topic(got) == {lite: sent[lite] for lite in chosen}  # exactly, in order

        kept, dropped = chosen[: subscribed // 2], chosen[subscribed // 2 :]
        await consumer.unsubscribe_lite(*dropped)
        assert consumer.lite_topics == set(kept)
        later = await send_lite(producer, topic, chosen, 5, "b")
        got = await receive_until(consumer, len(kept) * 5, timeout=timeout)
        got += await receive_until(consumer, 1, timeout=3 * 2.0)  # anything more: an error
        assert by_lite_topic(got) == {lite: later[lite] for lite in kept}
