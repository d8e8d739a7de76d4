"""``/readyz`` means the app can work: 503 naming the name server and the broker while they
cannot be reached, or the group whose pulls keep failing, within ``failing_after``; 200 again
once they are back. ``/healthz`` stays about the process."""

from __future__ import annotations

import time
from typing import Any

import httpx
from fastapi import FastAPI

from aiorocket import Admin, App
from aiorocket.embedded import EmbeddedBroker
from aiorocket.integrations.fastapi import health_router
from aiorocket.testing import ChaosProxy
from tests._harness.wait import wait_for

TOPIC, GROUP = "readyT", "readyG"
READINESS: dict[str, Any] = {
    "readiness_interval": 0.2,
    "readiness_timeout": 0.5,
    "failing_after": 1.0,
}
FAST: dict[str, Any] = {
    "rebalance_interval": 0.5,
    "pull_suspend_timeout": 0.5,
    "pull_retry_max_delay": 0.3,
    "offset_persist_interval": 0.2,
    "shutdown_grace": 1.0,
    "request_timeout": 1.0,
    "connect_timeout": 0.5,
}


def app_with_routes(namesrv: str) -> tuple[App, FastAPI]:
    app = App(namesrv=namesrv, **READINESS, **FAST)

    @app.subscriber(TOPIC, group=GROUP)
    async def handle(body: str) -> None: ...

    api = FastAPI(lifespan=app.lifespan)
    api.include_router(health_router(app))
    return app, api


async def test_readyz_names_an_unreachable_cluster_and_recovers(
    embedded_broker: EmbeddedBroker, chaos_proxy: ChaosProxy
) -> None:
    async with Admin(namesrv=embedded_broker.address) as admin:
        await admin.create_topic(TOPIC, queues=2)
    _app, api = app_with_routes(chaos_proxy.address)  # every connection goes through the proxy
    transport = httpx.ASGITransport(app=api)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
        api.router.lifespan_context(api),
    ):
        ready = await client.get("/readyz")
        assert ready.status_code == 200, ready.json()
        assert ready.json()["problems"] == {}
        # the outage: every connection reset, new ones refused
        chaos_proxy.upstream = None
        chaos_proxy.reset()
        lost = time.monotonic()

        async def both_named() -> bool:
            ready = await client.get("/readyz")
            named = ready.json()["problems"]
            return (
                ready.status_code == 503
                and "name server" in named
                and any(p.startswith("broker broker-a (") for p in named)
            )

        await wait_for(both_named, timeout=20.0, what="/readyz 503 naming both")
        took = time.monotonic() - lost
        body = (await client.get("/readyz")).json()
        assert body["ready"] is False
        assert "ConnectionClosedError" in body["problems"]["name server"], body["problems"]
        # within failing_after, plus at most a check interval and a check's timeouts
        assert READINESS["failing_after"] <= took <= 5.0, took
        assert (await client.get("/healthz")).status_code == 200  # liveness: the process
        chaos_proxy.upstream = embedded_broker.listen_address
        back = time.monotonic()

        async def ready_again() -> bool:
            return (await client.get("/readyz")).status_code == 200

        await wait_for(ready_again, timeout=20.0, what="/readyz 200 again")
        assert time.monotonic() - back <= 5.0
        assert (await client.get("/readyz")).json()["problems"] == {}


async def test_readyz_names_a_group_whose_pulls_keep_failing(broker: EmbeddedBroker) -> None:
    async with Admin(namesrv=broker.address) as admin:
        await admin.create_topic(TOPIC, queues=2)
    _app, api = app_with_routes(broker.address)
    transport = httpx.ASGITransport(app=api)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://t") as client,
        api.router.lifespan_context(api),
    ):
        assert (await client.get("/readyz")).status_code == 200
        # the broker answers everything but pulls, which it refuses (SYSTEM_BUSY) for a while
        broker.fail_next(11, 2, times=150)  # PULL_MESSAGE, SYSTEM_BUSY

        async def unready() -> bool:
            return (await client.get("/readyz")).status_code == 503

        await wait_for(unready, timeout=20.0, what="/readyz 503")
        problems = (await client.get("/readyz")).json()["problems"]
        assert list(problems) == [f"pulls of group {GROUP}"], problems
        assert "failed pull(s)" in problems[f"pulls of group {GROUP}"]

        async def ready_again() -> bool:
            return (await client.get("/readyz")).status_code == 200

        await wait_for(ready_again, timeout=60.0, what="the failures to run out")
        assert len(broker.injected_failures) == 150
