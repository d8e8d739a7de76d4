"""Rebalance planning: pure, no I/O."""

from __future__ import annotations

from datetime import datetime

import pytest

from aiorocket._consumer.rebalance import allocate_topic, plan_rebalance, start_policy
from aiorocket._protocol.allocation import allocate_averagely
from aiorocket.models import MessageQueue


def mq(topic: str, qid: int) -> MessageQueue:
    return MessageQueue(topic, "broker-a", qid)


def test_plan_adds_and_drops_per_allocated_topic() -> None:
    held = [mq("A", 0), mq("A", 1), mq("B", 0)]
    plan = plan_rebalance(held, {"A": [mq("A", 1), mq("A", 2)]}, ["A", "B"])
    assert plan.add == (mq("A", 2),)
    assert plan.drop == (mq("A", 0),)  # B was not allocated this round: kept


def test_plan_drops_unsubscribed_topics_and_empty_share() -> None:
    held = [mq("A", 0), mq("Gone", 0)]
    plan = plan_rebalance(held, {"A": []}, ["A"])
    assert plan.add == ()
    assert plan.drop == (mq("A", 0), mq("Gone", 0))


def test_plan_is_empty_when_nothing_changes() -> None:
    held = [mq("A", 0)]
    assert plan_rebalance(held, {"A": [mq("A", 0)]}, ["A"]).empty


def test_allocate_topic_sorts_and_trims_bad_strategies() -> None:
    queues = [mq("A", 3), mq("A", 1), mq("A", 0), mq("A", 2)]
    assert allocate_topic(
        mq_all=queues, cid_all=["b", "a"], client_id="a", strategy=allocate_averagely
    ) == [mq("A", 0), mq("A", 1)]
    assert allocate_topic(
        mq_all=queues, cid_all=["b", "a"], client_id="b", strategy=allocate_averagely
    ) == [mq("A", 2), mq("A", 3)]
    # Broadcasting takes everything whoever else is there.
    assert (
        len(
            allocate_topic(
                mq_all=queues,
                cid_all=[],
                client_id="x",
                strategy=allocate_averagely,
                broadcasting=True,
            )
        )
        == 4
    )

    def bad(mqs: object, cids: object, me: str) -> list[MessageQueue]:
        return [mq("A", 0), mq("Other", 9)]

    assert allocate_topic(mq_all=queues, cid_all=["a"], client_id="a", strategy=bad) == [mq("A", 0)]
    assert allocate_topic(mq_all=[], cid_all=["a"], client_id="a", strategy=bad) == []


@pytest.mark.parametrize(
    ("consume_from", "topic", "policy"),
    [
        ("last", "T", "max"),
        ("last", "%RETRY%g", "zero"),
        ("first", "T", "zero"),
        ("first", "%RETRY%g", "zero"),
        (datetime(2024, 1, 1), "T", "search"),
        (datetime(2024, 1, 1), "%RETRY%g", "max"),
    ],
)
def test_start_policy_follows_the_remoting_table(
    consume_from: str | datetime, topic: str, policy: str
) -> None:
    assert start_policy(consume_from, topic) == policy  # type: ignore[arg-type]
