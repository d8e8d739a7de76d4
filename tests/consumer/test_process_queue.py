"""Process queue: Java's offset semantics and flow control."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._consumer.process_queue import FlowLimits, ProcessQueue
from aiorocket.models import MessageQueue, ReceivedMessage

MQ = MessageQueue("T", "broker-a", 0)


def _msgs(offsets: range | list[int], size: int = 10) -> list[ReceivedMessage]:
    return [
        ReceivedMessage.create(topic="T", body=b"x" * size, queue_offset=o, broker_name="broker-a")
        for o in offsets
    ]


def test_scenario_1_all_consumed_commits_max_plus_one() -> None:
    pq = ProcessQueue(MQ)
    msgs = _msgs(range(1001, 1011))
    assert pq.put(msgs) == 10
    assert pq.remove(msgs) == 1011
    assert pq.cached_count == 0
    assert pq.cached_bytes == 0


def test_scenario_2_partial_commits_smallest_remaining() -> None:
    pq = ProcessQueue(MQ)
    msgs = _msgs(range(1001, 1011))
    pq.put(msgs)
    assert pq.remove(msgs[:8]) == 1009
    assert pq.cached_count == 2


def test_scenario_3_a_stuck_head_holds_the_offset() -> None:
    pq = ProcessQueue(MQ)
    msgs = _msgs(range(1001, 1011))
    pq.put(msgs)
    # 1005..1010 finish first, then 1002..1004: the offset stays at the unfinished 1001.
    assert pq.remove(msgs[4:]) == 1001
    assert pq.remove(msgs[1:4]) == 1001
    # Once 1001 finishes the offset jumps past everything.
    assert pq.remove(msgs[:1]) == 1011


def test_remove_on_empty_queue_and_duplicates() -> None:
    pq = ProcessQueue(MQ)
    assert pq.remove(_msgs([1])) == -1
    msgs = _msgs([5, 6, 7])
    pq.put(msgs)
    assert pq.put(_msgs([6, 7, 8])) == 1  # 6 and 7 are cached already
    assert pq.cached_count == 4
    assert pq.remove(_msgs([5, 6, 7, 8])) == 9
    assert pq.remove(_msgs([5])) == -1


def test_span_and_snapshot() -> None:
    pq = ProcessQueue(MQ)
    pq.put(_msgs([10, 11, 50]))
    assert pq.span == 40
    assert pq.min_offset == 10
    snap = pq.snapshot()
    assert (snap.cached_count, snap.min_offset, snap.max_offset, snap.span) == (3, 10, 50, 40)


def test_capacity_checks_count_size_and_span() -> None:
    pq = ProcessQueue(MQ)
    limits = FlowLimits(max_count=3, max_mib=1, max_span=100)
    pq.put(_msgs([1, 2, 3]))
    assert pq.has_capacity(limits)  # "more than" the threshold stops pulling, as in Java
    pq.put(_msgs([4]))
    assert not pq.has_capacity(limits)
    pq.clear()
    pq.put(_msgs([1, 500]))
    assert not pq.has_capacity(limits)  # span
    assert pq.has_capacity(FlowLimits(max_count=3, max_mib=1, max_span=None))  # orderly
    pq.clear()
    pq.put(_msgs([1, 2], size=1024 * 1024 + 1))
    assert not pq.has_capacity(FlowLimits(max_count=100, max_mib=1, max_span=None))


async def test_wait_has_capacity_is_woken_by_consumption_not_polling() -> None:
    pq = ProcessQueue(MQ)
    limits = FlowLimits(max_count=2, max_mib=100, max_span=None)
    msgs = _msgs(range(5))
    pq.put(msgs)
    waiter = asyncio.create_task(pq.wait_has_capacity(limits))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    pq.remove(msgs[:1])  # 4 left: still over the limit, the waiter stays parked
    await asyncio.sleep(0)
    assert not waiter.done()
    pq.remove(msgs[1:3])  # 2 left: capacity
    assert await asyncio.wait_for(waiter, 1) is True
    assert await pq.wait_has_capacity(limits) is False  # no wait when there is room


async def test_wait_has_capacity_ends_when_dropped_or_draining() -> None:
    for stop in ("mark_dropped", "mark_draining"):
        pq = ProcessQueue(MQ)
        pq.put(_msgs(range(10)))
        waiter = asyncio.create_task(
            pq.wait_has_capacity(FlowLimits(max_count=1, max_mib=1, max_span=None))
        )
        await asyncio.sleep(0.01)
        getattr(pq, stop)()
        await asyncio.wait_for(waiter, 1)
        assert not pq.active


async def test_waiter_cancellation_leaves_no_state() -> None:
    pq = ProcessQueue(MQ)
    msgs = _msgs(range(10))
    pq.put(msgs)
    waiter = asyncio.create_task(
        pq.wait_has_capacity(FlowLimits(max_count=1, max_mib=1, max_span=None))
    )
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert pq.remove(msgs) == 10


def _reference_remove(model: dict[int, int], max_ever: int, offsets: list[int]) -> int:
    if not model:
        return -1
    for o in offsets:
        model.pop(o, None)
    return min(model) if model else max_ever + 1


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("put"), st.lists(st.integers(0, 60), max_size=12)),
            st.tuples(st.just("remove"), st.lists(st.integers(0, 60), max_size=12)),
        ),
        max_size=40,
    )
)
def test_matches_a_plain_sorted_map(ops: list[tuple[str, list[int]]]) -> None:
    """Any sequence of puts (ascending pulls, overlapping ones, gaps) and removals behaves
    like a plain offset -> message map with Java's removeMessage rule."""
    pq = ProcessQueue(MQ)
    model: dict[int, int] = {}
    max_ever = -1
    for op, offsets in ops:
        if op == "put":
            batch = sorted(set(offsets)) if len(offsets) % 2 else offsets  # some unordered
            msgs = _msgs(batch, size=3)
            new = {o for o in batch if o not in model}
            assert pq.put(msgs) == len(new)
            for o in batch:
                model.setdefault(o, 3)
            if batch:
                max_ever = max(max_ever, *batch)
        else:
            assert pq.remove(_msgs(offsets)) == _reference_remove(model, max_ever, offsets)
        assert pq.cached_count == len(model)
        assert pq.cached_bytes == 3 * len(model)
        assert pq.min_offset == (min(model) if model else -1)
        assert pq.span == (max(model) - min(model) if model else 0)
        assert [m.queue_offset for m in pq.messages()] == sorted(model)
        assert [o for o in range(-1, 62) if o in pq] == sorted(model)


