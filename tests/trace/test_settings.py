"""The trace settings: on clients, and an App's from ``AIOROCKET_TRACE``."""

from __future__ import annotations

import pytest

from aiorocket.app.settings import load_app_settings
from aiorocket.settings import ConsumerSettings, ProducerSettings


def test_client_settings_default_off() -> None:
    s = ProducerSettings(namesrv=("127.0.0.1:9876",))
    assert (s.trace, s.trace_topic) == (False, None)
    c = ConsumerSettings(namesrv=("127.0.0.1:9876",), group="g", trace=True, trace_topic="T")
    assert (c.trace, c.trace_topic) == (True, "T")


def test_app_trace_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "trace" not in load_app_settings({}).client_settings()
    monkeypatch.setenv("AIOROCKET_TRACE", "true")
    monkeypatch.setenv("AIOROCKET_TRACE_TOPIC", "MyTrace")
    base = load_app_settings({}).client_settings()
    assert (base["trace"], base["trace_topic"]) == (True, "MyTrace")
