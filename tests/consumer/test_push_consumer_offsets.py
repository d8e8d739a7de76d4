"""Push consumer offsets: broadcasting keeps them locally, graceful shutdown (R2) commits exactly
what was delivered, a broker restart (R3) never makes them regress, OFFSET_ILLEGAL resets them."""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import aiorocket as rmq
from aiorocket._client.instance import ClientInstance
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.embedded.config import BrokerConfig
from aiorocket.models import Message
from aiorocket.settings import ClientSettings
from tests._harness.broker import FAST_DELAYS
from tests._harness.send import fill_queue
from tests._harness.wait import wait_for

from .conftest import FAST


async def test_broadcasting_delivers_everything_to_everyone_and_keeps_local_offsets(
    broker: EmbeddedBroker, producer: Producer, tmp_path: Path
) -> None:
    got: dict[str, list[bytes]] = defaultdict(list)

    def make(name: str) -> rmq.PushConsumer:
        c = rmq.PushConsumer(
            group="bcast",
            namesrv=broker.address,
            message_model="broadcasting",
            consume_from="first",
            instance_name=name,
            offset_store_dir=tmp_path / "offsets",
            **FAST,
        )
        c.subscribe("Bcast")

        @c.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            got[name].extend(m.body for m in msgs)
            if name == "b2" and msgs[0].body == b"5":
                raise RuntimeError("broadcasting failures are dropped, not retried")

        return c

    for i in range(20):
        await producer.send(Message("Bcast", b"%d" % i))
    b1, b2 = make("b1"), make("b2")
    async with b1, b2:
        await wait_for(
            lambda: len(got["b1"]) == 20 and len(got["b2"]) == 20, timeout=10.0, what="both"
        )
        assert all(mq.topic == "Bcast" for mq in b1.statistics().queues)  # no retry topic
    await asyncio.sleep(0.2)
    assert sorted(got["b1"]) == sorted(got["b2"]) == sorted(b"%d" % i for i in range(20))
    files = list((tmp_path / "offsets").rglob("offsets.json"))
    assert len(files) == 2

    for i in range(20, 30):
        await producer.send(Message("Bcast", b"%d" % i))
    got.clear()
    async with make("b1"):
        await wait_for(lambda: len(got["b1"]) == 10, timeout=10.0, what="the new messages")
        await asyncio.sleep(0.3)
    assert sorted(got["b1"]) == sorted(b"%d" % i for i in range(20, 30))


async def _broker_offsets(client: ClientInstance, group: str, topic: str) -> dict[int, int]:
    out = {}
    addr = client.master_address("broker-a")
    assert addr is not None
    for q in range(8):
        off = await client.query_consumer_offset(
            addr, group, rmq.MessageQueue(topic, "broker-a", q)
        )
        out[q] = -1 if off is None else off
    return out


