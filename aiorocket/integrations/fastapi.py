"""FastAPI integration: lifespan, a producer dependency and health routes.

::

    from fastapi import Depends, FastAPI
    from aiorocket import App, Producer
    from aiorocket.integrations.fastapi import health_router, producer_dependency

    rocket = App(namesrv="127.0.0.1:9876")
    api = FastAPI(lifespan=rocket.lifespan)
    api.include_router(health_router(rocket))

    @api.post("/orders")
    async def create(order: Order, producer: Producer = Depends(producer_dependency(rocket))):
        await producer.send(...)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

try:
    from fastapi import APIRouter
    from fastapi.responses import JSONResponse
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        'aiorocket.integrations.fastapi needs FastAPI: pip install "aiorocket[fastapi]"'
    ) from exc

from aiorocket import Producer
from aiorocket.app import App

__all__ = ["health_router", "producer_dependency"]


def producer_dependency(app: App) -> Callable[[], Producer]:
    """A FastAPI dependency that hands an endpoint the app's shared producer.

    The dependency raises :class:`~aiorocket.errors.ClientClosedError` if the app is not
    running (the lifespan was not installed).
    """

    def get_producer() -> Producer:
        return app.producer

    return get_producer


def health_router(
    app: App, *, live_path: str = "/healthz", ready_path: str = "/readyz"
) -> APIRouter:
    """Liveness and readiness routes.

    Liveness answers 200 while the process serves requests. Readiness answers 200 once the
    producer and every consumer are started (connected, first rebalance done) and no queue is
    stuck, else 503 with the reason.
    """
    router = APIRouter()

    @router.get(live_path)
    async def live() -> dict[str, str]:
        return {"status": "alive"}

    @router.get(ready_path)
    async def ready() -> JSONResponse:
        body: dict[str, Any] = {"ready": app.is_ready(), "stuck_queues": app.stuck_queues()}
        return JSONResponse(body, status_code=200 if body["ready"] else 503)

    return router
