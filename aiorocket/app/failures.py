"""How a failing handler shows up in the logs: one warning per failure with its traceback, at
most one per handler per ``failure_log_interval`` seconds; the failures in between are logged
at DEBUG without a traceback and counted in the next warning, so a poison message redelivered
in a loop cannot flood the log while the first traceback still tells what went wrong."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from aiorocket.models import ReceivedMessage

__all__ = ["FailureLog"]


class FailureLog:
    """The rate-limited failure log of one handler.

    Args:
        handler: the handler's name, in every line.
        interval: seconds between two tracebacks (0: every failure gets one).
        logger: where the lines go.
        clock: monotonic seconds (a test may pass its own).
    """

    __slots__ = ("_clock", "_handler", "_interval", "_last", "_log", "suppressed")

    def __init__(
        self,
        handler: str,
        interval: float,
        logger: logging.Logger,
        clock: Callable[[], float],
    ) -> None:
        self._handler = handler
        self._interval = interval
        self._log = logger
        self._clock = clock
        self._last: float | None = None
        #: failures logged without a traceback since the last warning
        self.suppressed = 0

    def failed(
        self,
        msgs: Sequence[ReceivedMessage],
        exc: BaseException,
        outcome: str,
        *,
        expected: bool = False,
    ) -> None:
        """Log one failed handler call on ``msgs`` (``outcome``: what happens to them next);
        an ``expected`` failure (the handler refused the message on purpose) is one INFO line
        without a traceback, and is not rate-limited with the others."""
        first = msgs[0]
        where = first.msg_id if len(msgs) == 1 else f"{len(msgs)} messages from {first.msg_id}"
        if expected:
            self._log.info(
                "handler %s refused %s (attempt %d), %s: %s: %s",
                self._handler,
                where,
                first.reconsume_times + 1,
                outcome,
                type(exc).__name__,
                exc,
            )
            return
        now = self._clock()
        if self._last is not None and now - self._last < self._interval:
            self.suppressed += 1
            self._log.debug(
                "handler %s failed on %s (attempt %d), %s: %r",
                self._handler,
                where,
                first.reconsume_times + 1,
                outcome,
                exc,
            )
            return
        extra = ""
        if self.suppressed:
            extra = f" ({self.suppressed} more failure(s) since the last traceback)"
        self._last, self.suppressed = now, 0
        self._log.warning(
            "handler %s failed on %s (attempt %d), %s%s",
            self._handler,
            where,
            first.reconsume_times + 1,
            outcome,
            extra,
            exc_info=(type(exc), exc, exc.__traceback__),
        )
