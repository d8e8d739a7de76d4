"""What the exactly-once sink's coordinator knows about each half message it must commit, and
the answer it gives the broker's checks (pure state, no I/O; ``coordinator.py`` acts on it).

The rule it keeps: a row (a ``UNIQ_KEY`` of a decided write) is committed at most once. A
RocketMQ 4.9 broker delivers a message again for every COMMIT it receives
(``EndTransactionProcessor`` writes the final message for each), and its check can ask about
a copy of a half message the coordinator already committed: ``TransactionalMessageServiceImpl``
puts a half message back at the queue's end before checking it, and an op message written
for the original once the scan passed it does not resolve the copy. So the coordinator sends
at most one COMMIT at a time per row, answers ROLLBACK for every copy of a row it knows is
committed, and, when it cannot know (an END without an answer, a check answered COMMIT, a
restart), waits ``grace`` for whatever was in flight to land and then reads the row's target
queue to find out.
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass

from aiorocket import PreparedMessage, TransactionState
from aiorocket.integrations.spark.txlog import Decision, Tag

__all__ = ["Ledger", "Row", "RowState", "Verdict"]


class RowState(enum.Enum):
    """Where a row to commit stands."""

    #: not committed, nothing in flight: the next COMMIT may go
    TO_APPLY = "to_apply"
    #: the coordinator's own END_TRANSACTION is waiting for its answer
    APPLYING = "applying"
    #: committed (the broker said so, or the message was found in its queue)
    APPLIED = "applied"
    #: maybe committed: found out by reading the target queue once ``grace`` passed
    UNSURE = "unsure"


class Verdict(enum.Enum):
    """The answer to a check, or what the coordinator must find out first."""

    COMMIT = TransactionState.COMMIT.value
    ROLLBACK = TransactionState.ROLLBACK.value
    UNKNOWN = TransactionState.UNKNOWN.value
    #: read the row's target queue, then ask again
    RESOLVE = "resolve"


@dataclass
class Row:
    """One half message of a decision (its ``UNIQ_KEY`` is the row's identity)."""

    prepared: PreparedMessage
    state: RowState
    #: when it became UNSURE (seconds since the epoch)
    since: float = 0.0
    #: direct END_TRANSACTIONs sent for it so far
    attempts: int = 0


class Ledger:
    """The decisions the coordinator holds and their rows.

    Args:
        grace: seconds after which an END whose outcome is unknown has surely landed (or
            never will), so that reading the target queue tells.
    """

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.decisions: dict[str, Decision] = {}
        self._rows: dict[str, dict[str, Row]] = {}
        #: (key, run) pairs whose half messages are rolled back
        self.expired: set[tuple[str, str]] = set()

    def __contains__(self, key: str) -> bool:
        return key in self.decisions

    def add(self, decision: Decision, *, unsure_since: float | None = None) -> None:
        """Hold ``decision``: its rows are to commit, or (a decision found at start-up,
        ``unsure_since`` the last moment the previous coordinator may have acted) unsure."""
        self.decisions[decision.key] = decision
        if decision.complete:
            self._rows[decision.key] = {}
            return
        state = RowState.TO_APPLY if unsure_since is None else RowState.UNSURE
        rows: dict[str, Row] = {}
        for halves in decision.halves:
            for p in halves:
                # a retried send can store two halves with one UNIQ_KEY: one row
                rows.setdefault(p.msg_id, Row(p, state, unsure_since or 0.0))
        self._rows[decision.key] = rows

    def rows(self, key: str) -> list[Row]:
        """The rows of ``key``'s decision (none once complete)."""
        return list(self._rows.get(key, {}).values())

    def pending(self) -> Iterator[Row]:
        """Every row not known to be committed, over all decisions."""
        for rows in self._rows.values():
            for row in rows.values():
                if row.state is not RowState.APPLIED:
                    yield row

    def is_complete(self, key: str) -> bool:
        """Whether every row of ``key`` is committed."""
        return all(r.state is RowState.APPLIED for r in self._rows.get(key, {}).values())

    def complete(self, key: str) -> None:
        """Forget the rows of a complete decision (it answers ROLLBACK to their copies)."""
        d = self.decisions[key]
        self.decisions[key] = Decision(d.key, d.run, d.chosen, (), True, d.at_ms)
        self._rows[key] = {}

    def verdict(self, tag: Tag, msg_id: str, now: float) -> Verdict:
        """The answer to a check of the half message ``msg_id`` tagged ``tag``, whose
        decision (or expiry) this ledger holds.

        A row to commit gets COMMIT (the caller then marks it unsure: the answer is oneway);
        a committed row's copy, and every half message not chosen, ROLLBACK; a row whose END
        is in flight, or unsure within ``grace``, UNKNOWN (the broker asks again).
        """
        if (tag.key, tag.run) in self.expired:
            return Verdict.ROLLBACK
        d = self.decisions.get(tag.key)
        if d is None:
            return Verdict.UNKNOWN
        if not d.chooses(tag) or d.complete:
            return Verdict.ROLLBACK
        row = self._rows[tag.key].get(msg_id)
        if row is None:
            return Verdict.ROLLBACK  # not among the halves the task reported: never commit
        if row.state is RowState.APPLIED:
            return Verdict.ROLLBACK
        if row.state is RowState.APPLYING:
            return Verdict.UNKNOWN
        if row.state is RowState.TO_APPLY:
            return Verdict.COMMIT
        return Verdict.UNKNOWN if now - row.since < self.grace else Verdict.RESOLVE

    def row(self, key: str, msg_id: str) -> Row | None:
        """The row ``msg_id`` of ``key``'s decision."""
        return self._rows.get(key, {}).get(msg_id)
