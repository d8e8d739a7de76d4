"""The exactly-once sink's durable decision record: a directory (the streaming checkpoint's
``rocketmq-sink``, or the ``transactionLog`` option) of small JSON files.

* ``record.json``: the record's id, from which the transaction group of its half messages is
  named (one checker per record).
* ``decisions/<key>.json``: the driver's commit of one write (a batch write, or a streaming
  query's micro-batch): the run that wrote it, the task attempt chosen per partition and the
  half messages to commit. Written once, before anything is committed; a later commit of
  the same key (a micro-batch replayed after a restart) finds it and commits nothing else.
  Once every half message of it was committed, the coordinator rewrites it without them.
* ``expired/<key>@<run>``: a run of a write whose half messages the broker checked before
  any decision (older than ``transactionTimeout``, or aborted): they are rolled back, and the
  driver's later commit of that run fails.
* ``aborts/<key>@<run>.json``: half messages an aborted write asks the coordinator to roll back.
* ``applied/<key>.json``: the coordinator's report on a decision (counts; ``complete``).
* ``coordinator.*``: the live coordinator's lock, pid, heartbeat and log.

Decisions and expiries exclude each other under ``record.lock`` (``flock``), so the record
must live on a local file system (or one whose ``flock`` works across the processes of the
driver's host).
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import time
import uuid
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from aiorocket import PreparedMessage
from aiorocket.errors import ConfigurationError, RocketError

__all__ = [
    "Decision",
    "ExpiredWriteError",
    "HalfSet",
    "TxRecord",
    "Tag",
]

#: the user property naming the write, run, partition and task attempt of a half message
TAG_PROPERTY: Final = "SPARK_TXN"
_VERSION: Final = 1
_KEY_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class ExpiredWriteError(RocketError):
    """The write's half messages were rolled back before the driver could commit them: it
    took longer than ``transactionTimeout`` (the broker checked them first) or was aborted."""


@dataclass(frozen=True)
class Tag:
    """What a half message says about where it comes from (its ``SPARK_TXN`` property):
    the write, the run (writer instance) and task attempt that sent it, and the seconds its
    write has to be decided (``transactionTimeout``) before it is rolled back."""

    key: str
    run: str
    partition: int
    attempt: int
    timeout: int = 120

    def render(self) -> str:
        """The property's value."""
        return f"{self.key}|{self.run}|{self.partition}|{self.attempt}|{self.timeout}"

    @classmethod
    def parse(cls, text: str | None) -> Tag | None:
        """The tag of a property value, or ``None`` for anything else."""
        if not text:
            return None
        parts = text.split("|")
        if len(parts) != 5 or not all(p.isdigit() for p in parts[2:]):
            return None
        return cls(parts[0], parts[1], int(parts[2]), int(parts[3]), int(parts[4]))


def check_key(key: str) -> str:
    """``key`` if it is usable as a file name (letters, digits, ``.``, ``_``, ``-``).

    Raises:
        ConfigurationError: another character, or empty.
    """
    if not key or not set(key) <= _KEY_CHARS:
        raise ConfigurationError(f"invalid transaction key {key!r}")
    return key


