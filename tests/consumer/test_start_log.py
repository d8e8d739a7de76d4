"""A consumer's start is one INFO line saying what it holds (before: one line per queue
added, then a count), and a later change of its queues one more line."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from tests._harness.wait import wait_for

FAST: dict[str, Any] = {"rebalance_interval": 0.3, "shutdown_grace": 0.5}


async def on(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None: ...


def consumer(addr: str) -> rmq.PushConsumer:
    c = rmq.PushConsumer(group="logG", namesrv=addr, **FAST)
    c.subscribe("logT", "created || paid")
    c.listener(on)
    return c


def infos(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "aiorocket.consumer" and r.levelno == logging.INFO
    ]


async def test_start_is_one_line_naming_what_it_holds(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic("logT", queues=4)
    first = consumer(broker.address)
    caplog.set_level(logging.INFO, logger="aiorocket")
    await first.start()
    try:
        (line,) = infos(caplog)
        assert line.startswith("consumer logG started as "), line
        assert "(clustering, concurrently, pull)" in line
        assert "logT 'created || paid' on broker-a:0-3" in line
        assert "%RETRY%logG '*' on broker-a:0" in line
        # a second member takes half: the first says so in one line
        caplog.clear()
        async with consumer(broker.address):
            # 2 of logT's 4 queues, and the retry queue
            await wait_for(lambda: len(first.held()) == 3, timeout=30, what="the rebalance")
        changed = [m for m in infos(caplog) if m.startswith("rebalance of logG")]
        assert changed, infos(caplog)
        assert (
            "0 queue(s) added, 2 dropped; holds %RETRY%logG@broker-a:0, logT@broker-a:"
            in (changed[0])
        ), changed
    finally:
        await first.close()
