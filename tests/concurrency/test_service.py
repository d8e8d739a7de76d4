"""The one service lifecycle (``aiorocket._concurrency.service``): background tasks run in the
service's own supervisor task, so one failing never cancels the task that called ``start()``
(a FastAPI lifespan, say); the crash is logged and reported to the owner; close is shielded,
bounded and idempotent."""

from __future__ import annotations

import asyncio
import logging

import anyio
import pytest

from aiorocket import Producer
from aiorocket._client.membership import Membership
from aiorocket._concurrency import Service, describe_crash
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ClientClosedError


async def _forever() -> None:
    # Waits until cancelled (an event nobody sets), with no timer to run out.
    await asyncio.Event().wait()


class Bug(Exception):
    """An unexpected error in a background task."""


async def _fail_soon() -> None:
    await asyncio.sleep(0.05)
    raise Bug("boom")


async def test_a_crashing_task_does_not_cancel_the_starter_and_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crashes: list[BaseException] = []
    aborted: list[bool] = []
    service: Service

    async def startup() -> None:
        service.spawn(_forever(), name="forever")
        service.spawn(_fail_soon(), name="bug")

    async def abort(started: bool) -> None:
        aborted.append(started)

    service = Service("svc", startup=startup, abort=abort, on_crash=crashes.append)
    with caplog.at_level(logging.ERROR, logger="aiorocket"):
        await service.start()
        # The starter keeps running (no CancelledError here) while the task fails.
        await asyncio.sleep(0.3)
    assert service.closed
    assert isinstance(service.crash, BaseExceptionGroup)
    assert service.crash.subgroup(Bug) is not None
    assert crashes == [service.crash]
    assert aborted == [True]
    assert any("svc crashed" in r.getMessage() for r in caplog.records)
    with pytest.raises(BaseExceptionGroup):
        await service.wait_closed()
    service.raise_crash()  # reported once already: not raised again
    await asyncio.wait_for(service.close(), 1.0)
    await asyncio.wait_for(service.close(), 1.0)
    with pytest.raises(ClientClosedError):
        await service.start()


async def test_close_is_bounded_idempotent_and_shielded() -> None:
    stopped: list[str] = []
    service: Service

    async def startup() -> None:
        service.spawn(_forever(), name="forever")

    async def shutdown() -> None:
        await asyncio.sleep(0.05)
        stopped.append("shutdown")

    service = Service("svc", startup=startup, shutdown=shutdown)
    await service.start()
    # A closer in a cancelled scope (an anyio task group, a lifespan) still gets the whole
    # shutdown.
    with anyio.CancelScope() as scope:
        scope.cancel()
        await service.close()
    assert stopped == ["shutdown"]
    assert service.closed
    assert not service.tasks  # the endless task was cancelled
    await asyncio.wait_for(service.close(), 1.0)
    await service.wait_closed()
    assert service.crash is None


async def test_a_start_up_failure_is_raised_to_the_caller_unwrapped() -> None:
    async def startup() -> None:
        raise Bug("no")

    service = Service("svc", startup=startup)
    with pytest.raises(Bug):
        await service.start()
    assert service.closing


async def test_a_producer_crashing_in_the_background_leaves_its_starter_running(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch, broker: EmbeddedBroker
) -> None:
    async def broken_heartbeat(self: Membership, *, at_start: bool = False) -> None:
        raise Bug("heartbeat bug")

    monkeypatch.setattr(Membership, "send_heartbeats", broken_heartbeat)
    # (a live name server: a producer's start connects to one)
    producer = Producer(namesrv=broker.address, group="svc", heartbeat_interval=0.05)
    finished: list[bool] = []

    async def use() -> None:
        async with producer:
            # Before: the producer's task group lived in this task, so its crash cancelled
            # this sleep.
            await asyncio.sleep(0.5)
            finished.append(True)

    with (
        caplog.at_level(logging.ERROR, logger="aiorocket"),
        pytest.raises(BaseExceptionGroup) as info,
    ):
        await use()
    assert finished == [True]
    assert info.value.subgroup(Bug) is not None
    assert any("crashed" in r.getMessage() for r in caplog.records)
    await asyncio.wait_for(producer.close(), 1.0)


async def test_a_watched_crash_crashes_the_owner_and_a_shutdown_error_is_raised() -> None:
    child: Service

    async def child_startup() -> None:
        child.spawn(_fail_soon(), name="bug")

    child = Service("child", startup=child_startup)
    parent: Service

    async def parent_startup() -> None:
        await child.start()
        parent.watch(child)

    parent = Service("parent", startup=parent_startup)
    await parent.start()
    with pytest.raises(BaseExceptionGroup, match="parent crashed") as info:
        await asyncio.wait_for(parent.wait_closed(), 5)
    assert info.value.subgroup(Bug) is not None
    assert describe_crash(info.value) == "parent crashed: child crashed: Bug: boom"

    async def failing_shutdown() -> None:
        raise OSError("final flush failed")

    service = Service("svc", shutdown=failing_shutdown)
    await service.start()
    with pytest.raises(OSError, match="final flush failed"):
        await service.close()
    await service.close()  # raised once
    await service.wait_closed()  # no crash
    assert service.crash is None
