"""A push consumer that only collects what it receives: its subscription and listener."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import aiorocket as rmq

__all__ = ["collect_bodies", "consume_until"]


def collect_bodies(
    consumer: rmq.PushConsumer, topic: str, add: Callable[[Iterator[bytes]], object]
) -> rmq.PushConsumer:
    """Subscribe ``consumer`` to all of ``topic`` with a concurrent listener handing the bodies
    of each batch to ``add`` (``got.extend``, ``got.update``); ``consumer``."""
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        add(m.body for m in msgs)

    return consumer


async def consume_until(
    namesrv: str, topic: str, group: str, expect: int, *, timeout: float, **settings: Any
) -> list[rmq.ReceivedMessage]:
    """What a push consumer of ``group`` (from the first offset, ``settings`` besides) gets
    from ``topic`` until it has ``expect`` messages.

    Raises:
        TimeoutError: it had fewer within ``timeout``.
    """
    got: list[rmq.ReceivedMessage] = []
    done = asyncio.Event()
    consumer = rmq.PushConsumer(group=group, namesrv=namesrv, consume_from="first", **settings)
    consumer.subscribe(topic)

    @consumer.listener
    async def on(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(msgs)
        if len(got) >= expect:
            done.set()

    async with consumer:
        await asyncio.wait_for(done.wait(), timeout)
    return got
