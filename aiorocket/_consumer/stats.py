"""Consumer statistics (Java ``ConsumerStatsManager``): pull RT and TPS, consume RT, OK and
failed TPS per topic, and per-queue cache figures.

Recording only bumps counters (the hot path); rates are computed over a sliding window of
samples taken by the offset-persistence tick, so no extra task runs for statistics.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiorocket.models import MessageQueue

__all__ = [
    "ConsumerStatistics",
    "QueueStatistics",
    "StatsRecorder",
    "TopicStatistics",
]


@dataclass(frozen=True, slots=True)
class TopicStatistics:
    """Rates of one topic over the last minute or so (Java ``ConsumeStatus``).

    Attributes:
        pull_rt_ms: mean pull round trip (a held long poll counts its hold time).
        pull_tps: messages pulled per second.
        consume_rt_ms: mean handler call duration.
        consume_ok_tps, consume_failed_tps: messages per second that succeeded / failed.
        pulled_total, consumed_ok_total, consumed_failed_total: counts since start.
        lag: messages of the topic's held queues not consumed yet: per queue, the broker's
            max offset from the last pull response minus the offset to commit next.
    """

    pull_rt_ms: float = 0.0
    pull_tps: float = 0.0
    consume_rt_ms: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    pulled_total: int = 0
    consumed_ok_total: int = 0
    consumed_failed_total: int = 0
    lag: int = 0


@dataclass(frozen=True, slots=True)
class QueueStatistics:
    """One assigned queue.

    Attributes:
        queue: the queue (wire topic).
        cached_count, cached_bytes: messages pulled whose consumption has not finished.
        span: largest minus smallest cached offset.
        committed_offset: the offset to commit next (-1 if none yet).
        last_pull_time, last_consume_time: epoch seconds of the last pull / finished batch.
        locked: orderly, clustering: the broker granted this member the queue's lock and it
            has not expired (``lock_expiry``); always False otherwise.
        last_lock_time: orderly, clustering: epoch seconds at which the last granted lock
            request was sent (0.0 if never).
        broker_offset: the queue's max offset on the broker, from the last pull response
            (-1 before the first pull answered).
        lag: ``broker_offset - committed_offset`` (0 while either is unknown): messages
            stored that this consumer has not finished.
        in_flight: handler calls running on this queue's messages.
        in_flight_since: epoch seconds at which the oldest handler call still running on
            this queue's messages started (0.0 when none runs).
        flow_blocked: which flow-control limit holds the queue's pulls right now
            (``"count"``, ``"size"`` or ``"span"``), ``None`` when pulls are not held.
    """

    queue: MessageQueue
    cached_count: int
    cached_bytes: int
    span: int
    committed_offset: int
    last_pull_time: float
    last_consume_time: float
    locked: bool = False
    last_lock_time: float = 0.0
    broker_offset: int = -1
    lag: int = 0
    in_flight: int = 0
    in_flight_since: float = 0.0
    flow_blocked: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerStatistics:
    """What [`statistics`][aiorocket.PushConsumer.statistics] returns.

    Attributes:
        topics: per wire topic, see [`TopicStatistics`][aiorocket.TopicStatistics].
        queues: per assigned queue, see [`QueueStatistics`][aiorocket.QueueStatistics].
        pull_errors: failed pulls (connection lost, broker errors), retried with backoff.
        flow_control_pauses: times a queue waited for cache capacity before pulling.
        send_back_failures: failed messages that could not be returned to the broker and were
            scheduled for a local retry.
        rebalances: completed rebalance rounds.
        pull_restarts: pull tasks restarted by the watchdog after staying silent for twice
            ``pull_timeout`` (a healthy consumer keeps this at 0).
        handlers_cancelled: handler calls cancelled after running longer than
            ``consume_timeout`` (see ``cancel_timed_out_handlers``).
    """

    topics: Mapping[str, TopicStatistics] = field(default_factory=dict)
    queues: Mapping[MessageQueue, QueueStatistics] = field(default_factory=dict)
    pull_errors: int = 0
    flow_control_pauses: int = 0
    send_back_failures: int = 0
    rebalances: int = 0
    pull_restarts: int = 0
    handlers_cancelled: int = 0


class _Counters:
    __slots__ = ("consume_calls", "consume_rt", "failed", "ok", "pull_rt", "pulled", "pulls")

    def __init__(self) -> None:
        self.pulls = 0
        self.pull_rt = 0.0
        self.pulled = 0
        self.consume_calls = 0
        self.consume_rt = 0.0
        self.ok = 0
        self.failed = 0

    def copy(self) -> _Counters:
        c = _Counters()
        c.pulls, c.pull_rt, c.pulled = self.pulls, self.pull_rt, self.pulled
        c.consume_calls, c.consume_rt = self.consume_calls, self.consume_rt
        c.ok, c.failed = self.ok, self.failed
        return c


class StatsRecorder:
    """Cumulative counters per topic plus a window of samples for rates.

    ``window`` samples are kept; with a 5 s sampling tick the rates cover about a minute.
    """

    def __init__(self, *, now: float, window: int = 13) -> None:
        self._topics: dict[str, _Counters] = {}
        self._samples: deque[tuple[float, dict[str, _Counters]]] = deque(maxlen=window)
        self._samples.append((now, {}))
        self.pull_errors = 0
        self.flow_control_pauses = 0
        self.send_back_failures = 0
        self.rebalances = 0
        self.pull_restarts = 0
        self.handlers_cancelled = 0

    def _topic(self, topic: str) -> _Counters:
        c = self._topics.get(topic)
        if c is None:
            c = self._topics[topic] = _Counters()
        return c

    def pulled(self, topic: str, rt: float, count: int) -> None:
        """One pull finished after ``rt`` seconds with ``count`` messages."""
        c = self._topic(topic)
        c.pulls += 1
        c.pull_rt += rt
        c.pulled += count

    def consumed(self, topic: str, rt: float, ok: int, failed: int) -> None:
        """One handler call finished after ``rt`` seconds."""
        c = self._topics.get(topic) or self._topic(topic)
        c.consume_calls += 1
        c.consume_rt += rt
        c.ok += ok
        c.failed += failed

    def sample(self, now: float) -> None:
        """Take a sample (called periodically)."""
        self._samples.append((now, {t: c.copy() for t, c in self._topics.items()}))

    def topic_statistics(self, now: float) -> dict[str, TopicStatistics]:
        """Rates between the oldest sample and now, totals since start."""
        t0, base = self._samples[0]
        dt = max(now - t0, 1e-9)
        out: dict[str, TopicStatistics] = {}
        for topic, c in self._topics.items():
            b = base.get(topic) or _Counters()
            pulls = c.pulls - b.pulls
            calls = c.consume_calls - b.consume_calls
            out[topic] = TopicStatistics(
                pull_rt_ms=(c.pull_rt - b.pull_rt) / pulls * 1000 if pulls else 0.0,
                pull_tps=(c.pulled - b.pulled) / dt,
                consume_rt_ms=(c.consume_rt - b.consume_rt) / calls * 1000 if calls else 0.0,
                consume_ok_tps=(c.ok - b.ok) / dt,
                consume_failed_tps=(c.failed - b.failed) / dt,
                pulled_total=c.pulled,
                consumed_ok_total=c.ok,
                consumed_failed_total=c.failed,
            )
        return out
