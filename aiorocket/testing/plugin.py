"""The pytest plugin of ``aiorocket.testing`` (entry point ``aiorocket`` in group ``pytest11``).

Fixtures (function scope, on the test's event loop; they need pytest-asyncio, in strict or
auto mode):

``embedded_broker_config``
    The [`BrokerConfig`][aiorocket.embedded.BrokerConfig] of ``embedded_broker``: defaults, except
        that
    every delay level is 100 ms, so retried messages come back at once. Override the fixture in
    a ``conftest.py`` to change it. As a Java name server, the broker does not create a topic
    when a client looks it up: a consumer started before its topic exists finds it about a
    second after the first send (``missing_route_retry``). Create the topic first
    (``Admin.create_topic``), or set ``create_topics_on_lookup=True`` here, to skip that wait.
``embedded_broker``
    A running [`EmbeddedBroker`][aiorocket.embedded.EmbeddedBroker] (name server and broker on one
    free port of 127.0.0.1, data in the test's ``tmp_path``); clients use
    ``embedded_broker.address`` as their name server. Its fault hooks (``redeliver``,
    ``notify_rebalance``, ``drop_below``, ``fail_next``) drive the situations a test wants to see
    handled.
``chaos_proxy``
    A running [`ChaosProxy`][aiorocket.testing.ChaosProxy]. When the test also uses
    ``embedded_broker``, the broker is started behind it (it advertises the proxy's port and
    ``embedded_broker.address`` is the proxy's address), so every client connection passes
    through the proxy. Alone, it has no upstream until the test sets ``chaos_proxy.upstream``.

A fixture of the same name in a ``conftest.py`` or test module takes precedence over these, as
pytest always lets the closer definition win.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest

if TYPE_CHECKING:
    from aiorocket.embedded import BrokerConfig, EmbeddedBroker
    from aiorocket.testing.proxy import ChaosProxy

_HAVE_PYTEST_ASYNCIO = importlib.util.find_spec("pytest_asyncio") is not None

__all__ = ["chaos_proxy", "embedded_broker", "embedded_broker_config"]

_F = TypeVar("_F", bound=Callable[..., Any])

#: every delay level of the fixture's broker (retries come back fast)
FIXTURE_DELAY = "100ms"


def _async_fixture(fn: _F) -> _F:
    if _HAVE_PYTEST_ASYNCIO:
        import pytest_asyncio

        return cast(_F, pytest_asyncio.fixture(fn))

    def missing() -> None:  # pragma: no cover - the suite runs with pytest-asyncio
        pytest.fail("aiorocket's pytest fixtures need pytest-asyncio (pip install pytest-asyncio)")

    return cast(_F, pytest.fixture(name=fn.__name__)(missing))


@pytest.fixture
def embedded_broker_config() -> BrokerConfig:
    """The configuration of ``embedded_broker`` (override it in a conftest.py)."""
    from aiorocket.embedded import BrokerConfig, parse_delay_levels

    return BrokerConfig(delay_levels=parse_delay_levels(" ".join([FIXTURE_DELAY] * 18)))


@_async_fixture
async def chaos_proxy() -> AsyncIterator[ChaosProxy]:
    """A running ChaosProxy (in front of ``embedded_broker`` when the test uses both)."""
    from aiorocket.testing.proxy import ChaosProxy

    async with ChaosProxy() as proxy:
        yield proxy


@pytest.fixture
def _aiorocket_broker_proxy(request: pytest.FixtureRequest) -> ChaosProxy | None:
    # Set up outside the event loop: an async fixture cannot set up another one from inside.
    if "chaos_proxy" in request.fixturenames:
        proxy: ChaosProxy = request.getfixturevalue("chaos_proxy")
        return proxy
    return None


@_async_fixture
async def embedded_broker(
    _aiorocket_broker_proxy: ChaosProxy | None,
    embedded_broker_config: BrokerConfig,
    tmp_path: Path,
) -> AsyncIterator[EmbeddedBroker]:
    """A running embedded broker + name server (behind ``chaos_proxy`` when the test uses
    it)."""
    from aiorocket.embedded import EmbeddedBroker

    config = embedded_broker_config
    proxy = _aiorocket_broker_proxy
    if proxy is not None:
        config = dataclasses.replace(config, advertised_port=proxy.port)
    async with EmbeddedBroker(data_dir=tmp_path / "aiorocket-broker", config=config) as broker:
        if proxy is not None:
            proxy.upstream = broker.listen_address
        yield broker
