"""Cleanup that must run even while the caller is being cancelled, but never forever."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

__all__ = ["bounded_cleanup"]

log = logging.getLogger("aiorocket")


async def bounded_cleanup(aw: Awaitable[object], *, timeout: float, what: str) -> bool:
    """Await ``aw`` shielded from cancellation, for at most ``timeout`` seconds.

    Used for the last steps of a shutdown (flush offsets, unlock queues, unregister): they must
    not be cut short by the cancellation that triggered the shutdown, and must not hang it.
    Failures are logged, not raised. Returns True when ``aw`` completed without error.
    If the caller was cancelled meanwhile, the cancellation is re-raised after the cleanup.
    """
    task = asyncio.ensure_future(aw)
    try:
        await asyncio.wait_for(asyncio.shield(task), timeout)
    except asyncio.CancelledError:
        # The caller is cancelled: let the cleanup finish (bounded), then propagate.
        try:
            await asyncio.wait_for(task, timeout)
        except Exception:
            log.warning("%s failed during cancellation", what, exc_info=True)
        raise
    except TimeoutError:
        task.cancel()
        log.warning("%s did not finish within %.1f s", what, timeout)
        return False
    except Exception:
        log.warning("%s failed", what, exc_info=True)
        return False
    return True
