"""Prometheus metrics of a running [`App`][aiorocket.app.App] (``pip install
"aiorocketmq[prometheus]"``).

Nothing is recorded on the hot path: a collector reads the consumers' statistics and the
subscribers' counters when Prometheus scrapes, on the event loop (the worker's metrics server
and the FastAPI route both run there). Each app gets its own registry, so tests and several
apps in one process never collide.

The metrics are `aiorocket.app.metrics.METRICS` (counters get Prometheus' ``_total``
suffix): per queue ``aiorocket_consumer_lag_messages``, ``cached_messages``, ``cached_bytes``,
``in_flight_handlers``, ``oldest_in_flight_seconds``, ``queue_stuck``; per topic
``pull_rt_milliseconds``, ``pull_tps``, ``consume_rt_milliseconds``, ``consume_ok_tps``,
``consume_failed_tps``, ``pulled_messages_total``, ``consumed_messages_total{result}``; per
group ``rebalances_total``, ``pull_errors_total``; per subscriber
``aiorocket_app_messages_total{result="handled"|"failed"|"dead_lettered"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator

import anyio

from aiorocket.integrations._extras import missing_extra

try:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise missing_extra(__name__, "prometheus-client", "prometheus") from exc

from aiorocket.app import App
from aiorocket.app.metrics import METRICS, MetricSample, collect

__all__ = ["CONTENT_TYPE", "AppCollector", "registry_for", "render", "serve"]

log = logging.getLogger("aiorocket.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The exposition format's content type."""


class AppCollector(Collector):
    """Reads an app's metrics (`aiorocket.app.metrics.collect`) at each scrape.

    Args:
        app: the app; while it is not running, only the subscriber counters are reported.
    """

    def __init__(self, app: App) -> None:
        self._app = app

    def collect(self) -> Iterator[Metric]:
        """Build every metric family from the current statistics."""
        by_name: dict[str, list[MetricSample]] = {}
        for sample in collect(self._app):
            by_name.setdefault(sample.name, []).append(sample)
        for spec in METRICS:
            family: GaugeMetricFamily | CounterMetricFamily
            if spec.kind == "counter":
                family = CounterMetricFamily(spec.name, spec.help, labels=list(spec.labels))
            else:
                family = GaugeMetricFamily(spec.name, spec.help, labels=list(spec.labels))
            for sample in by_name.get(spec.name, []):
                family.add_metric(list(sample.labels), sample.value)
            yield family


def registry_for(app: App) -> CollectorRegistry:
    """A new registry holding only the app's collector."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AppCollector(app))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The registry in the Prometheus text format (call it on the app's event loop)."""
    return generate_latest(registry)


async def serve(app: App, *, host: str = "0.0.0.0", port: int = 9100) -> asyncio.Server:
    """Serve ``GET /metrics`` (Prometheus), ``/healthz`` and ``/readyz`` for ``app`` on the
    running event loop (what ``aiorocket run --metrics-port`` starts); close the returned
    server to stop. A minimal HTTP/1.0 responder: one request per connection.

    Raises:
        OSError: the port cannot be bound.
    """
    registry = registry_for(app)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            with anyio.fail_after(10.0):
                line = await reader.readline()
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass
            parts = line.decode("latin-1").split()
            path = parts[1].split("?", 1)[0] if len(parts) >= 2 else ""
            status, ctype, body = 404, "text/plain", b"not found\n"
            if len(parts) >= 2 and parts[0] != "GET":
                status, body = 405, b"method not allowed\n"
            elif path == "/metrics":
                status, ctype, body = 200, CONTENT_TYPE, render(registry)
            elif path == "/healthz":
                status, ctype, body = 200, "application/json", b'{"status":"alive"}'
            elif path == "/readyz":
                report = app.readiness()
                status = 200 if report["ready"] else 503
                ctype, body = "application/json", json.dumps(report).encode()
            reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 503: "Unavailable"}
            writer.write(
                f"HTTP/1.0 {status} {reason[status]}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError):
            pass
        except Exception:
            log.exception("metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port)
