"""Shutdown under cancellation: an orderly clustering PushConsumer whose owner is cancelled by
SIGTERM (an anyio cancel scope, as in an anyio or Starlette app) while handlers run, while a
rebalance is stuck, and while the broker is black-holed. Leaving ``async with`` must take no
longer than ``shutdown_grace`` plus a little, and by then the finished messages' offsets are
on the broker and the queue locks are free: a second member takes every queue at once."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket.embedded import BrokerConfig
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message
from tests._harness.wait import wait_for
from tests.reliability.helpers import broker_behind_proxy

QUEUES = 8
GRACE = 4.0
#: what a shutdown may take beyond the handlers' own time (cleanup RPCs, a loaded machine)
SLACK = 2.0
#: how long a slow handler call runs
HANDLER = 1.0

#: The periodic offset persistence never runs in these tests (only the shutdown's flush, or a
#: pull's piggy-backed commit, writes offsets); the broker's lock lease is 60 s, the client's
#: lock expiry 30 s, so only an unlock frees a queue for the second member.
SETTINGS: dict[str, Any] = {
    "orderly": True,
    "consume_from": "first",
    "rebalance_interval": 0.5,
    "offset_persist_interval": 600.0,
    "shutdown_grace": GRACE,
}


@contextlib.contextmanager
def sigterm_cancels(scope: anyio.CancelScope) -> Iterator[None]:
    """While inside: SIGTERM cancels ``scope`` (an application's signal handling)."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, scope.cancel)
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def sigterm() -> float:
    """Send SIGTERM to this process; returns when (monotonic)."""
    os.kill(os.getpid(), signal.SIGTERM)
    return time.monotonic()


async def send_per_queue(producer: Producer, topic: str, bodies: list[bytes]) -> None:
    for q in range(QUEUES):
        mq = rmq.MessageQueue(topic, "broker-a", q)
        for body in bodies:
            await producer.send(Message(topic, body), queue=mq)


def recording_member(
    namesrv: str, group: str, topic: str, done: dict[int, int], started: set[int], **extra: Any
) -> rmq.PushConsumer:
    """An orderly member recording, per queue id, the offset after its last finished message
    (``done``) and the queues whose ``slow`` message is running (``started``)."""
    consumer = rmq.PushConsumer(group=group, namesrv=namesrv, **SETTINGS, **extra)
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        for m in msgs:
            if m.body == b"slow":
                started.add(m.queue_id)
                await asyncio.sleep(HANDLER)
            done[m.queue_id] = m.queue_offset + 1

    return consumer


async def committed(namesrv: str, group: str, topic: str) -> dict[int, int | None]:
    """The group's offsets as the broker has them, by queue id."""
    async with rmq.QueueReader(namesrv=namesrv) as reader:
        return {
            q: await reader.committed_offset(group, rmq.MessageQueue(topic, "broker-a", q))
            for q in range(QUEUES)
        }


async def assert_second_member_takes_every_queue(namesrv: str, group: str, topic: str) -> None:
    """A new member's start-up (its first rebalance locks what it is given) gets all queues:
    the stopped member unregistered and released every lock."""
    b = rmq.PushConsumer(group=group, namesrv=namesrv, instance_name="b", **SETTINGS)
    b.subscribe(topic)

    @b.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
        pass

    async with b:
        held = [mq for mq in b.held() if mq.topic == topic]
        assert len(held) == QUEUES, f"the second member got {len(held)} of {QUEUES} queues"
        assert all(s.locked for mq, s in b.statistics().queues.items() if mq.topic == topic)


async def test_sigterm_while_handlers_run_drains_flushes_and_unlocks_within_the_grace(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    topic, group = "ShutRunning", "shut-running"
    await send_per_queue(producer, topic, [b"fast", b"slow", b"later"])
    done: dict[int, int] = {}
    started: set[int] = set()
    a = recording_member(broker.address, group, topic, done, started, instance_name="a")
    with anyio.CancelScope() as scope, sigterm_cancels(scope):
        async with a:
            await wait_for(
                lambda: len(started) == QUEUES, timeout=10.0, what="a slow handler on every queue"
            )
            t0 = sigterm()
            await anyio.sleep_forever()
    elapsed = time.monotonic() - t0
    assert scope.cancelled_caught
    assert elapsed < GRACE + SLACK
    # The running handlers were waited for; what they finished is on the broker.
    assert done == dict.fromkeys(range(QUEUES), 2)
    assert await committed(broker.address, group, topic) == done
    await assert_second_member_takes_every_queue(broker.address, group, topic)


async def test_sigterm_during_a_stuck_rebalance_still_flushes_and_unlocks(
    broker: EmbeddedBroker, producer: Producer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rebalance in progress holds the queue table and loses the first cancellation it
    gets (Python 3.11's ``wait_for`` can); the shutdown must still end it at once."""
    topic, group = "ShutRebalance", "shut-rebalance"
    await send_per_queue(producer, topic, [b"fast"])
    done: dict[int, int] = {}
    a = recording_member(broker.address, group, topic, done, set(), instance_name="a")
    entered = asyncio.Event()

    async def stuck(topics: list[str]) -> None:
        entered.set()
        with contextlib.suppress(asyncio.CancelledError):  # the first cancellation is lost
            await asyncio.Event().wait()  # until cancelled
        await asyncio.Event().wait()  # until cancelled

    with anyio.CancelScope() as scope, sigterm_cancels(scope):
        async with a:
            await wait_for(lambda: len(done) == QUEUES, timeout=10.0, what="every queue consumed")
            monkeypatch.setattr(a._rebalancer, "run_once", stuck)
            a._rebalance_timer.wake()  # as NOTIFY_CONSUMER_IDS_CHANGED does
            await asyncio.wait_for(entered.wait(), 5)
            t0 = sigterm()
            await anyio.sleep_forever()
    elapsed = time.monotonic() - t0
    assert scope.cancelled_caught
    assert elapsed < GRACE + SLACK
    assert await committed(broker.address, group, topic) == dict.fromkeys(range(QUEUES), 1)
    await assert_second_member_takes_every_queue(broker.address, group, topic)


async def test_sigterm_during_a_broker_outage_flushes_once_it_is_back_and_unlocks(
    tmp_path: Path,
) -> None:
    """SIGTERM while handlers run and the broker is black-holed; the network comes back
    while the final offsets are on their way: the shielded flush waits for them."""
    topic, group = "ShutOutage", "shut-outage"
    async with broker_behind_proxy(tmp_path, BrokerConfig(default_queues=QUEUES)) as (
        broker,
        proxy,
    ):
        async with Producer(
            namesrv=broker.address, group="shut-producer", default_topic_queue_nums=QUEUES
        ) as producer:
            await send_per_queue(producer, topic, [b"fast", b"slow"])
        done: dict[int, int] = {}
        started: set[int] = set()
        a = recording_member(broker.address, group, topic, done, started, instance_name="a")
        loop = asyncio.get_running_loop()
        with anyio.CancelScope() as scope, sigterm_cancels(scope):
            async with a:
                await wait_for(
                    lambda: len(started) == QUEUES, timeout=10.0, what="a slow handler everywhere"
                )
                proxy.stall()
                # Healed after the handlers finished: the flush is under way by then.
                loop.call_later(HANDLER + 0.5, proxy.heal)
                t0 = sigterm()
                await anyio.sleep_forever()
        elapsed = time.monotonic() - t0
        assert scope.cancelled_caught
        assert not proxy.stalled
        assert elapsed < GRACE + SLACK
        assert done == dict.fromkeys(range(QUEUES), 2)
        assert await committed(broker.address, group, topic) == done
        await assert_second_member_takes_every_queue(broker.address, group, topic)