def test_removing_the_very_list_that_was_put_drops_its_run() -> None:
    pq = ProcessQueue(MQ)
    first, second = _msgs(range(4)), _msgs(range(4, 8))
    pq.put(first)
    pq.put(second)
    assert pq.remove(second) == 0  # the whole second run at once; the first still cached
    assert pq.cached_count == 4
    assert pq.cached_bytes == 40
    assert pq.remove(first[:1]) == 1
    assert pq.remove(first) == 8  # not whole any more: message by message
    assert (pq.cached_count, pq.cached_bytes, 5 in pq) == (0, 0, False)


def test_a_pull_spanning_its_length_out_of_order_is_not_taken_as_ascending() -> None:
    # First and last offsets 3 apart over 4 messages, yet not ascending: the cache must sort.
    pq = ProcessQueue(MQ)
    msgs = _msgs([5, 7, 6, 8])
    assert pq.put(msgs) == 4
    assert [m.queue_offset for m in pq.messages()] == [5, 6, 7, 8]
    assert pq.remove(msgs[:1]) == 6
    assert pq.remove(msgs[2:3]) == 7


def test_emptying_a_run_behind_the_first_keeps_the_others() -> None:
    pq = ProcessQueue(MQ)
    runs = [_msgs(range(1, 3)), _msgs(range(3, 5)), _msgs(range(5, 7))]
    for run in runs:
        pq.put(run)
    assert pq.remove(runs[1]) == 1  # the middle run, whole
    assert pq.remove(runs[2][:1]) == 1
    assert [m.queue_offset for m in pq.messages()] == [1, 2, 6]
    assert [m.queue_offset for m in pq.take(3)] == [1, 2, 6]
    assert pq.commit() == 7
    assert (pq.cached_count, pq.min_offset) == (0, -1)
