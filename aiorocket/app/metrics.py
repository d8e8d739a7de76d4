"""The metrics of a running [`App`][aiorocket.app.App], independent of any metrics library: one
list of named samples read from the consumers' statistics and the subscribers' counters.
[`aiorocket.integrations.prometheus`][aiorocket.integrations.prometheus] and
[`aiorocket.integrations.opentelemetry`][aiorocket.integrations.opentelemetry] export them. Nothing
is recorded on the hot path; `collect` reads the current state and must run on the app's event loop
(the consumers' statistics live there).

Per-queue metrics carry the labels ``group``, ``topic``, ``broker``, ``queue``; per-topic ones
``group``, ``topic``; per-group ones ``group``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from aiorocket.app.app import App

__all__ = ["METRICS", "MetricSample", "MetricSpec", "collect"]

Kind = Literal["gauge", "counter"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A metric: name (without ``_total`` for counters), kind, help text and label names."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One value of a metric with its label values (in the spec's label order)."""

    name: str
    labels: tuple[str, ...]
    value: float


_Q = ("group", "topic", "broker", "queue")
_T = ("group", "topic")
_G = ("group",)
_P = "aiorocket_consumer_"

#: every metric `collect` reports
METRICS: tuple[MetricSpec, ...] = (
    MetricSpec(_P + "lag_messages", "gauge", "Broker max offset minus committed offset", _Q),
    MetricSpec(_P + "cached_messages", "gauge", "Messages pulled, not finished", _Q),
    MetricSpec(_P + "cached_bytes", "gauge", "Body bytes pulled, not finished", _Q),
    MetricSpec(_P + "in_flight_handlers", "gauge", "Handler calls running", _Q),
    MetricSpec(
        _P + "oldest_in_flight_seconds", "gauge", "Age of the oldest running handler call", _Q
    ),
    MetricSpec(_P + "queue_stuck", "gauge", "1 when the readiness model says stuck", _Q),
    MetricSpec(_P + "pull_rt_milliseconds", "gauge", "Mean pull round trip (last minute)", _T),
    MetricSpec(_P + "pull_tps", "gauge", "Messages pulled per second (last minute)", _T),
    MetricSpec(_P + "consume_rt_milliseconds", "gauge", "Mean handler call duration", _T),
    MetricSpec(_P + "consume_ok_tps", "gauge", "Messages consumed OK per second", _T),
    MetricSpec(_P + "consume_failed_tps", "gauge", "Messages failed per second", _T),
    MetricSpec(_P + "pulled_messages", "counter", "Messages pulled", _T),
    MetricSpec(
        _P + "consumed_messages", "counter", "Messages consumed, by result", (*_T, "result")
    ),
    MetricSpec(_P + "rebalances", "counter", "Completed rebalance rounds", _G),
    MetricSpec(_P + "pull_errors", "counter", "Failed pulls (retried)", _G),
    MetricSpec(
        "aiorocket_app_messages",
        "counter",
        "Messages by subscriber and outcome: handled, failed (retried), dead_lettered",
        ("group", "topic", "handler", "result"),
    ),
)


def collect(app: App) -> list[MetricSample]:
    """The current value of every metric of `METRICS` (call on the app's loop)."""
    out: list[MetricSample] = []
    add = out.append
    consumers = app.consumers()
    stuck = {(h.group, h.queue) for h in app.health() if h.stuck} if consumers else set()
    now = time.time()
    for group, consumer in sorted(consumers.items()):
        st = consumer.statistics()
        for mq, q in sorted(st.queues.items()):
            labels = (group, mq.topic, mq.broker_name, str(mq.queue_id))
            add(MetricSample(_P + "lag_messages", labels, q.lag))
            add(MetricSample(_P + "cached_messages", labels, q.cached_count))
            add(MetricSample(_P + "cached_bytes", labels, q.cached_bytes))
            add(MetricSample(_P + "in_flight_handlers", labels, q.in_flight))
            age = now - q.in_flight_since if q.in_flight_since else 0.0
            add(MetricSample(_P + "oldest_in_flight_seconds", labels, max(age, 0.0)))
            add(MetricSample(_P + "queue_stuck", labels, 1.0 if (group, str(mq)) in stuck else 0.0))
        for topic, t in sorted(st.topics.items()):
            tlabels = (group, topic)
            add(MetricSample(_P + "pull_rt_milliseconds", tlabels, t.pull_rt_ms))
            add(MetricSample(_P + "pull_tps", tlabels, t.pull_tps))
            add(MetricSample(_P + "consume_rt_milliseconds", tlabels, t.consume_rt_ms))
            add(MetricSample(_P + "consume_ok_tps", tlabels, t.consume_ok_tps))
            add(MetricSample(_P + "consume_failed_tps", tlabels, t.consume_failed_tps))
            add(MetricSample(_P + "pulled_messages", tlabels, t.pulled_total))
            add(MetricSample(_P + "consumed_messages", (*tlabels, "ok"), t.consumed_ok_total))
            add(
                MetricSample(
                    _P + "consumed_messages", (*tlabels, "failed"), t.consumed_failed_total
                )
            )
        add(MetricSample(_P + "rebalances", (group,), st.rebalances))
        add(MetricSample(_P + "pull_errors", (group,), st.pull_errors))
    for key, s in sorted(app.statistics().items()):
        group, topic, handler = key.split(":", 2)
        for result, value in (
            ("handled", s.handled),
            ("failed", s.failed),
            ("dead_lettered", s.dead_lettered),
        ):
            add(MetricSample("aiorocket_app_messages", (group, topic, handler, result), value))
    return out