@dataclass(frozen=True)
class HalfSet:
    """The half messages of one task attempt, in columns (a commit message carries it from
    the executor to the driver, the decision record keeps it): small to pickle and to store
    as JSON. Every half of a set has the same transaction ``group``."""

    group: str
    brokers: tuple[str, ...]
    topics: tuple[str, ...]
    #: per half: index into ``brokers``, into ``topics``, queue id (``array('i')`` bytes)
    broker_index: bytes
    topic_index: bytes
    queue_ids: bytes
    #: per half: half-queue offset, commit-log offset, born time in ms (``array('q')`` bytes)
    queue_offsets: bytes
    commit_log_offsets: bytes
    born: bytes
    #: the halves' ``UNIQ_KEY`` values joined by ``,``
    msg_ids: str

    @classmethod
    def of(cls, group: str, prepared: Sequence[PreparedMessage]) -> HalfSet:
        """The set of ``prepared`` (all of ``group``)."""
        brokers: dict[str, int] = {}
        topics: dict[str, int] = {}
        bi, ti, qi = array("i"), array("i"), array("i")
        qo, co, born = array("q"), array("q"), array("q")
        for p in prepared:
            bi.append(brokers.setdefault(p.broker_name, len(brokers)))
            ti.append(topics.setdefault(p.topic, len(topics)))
            qi.append(p.queue_id)
            qo.append(p.queue_offset)
            co.append(p.commit_log_offset)
            born.append(p.born_ms)
        return cls(
            group,
            tuple(brokers),
            tuple(topics),
            bi.tobytes(),
            ti.tobytes(),
            qi.tobytes(),
            qo.tobytes(),
            co.tobytes(),
            born.tobytes(),
            ",".join(p.msg_id for p in prepared),
        )

    def __len__(self) -> int:
        return len(self.queue_offsets) // 8

    def __iter__(self) -> Iterator[PreparedMessage]:
        ints = [_ints("i", b) for b in (self.broker_index, self.topic_index, self.queue_ids)]
        longs = [_ints("q", b) for b in (self.queue_offsets, self.commit_log_offsets, self.born)]
        ids = self.msg_ids.split(",") if self.msg_ids else []
        for i, msg_id in enumerate(ids):
            yield PreparedMessage(
                group=self.group,
                broker_name=self.brokers[ints[0][i]],
                queue_offset=longs[0][i],
                commit_log_offset=longs[1][i],
                msg_id=msg_id,
                topic=self.topics[ints[1][i]],
                queue_id=ints[2][i],
                born_ms=longs[2][i],
            )

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form (`from_json` reads it)."""
        out: dict[str, Any] = {
            "group": self.group,
            "brokers": list(self.brokers),
            "topics": list(self.topics),
            "msg_ids": self.msg_ids,
        }
        for name in _COLUMNS:
            out[name] = base64.b64encode(getattr(self, name)).decode()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HalfSet:
        """The set `to_json` wrote."""
        cols = {name: base64.b64decode(data[name]) for name in _COLUMNS}
        return cls(
            group=data["group"],
            brokers=tuple(data["brokers"]),
            topics=tuple(data["topics"]),
            msg_ids=data["msg_ids"],
            **cols,
        )


_COLUMNS: Final = (
    "broker_index",
    "topic_index",
    "queue_ids",
    "queue_offsets",
    "commit_log_offsets",
    "born",
)


def _ints(code: str, raw: bytes) -> array[int]:
    out = array(code)
    out.frombytes(raw)
    return out


@dataclass(frozen=True)
class Decision:
    """The driver's commit of one write: ``run``'s attempt ``chosen[partition]`` of every
    partition; ``halves`` are what to commit (empty once ``complete``: all committed)."""

    key: str
    run: str
    chosen: dict[int, int]
    halves: tuple[HalfSet, ...] = ()
    complete: bool = False
    at_ms: int = field(default_factory=lambda: int(time.time() * 1000))

    def chooses(self, tag: Tag) -> bool:
        """Whether the half message tagged ``tag`` is one to commit."""
        return tag.run == self.run and self.chosen.get(tag.partition) == tag.attempt

    def topics(self) -> set[str]:
        """The topics its half messages go to."""
        return {t for h in self.halves for t in h.topics}

    def to_json(self) -> dict[str, Any]:
        """A JSON-able form."""
        return {
            "version": _VERSION,
            "key": self.key,
            "run": self.run,
            "chosen": {str(p): a for p, a in sorted(self.chosen.items())},
            "halves": [h.to_json() for h in self.halves],
            "complete": self.complete,
            "at_ms": self.at_ms,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Decision:
        """The decision `to_json` wrote."""
        return cls(
            key=data["key"],
            run=data["run"],
            chosen={int(p): int(a) for p, a in data["chosen"].items()},
            halves=tuple(HalfSet.from_json(h) for h in data["halves"]),
            complete=bool(data.get("complete", False)),
            at_ms=int(data.get("at_ms", 0)),
        )


def _write_atomically(path: Path, data: Any) -> None:
    # The file appears whole or not at all, and survives a crash once this returns.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: Path) -> Any:
    try:
        with path.open() as f:
            return json.load(f)
    except FileNotFoundError:
        return None


class TxRecord:
    """One decision record directory (created on first use)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory)
        for sub in ("decisions", "expired", "aborts", "applied"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        meta = self.path / "record.json"
        with self.locked():
            data = _read(meta)
            if data is None:
                data = {"version": _VERSION, "id": uuid.uuid4().hex}
                _write_atomically(meta, data)
        self.id: str = data["id"]

    def group(self, base: str) -> str:
        """The transaction group of this record's half messages: ``base`` and the record id
        (the coordinator of this record is its only member)."""
        return f"{base}_TX_{self.id[:12]}"

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold ``record.lock`` (exclusive, across processes)."""
        fd = os.open(self.path / "record.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    # -- decisions and expiries ---------------------------------------------------------------

    def _decision_path(self, key: str) -> Path:
        return self.path / "decisions" / f"{check_key(key)}.json"

    def _expired_path(self, key: str, run: str) -> Path:
        return self.path / "expired" / f"{check_key(key)}@{check_key(run)}"

    def decision(self, key: str) -> Decision | None:
        """The decision of ``key``, if made."""
        data = _read(self._decision_path(key))
        return None if data is None else Decision.from_json(data)

    def decision_keys(self) -> list[str]:
        """The keys with a decision."""
        return [p.name[:-5] for p in (self.path / "decisions").glob("*.json")]

    def is_expired(self, key: str, run: str) -> bool:
        """Whether ``run`` of ``key`` expired (or was aborted)."""
        return self._expired_path(key, run).exists()

    def decide(self, decision: Decision) -> Decision:
        """Record ``decision`` unless ``key`` was decided before (a replay): the decision in
        force, which may be another run's.

        Raises:
            ExpiredWriteError: this run expired first.
            OSError: the record could not be written.
        """
        with self.locked():
            if self.is_expired(decision.key, decision.run):
                raise ExpiredWriteError(
                    f"rocketmq sink: {decision.key} was rolled back before its commit: the "
                    "broker checked its half messages first (it took longer than "
                    "transactionTimeout) or it was aborted"
                )
            earlier = self.decision(decision.key)
            if earlier is not None:
                return earlier
            _write_atomically(self._decision_path(decision.key), decision.to_json())
            return decision

    def expire(self, key: str, run: str) -> Decision | None:
        """Expire ``run`` of ``key`` unless ``key`` is decided: ``None`` once expired, else
        the decision (which the caller must follow instead).

        Raises:
            OSError: the record could not be written.
        """
        with self.locked():
            earlier = self.decision(key)
            if earlier is not None:
                return earlier
            path = self._expired_path(key, run)
            if not path.exists():
                _write_atomically(path, {"at_ms": int(time.time() * 1000)})
            return None

    def compact(self, key: str) -> None:
        """Rewrite ``key``'s decision as complete, without its half messages.

        Raises:
            OSError: the record could not be written.
        """
        with self.locked():
            d = self.decision(key)
            if d is not None and not d.complete:
                done = Decision(d.key, d.run, d.chosen, (), True, d.at_ms)
                _write_atomically(self._decision_path(key), done.to_json())

    # -- aborts -------------------------------------------------------------------------------

    def abort(self, key: str, run: str, halves: Iterable[HalfSet]) -> None:
        """Expire ``run`` of ``key`` and ask the coordinator to roll back ``halves``; nothing
        when ``run`` is the one decided for ``key`` (its half messages are committed).

        Raises:
            OSError: the record could not be written.
        """
        decided = self.expire(key, run)
        if decided is not None and decided.run == run:
            return
        sets = [h.to_json() for h in halves if len(h)]
        if sets:
            name = f"{check_key(key)}@{check_key(run)}.json"
            _write_atomically(self.path / "aborts" / name, {"halves": sets})

    def aborts(self) -> list[Path]:
        """The abort requests not handled yet."""
        return sorted((self.path / "aborts").glob("*.json"))

    @staticmethod
    def abort_halves(path: Path) -> list[HalfSet]:
        """The half messages of an abort request."""
        data = _read(path) or {"halves": []}
        return [HalfSet.from_json(h) for h in data["halves"]]

    # -- the coordinator's reports ------------------------------------------------------------

    def report(self, key: str, *, applied: int, pending: int, complete: bool) -> None:
        """The coordinator's pass over ``key`` is done: how many half messages it committed
        and how many wait for the broker's check.

        Raises:
            OSError: the record could not be written.
        """
        _write_atomically(
            self.path / "applied" / f"{check_key(key)}.json",
            {"applied": applied, "pending": pending, "complete": complete},
        )

    def reported(self, key: str) -> dict[str, Any] | None:
        """The coordinator's report on ``key``, if any."""
        data = _read(self.path / "applied" / f"{check_key(key)}.json")
        return data if isinstance(data, dict) else None
