"""R4 (docs/reliability.md): a network black hole of 30 s between the clients and the broker.

A ChaosProxy in front of the embedded broker stalls all traffic for 30 s without closing any
connection, while a producer sends and a consumer consumes. Pass when: every pending request
fails within its timeout (no `send` lasts longer than `send_timeout` + 0.5 s; no request stays
pending past its deadline), delivery resumes within 5 s of the heal, nothing acknowledged is
lost, and the process's task and file-descriptor counts come back to their baseline.

The stall lasts the full 30 s; the long poll is shortened (held 5 s, timeout 10 s instead of
15 s / 30 s) so that each pull task sees its pulls time out several times during the stall,
and the watchdog (2 × pull_timeout = 20 s) must not mistake that for a dead pull task.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from aiorocket import Admin, ConcurrentContext, Message, Producer, PushConsumer, ReceivedMessage
from aiorocket._remoting import Connection
from aiorocket.errors import RocketError
from tests._harness.wait import wait_for
from tests.reliability.helpers import first_consumer

from .helpers import Ledger, broker_behind_proxy, make_body, open_fds, task_count

STALL = 30.0
SEND_TIMEOUT = 3.0
TOPIC = "R4"

pytestmark = pytest.mark.slow


def connections(*clients: Producer | PushConsumer) -> list[Connection]:
    conns: list[Connection] = []
    for c in clients:
        pool = c._client._pool
        assert pool is not None
        conns.extend(pool._conns.values())
    return conns


def overdue(conns: list[Connection], slack: float) -> list[tuple[float, float]]:
    """Requests still pending ``slack`` seconds after their deadline: (timeout, overdue by)."""
    now = asyncio.get_running_loop().time()
    return [
        (timeout, now - deadline)
        for conn in conns
        for (_fut, deadline, timeout) in list(conn._pending.values())
        if now > deadline + slack
    ]


async def quiet_counts(ledger: Ledger) -> tuple[int, int]:
    await wait_for(lambda: not ledger.lost, timeout=20, what="every acknowledged message")
    # Settled: the same task and descriptor counts over half a second.
    seen = [(task_count(), open_fds())]

    def steady() -> bool:
        seen.append((task_count(), open_fds()))
        return len(seen) > 5 and len(set(seen[-6:])) == 1

    await wait_for(steady, timeout=10, what="steady task and fd counts", interval=0.1)
    return seen[-1]


async def test_r4_thirty_second_black_hole(tmp_path: Path) -> None:
    ledger = Ledger()
    async with broker_behind_proxy(tmp_path) as (broker, proxy):
        # the topic exists before the consumer starts, with 8 queues (8 pull loops)
        async with Admin(namesrv=broker.address) as admin:
            await admin.create_topic(TOPIC, queues=8)
        consumer = first_consumer(
            broker.address,
            "r4",
            pull_suspend_timeout=5.0,
            pull_timeout=10.0,
        )
        consumer.subscribe(TOPIC)

        @consumer.listener
        async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
            ledger.record(msgs)

        async with (
            Producer(namesrv=broker.address, group="r4p", send_timeout=SEND_TIMEOUT) as producer,
            consumer,
        ):
            durations: list[float] = []
            sent_at: dict[bytes, float] = {}
            counter = iter(range(10**9))

            async def send_one() -> None:
                body = make_body(next(counter))
                t0 = time.monotonic()
                try:
                    await producer.send(Message(TOPIC, body))
                except RocketError:
                    pass
                else:
                    ledger.acked.add(body)
                    sent_at[body] = t0
                finally:
                    durations.append(time.monotonic() - t0)

            async def sender(stop: asyncio.Event) -> None:
                while not stop.is_set():
                    await send_one()
                    await asyncio.sleep(0.05)

            for _ in range(40):
                await send_one()
            tasks0, fds0 = await quiet_counts(ledger)

            stop = asyncio.Event()
            sending = asyncio.create_task(sender(stop))
            flowing = len(ledger.acked) + 10
            await wait_for(lambda: len(ledger.acked) >= flowing, timeout=10, what="sends flowing")
            errors_before = consumer.statistics().pull_errors
            proxy.stall()
            stalled_at = time.monotonic()
            worst: list[tuple[float, float]] = []
            while time.monotonic() - stalled_at < STALL:
                await asyncio.sleep(0.25)
                worst += overdue(connections(producer, consumer), slack=0.5)
            pull_errors = consumer.statistics().pull_errors - errors_before
            proxy.heal()
            healed_at = time.monotonic()

            def resumed() -> bool:
                return any(
                    sent_at[b] >= healed_at and b in ledger.first_seen for b in list(sent_at)
                )

            recovery = await wait_for(
                resumed, timeout=5.0, what="a message sent after the heal delivered"
            )
            # Sending goes on after the recovery until 20 more messages made it through.
            await wait_for(
                lambda: (
                    sum(sent_at[b] >= healed_at and b in ledger.first_seen for b in sent_at) >= 20
                ),
                timeout=10,
                what="traffic after the heal",
            )
            stop.set()
            await sending
            await wait_for(lambda: not ledger.lost, timeout=20, what="every acknowledged message")

            deadline = time.monotonic() + 20
            while (task_count(), open_fds()) != (tasks0, fds0) and time.monotonic() < deadline:
                await asyncio.sleep(0.25)
            counts = (task_count(), open_fds())
            restarts = consumer.statistics().pull_restarts

    print(  # (shown with -s)
        f"R4: max send {max(durations):.3f} s, recovery {recovery:.3f} s, pull errors "
        f"{pull_errors}, tasks/fds {counts} vs {(tasks0, fds0)}, dups {ledger.duplicates}"
    )
    assert not worst, f"requests pending past their deadline (timeout, overdue by): {worst[:5]}"
    # 8 queues + the retry queue, each pull timing out every ~10 s during 30 s
    assert pull_errors >= 9 * 2, pull_errors
    assert max(durations) <= SEND_TIMEOUT + 0.5, f"a send took {max(durations):.2f} s"
    assert recovery <= 5.0
    assert not ledger.lost
    assert not ledger.corrupt
    assert counts == (tasks0, fds0), f"(tasks, fds) {counts} after, {(tasks0, fds0)} before"
    assert restarts == 0  # timed-out pulls are retried, not mistaken for dead tasks