async def test_graceful_shutdown_commits_exactly_what_was_delivered(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    total = 2000
    for start in range(0, total, 100):
        await producer.send_batch(
            [Message("Graceful", b"%d" % i) for i in range(start, start + 100)]
        )
    delivered: list[tuple[int, int, bytes]] = []

    def make() -> rmq.PushConsumer:
        c = rmq.PushConsumer(group="graceful", namesrv=broker.address, concurrency=16, **FAST)
        c.subscribe("Graceful")

        @c.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            for m in msgs:
                await asyncio.sleep(0.001 * (m.queue_offset % 3))
                delivered.append((m.queue_id, m.queue_offset, m.body))

        return c

    first = make()
    async with first:
        await wait_for(lambda: len(delivered) >= 500, timeout=10.0, what="500 deliveries")
    # R2: the committed offset of every queue is the last delivered offset + 1.
    last: dict[int, int] = {}
    for q, off, _ in delivered:
        last[q] = max(last.get(q, -1), off)
    client = ClientInstance(ClientSettings(namesrv=(broker.address,)))
    client.start(lambda coro: None)
    await client.fetch_route("Graceful")
    committed = await _broker_offsets(client, "graceful", "Graceful")
    await client.close()
    for q in range(8):
        assert committed[q] == last.get(q, -1) + 1, (q, committed, last)
        per_queue = sorted(off for qq, off, _ in delivered if qq == q)
        assert per_queue == list(range(len(per_queue)))  # a contiguous prefix

    second = make()
    async with second:
        await wait_for(lambda: len(delivered) >= total, timeout=20, what="the rest")
        await asyncio.sleep(0.3)
    counts = Counter(body for _, _, body in delivered)
    assert len(counts) == total  # lost = 0
    assert max(counts.values()) == 1  # duplicates = 0


@pytest.mark.slow
async def test_broker_restart_resumes_quickly_and_offsets_never_regress(
    tmp_path: Path,
) -> None:
    config = BrokerConfig(default_queues=8, delay_levels=FAST_DELAYS)
    data = tmp_path / "b"
    b1 = EmbeddedBroker(data_dir=data, config=config)
    await b1.start()
    port = b1.port
    addr = b1.address
    got: list[tuple[bytes, float]] = []
    consumer = rmq.PushConsumer(group="restart", namesrv=addr, **FAST)
    consumer.subscribe("Restart")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend((m.body, time.monotonic()) for m in msgs)

    seen: dict[int, list[int]] = defaultdict(list)
    checker = ClientInstance(ClientSettings(namesrv=(addr,), request_timeout=0.5))

    async def watch_offsets() -> None:
        while True:
            try:
                offs = await _broker_offsets(checker, "restart", "Restart")
            except rmq.RocketError:
                await asyncio.sleep(0.05)
                continue
            for q, off in offs.items():
                if off >= 0:
                    seen[q].append(off)
            await asyncio.sleep(0.05)

    def committed(total: int) -> bool:
        # The broker's offsets, as the watcher last read them, cover ``total`` messages.
        return sum(offs[-1] for offs in seen.values() if offs) == total

    try:
        async with Producer(namesrv=addr, group="p1") as p:
            for i in range(50):
                await p.send(Message("Restart", b"a%d" % i))
        async with consumer:
            checker.start(lambda coro: None)
            await checker.fetch_route("Restart")
            watcher = asyncio.create_task(watch_offsets())
            await wait_for(lambda: len(got) == 50, timeout=10.0, what="first batch")
            await wait_for(lambda: committed(50), timeout=10, what="offsets persisted")
            await b1.close()
            await asyncio.sleep(1.5)  # pulls fail and back off meanwhile
            b2 = EmbeddedBroker(port=port, data_dir=data, config=config)
            await b2.start()
            listening = time.monotonic()
            try:
                async with Producer(namesrv=addr, group="p2") as p:
                    for i in range(20):
                        await p.send(Message("Restart", b"b%d" % i))
                await wait_for(lambda: len(got) >= 70, timeout=10, what="after the restart")
                resumed = min(t for body, t in got if body.startswith(b"b"))
                assert resumed - listening <= 2.0, resumed - listening
                await wait_for(lambda: committed(70), timeout=10, what="offsets persisted")
            finally:
                await consumer.close()
                watcher.cancel()
                await b2.close()
    finally:
        await checker.close()
        await b1.close()
    assert sorted(b for b, _ in got) == sorted(
        [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(20)]
    )
    for q, offs in seen.items():
        assert offs == sorted(offs), (q, offs)  # committed offsets never went backwards


async def test_offset_illegal_resets_to_the_broker_offset(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = await fill_queue(producer, "Illegal", [b"old-%d" % i for i in range(3)])
    # A committed offset far beyond the queue's end: the pull answers OFFSET_ILLEGAL (21).
    client = ClientInstance(ClientSettings(namesrv=(broker.address,)))
    client.start(lambda coro: None)
    await client.fetch_route("Illegal")
    addr = client.master_address("broker-a")
    assert addr is not None
    await client.update_consumer_offset(addr, "illegal", queue, 1000, oneway=False)
    await client.close()
    got: list[bytes] = []
    consumer = rmq.PushConsumer(
        group="illegal", namesrv=broker.address, offset_illegal_delay=0.2, **FAST
    )
    consumer.subscribe("Illegal")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    async with consumer:
        # The queue is re-added at nextBeginOffset (the queue's max, 3): nothing old again.
        await wait_for(
            lambda: (
                consumer.statistics().queues.get(queue) is not None
                and consumer.statistics().queues[queue].committed_offset == 3
            ),
            timeout=10.0,
            what="the corrected offset",
        )
        await producer.send(Message("Illegal", b"new"), queue=queue)
        await wait_for(lambda: got == [b"new"], timeout=10.0, what="the new message")
