"""Planning micro-batches on the driver: offsets as JSON, resolving an offsets option to
concrete offsets, the queues of the topics, and the ranges (partitions) to read."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql.datasource import InputPartition

from aiorocket import MessageQueue, SyncQueueReader
from aiorocket.errors import ConfigurationError, TopicNotExistError

__all__ = [
    "EARLIEST",
    "LATEST",
    "Offsets",
    "QueueRange",
    "all_queues",
    "from_json",
    "ranges",
    "resolve",
    "share",
    "to_json",
]

log = logging.getLogger("aiorocket.spark")

#: An offset in offsets JSON: the queue's earliest, or its latest, offset.
EARLIEST: Final = -2
LATEST: Final = -1

Offsets = dict[MessageQueue, int]


def _queue_key(mq: MessageQueue) -> str:
    return f"{mq.broker_name}:{mq.queue_id}"


def to_json(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, int]]:
    """``offsets`` as Spark keeps them: ``{topic: {"<broker>:<queue id>": offset}}``."""
    out: dict[str, dict[str, int]] = {}
    for mq in sorted(offsets):
        out.setdefault(mq.topic, {})[_queue_key(mq)] = offsets[mq]
    return out


def from_json(data: Mapping[str, Any]) -> Offsets:
    """The offsets of `to_json`'s form."""
    out: Offsets = {}
    for topic, queues in data.items():
        for key, offset in queues.items():
            broker, _, qid = key.rpartition(":")
            out[MessageQueue(topic, broker, int(qid))] = int(offset)
    return out


def resolve(
    spec: str, reader: SyncQueueReader, mqs: list[MessageQueue], *, missing: int, what: str
) -> Offsets:
    """Concrete offsets of ``mqs`` for an offsets option (earliest/latest/timestamp/JSON).

    Raises:
        ConfigurationError: JSON naming a queue that does not exist.
        RocketError: a broker could not be asked.
    """
    s = spec.strip()
    if s.lower() == "earliest":
        return reader.min_offsets(mqs)
    if s.lower() == "latest":
        return reader.max_offsets(mqs)
    if s.isdigit():
        ts = int(s)
        return {mq: reader.offset_for_timestamp(mq, ts) for mq in mqs}
    wanted: dict[MessageQueue, int] = {}
    known = set(mqs)
    for topic, queues in json.loads(s).items():
        brokers = {mq.broker_name for mq in mqs if mq.topic == topic}
        for key, offset in queues.items():
            broker, _, qid = key.rpartition(":")
            if not broker and len(brokers) == 1:
                broker = next(iter(brokers))
            mq = MessageQueue(topic, broker, int(qid))
            if mq not in known:
                raise ConfigurationError(f"{what} names {topic} {key}, which is not a queue")
            wanted[mq] = offset
    specials = {mq: wanted.get(mq, missing) for mq in mqs}
    need_min = [mq for mq, o in specials.items() if o == EARLIEST]
    need_max = [mq for mq, o in specials.items() if o == LATEST]
    out = {mq: o for mq, o in specials.items() if o >= 0}
    out.update(reader.min_offsets(need_min) if need_min else {})
    out.update(reader.max_offsets(need_max) if need_max else {})
    return out


def all_queues(
    reader: SyncQueueReader, topics: Iterable[str], *, lenient: bool
) -> list[MessageQueue]:
    """Every readable queue of ``topics``; with ``lenient`` a topic without a route has none
    (yet) instead of failing.

    Raises:
        TopicNotExistError: (not lenient) a topic has no route.
        RocketError: the name server could not be asked.
    """
    out: list[MessageQueue] = []
    for topic in topics:
        try:
            out.extend(reader.queues(topic))
        except TopicNotExistError:
            if not lenient:
                raise
            log.info("topic %s has no route yet", topic)
    return out


@dataclass(frozen=True)
class QueueRange(InputPartition):
    """One partition: the offsets ``[start, end)`` of one queue."""

    topic: str
    broker: str
    queue_id: int
    start: int
    end: int

    @property
    def queue(self) -> MessageQueue:
        """The queue read."""
        return MessageQueue(self.topic, self.broker, self.queue_id)


def ranges(start: Offsets, end: Offsets, split: int | None) -> list[QueueRange]:
    """The partitions between ``start`` and ``end``: one per queue that moved, or pieces of
    at most ``split`` offsets."""
    out: list[QueueRange] = []
    for mq in sorted(end):
        lo = start.get(mq)
        hi = end[mq]
        if lo is None or hi <= lo:
            continue
        step = split or hi - lo
        out.extend(
            QueueRange(mq.topic, mq.broker_name, mq.queue_id, s, min(s + step, hi))
            for s in range(lo, hi, step)
        )
    return out


def share(backlog: Mapping[MessageQueue, int], limit: int | None) -> dict[MessageQueue, int]:
    """How many offsets each queue may advance: everything, or ``limit`` split in proportion
    to the backlogs (largest remainders first, ties by queue order), as Kafka's source does."""
    total = sum(backlog.values())
    if limit is None or total <= limit:
        return dict(backlog)
    shares = {mq: n * limit // total for mq, n in backlog.items()}
    left = limit - sum(shares.values())
    for mq in sorted(backlog, key=lambda q: (-(backlog[q] * limit % total), q)):
        if left <= 0:
            break
        if shares[mq] < backlog[mq]:
            shares[mq] += 1
            left -= 1
    return shares
