"""Polling until a condition holds: the one helper every test waits with."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

__all__ = ["wait_for", "wait_for_blocking"]


async def wait_for(
    cond: Callable[[], object], *, timeout: float, what: str, interval: float = 0.01
) -> float:
    """Call ``cond`` (and await its result when it is awaitable) every ``interval`` seconds
    until it is true; returns the seconds it took.

    Raises:
        AssertionError: not true within ``timeout`` seconds.
    """
    start = time.monotonic()
    while True:
        result = cond()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)


def wait_for_blocking(
    cond: Callable[[], object], *, timeout: float, what: str, interval: float = 0.05
) -> float:
    """:func:`wait_for` for a thread without an event loop (it sleeps between checks).

    Raises:
        AssertionError: not true within ``timeout`` seconds.
    """
    start = time.monotonic()
    while not cond():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)
    return time.monotonic() - start
