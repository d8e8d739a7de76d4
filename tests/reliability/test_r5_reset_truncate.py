"""R5 (docs/reliability.md): connections reset (TCP RST) and frames cut in half mid-stream.

Pass when: calls pending on a connection that dies fail with a connection error within 1 s
(not at their timeout), nothing partial reaches a handler (every body carries a checksum),
the clients reconnect, and every acknowledged message is delivered.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from aiorocket import Message, Producer
from aiorocket.errors import ConnectionClosedError, RocketError
from tests._harness.wait import wait_for

from .helpers import Ledger, broker_behind_proxy, make_body, recording_consumer

TOPIC = "R5"


async def test_r5_reset_fails_pending_calls_at_once_and_clients_reconnect(tmp_path: Path) -> None:
    ledger = Ledger()
    async with broker_behind_proxy(tmp_path) as (broker, proxy):
        consumer = recording_consumer(broker.address, "r5", TOPIC, ledger)
        async with (
            Producer(namesrv=broker.address, group="r5p", retries=0, send_timeout=5.0) as p,
            consumer,
        ):
            for i in range(20):
                await p.send(Message(TOPIC, make_body(i)))
                ledger.acked.add(make_body(i))
            await wait_for(lambda: not ledger.lost, timeout=10, what="warm-up deliveries")
            errors_before = consumer.statistics().pull_errors

            proxy.stall()  # so that calls are pending when the RST comes
            pending = asyncio.create_task(p.send(Message(TOPIC, make_body(999))))
            await asyncio.sleep(0.5)
            assert not pending.done()
            assert proxy.reset() == 2  # the producer's and the consumer's connections
            reset_at = time.monotonic()
            proxy.heal()
            exc = await asyncio.wait_for(asyncio.gather(pending, return_exceptions=True), 5)
            failed_after = time.monotonic() - reset_at
            assert isinstance(exc[0], ConnectionClosedError), exc
            assert failed_after <= 1.0
            # the consumer's held pulls failed the same way, at once
            await wait_for(
                lambda: consumer.statistics().pull_errors > errors_before,
                timeout=1.0,
                what="pull errors",
            )

            for i in range(20, 40):  # reconnects
                await p.send(Message(TOPIC, make_body(i)))
                ledger.acked.add(make_body(i))
            await wait_for(lambda: not ledger.lost, timeout=10, what="deliveries after the reset")
    assert not ledger.corrupt


async def test_r5_half_frames_never_reach_a_handler(tmp_path: Path) -> None:
    ledger = Ledger()
    failures: list[tuple[str, float]] = []
    async with broker_behind_proxy(tmp_path) as (broker, proxy):
        consumer = recording_consumer(broker.address, "r5t", TOPIC, ledger, pull_batch_size=32)
        async with (
            Producer(namesrv=broker.address, group="r5p", retries=0, send_timeout=5.0) as p,
            consumer,
        ):
            n = 0

            async def send_some(count: int) -> None:
                nonlocal n
                for _ in range(count):
                    body = make_body(n, size=1024)  # pull responses of up to 32 KiB
                    n += 1
                    t0 = time.monotonic()
                    try:
                        await p.send(Message(TOPIC, body))
                    except RocketError as exc:
                        failures.append((type(exc).__name__, time.monotonic() - t0))
                    else:
                        ledger.acked.add(body)

            await send_some(50)
            await wait_for(lambda: not ledger.lost, timeout=10, what="warm-up deliveries")
            pull_failures = 0
            for _round in range(3):
                consumer.pause()  # a backlog, so that the next pull answers carry messages
                await send_some(100)
                target = proxy.truncated + proxy.truncate()
                errors = consumer.statistics().pull_errors
                consumer.resume()
                await send_some(20)
                await wait_for(lambda t=target: proxy.truncated >= t, timeout=10, what="frames cut")  # type: ignore[misc]
                await wait_for(lambda: not ledger.lost, timeout=15, what="deliveries after the cut")
                pull_failures += consumer.statistics().pull_errors > errors
            cut = proxy.truncated
    assert cut >= 6
    assert pull_failures == 3  # each round cut the consumer's connection under a pull
    assert not ledger.corrupt, "a partial message reached the handler"
    assert not ledger.lost
    # a send whose response was cut failed with a connection error at once, not at 5 s
    assert all(name == "ConnectionClosedError" and took < 1.0 for name, took in failures), failures
