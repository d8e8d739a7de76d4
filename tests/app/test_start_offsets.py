"""Where a group starts (docs/concepts/start-offsets.md): a new group's ``consume_from`` applies
only when the broker has no offset for it *and* does not answer 0 for a young queue; an
existing group resumes at its committed offset whatever ``consume_from`` says."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from aiorocket import Admin, App, Message, Producer
from aiorocket.embedded import EmbeddedBroker
from tests._harness.wait import wait_for

TOPIC = "startT"
FAST: dict[str, Any] = {
    "rebalance_interval": 0.5,
    "offset_persist_interval": 0.2,
    "pull_suspend_timeout": 0.5,
    "shutdown_grace": 1.0,
}


async def send(addr: str, *bodies: str) -> None:
    async with Producer(namesrv=addr, group="startP") as p:
        for body in bodies:
            await p.send(Message(TOPIC, body))


async def consume(
    addr: str, group: str, consume_from: Any, *, after_start: tuple[str, ...], expect: int
) -> list[str]:
    """Run a one-group app, send ``after_start`` once it holds its queue, return what it got
    once ``expect`` messages arrived (and nothing more came for a moment)."""
    app = App(namesrv=addr, consume_from=consume_from, **FAST)
    got: list[str] = []

    @app.subscriber(TOPIC, group=group)
    async def handle(body: str) -> None:
        got.append(body)

    async with app:
        await send(addr, *after_start)
        await wait_for(lambda: len(got) >= expect, timeout=20.0, what=f"{expect} for {group}")
        await asyncio.sleep(0.5)  # anything beyond `expect` would show up by now
        await wait_for(
            lambda: app.consumers()[group].statistics().topics[TOPIC].lag == 0,
            timeout=20.0,
            what="the offsets committed",
        )
    return got


async def test_start_offsets_of_new_and_existing_groups(broker: EmbeddedBroker) -> None:
    addr = broker.address
    async with Admin(namesrv=addr) as admin:
        await admin.create_topic(TOPIC, queues=1)
    await send(addr, "a1", "a2", "a3")

    # A young queue (its first message still stored at offset 0): the broker answers offset 0
    # to a new group, so "last" reads the whole history, as a Java consumer would.
    young = await consume(addr, "g-young", "last", after_start=("b1",), expect=4)
    assert young == ["a1", "a2", "a3", "b1"]

    # An existing group resumes at its committed offset: consume_from is not consulted.
    resumed = await consume(addr, "g-young", "first", after_start=("b2",), expect=1)
    assert resumed == ["b2"]

    # Retention removed the queue's head (min offset > 0): the broker has no offset for a new
    # group (QUERY_NOT_FOUND) and consume_from decides.
    await asyncio.sleep(0.3)
    between = datetime.now(UTC)
    await asyncio.sleep(0.05)
    await send(addr, "c1")  # stored just after `between`, well after b2
    assert broker.drop_below(TOPIC, 0, 1) == 1
    last = await consume(addr, "g-last", "last", after_start=("d1",), expect=1)
    assert last == ["d1"]  # the queue's end: nothing stored before the start
    since = await consume(addr, "g-time", between, after_start=("d2",), expect=3)
    assert since == ["c1", "d1", "d2"]  # the message stored closest to the time, onwards
