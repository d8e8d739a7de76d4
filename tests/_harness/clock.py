"""Moving the clock of a broker on a `ManualClock` (the ``broker`` fixture of a test marked
``manual_clock``): tests of what the broker does when time passes (delay levels, invisible
times, revive, transaction checks) move its clock on instead of sleeping."""

from __future__ import annotations

from aiorocket.embedded import EmbeddedBroker, ManualClock

__all__ = ["advance"]


async def advance(broker: EmbeddedBroker, seconds: float) -> None:
    """Move the clock of ``broker`` on by ``seconds``: what comes due meanwhile is done when
    this returns."""
    clock = broker.clock
    assert isinstance(clock, ManualClock), "the broker runs on the real clock"
    await clock.advance(seconds)
