"""OpenTelemetry metrics of a running [`App`][aiorocket.app.App].

Every metric of `aiorocket.app.metrics.METRICS` becomes an observable instrument
(gauges as observable gauges, counters as observable counters) with the same attributes.
Readers usually collect from their own thread, while the consumers' statistics live on the
event loop: a task on the loop takes a snapshot every ``interval`` seconds and the callbacks
report the latest one (a collection made on the loop itself reads the live values).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation

from aiorocket._concurrency import Service
from aiorocket.app import App
from aiorocket.app.metrics import METRICS, MetricSample, MetricSpec, collect

__all__ = ["AppInstrumentation", "instrument"]

log = logging.getLogger("aiorocket.opentelemetry")


class AppInstrumentation:
    """The instruments of one app;
    [`start`][aiorocket.integrations.opentelemetry.AppInstrumentation.start] the snapshot task on
    the app's loop (done by [`instrument`][aiorocket.integrations.opentelemetry.instrument] when
    called on a running loop) and
    [`stop`][aiorocket.integrations.opentelemetry.AppInstrumentation.stop] it when done.

    Args:
        app: the app.
        meter_provider: where the instruments live (default: the global provider).
        interval: seconds between snapshots for collections made off the loop.
    """

    def __init__(
        self, app: App, *, meter_provider: MeterProvider | None = None, interval: float = 5.0
    ) -> None:
        self._app = app
        self._interval = interval
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lifecycle: Service | None = None
        self._snapshot: dict[str, list[MetricSample]] = {}
        meter = (meter_provider or metrics.get_meter_provider()).get_meter("aiorocket")
        for spec in METRICS:
            if spec.kind == "counter":
                meter.create_observable_counter(
                    spec.name, callbacks=[self._callback(spec)], description=spec.help
                )
            else:
                meter.create_observable_gauge(
                    spec.name, callbacks=[self._callback(spec)], description=spec.help
                )

    def refresh(self) -> None:
        """Take a snapshot now (on the app's loop)."""
        snapshot: dict[str, list[MetricSample]] = {}
        for sample in collect(self._app):
            snapshot.setdefault(sample.name, []).append(sample)
        self._snapshot = snapshot

    def start(self) -> None:
        """Start refreshing the snapshot every ``interval`` seconds on the running loop."""
        self._loop = asyncio.get_running_loop()
        self.refresh()
        if self._lifecycle is None:
            # The snapshot task is owned by its own supervisor, not by the caller's task.
            async def startup() -> None:
                lifecycle.spawn(self._run(), name="aiorocket-otel-snapshot")

            lifecycle = Service("aiorocket-otel", startup=startup, logger=log)
            self._lifecycle = lifecycle
            lifecycle.start_soon()

    async def stop(self) -> None:
        """Stop the snapshot task."""
        lifecycle, self._lifecycle = self._lifecycle, None
        if lifecycle is not None:
            await lifecycle.close()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            self.refresh()

    def _callback(self, spec: MetricSpec) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            try:
                on_loop = asyncio.get_running_loop() is self._loop
            except RuntimeError:
                on_loop = False
            if on_loop:
                self.refresh()  # collected on the app's own loop: live values
            for sample in self._snapshot.get(spec.name, []):
                yield Observation(sample.value, dict(zip(spec.labels, sample.labels, strict=True)))

        return observe


def instrument(
    app: App, *, meter_provider: MeterProvider | None = None, interval: float = 5.0
) -> AppInstrumentation:
    """Create the app's instruments; on a running loop, start the snapshot task too.

    Raises:
        ImportError: opentelemetry-api is not installed (at import).
    """
    inst = AppInstrumentation(app, meter_provider=meter_provider, interval=interval)
    with contextlib.suppress(RuntimeError):
        inst.start()
    return inst
