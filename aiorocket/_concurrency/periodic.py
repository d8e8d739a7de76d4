"""Fixed-rate periodic tasks with an early wake (rebalance on NOTIFY_CONSUMER_IDS_CHANGED)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from aiorocket.errors import RocketError

__all__ = ["Periodic"]

log = logging.getLogger("aiorocket")


class Periodic:
    """Runs ``fn`` every ``interval`` seconds until cancelled; :meth:`wake` runs it early.

    Expected failures (``RocketError`` and ``OSError``: a broker down, a timeout) are logged and
    the loop carries on at the next tick; anything else is a bug and propagates, crashing the
    owner's task group loudly.
    """

    def __init__(
        self,
        fn: Callable[[], Awaitable[object]],
        interval: float,
        *,
        name: str,
        run_first: bool = True,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self._fn = fn
        self.interval = interval
        self.name = name
        self._run_first = run_first
        self._wake = asyncio.Event()
        self._stopped = False
        self.runs = 0
        self.failures = 0

    def wake(self) -> None:
        """Run the function as soon as the current run (if any) ends."""
        self._wake.set()

    def stop(self) -> None:
        """Make :meth:`run` return after the current run, even if a cancellation was lost.

        Owners call this before cancelling the task: Python 3.11's ``wait_for`` can swallow a
        cancellation that races with its inner future, and a loop that survived its cancel
        would keep an owner's task group from ever closing.
        """
        self._stopped = True
        self._wake.set()

    async def run(self) -> None:
        """Loop forever (until cancelled)."""
        loop = asyncio.get_running_loop()
        if not self._run_first:
            await self._sleep(self.interval)
        while not self._stopped:
            started = loop.time()
            self._wake.clear()
            try:
                await self._fn()
            except (RocketError, OSError) as exc:
                self.failures += 1
                log.warning("%s failed: %s", self.name, exc)
            self.runs += 1
            await self._sleep(max(0.0, self.interval - (loop.time() - started)))

    async def _sleep(self, delay: float) -> None:
        # stop() sets the event too, so a stopped loop never waits here.
        if self._wake.is_set():
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._wake.wait()
