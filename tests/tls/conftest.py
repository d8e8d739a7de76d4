"""Fixtures of the TLS tests: one set of test certificates per session, and embedded brokers
that use them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aiorocket.embedded import EmbeddedBroker
from tests.tls.pki import Pki, make_pki, tls_config


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A private CA and certificates signed by it (see :class:`~tests.tls.pki.Pki`)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
async def enforcing(pki: Pki, tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    """A broker with a certificate and no mode: enforcing is the default then."""
    async with EmbeddedBroker(data_dir=tmp_path / "b", config=tls_config(pki)) as b:
        yield b


@pytest.fixture
async def permissive(pki: Pki, tmp_path: Path) -> AsyncIterator[EmbeddedBroker]:
    """A broker serving TLS and plain clients on one port."""
    config = tls_config(pki, tls_mode="permissive")
    async with EmbeddedBroker(data_dir=tmp_path / "b", config=config) as b:
        yield b
