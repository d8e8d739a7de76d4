"""Per-queue health of a running [`App`][aiorocket.app.App]: the readiness model behind
``/readyz`` (FastAPI integration and the worker's ``--metrics-port`` server).

A queue is *stuck* when

* a handler call on its messages has been running for more than ``stuck_after`` seconds (a
  handler blocked on a lock, a hung network call): nothing after it is committed, and with
  concurrent consumption the span limit soon stops the queue's pulls; or
* it holds cached messages and nothing of it finished for ``stuck_after`` seconds.

Pulls alone do not count as progress: a queue keeps long-polling while a handler hangs.
Whether the app reaches its name server and brokers is `aiorocket.app.readiness`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiorocket._consumer import PushConsumer

__all__ = ["QueueHealth", "queue_health", "readiness_report"]


@dataclass(frozen=True, slots=True)
class QueueHealth:
    """The health of one queue held by one of the app's consumers.

    Attributes:
        group: the consumer group.
        queue: ``topic@broker:queue``.
        last_pull_age, last_consume_age: seconds since the last pull was sent and since
            consumption last finished on the queue.
        oldest_in_flight_age: seconds the oldest running handler call has run (0.0: none).
        in_flight: handler calls running.
        cached: messages pulled and not finished.
        lag: messages on the broker this member has not finished.
        flow_blocked: which flow-control limit holds the pulls (``"span"`` when one slow
            message keeps the queue from moving), ``None`` if none.
        stuck: see the module docstring; ``reason`` says why.
    """

    group: str
    queue: str
    last_pull_age: float
    last_consume_age: float
    oldest_in_flight_age: float
    in_flight: int
    cached: int
    lag: int
    flow_blocked: str | None
    stuck: bool
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``/readyz`` bodies)."""
        return {
            "group": self.group,
            "queue": self.queue,
            "last_pull_age": round(self.last_pull_age, 3),
            "last_consume_age": round(self.last_consume_age, 3),
            "oldest_in_flight_age": round(self.oldest_in_flight_age, 3),
            "in_flight": self.in_flight,
            "cached": self.cached,
            "lag": self.lag,
            "flow_blocked": self.flow_blocked,
            "stuck": self.stuck,
            "reason": self.reason,
        }


def queue_health(
    consumers: Mapping[str, PushConsumer], *, stuck_after: float, now: float
) -> list[QueueHealth]:
    """The health of every queue the consumers hold, sorted by group and queue.

    Args:
        consumers: the running consumers by group.
        stuck_after: seconds after which a queue counts as stuck.
        now: the current epoch time in seconds.
    """
    out: list[QueueHealth] = []
    for group in sorted(consumers):
        stats = consumers[group].statistics()
        for mq in sorted(stats.queues):
            q = stats.queues[mq]
            in_flight_age = now - q.in_flight_since if q.in_flight_since else 0.0
            consume_age = max(now - q.last_consume_time, 0.0)
            reason = None
            if in_flight_age > stuck_after:
                reason = (
                    f"a handler call has run for {in_flight_age:.0f} s "
                    f"(stuck_after {stuck_after:g} s)"
                )
            elif q.cached_count and consume_age > stuck_after:
                reason = (
                    f"{q.cached_count} cached message(s), nothing consumed for "
                    f"{consume_age:.0f} s (stuck_after {stuck_after:g} s)"
                )
            if reason is not None and q.flow_blocked:
                reason += f"; pulls held by the {q.flow_blocked} limit"
            out.append(
                QueueHealth(
                    group=group,
                    queue=str(mq),
                    last_pull_age=max(now - q.last_pull_time, 0.0),
                    last_consume_age=consume_age,
                    oldest_in_flight_age=max(in_flight_age, 0.0),
                    in_flight=q.in_flight,
                    cached=q.cached_count,
                    lag=q.lag,
                    flow_blocked=q.flow_blocked,
                    stuck=reason is not None,
                    reason=reason,
                )
            )
    return out


def readiness_report(
    ready: bool, health: list[QueueHealth], problems: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The ``/readyz`` body: readiness, what the app cannot reach (``problems``: the name
    server, a broker, a group whose pulls fail; `aiorocket.app.readiness`), the stuck
    queues with their reasons, every queue."""
    return {
        "ready": ready,
        "problems": dict(problems or {}),
        "stuck_queues": [h.queue for h in health if h.stuck],
        "reasons": {f"{h.group}/{h.queue}": h.reason for h in health if h.stuck},
        "queues": [h.to_dict() for h in health],
    }
