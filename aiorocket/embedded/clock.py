"""The embedded broker's time: monotonic seconds, wall-clock milliseconds, and waiting.

Everything the broker does *because time passed* reads this clock: store times, delay levels
and timer messages coming due, POP invisible times and revive, transaction checks, lite
topics coming due and expiring. `Clock` is the real one (the default); `ManualClock` jumps
ahead when a test moves it with [`advance`][aiorocket.embedded.ManualClock.advance], so a
test of a 10 s delay level takes no 10 s.

What measures a *client's* patience stays on the event loop's real time: held pulls and
POPs (the client waits for their answer with its own timer), heartbeats and channel expiry,
queue-lock leases (the client renews them on its own timer).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol

from aiorocket._names import now_ms

__all__ = ["Clock", "ManualClock", "TimerHandle"]

#: loop turns `ManualClock.advance` gives woken tasks at most before it goes on, and after it
#: reached its target (each step of a delivery — wake, read, re-store, wake the next waiter —
#: is one turn or a few)
_SETTLE_TURNS = 20


class TimerHandle(Protocol):
    """What `Clock.call_later` returns: a callback that can still be called off."""

    def cancel(self) -> None:
        """Call it off (nothing happens if it already ran)."""


class Clock:
    """The real clock: ``time.monotonic``, the wall clock, the event loop's timers.

    A broker built without a clock uses one of these; every method behaves as the standard
    library call it wraps.
    """

    def monotonic(self) -> float:
        """Monotonic seconds (only differences mean anything)."""
        return time.monotonic()

    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (store times, due times)."""
        return now_ms()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (0 or less: yield to the loop once)."""
        await asyncio.sleep(max(seconds, 0.0))

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        """Wait until ``event`` is set or ``timeout`` seconds pass; returns whether it is set."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(max(timeout, 0.0)):
                await event.wait()
        return event.is_set()

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Call ``callback(*args)`` on the running loop in ``delay`` seconds."""
        return asyncio.get_running_loop().call_later(max(delay, 0.0), callback, *args)


class _ManualTimer:
    """A callback of a `ManualClock`, due at its monotonic ``when``."""

    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class ManualClock(Clock):
    """A clock a test moves on by hand: for tests of what the broker does when time passes
    (delay levels, timer messages, invisible times, transaction checks).

    ```python
    clock = ManualClock()
    async with EmbeddedBroker(clock=clock) as broker:
        ...  # send a message with delay level 3 (10 s)
        await clock.advance(10)  # the broker delivers it now
    ```

    By default it runs at the pace of real time from the real time of its creation, and
    [`advance`][aiorocket.embedded.ManualClock.advance] jumps it ahead: the broker's time is
    then never behind a client's, which compares the receipt handles it got with its own
    wall clock. A ``frozen`` one moves only when advanced (for code that reads no other
    clock). Sleepers and timers whose time has come are woken in due order, and a woken
    sleeper runs its step before the clock moves past it. A clock serves one event loop (its
    timers run there): make one per test.

    Args:
        start_ms: the wall-clock milliseconds it starts at (``None``: now).
        frozen: stand still between advances instead of running with real time.
    """

    def __init__(self, *, start_ms: int | None = None, frozen: bool = False) -> None:
        self._start_ms = now_ms() if start_ms is None else start_ms
        self._frozen = frozen
        self._real0 = time.monotonic()
        self._offset = 0.0  # seconds advanced (and absorbed while advancing)
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()
        # Sleepers `advance` woke that have not resumed yet: it waits for them before it moves
        # the clock on (a periodic task woken a thousand times costs a turn or two each).
        self._waking: set[asyncio.Future[None]] = set()
        # Running with real time: one loop timer at the earliest deadline fires what is due.
        self._alarm: asyncio.TimerHandle | None = None
        self._alarm_at = float("inf")

    def _real(self) -> float:
        return 0.0 if self._frozen else time.monotonic() - self._real0

    def monotonic(self) -> float:
        """Seconds since creation: the real ones (none when frozen) plus those advanced."""
        return self._real() + self._offset

    def now_ms(self) -> int:
        """The start time plus `monotonic` in milliseconds."""
        # A hair added before flooring: 0.1 + 0.2 s advanced must read 300 ms, not 299.
        return self._start_ms + int(self.monotonic() * 1000 + 1e-6)

    async def sleep(self, seconds: float) -> None:
        """Wait until the clock has moved on by ``seconds`` (0 or less: yield once)."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(seconds, _wake, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._waking.discard(fut)

    async def wait(self, event: asyncio.Event, timeout: float) -> bool:
        """Wait until ``event`` is set or the clock has moved on by ``timeout`` seconds;
        returns whether it is set."""
        if event.is_set():
            return True
        waiter = asyncio.ensure_future(event.wait())
        timed_out: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = self.call_later(timeout, _wake, timed_out)
        try:
            await asyncio.wait((waiter, timed_out), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            waiter.cancel()
            timed_out.cancel()
            self._waking.discard(timed_out)
        return event.is_set()

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Call ``callback(*args)`` once the clock has moved on by ``delay`` seconds."""
        timer = _ManualTimer(self.monotonic() + max(delay, 0.0), callback, args)
        heapq.heappush(self._timers, (timer.when, next(self._seq), timer))
        self._set_alarm()
        return timer

    def _set_alarm(self) -> None:
        if self._frozen:
            return
        while self._timers and self._timers[0][2].cancelled:
            heapq.heappop(self._timers)
        first = self._timers[0][0] if self._timers else float("inf")
        if first == self._alarm_at:
            return
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = None
        self._alarm_at = first
        if self._timers:
            loop = asyncio.get_running_loop()
            self._alarm = loop.call_later(max(first - self.monotonic(), 0.0), self._ring)

    def _ring(self) -> None:
        # Real time reached the earliest deadline: fire everything due, as the loop would.
        self._alarm = None
        self._alarm_at = float("inf")
        now = self.monotonic()
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if not timer.cancelled:
                timer.callback(*timer.args)
        self._set_alarm()

    async def advance(self, seconds: float) -> None:
        """Move the clock on by ``seconds``: every timer due by then runs, earliest first,
        with the clock reading its due time, and a sleeper it wakes runs before the next (so a
        task that sleeps again is woken again within the same advance); what they did has
        settled when this returns.

        Raises:
            ValueError: ``seconds`` is negative (time does not go back).
        """
        if seconds < 0:
            raise ValueError(f"cannot advance by {seconds} s: time does not go back")
        target = self.monotonic() + seconds
        while self._timers and self._timers[0][0] <= target:
            when, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            # The clock reads the due time (or later, when real time already passed it).
            self._offset = max(self._offset, when - self._real())
            if timer.callback is _wake and not timer.args[0].done():
                self._waking.add(timer.args[0])
            timer.callback(*timer.args)
            # Until the woken sleeper ran its step (and slept again, most often), then a turn
            # more for what that step woke.
            for _ in range(_SETTLE_TURNS):
                if not self._waking:
                    break
                await asyncio.sleep(0)
            await asyncio.sleep(0)
        self._offset = max(self._offset, target - self._real())
        self._set_alarm()
        await _settle()

    @property
    def pending(self) -> int:
        """How many sleepers and timers wait for the clock (cancelled ones excluded)."""
        return sum(not t.cancelled for _, _, t in self._timers)


async def _settle() -> None:
    # Woken tasks run in the loop turns after their future is set; a few turns let them
    # finish their step (and sleep again) before the clock moves on.
    for _ in range(_SETTLE_TURNS):
        await asyncio.sleep(0)
