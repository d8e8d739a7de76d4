"""Broker statistics for the admin tools (Java ``BrokerStats``, ``BrokerStatsManager`` and
``StoreStatsService``, as far as ``mqadmin clusterList``, ``brokerStatus`` and
``consumerProgress`` show them).

Counters only go up; rates come from samples of the counters, as Java computes them:
``putTps`` and ``getTransferedTps`` from one sample a second (``StoreStatsService``), as three
rates over the last 10 s, 1 min and 10 min (empty while there are not enough samples yet); a
group's consume TPS (``tpsGroupGetNums``) from one sample every 10 s, the rate between the
oldest and the newest of the last seven (``StatsItem.computeStatsData``). The broker takes the
samples from a one-second timer (`BrokerStats.tick`).
Daily totals (``msgPutTotalTodayMorning`` …) are the counters at the last local midnight, and at
the one before.

No I/O; times are passed in (monotonic seconds, and wall-clock ms for the day boundaries).
"""

from __future__ import annotations

import datetime
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["BrokerStats"]

#: the windows of ``putTps`` / ``getTransferedTps``, in samples of one second
_WINDOWS = (10, 60, 600)
#: ``StatsItem``: one minute-window sample every 10 s, seven kept
_MINUTE_SAMPLE = 10.0
_MINUTE_KEEP = 7


@dataclass(slots=True)
class _Sample:
    at: float
    puts: int
    gets: int


@dataclass(slots=True)
class _GroupSample:
    at: float
    gets: dict[tuple[str, str], int] = field(default_factory=dict)


def _tps(old: _Sample, new: _Sample, value: Callable[[_Sample], int]) -> float:
    # CallSnapshot.getTPS
    elapsed = new.at - old.at
    return (value(new) - value(old)) / elapsed if elapsed > 0 else 0.0


def _puts(s: _Sample) -> int:
    return s.puts


def _gets(s: _Sample) -> int:
    return s.gets


class BrokerStats:
    """Message counters of one broker and their rates.

    Args:
        now: monotonic seconds at start.
        now_ms: wall-clock milliseconds at start (the boot timestamp).
        stored: returns the store's totals since start: messages and bytes stored.
        sample_interval: seconds between rate samples (1 s in Java).
    """

    def __init__(
        self,
        *,
        now: float,
        now_ms: int,
        stored: Callable[[], tuple[int, int]],
        sample_interval: float = 1.0,
    ) -> None:
        self.boot_ms = now_ms
        self._interval = sample_interval
        self._stored = stored
        self.gets = 0
        self._group_gets: dict[tuple[str, str], int] = {}
        self._samples: deque[_Sample] = deque(maxlen=_WINDOWS[-1] + 1)
        self._minute: deque[_GroupSample] = deque(maxlen=_MINUTE_KEEP)
        self._day = self._local_day(now_ms)
        self.puts_today_morning = 0
        self.puts_yesterday_morning = 0
        self.gets_today_morning = 0
        self.gets_yesterday_morning = 0
        self._tick(now, now_ms)

    @staticmethod
    def _local_day(now_ms: int) -> datetime.date:
        return datetime.datetime.fromtimestamp(now_ms / 1000).date()

    @property
    def puts(self) -> int:
        """Messages stored since start (the store's counter)."""
        return self._stored()[0]

    @property
    def put_bytes(self) -> int:
        """Bytes stored since start."""
        return self._stored()[1]

    # -- recording ----------------------------------------------------------------------------

    def tick(self, *, now: float, now_ms: int) -> None:
        """Take the samples that are due (the broker calls this every second)."""
        self._tick(now, now_ms)

    def got(
        self,
        group: str,
        topic: str,
        count: int,
        *,
        now: float | None = None,
        now_ms: int | None = None,
    ) -> None:
        """A pull of ``group`` served ``count`` messages of ``topic``.

        ``now`` and ``now_ms`` are not needed (the counters are sampled by `tick`);
        they are accepted for callers that pass them.
        """
        self.gets += count
        key = (group, topic)
        self._group_gets[key] = self._group_gets.get(key, 0) + count

    def _tick(self, now: float, now_ms: int) -> None:
        if not self._samples or now - self._samples[-1].at >= self._interval * 0.9:
            self._samples.append(_Sample(now, self.puts, self.gets))
        if not self._minute or now - self._minute[-1].at >= _MINUTE_SAMPLE:
            self._minute.append(_GroupSample(now, dict(self._group_gets)))
        day = self._local_day(now_ms)
        if day != self._day:
            # BrokerStats.record at midnight: yesterday's morning is the last morning.
            self._day = day
            self.puts_yesterday_morning = self.puts_today_morning
            self.gets_yesterday_morning = self.gets_today_morning
            self.puts_today_morning = self.puts
            self.gets_today_morning = self.gets

    # -- reading ------------------------------------------------------------------------------

    def _windows(self, value: Callable[[_Sample], int]) -> tuple[float | None, ...]:
        samples = self._samples
        last = samples[-1]
        return tuple(
            _tps(samples[len(samples) - 1 - w], last, value) if len(samples) > w else None
            for w in _WINDOWS
        )

    def put_tps(self) -> tuple[float | None, ...]:
        """Messages stored per second over 10 s, 1 min and 10 min (``None``: not enough
        samples yet)."""
        return self._windows(_puts)

    def get_tps(self) -> tuple[float | None, ...]:
        """Messages served by pulls per second over 10 s, 1 min and 10 min."""
        return self._windows(_gets)

    def group_get_tps(self, group: str, topic: str) -> float:
        """``tpsGroupGetNums``: ``group``'s messages of ``topic`` served per second, between
        the oldest and the newest minute sample."""
        first, last = self._minute[0], self._minute[-1]
        elapsed = last.at - first.at
        if elapsed <= 0:
            return 0.0
        key = (group, topic)
        return (last.gets.get(key, 0) - first.gets.get(key, 0)) / elapsed
