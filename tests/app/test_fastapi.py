"""The FastAPI example through an ASGI client, with the app's lifespan."""

from __future__ import annotations

import asyncio
import importlib

import httpx
import pytest

from aiorocket.embedded import EmbeddedBroker


async def test_post_publishes_and_the_in_process_subscriber_handles_it(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIOROCKET_NAMESRV", broker.address)
    monkeypatch.setenv(
        "AIOROCKET_CONSUMER", '{"rebalance_interval": 0.5, "pull_suspend_timeout": 1}'
    )
    import examples.fastapi_service as service

    service = importlib.reload(service)
    transport = httpx.ASGITransport(app=service.api)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        # Before the lifespan runs: alive, not ready.
        assert (await client.get("/healthz")).status_code == 200
        resp = await client.get("/readyz")
        assert resp.status_code == 503
        assert resp.json()["ready"] is False
        async with service.api.router.lifespan_context(service.api):
            ready = await client.get("/readyz")
            assert ready.status_code == 200, ready.text
            posted = await client.post("/orders", json={"id": 7, "item": "lamp"})
            assert posted.status_code == 202, posted.text
            msg_id = posted.json()["msg_id"]
            for _ in range(500):
                if service.handled:
                    break
                await asyncio.sleep(0.02)
            assert [(o.id, o.item, m) for o, m in service.handled] == [(7, "lamp", msg_id)]
        assert (await client.get("/readyz")).status_code == 503
