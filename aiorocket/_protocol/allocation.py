"""Queue allocation inside a consumer group (Java ``AllocateMessageQueueStrategy``).

Pure functions: every member of a group computes its own share from the same sorted inputs,
so all members must use the same strategy (docs/protocol.md §6.7). Each function takes
``(mq_all, cid_all, current_cid)``, both lists already sorted with `sort_queues` /
`sort_client_ids`, and returns the current client's queues; a client missing from
``cid_all`` gets nothing.
"""

from __future__ import annotations

import hashlib
import logging
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

from aiorocket.models import MessageQueue

__all__ = [
    "AllocationStrategy",
    "allocate_averagely",
    "allocate_by_circle",
    "allocate_by_config",
    "allocate_consistent_hash",
    "sort_client_ids",
    "sort_queues",
    "strategy_named",
]

log = logging.getLogger("aiorocket.consumer")

#: ``(mq_all, cid_all, current_cid) -> my queues``; a user strategy has this shape too.
AllocationStrategy = Callable[[Sequence[MessageQueue], Sequence[str], str], Sequence[MessageQueue]]


def _java_key(s: str) -> bytes:
    # Java's String.compareTo orders by UTF-16 code units; Python's str by code points (they
    # differ above the BMP). Big-endian UTF-16 bytes compare like the code units.
    return s.encode("utf-16-be", "surrogatepass")


def sort_queues(mqs: Iterable[MessageQueue]) -> list[MessageQueue]:
    """``mqAll`` sorted as ``MessageQueue.compareTo`` does: topic, broker name, queue id."""
    return sorted(mqs, key=lambda q: (_java_key(q.topic), _java_key(q.broker_name), q.queue_id))


def sort_client_ids(cids: Iterable[str]) -> list[str]:
    """``cidAll`` sorted by Java string order, duplicates removed."""
    return sorted(set(cids), key=_java_key)


def allocate_averagely(
    mq_all: Sequence[MessageQueue], cid_all: Sequence[str], current_cid: str
) -> list[MessageQueue]:
    """``AllocateMessageQueueAveragely``: contiguous blocks, the first ``n % m`` clients get
    one queue more (docs/protocol.md §6.7, exactly)."""
    if current_cid not in cid_all or not mq_all:
        return []
    n, m = len(mq_all), len(cid_all)
    index = cid_all.index(current_cid)
    mod = n % m
    if n <= m:
        average = 1
    elif mod > 0 and index < mod:
        average = n // m + 1
    else:
        average = n // m
    start = index * average if mod > 0 and index < mod else index * average + mod
    count = min(average, n - start)
    return [mq_all[(start + k) % n] for k in range(count)]


def allocate_by_circle(
    mq_all: Sequence[MessageQueue], cid_all: Sequence[str], current_cid: str
) -> list[MessageQueue]:
    """``AllocateMessageQueueAveragelyByCircle``: queue ``i`` goes to client ``i % m``."""
    if current_cid not in cid_all:
        return []
    index = cid_all.index(current_cid)
    m = len(cid_all)
    return [mq for i, mq in enumerate(mq_all) if i % m == index]


def _md5_hash(key: str) -> int:
    # MD5Hash.hash: the first four digest bytes as a non-negative long.
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big")


def _java_mq_string(mq: MessageQueue) -> str:
    # MessageQueue.toString(), the key the Java router hashes.
    return f"MessageQueue [topic={mq.topic}, brokerName={mq.broker_name}, queueId={mq.queue_id}]"


def allocate_consistent_hash(
    mq_all: Sequence[MessageQueue],
    cid_all: Sequence[str],
    current_cid: str,
    *,
    virtual_nodes: int = 10,
) -> list[MessageQueue]:
    """``AllocateMessageQueueConsistentHash`` with ``ConsistentHashRouter`` and MD5.

    Each client has ``virtual_nodes`` points ``"<cid>-<i>"`` on a ring; a queue belongs to the
    first point at or after the hash of its Java ``toString()``, wrapping around. On a hash
    collision the later client wins, as with Java's ``TreeMap.put``.
    """
    if current_cid not in cid_all or virtual_nodes < 1:
        return []
    ring: dict[int, str] = {}
    for cid in cid_all:
        for i in range(virtual_nodes):
            ring[_md5_hash(f"{cid}-{i}")] = cid
    points = sorted(ring)
    out = []
    for mq in mq_all:
        pos = bisect_left(points, _md5_hash(_java_mq_string(mq)))
        owner = ring[points[pos if pos < len(points) else 0]]
        if owner == current_cid:
            out.append(mq)
    return out


def allocate_by_config(queues: Iterable[MessageQueue]) -> AllocationStrategy:
    """``AllocateMessageQueueByConfig``: a strategy that always takes ``queues`` (those of
    the topic being allocated), whoever else is in the group."""
    fixed = frozenset(queues)

    def by_config(
        mq_all: Sequence[MessageQueue], cid_all: Sequence[str], current_cid: str
    ) -> list[MessageQueue]:
        return [mq for mq in mq_all if mq in fixed]

    return by_config


def strategy_named(
    name: str, *, queues: Iterable[MessageQueue] = (), virtual_nodes: int = 10
) -> AllocationStrategy:
    """The strategy of a
    [`ConsumerSettings.allocation`][aiorocket.settings.ConsumerSettings.allocation] name.

    Raises:
        ValueError: an unknown name.
    """
    if name == "averagely":
        return allocate_averagely
    if name == "by_circle":
        return allocate_by_circle
    if name == "consistent_hash":

        def consistent_hash(
            mq_all: Sequence[MessageQueue], cid_all: Sequence[str], current_cid: str
        ) -> list[MessageQueue]:
            return allocate_consistent_hash(
                mq_all, cid_all, current_cid, virtual_nodes=virtual_nodes
            )

        return consistent_hash
    if name == "by_config":
        return allocate_by_config(queues)
    raise ValueError(f"unknown allocation strategy {name!r}")
