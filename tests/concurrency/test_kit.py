"""The concurrency kit: periodic runner and backoff."""

from __future__ import annotations

import asyncio
import random

import pytest

from aiorocket._concurrency import Backoff, Periodic
from aiorocket.errors import ConnectError


def _ticking(interval: float) -> tuple[Periodic, list[float]]:
    """A periodic runner every ``interval`` seconds, and the loop times it was called at."""
    calls: list[float] = []

    async def tick() -> None:
        calls.append(asyncio.get_running_loop().time())

    return Periodic(tick, interval, name="tick"), calls


async def test_periodic_runs_at_its_rate_and_wakes_early() -> None:
    p, calls = _ticking(10.0)
    task = asyncio.create_task(p.run())
    await asyncio.sleep(0.05)
    assert len(calls) == 1  # ran first, then waits 10 s
    p.wake()
    await asyncio.sleep(0.05)
    assert len(calls) == 2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_periodic_survives_expected_failures_and_crashes_on_bugs() -> None:
    n = 0

    async def flaky() -> None:
        nonlocal n
        n += 1
        if n < 3:
            raise ConnectError("down")
        if n == 3:
            raise ZeroDivisionError

    p = Periodic(flaky, 0.01, name="flaky")
    with pytest.raises(ZeroDivisionError):
        await asyncio.wait_for(p.run(), 2)
    assert p.failures == 2


def test_backoff_grows_caps_and_resets() -> None:
    b = Backoff(initial=0.1, maximum=1.0, factor=2, jitter=0.0, rng=random.Random(1))
    assert [round(b.next_delay(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    b.reset()
    assert b.next_delay() == pytest.approx(0.1)
    j = Backoff(initial=1, maximum=1, jitter=0.2, rng=random.Random(7))
    assert all(0.8 <= j.next_delay() <= 1.2 for _ in range(100))
    with pytest.raises(ValueError):
        Backoff(initial=0)


async def test_stop_ends_the_loop_even_without_a_cancellation() -> None:
    p, calls = _ticking(30.0)
    task = asyncio.create_task(p.run())
    await asyncio.sleep(0.02)
    p.stop()
    await asyncio.wait_for(task, 1)
    assert len(calls) in (1, 2)


async def test_stop_ends_the_loop_even_when_the_function_loses_a_cancellation() -> None:
    """A function that swallows one cancellation (as 3.11's ``wait_for`` can) and waits on is
    cancelled again at once: stop() keeps cancelling until run() returns."""
    entered = asyncio.Event()
    swallowed = 0

    async def stubborn() -> None:
        nonlocal swallowed
        entered.set()
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            swallowed += 1
        await asyncio.Event().wait()  # until cancelled

    p = Periodic(stubborn, 60.0, name="stubborn")
    task = asyncio.create_task(p.run())
    await asyncio.wait_for(entered.wait(), 1)
    p.stop()
    await asyncio.wait_for(task, 1)
    assert swallowed == 1
    assert task.exception() is None  # a stopped loop returns, it does not raise


async def test_a_loop_stopped_before_it_runs_never_calls_the_function() -> None:
    p, calls = _ticking(10.0)
    p.stop()
    await asyncio.wait_for(p.run(), 1)
    assert calls == []


async def test_a_cancelled_loop_raises_the_cancellation() -> None:
    async def tick() -> None:
        await asyncio.Event().wait()  # until cancelled

    p = Periodic(tick, 10.0, name="tick")
    task = asyncio.create_task(p.run())
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 1)
