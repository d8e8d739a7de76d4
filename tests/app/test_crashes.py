"""Crashes that surface (issue 37): an unexpected error in a background task of a producer, a
consumer or the embedded broker fails its ``wait_closed()``; a crashed consumer crashes its
App, whose ``/readyz`` then names it, and ends ``aiorocket run`` within a second."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from aiorocket import App, Message, Producer, PushConsumer
from aiorocket._client.membership import Membership
from aiorocket._consumer.process_queue import ProcessQueue
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from aiorocket.embedded.groups import ClientGroups
from aiorocket.integrations.fastapi import health_router
from aiorocket.models import ConcurrentContext, ConsumeStatus, ReceivedMessage
from tests._harness.wait import wait_for
from tests.app.crashing_worker import InjectedBug, buggy_put

ROOT = Path(__file__).resolve().parents[2]
FAST: dict[str, Any] = {
    "rebalance_interval": 0.5,
    "pull_suspend_timeout": 1,
    "consume_from": "first",
}
#: how the App's crash is named: the app, its consumer, the error
CRASH = "app crashed: consumer crashing crashed: InjectedBug: the pull task met a bug"


class Bug(Exception):
    """An unexpected error in a background task."""


@pytest.mark.slow
async def test_a_worker_whose_pull_task_crashes_exits_non_zero_within_a_second(
    broker: EmbeddedBroker,
) -> None:
    env = {
        **os.environ,
        "AIOROCKET_NAMESRV": broker.address,
        "AIOROCKET_CONSUMER": '{"rebalance_interval": 0.5, "pull_suspend_timeout": 1, '
        '"consume_from": "first"}',
        "CRASHING_WORKER": "1",
        "WORKER_TOPIC": "crashes",
        "PYTHONPATH": str(ROOT),
    }
    worker = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "aiorocket", "run", "tests.app.crashing_worker:app"),
        *("--status-interval", "0.2", "--loop", "asyncio"),
        cwd=ROOT,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert worker.stderr is not None
        while b"worker started" not in (line := await worker.stderr.readline()):
            assert line, "the worker ended before it started"
        async with Producer(namesrv=broker.address, group="pg") as producer:
            await producer.send(Message("crashes", b"fine"))
            await producer.send(Message("crashes", b"crash"))
        rest = await asyncio.wait_for(worker.stderr.read(), 30)
        await worker.wait()
        exited = time.time()
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    err = rest.decode()
    assert worker.returncode == 1, err
    crashed_at = float(next(x for x in err.splitlines() if x.startswith("CRASH AT")).split()[2])
    # The status lines went on after the crash until SIGTERM, before.
    print(f"the worker exited {exited - crashed_at:.3f} s after the crash")
    assert exited - crashed_at < 1.0, err
    last = err.strip().splitlines()[-1]
    assert last == f"aiorocket worker crashed: {CRASH}", err


async def test_readyz_names_the_crash_of_an_app_under_fastapi(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ProcessQueue, "put", buggy_put(ProcessQueue.put))
    rocket = App(namesrv=broker.address, consumer=FAST)

    @rocket.subscriber("crashes", group="crashing")
    async def handle(body: bytes) -> None:
        pass

    api = FastAPI(lifespan=rocket.lifespan)
    api.include_router(health_router(rocket))
    transport = httpx.ASGITransport(app=api)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        api.router.lifespan_context(api),
    ):
        assert (await client.get("/readyz")).status_code == 200
        await rocket.publish("crashes", b"crash")

        async def not_ready() -> bool:
            return (await client.get("/readyz")).status_code == 503

        await wait_for(not_ready, timeout=20, what="/readyz to answer 503")
        body = (await client.get("/readyz")).json()
        assert body["ready"] is False
        assert body["problems"] == {"crash": CRASH}
        with pytest.raises(BaseExceptionGroup) as info:
            await asyncio.wait_for(rocket.wait_closed(), 10)
        assert info.value.subgroup(InjectedBug) is not None
        # The web app itself goes on serving.
        assert (await client.get("/healthz")).status_code == 200


async def test_wait_closed_of_a_push_consumer_reraises_a_crash_of_its_pull_task(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ProcessQueue, "put", buggy_put(ProcessQueue.put))
    consumer = PushConsumer(group="crashing", namesrv=broker.address, **FAST)
    consumer.subscribe("crashes")

    @consumer.listener
    async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> ConsumeStatus:
        return ConsumeStatus.CONSUME_SUCCESS

    async with consumer, Producer(namesrv=broker.address, group="pg") as producer:
        # (after the start: a crash during the start-up is start()'s error)
        await producer.send(Message("crashes", b"crash"))
        with pytest.raises(BaseExceptionGroup, match="consumer crashing crashed") as info:
            await asyncio.wait_for(consumer.wait_closed(), 20)
    assert info.value.subgroup(InjectedBug) is not None
    assert consumer.crash is info.value


async def test_wait_closed_of_a_producer_reraises_a_crash_of_its_heartbeat(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken_heartbeat(self: Membership, *, at_start: bool = False) -> None:
        raise Bug("heartbeat bug")

    monkeypatch.setattr(Membership, "send_heartbeats", broken_heartbeat)
    async with Producer(namesrv=broker.address, group="pg", heartbeat_interval=0.05) as producer:
        with pytest.raises(BaseExceptionGroup, match="producer pg crashed") as info:
            await asyncio.wait_for(producer.wait_closed(), 10)
    assert info.value.subgroup(Bug) is not None


async def test_wait_closed_of_the_embedded_broker_reraises_a_crash_of_its_housekeeping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_expire(self: ClientGroups, **kwargs: object) -> list[object]:
        raise Bug("housekeeping bug")

    monkeypatch.setattr(ClientGroups, "expire", broken_expire)
    config = BrokerConfig(channel_scan_interval=0.05)
    async with EmbeddedBroker(data_dir=tmp_path, config=config) as broker:
        with pytest.raises(BaseExceptionGroup, match="aiorocket-broker crashed") as info:
            await asyncio.wait_for(broker.wait_closed(), 10)
    assert info.value.subgroup(Bug) is not None
