"""Jittered exponential backoff for loops that retry after expected failures."""

from __future__ import annotations

import random

__all__ = ["Backoff"]


class Backoff:
    """Delays ``initial``, ``initial * factor``, … capped at ``maximum``, each with ±``jitter``.

    Jitter spreads reconnect storms when a broker comes back and every pull task retries.
    """

    __slots__ = ("_attempt", "_factor", "_initial", "_jitter", "_maximum", "_rng")

    def __init__(
        self,
        *,
        initial: float = 0.1,
        maximum: float = 5.0,
        factor: float = 2.0,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        if initial <= 0 or maximum < initial or factor < 1 or not 0 <= jitter < 1:
            raise ValueError("invalid backoff parameters")
        self._initial = initial
        self._maximum = maximum
        self._factor = factor
        self._jitter = jitter
        self._attempt = 0
        self._rng = rng or random.Random()

    @property
    def attempts(self) -> int:
        """Failures since the last `reset`."""
        return self._attempt

    def next_delay(self) -> float:
        """Return the delay before the next attempt and count one more failure."""
        base = min(self._maximum, self._initial * self._factor**self._attempt)
        self._attempt += 1
        return base * (1 + self._jitter * (2 * self._rng.random() - 1))

    def reset(self) -> None:
        """Start over after a success."""
        self._attempt = 0
