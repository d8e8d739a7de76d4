"""A broker on a `ManualClock`: tests of what the broker does when time passes (delay levels,
invisible times, revive, transaction checks) move its clock on instead of sleeping."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiorocket.embedded import BrokerConfig, EmbeddedBroker, ManualClock

__all__ = ["advance", "manual_broker"]


@asynccontextmanager
async def manual_broker(config: BrokerConfig, tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    """A running broker as the suite's ``broker`` fixture makes it, on a `ManualClock`."""
    clock = ManualClock()
    async with EmbeddedBroker(data_dir=tmp_path / "broker", config=config, clock=clock) as b:
        yield b


async def advance(broker: EmbeddedBroker, seconds: float) -> None:
    """Move the clock of ``broker`` (made by `manual_broker`) on by ``seconds``: what comes
    due meanwhile is done when this returns."""
    clock = broker.clock
    assert isinstance(clock, ManualClock), "the broker runs on the real clock"
    await clock.advance(seconds)
