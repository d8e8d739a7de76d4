"""The broker's clock: `ManualClock` wakes sleepers, waiters and timers when advanced, in due
order and never before, and by default runs with real time meanwhile; `Clock` is the real
time."""

from __future__ import annotations

import asyncio
import time

import pytest

from aiorocket.embedded import Clock, ManualClock


async def test_real_clock_reads_and_waits_real_time() -> None:
    clock = Clock()
    assert abs(clock.now_ms() - time.time() * 1000) < 1000
    assert clock.monotonic() <= time.monotonic()
    event = asyncio.Event()
    assert await clock.wait(event, 0.01) is False
    event.set()
    assert await clock.wait(event, 10) is True
    fired: list[int] = []
    clock.call_later(0, fired.append, 1)
    await clock.sleep(0.01)
    assert fired == [1]


async def test_manual_clock_stands_still_until_advanced() -> None:
    clock = ManualClock(start_ms=1_000_000, frozen=True)
    assert (clock.now_ms(), clock.monotonic()) == (1_000_000, 0.0)
    seconds = 5.0  # of the manual clock: no real time
    sleeper = asyncio.create_task(clock.sleep(seconds))
    await asyncio.sleep(0.05)  # real time passes: the clock does not
    assert not sleeper.done()
    await clock.advance(4.9)
    assert not sleeper.done()
    await clock.advance(0.1)
    assert sleeper.done()
    assert clock.now_ms() == 1_005_000
    assert clock.pending == 0


async def test_manual_clock_wakes_in_due_order_reading_each_due_time() -> None:
    clock = ManualClock(start_ms=0, frozen=True)
    seen: list[tuple[str, int]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        seen.append((name, clock.now_ms()))

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in (("b", 2), ("a", 1), ("c", 3))]
    await asyncio.sleep(0)
    clock.call_later(1.5, lambda: seen.append(("timer", clock.now_ms())))
    await clock.advance(10)
    assert seen == [("a", 1000), ("timer", 1500), ("b", 2000), ("c", 3000)]
    await asyncio.gather(*tasks)


async def test_a_task_sleeping_again_is_woken_within_one_advance() -> None:
    clock = ManualClock(start_ms=0, frozen=True)
    ticks: list[int] = []

    async def ticker(period: float) -> None:
        while True:
            await clock.sleep(period)
            ticks.append(clock.now_ms())

    task = asyncio.create_task(ticker(1.0))
    await asyncio.sleep(0)
    await clock.advance(3.5)
    assert ticks == [1000, 2000, 3000]
    task.cancel()


async def test_manual_wait_returns_on_the_event_or_the_advanced_timeout() -> None:
    clock = ManualClock(frozen=True)
    event = asyncio.Event()
    waiting = asyncio.create_task(clock.wait(event, 2))
    await asyncio.sleep(0)
    event.set()
    assert await waiting is True
    event.clear()
    waiting = asyncio.create_task(clock.wait(event, 2))
    await asyncio.sleep(0)
    await clock.advance(1)
    assert not waiting.done()
    await clock.advance(1)
    assert await waiting is False
    assert clock.pending == 0


async def test_cancelled_timer_and_sleeper_do_not_run() -> None:
    clock = ManualClock(frozen=True)
    fired: list[int] = []
    second = 1.0  # of the manual clock
    clock.call_later(second, fired.append, 1).cancel()
    sleeper = asyncio.create_task(clock.sleep(second))
    await asyncio.sleep(0)
    sleeper.cancel()
    await asyncio.sleep(0)
    assert clock.pending == 0
    await clock.advance(2)
    assert fired == []
    assert sleeper.cancelled()


async def test_manual_clock_does_not_go_back() -> None:
    with pytest.raises(ValueError, match="does not go back"):
        await ManualClock().advance(-1)


async def test_a_running_manual_clock_keeps_real_time_and_jumps_when_advanced() -> None:
    clock = ManualClock()
    started_ms, started = clock.now_ms(), time.monotonic()
    fired: list[float] = []
    clock.call_later(0.05, lambda: fired.append(time.monotonic() - started))
    hour = 3600.0
    long_sleep = asyncio.create_task(clock.sleep(hour))
    await asyncio.sleep(0.2)  # real time fires the short timer, not the hour
    assert len(fired) == 1
    assert fired[0] >= 0.04
    assert not long_sleep.done()
    await clock.advance(hour)
    assert long_sleep.done()
    assert clock.now_ms() - started_ms >= 3_600_200
    assert clock.now_ms() - time.time() * 1000 >= 3_599_000
    assert clock.pending == 0
