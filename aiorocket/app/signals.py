"""What a handler can ask for besides success. These are outcomes, not library errors, so they
live outside the [`RocketError`][aiorocket.errors.RocketError] tree."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["DeadLetter", "ReconsumeLater", "RetryPolicy"]


class ReconsumeLater(Exception):
    """Raise in a handler to have the message delivered again later.

    Args:
        delay_level: 1-18 picks the broker delay level (1 s … 2 h); ``None`` lets the broker
            choose (level 3 + reconsume times), as ``RECONSUME_LATER`` does in Java.
    """

    def __init__(self, reason: str = "", *, delay_level: int | None = None) -> None:
        super().__init__(reason or "reconsume later")
        self.delay_level = delay_level


class DeadLetter(Exception):
    """Raise in a handler to send the message to the dead-letter queue now, without retries."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Per-subscriber retry rules.

    Attributes:
        max_attempts: deliveries in total before the message goes to the dead-letter queue
            (1 = no retry). ``None`` keeps the consumer's ``max_reconsume_times`` (16 retries).
        dead_letter_on: exception classes that send a message to the DLQ at once.
        delay_level: the retry delay level for failures (``None``: the broker's schedule).
        expected: exception classes the handler raises on purpose (it refuses the message;
            not a bug): their failures are retried as any other, but logged in one INFO line
            without a traceback; the dead-letter warning, if the message gets there, still
            shows at the default level.
    """

    max_attempts: int | None = None
    dead_letter_on: tuple[type[BaseException], ...] = field(default=())
    delay_level: int | None = None
    expected: tuple[type[BaseException], ...] = field(default=())

    def __init__(
        self,
        *,
        max_attempts: int | None = None,
        dead_letter_on: Iterable[type[BaseException]] = (),
        delay_level: int | None = None,
        expected: Iterable[type[BaseException]] = (),
    ) -> None:
        if max_attempts is not None and max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        object.__setattr__(self, "max_attempts", max_attempts)
        object.__setattr__(self, "dead_letter_on", tuple(dead_letter_on))
        object.__setattr__(self, "delay_level", delay_level)
        object.__setattr__(self, "expected", tuple(expected))

    def gives_up(self, exc: BaseException, reconsume_times: int) -> bool:
        """Whether a failure with ``exc`` on delivery ``reconsume_times + 1`` is final."""
        if isinstance(exc, (DeadLetter, *self.dead_letter_on)):
            return True
        return self.max_attempts is not None and reconsume_times + 1 >= self.max_attempts
