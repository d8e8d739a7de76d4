"""OpenTelemetry for aiorocket (``pip install "aiorocketmq[opentelemetry]"``): metrics of an
[`App`][aiorocket.app.App] and traces of sends and handler calls.

```python
from aiorocket.integrations.opentelemetry import instrument, instrument_tracing

instrument_tracing(app)                    # spans; the global TracerProvider, or
                                           # tracer_provider=…; also a Producer or consumer
instrumentation = instrument(app)          # metrics; the global MeterProvider, or
                                           # meter_provider=…
async with app:
    ...                                    # your exporters send spans and metrics
```

Tracing ([`instrument_tracing`][aiorocket.integrations.opentelemetry.instrument_tracing]) follows
the OpenTelemetry messaging conventions and carries the W3C trace context in each message's
properties (``traceparent``, ``tracestate``), as the OpenTelemetry Java agent's RocketMQ
instrumentation does, so a trace runs from a Java producer to a Python handler and back. Nothing is
recorded, and this module is not even imported, by clients that were not instrumented.

Metrics ([`instrument`][aiorocket.integrations.opentelemetry.instrument]): every metric of
`aiorocket.app.metrics.METRICS` becomes an observable instrument with the same attributes.
"""

from __future__ import annotations

from aiorocket.integrations._extras import missing_extra

try:
    import opentelemetry.metrics
    import opentelemetry.trace  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise missing_extra(__name__, "opentelemetry-api", "opentelemetry") from exc

from aiorocket.integrations.opentelemetry._metrics import AppInstrumentation, instrument
from aiorocket.integrations.opentelemetry._tracing import instrument_tracing

__all__ = ["AppInstrumentation", "instrument", "instrument_tracing"]
