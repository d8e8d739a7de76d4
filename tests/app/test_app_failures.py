"""A failing handler is logged once per failure with its traceback, at most one traceback per
handler per ``failure_log_interval``, the failures in between counted in the next line."""

from __future__ import annotations

import logging
import re

import pytest

from aiorocket import App
from aiorocket.embedded import EmbeddedBroker
from tests._harness.wait import wait_for

FAST = {
    "rebalance_interval": 0.5,
    "offset_persist_interval": 0.2,
    "pull_suspend_timeout": 0.5,
    "shutdown_grace": 1.0,
    "consume_from": "first",
}


pytestmark = pytest.mark.broker(delay_levels=(0.2, 0.2, 0.2, 0.2))


_COUNTED = re.compile(r"\((\d+) more failure\(s\) since the last traceback\)")


def warnings_of(caplog: pytest.LogCaptureFixture, handler: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith(f"handler {handler} failed")
    ]


async def test_failures_carry_their_traceback_rate_limited_per_handler(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="aiorocket")
    app = App(namesrv=broker.address, failure_log_interval=1.0, **FAST)
    calls = {"poison": 0, "other": 0}

    @app.subscriber("failT", group="failG", tags="poison")
    async def poison(body: dict[str, str]) -> None:
        calls["poison"] += 1
        body["missing"]  # KeyError('missing'), every time

    @app.subscriber("failT", group="failG", tags="other")
    async def other(body: str) -> None:
        calls["other"] += 1
        raise RuntimeError("always")

    async with app:
        await app.publish("failT", {"a": "b"}, tags="poison")
        await app.publish("failT", "x", tags="other")
        # a traceback, failures logged without one, then the next traceback counting them
        # (how many failures fall in one interval depends on the retry timing)
        await wait_for(
            lambda: any(_COUNTED.search(r.getMessage()) for r in warnings_of(caplog, "poison")),
            timeout=20.0,
            what="a traceback counting the failures before it",
        )
        await wait_for(lambda: calls["other"] >= 1, timeout=20.0, what="the other handler")
    poisons = warnings_of(caplog, "poison")
    at = next(i for i, r in enumerate(poisons) if _COUNTED.search(r.getMessage()))
    first, second = poisons[at - 1], poisons[at]
    for record in (first, second):
        assert record.name == "aiorocket.app"
        assert record.exc_info is not None
        assert isinstance(record.exc_info[1], KeyError)
        trace = caplog.handler.formatter.formatException(record.exc_info)  # type: ignore[union-attr]
        assert "in poison" in trace
        assert 'body["missing"]' in trace
    assert "handed back for a retry" in poisons[0].getMessage()
    # the failures between the two tracebacks: DEBUG lines without one, counted in the second
    between = [
        r
        for r in caplog.records
        if first.created <= r.created <= second.created
        and r.levelno == logging.DEBUG
        and r.getMessage().startswith("handler poison failed")
    ]
    assert all(r.exc_info is None for r in between)
    m = _COUNTED.search(second.getMessage())
    assert m is not None
    assert int(m.group(1)) == len(between) >= 1
    assert second.created - first.created >= 1.0
    # the other handler has its own limit: its first failure has its traceback at once
    (other_first, *_) = warnings_of(caplog, "other")
    assert other_first.exc_info is not None
    assert isinstance(other_first.exc_info[1], RuntimeError)
    # one line per failure: nothing else logged a KeyError traceback
    keyerrors = [
        r for r in caplog.records if r.exc_info is not None and isinstance(r.exc_info[1], KeyError)
    ]
    assert all(
        r.name == "aiorocket.app" and r.getMessage().startswith("handler poison") for r in keyerrors
    )
