"""Fixtures of the TLS tests: one set of test certificates per session."""

from __future__ import annotations

import pytest

from tests.tls.pki import Pki, make_pki


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A private CA and certificates signed by it (see :class:`~tests.tls.pki.Pki`)."""
    return make_pki(tmp_path_factory.mktemp("pki"))
