"""FastAPI integration: lifespan, a producer dependency, health routes and the app's AsyncAPI
document.

```python
from fastapi import Depends, FastAPI
from aiorocket import App, Producer
from aiorocket.integrations.fastapi import (
    asyncapi_router,
    health_router,
    metrics_router,
    producer_dependency,
)

rocket = App(namesrv="127.0.0.1:9876")
api = FastAPI(lifespan=rocket.lifespan)
api.include_router(health_router(rocket))
api.include_router(metrics_router(rocket))   # GET /metrics (aiorocketmq[prometheus])
api.include_router(asyncapi_router(rocket))  # GET /asyncapi.json, /asyncapi.yaml

@api.post("/orders")
async def create(order: Order, producer: Producer = Depends(producer_dependency(rocket))):
    await producer.send(...)
```
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiorocket.integrations._extras import missing_extra

try:
    from fastapi import APIRouter
    from fastapi.responses import JSONResponse, Response
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise missing_extra(__name__, "FastAPI", "fastapi") from exc

from aiorocket import Producer
from aiorocket.app import App
from aiorocket.app.asyncapi import to_yaml

__all__ = ["asyncapi_router", "health_router", "metrics_router", "producer_dependency"]


def producer_dependency(app: App) -> Callable[[], Producer]:
    """A FastAPI dependency that hands an endpoint the app's shared producer.

    The dependency raises [`ClientClosedError`][aiorocket.errors.ClientClosedError] if the app is
    not running (the lifespan was not installed).
    """

    def get_producer() -> Producer:
        return app.producer

    return get_producer


def health_router(
    app: App, *, live_path: str = "/healthz", ready_path: str = "/readyz"
) -> APIRouter:
    """Liveness and readiness routes.

    Liveness answers 200 while the process serves requests: it is about the process, never
    about the cluster (a liveness probe that failed through a broker outage would have every
    replica restarted for nothing). Readiness answers 200 once the producer and every
    consumer are started (connected, first rebalance done), the name server and the brokers
    answer, no group's pulls keep failing, and no queue is stuck; else 503. The body names
    what fails (``problems``: the name server, a broker, a group's pulls, failing for
    ``failing_after`` seconds; [`problems`][aiorocket.app.App.problems]), the stuck queues and why
    (a handler call running past ``stuck_after``, or cached messages with nothing consumed that
    long), and lists every queue's health ([`health`][aiorocket.app.App.health]).
    """
    router = APIRouter()

    @router.get(live_path)
    async def live() -> dict[str, str]:
        return {"status": "alive"}

    @router.get(ready_path)
    async def ready() -> JSONResponse:
        body: dict[str, Any] = app.readiness()
        return JSONResponse(body, status_code=200 if body["ready"] else 503)

    return router


def metrics_router(app: App, *, path: str = "/metrics") -> APIRouter:
    """A ``GET /metrics`` route with the app's Prometheus metrics
    ([`aiorocket.integrations.prometheus`][aiorocket.integrations.prometheus]; needs
    ``aiorocketmq[prometheus]``).

    Raises:
        ImportError: prometheus-client is not installed.
    """
    from aiorocket.integrations.prometheus import CONTENT_TYPE, registry_for, render

    registry = registry_for(app)
    router = APIRouter()

    @router.get(path)
    async def metrics() -> Response:
        # Rendered on the event loop: the consumers' statistics live there.
        return Response(render(registry), media_type=CONTENT_TYPE)

    return router


def asyncapi_router(
    app: App,
    *,
    path: str = "/asyncapi",
    title: str = "aiorocket app",
    version: str = "1.0.0",
) -> APIRouter:
    """``GET {path}.json`` and ``GET {path}.yaml``: the app's AsyncAPI 3.0 document
    ([App.asyncapi][aiorocket.app.App.asyncapi]), built once, on the first request."""
    router = APIRouter()
    cache: dict[str, Any] = {}

    def document() -> dict[str, Any]:
        if not cache:
            cache.update(app.asyncapi(title=title, version=version))
        return cache

    @router.get(f"{path}.json")
    async def as_json() -> JSONResponse:
        return JSONResponse(document())

    @router.get(f"{path}.yaml")
    async def as_yaml() -> Response:
        return Response(to_yaml(document()) + "\n", media_type="application/yaml")

    return router
