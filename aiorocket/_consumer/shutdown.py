"""A consumer's shutdown, written once as ordered steps that each kind of consumer fills in
(Java ``DefaultMQPushConsumerImpl.shutdown`` and ``DefaultLitePullConsumerImpl.shutdown`` share
this order): stop assigning → stop feeding → drain → flush offsets → release → unregister →
close. The consumer's `_shutdown` runs them in that order; the steps that follow a failed
start or a crash (flush, release, unregister, close) run in the same order.

Why this order: the held set is final before the feeds stop; running handlers finish (and
their acks go out) before offsets are flushed; orderly queues are unlocked only after the
flush, so the next owner reads the final offsets (``unlockAll`` after ``persistAll``); the
member leaves its group last, while its connections are still open.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["ShutdownSteps"]


def _nothing() -> None:
    return None


async def _done() -> None:
    return None


async def _no_drain(grace: float) -> None:
    return None


@dataclass(frozen=True, slots=True)
class ShutdownSteps:
    """What one kind of consumer does at each step of its shutdown; a step it has no use
    for is left out (a POP consumer holds no queues and flushes no offsets)."""

    #: 1. the held set becomes final (rebalance and lock renewal stop; readers are woken)
    stop_assigning: Callable[[], None] = _nothing
    #: 2. no more pulls or pops (under the queue table's lock)
    stop_feeding: Callable[[], Awaitable[None]] = _done
    #: 3. running handlers finish within the grace period; their acks go out
    drain: Callable[[float], Awaitable[None]] = _no_drain
    #: 4. the offsets of held queues, persisted and awaited (shielded, bounded)
    flush_offsets: Callable[[], Awaitable[None]] | None = None
    #: 5. what the member holds on brokers is given back: orderly queue locks, lite
    #: subscriptions (bounded by the step itself)
    release: Callable[[], Awaitable[None]] = _done
    #: after the last step, even when the shutdown failed: local resources (the
    #: broadcasting offsets file's lock)
    finalize: Callable[[], None] = _nothing
