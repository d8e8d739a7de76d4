"""Fixed-rate periodic tasks with an early wake (rebalance on NOTIFY_CONSUMER_IDS_CHANGED)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import anyio

from aiorocket.errors import RocketError

__all__ = ["Periodic"]

log = logging.getLogger("aiorocket")


class Periodic:
    """Runs ``fn`` every ``interval`` seconds until `stop` (or a cancellation);
    `wake` runs it early.

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
        # Level-triggered: once stopped, every await inside run() is cancelled until it
        # returns, so a cancellation that ``fn`` loses (3.11's ``wait_for``) cannot keep the
        # loop, and its owner's task group, alive.
        self._scope = anyio.CancelScope()
        self.runs = 0
        self.failures = 0

    def wake(self) -> None:
        """Run the function as soon as the current run (if any) ends."""
        self._wake.set()

    def stop(self) -> None:
        """End `run` now: the current run of the function is cancelled and `run`
        returns normally. Works before `run` started too."""
        self._scope.cancel()

    async def run(self) -> None:
        """Loop until `stop` (returns) or a cancellation (raises it)."""
        with self._scope:
            if not self._run_first:
                await self._sleep(self.interval)
            while not self._scope.cancel_called:
                started = anyio.current_time()
                self._wake.clear()
                try:
                    await self._fn()
                except (RocketError, OSError) as exc:
                    self.failures += 1
                    log.warning("%s failed: %s", self.name, exc)
                self.runs += 1
                await self._sleep(max(0.0, self.interval - (anyio.current_time() - started)))

    async def _sleep(self, delay: float) -> None:
        if self._wake.is_set():
            return
        with anyio.move_on_after(delay):
            await self._wake.wait()
