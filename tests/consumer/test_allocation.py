"""Allocation strategies against the Java algorithms (docs/protocol.md §6.7)."""

from __future__ import annotations

import pytest

from aiorocket._protocol.allocation import (
    allocate_averagely,
    allocate_by_circle,
    allocate_by_config,
    allocate_consistent_hash,
    sort_client_ids,
    sort_queues,
    strategy_named,
)
from aiorocket.models import MessageQueue


def _mqs(n: int, topic: str = "T", brokers: int = 1) -> list[MessageQueue]:
    per = n // brokers
    return sort_queues(
        MessageQueue(topic, f"broker-{chr(97 + b)}", q) for b in range(brokers) for q in range(per)
    )


def _java_averagely(n: int, m: int, index: int) -> list[int]:
    """AllocateMessageQueueAveragely transcribed literally (indices into mqAll)."""
    mod = n % m
    average = 1 if n <= m else (n // m + 1 if mod > 0 and index < mod else n // m)
    start_index = index * average if mod > 0 and index < mod else index * average + mod
    rng = min(average, n - start_index)
    return [(start_index + i) % n for i in range(rng)]


@pytest.mark.parametrize(
    ("n", "m", "expected"),
    [
        # 8 queues, 3 consumers: 3, 3, 2 in contiguous blocks.
        (8, 3, [[0, 1, 2], [3, 4, 5], [6, 7]]),
        (10, 4, [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]),
        (8, 8, [[i] for i in range(8)]),
        # More consumers than queues: the last ones get nothing.
        (2, 3, [[0], [1], []]),
        (4, 1, [[0, 1, 2, 3]]),
        (7, 2, [[0, 1, 2, 3], [4, 5, 6]]),
    ],
)
def test_averagely_matches_hand_computed_splits(n: int, m: int, expected: list[list[int]]) -> None:
    mqs = _mqs(n)
    cids = sort_client_ids(f"10.0.0.{i}@{i}" for i in range(m))
    for i, cid in enumerate(cids):
        assert allocate_averagely(mqs, cids, cid) == [mqs[k] for k in expected[i]]


@pytest.mark.parametrize("n", range(1, 20))
@pytest.mark.parametrize("m", range(1, 9))
def test_averagely_equals_java_and_partitions(n: int, m: int) -> None:
    mqs = _mqs(n)
    cids = sort_client_ids(f"c{i:02d}" for i in range(m))
    seen: list[MessageQueue] = []
    for i, cid in enumerate(cids):
        mine = allocate_averagely(mqs, cids, cid)
        assert mine == [mqs[k] for k in _java_averagely(n, m, i)]
        seen.extend(mine)
    assert sorted(seen) == sorted(mqs)  # every queue exactly once


def test_unknown_client_gets_nothing() -> None:
    mqs = _mqs(4)
    assert allocate_averagely(mqs, ["a", "b"], "c") == []
    assert allocate_by_circle(mqs, ["a", "b"], "c") == []
    assert allocate_consistent_hash(mqs, ["a", "b"], "c") == []


@pytest.mark.parametrize(("n", "m"), [(8, 3), (5, 5), (3, 4), (16, 5)])
def test_by_circle_deals_round_robin(n: int, m: int) -> None:
    mqs = _mqs(n)
    cids = [f"c{i}" for i in range(m)]
    seen: list[MessageQueue] = []
    for i, cid in enumerate(cids):
        mine = allocate_by_circle(mqs, cids, cid)
        assert mine == mqs[i::m]
        seen.extend(mine)
    assert sorted(seen) == sorted(mqs)


def test_consistent_hash_partitions_and_moves_little() -> None:
    mqs = _mqs(64, brokers=2)
    cids = sort_client_ids(["10.0.0.1@a", "10.0.0.2@b", "10.0.0.3@c"])
    owner = {}
    for cid in cids:
        for mq in allocate_consistent_hash(mqs, cids, cid):
            assert mq not in owner
            owner[mq] = cid
    assert len(owner) == 64
    assert len(set(owner.values())) == 3
    # A fourth member takes queues only from the others; nothing moves between old members.
    cids4 = sort_client_ids([*cids, "10.0.0.4@d"])
    owner4 = {mq: cid for cid in cids4 for mq in allocate_consistent_hash(mqs, cids4, cid)}
    assert len(owner4) == 64
    moved = [mq for mq in mqs if owner[mq] != owner4[mq]]
    assert all(owner4[mq] == "10.0.0.4@d" for mq in moved)


def test_consistent_hash_uses_java_md5_key() -> None:
    # MD5("c-0") first four bytes, as Java's MD5Hash.hash returns them.
    import hashlib

    from aiorocket._protocol.allocation import _java_mq_string, _md5_hash

    assert _md5_hash("c-0") == int.from_bytes(hashlib.md5(b"c-0").digest()[:4], "big")
    assert (
        _java_mq_string(MessageQueue("T", "b", 3))
        == "MessageQueue [topic=T, brokerName=b, queueId=3]"
    )


def test_by_config_takes_the_configured_queues_of_the_topic() -> None:
    mqs = _mqs(4)
    strategy = allocate_by_config([mqs[1], mqs[3], MessageQueue("Other", "broker-a", 0)])
    assert strategy(mqs, ["a", "b"], "a") == [mqs[1], mqs[3]]
    assert strategy(mqs, ["a", "b"], "b") == [mqs[1], mqs[3]]


def test_sorting_follows_java_order() -> None:
    mqs = [
        MessageQueue("T", "broker-b", 0),
        MessageQueue("T", "broker-a", 10),
        MessageQueue("T", "broker-a", 2),
        MessageQueue("S", "broker-z", 0),
    ]
    assert sort_queues(mqs) == [
        MessageQueue("S", "broker-z", 0),
        MessageQueue("T", "broker-a", 2),
        MessageQueue("T", "broker-a", 10),
        MessageQueue("T", "broker-b", 0),
    ]
    # Above the BMP Java compares UTF-16 code units: U+FF5E sorts after U+1F600's surrogates.
    assert sort_client_ids(["\uff5e", "\U0001f600", "a", "a"]) == ["a", "\U0001f600", "\uff5e"]


def test_strategy_names() -> None:
    mqs = _mqs(4)
    for name in ("averagely", "by_circle", "consistent_hash"):
        assert strategy_named(name)(mqs, ["a"], "a") == mqs
    with pytest.raises(ValueError):
        strategy_named("nope")
