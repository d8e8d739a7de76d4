"""Held pulls: woken by a matching arrival within a few ms, answered 19 on timeout,
discarded when the client disconnects (docs/protocol.md §6.4)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from aiorocket._protocol.codes import ResponseCode
from aiorocket.embedded import EmbeddedBroker
from tests._harness.wait import wait_for
from tests.embedded.test_broker_kit import RawClient, running_broker


@contextlib.asynccontextmanager
async def two_clients() -> AsyncIterator[tuple[EmbeddedBroker, RawClient, RawClient]]:
    """A running broker and two raw clients of it."""
    async with (
        running_broker() as broker,
        RawClient(broker.address) as first,
        RawClient(broker.address) as second,
    ):
        yield broker, first, second


async def held_pulls(broker: EmbeddedBroker, n: int) -> None:
    """Wait (2 s at most) until the broker holds ``n`` pulls."""
    await wait_for(lambda: broker.held_pulls == n, timeout=2.0, what=f"broker.held_pulls == {n}")


async def test_held_pull_wakes_on_arrival_quickly() -> None:
    async with two_clients() as (broker, consumer, producer):
        await consumer.create_topic("LP")
        pull = asyncio.create_task(consumer.pull("G", "LP", 0, 0, suspend_ms=15000, timeout=20))
        await held_pulls(broker, 1)
        t0 = time.perf_counter()
        assert (await producer.send("LP", b"wake")).code == 0
        resp, recs = await pull
        elapsed = time.perf_counter() - t0
        assert resp.code == ResponseCode.SUCCESS
        assert [r.body for r in recs] == [b"wake"]
        assert elapsed < 0.2
        assert broker.held_pulls == 0


async def test_held_pull_times_out_with_19_and_the_cap_applies() -> None:
    async with running_broker(long_poll_max_hold=0.3) as broker, RawClient(broker.address) as c:
        await c.create_topic("Quiet")
        t0 = time.perf_counter()
        resp, _ = await c.pull("G", "Quiet", 0, 0, suspend_ms=200)
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        assert resp.ext_fields["nextBeginOffset"] == "0"
        assert 0.18 < time.perf_counter() - t0 < 1.0
        t0 = time.perf_counter()
        resp, _ = await c.pull("G", "Quiet", 0, 0, suspend_ms=15000)  # capped at 0.3 s
        assert resp.code == ResponseCode.PULL_NOT_FOUND
        assert 0.25 < time.perf_counter() - t0 < 1.5


async def test_non_matching_arrival_does_not_wake_a_tag_pull() -> None:
    async with two_clients() as (broker, consumer, producer):
        await producer.send("Tg", b"old", tags="A")
        pull = asyncio.create_task(
            consumer.pull("G", "Tg", 0, 1, subscription="A", suspend_ms=10000, timeout=15)
        )
        await held_pulls(broker, 1)
        await producer.send("Tg", b"other", tags="B")
        await asyncio.sleep(0.1)
        assert not pull.done()
        await producer.send("Tg", b"mine", tags="A")
        resp, recs = await asyncio.wait_for(pull, 1.0)
        assert resp.code == 0
        assert [r.body for r in recs] == [b"mine"]
        assert resp.ext_fields["nextBeginOffset"] == "3"


async def test_several_held_pulls_on_one_queue_all_wake() -> None:
    async with two_clients() as (broker, a, b):
        await a.create_topic("Fan")
        pulls = [
            asyncio.create_task(cl.pull(g, "Fan", 0, 0, suspend_ms=10000, timeout=15))
            for cl, g in ((a, "G1"), (b, "G2"), (a, "G3"))
        ]
        await held_pulls(broker, 3)
        await a.send("Fan", b"all")
        for resp, recs in await asyncio.wait_for(asyncio.gather(*pulls), 1.0):
            assert resp.code == 0
            assert [r.body for r in recs] == [b"all"]


async def test_held_pull_is_discarded_when_the_client_disconnects() -> None:
    async with running_broker() as broker:
        c = RawClient(broker.address)
        await c.__aenter__()
        await c.create_topic("Gone")
        pull = asyncio.create_task(c.pull("G", "Gone", 0, 0, suspend_ms=10000, timeout=15))
        await held_pulls(broker, 1)
        await c.close()
        await held_pulls(broker, 0)
        assert pull.done()
        assert isinstance(pull.exception(), Exception)
        async with RawClient(broker.address) as other:
            assert (await other.send("Gone", b"x")).code == 0


async def test_commit_offset_rides_on_the_pull() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        for i in range(3):
            await c.send("Pig", b"%d" % i)
        await c.pull("G", "Pig", 0, 2, commit_offset=2)
        resp = await c.query_offset("G", "Pig", 0)
        assert (resp.code, resp.ext_fields["offset"]) == (0, "2")
        # committed even when the pull itself finds nothing (§6.4 step 7)
        await c.pull("G", "Pig", 0, 3, commit_offset=3)
        assert (await c.query_offset("G", "Pig", 0)).ext_fields["offset"] == "3"
