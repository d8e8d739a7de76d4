"""Fixtures of the whole suite: ``broker`` (an embedded broker), configured by the ``broker``
marker.

``broker`` is the ``embedded_broker`` fixture of :mod:`aiorocket.testing.plugin` without the
chaos proxy, configured by the closest ``@pytest.mark.broker(**BrokerConfig fields)`` (a
test's own, else its class's or module's ``pytestmark``, else defaults) rather than
``embedded_broker_config`` (fast delays), which the plugin's own tests keep as shipped. With ``@pytest.mark.manual_clock``
the broker runs on a `ManualClock` that the test moves on (``tests._harness.clock.advance``)
instead of sleeping through delays, invisible times and checks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocket.embedded import BrokerConfig, EmbeddedBroker, ManualClock


def marked_broker_config(node: pytest.Item) -> BrokerConfig:
    """The ``BrokerConfig`` of ``node``'s closest ``broker`` marker (defaults without one)."""
    marker = node.get_closest_marker("broker")
    return BrokerConfig(**marker.kwargs) if marker is not None else BrokerConfig()


@pytest.fixture
async def broker(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    """A running embedded broker + name server on a free port, data under ``tmp_path``,
    configured by the test's closest ``broker`` marker, on a `ManualClock` when the test is
    marked ``manual_clock``."""
    config = marked_broker_config(request.node)
    clock = ManualClock() if request.node.get_closest_marker("manual_clock") else None
    async with EmbeddedBroker(data_dir=tmp_path / "broker", config=config, clock=clock) as b:
        yield b
