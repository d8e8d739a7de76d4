"""Fixtures of the whole suite: ``broker`` (an embedded broker) and its ``broker_config``.

``broker`` is the ``embedded_broker`` fixture of :mod:`aiorocket.testing.plugin` without the
chaos proxy, configured by ``broker_config`` (defaults) rather than ``embedded_broker_config``
(fast delays), which the plugin's own tests keep as shipped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocket.embedded import BrokerConfig, EmbeddedBroker


@pytest.fixture
def broker_config() -> BrokerConfig:
    """The configuration of ``broker``: defaults; a test module overrides this fixture."""
    return BrokerConfig()


@pytest.fixture
async def broker(broker_config: BrokerConfig, tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    """A running embedded broker + name server on a free port, data under ``tmp_path``."""
    async with EmbeddedBroker(data_dir=tmp_path / "broker", config=broker_config) as b:
        yield b
