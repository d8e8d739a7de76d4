"""Orderly parts without a broker: the process queue's consuming subset (take, commit,
rollback, make_again) against a reference model, its lock state, and the pull gate."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

import aiorocket as rmq
from aiorocket._consumer.process_queue import FlowLimits, ProcessQueue

MQ = rmq.MessageQueue("T", "b", 0)


def msg(offset: int, reconsume: int = 0) -> rmq.ReceivedMessage:
    return rmq.ReceivedMessage.create(
        topic="T", body=b"x" * 10, queue_offset=offset, reconsume_times=reconsume
    )


def test_take_commit_rollback_make_again() -> None:
    pq = ProcessQueue(MQ)
    pq.put([msg(o) for o in (10, 11, 13, 14)])  # 12 filtered out by tag
    pq.put([msg(o) for o in (15, 16)])
    assert [m.queue_offset for m in pq.take(3)] == [10, 11, 13]
    assert pq.consuming_count == 3
    assert pq.cached_count == 6
    assert [m.queue_offset for m in pq.take(2)] == [14, 15]
    pq.make_again([msg(14, 1), msg(15, 1)])
    again = pq.take(5)
    assert [(m.queue_offset, m.reconsume_times) for m in again] == [(14, 1), (15, 1), (16, 0)]
    pq.rollback()
    assert [m.queue_offset for m in pq.take(1)] == [10]
    assert pq.commit() == 11
    assert pq.cached_count == 5
    assert [(m.queue_offset, m.reconsume_times) for m in pq.take(10)] == [
        (11, 0), (13, 0), (14, 1), (15, 1), (16, 0)
    ]  # fmt: skip
    assert pq.commit() == 17
    assert pq.cached_count == 0
    assert pq.take(1) == []
    assert pq.commit() == -1


def test_commit_frees_capacity_for_a_waiting_pull() -> None:
    async def main() -> None:
        pq = ProcessQueue(MQ)
        pq.put([msg(o) for o in range(5)])
        limits = FlowLimits(max_count=3, max_mib=100, max_span=None)
        waiter = asyncio.create_task(pq.wait_has_capacity(limits))
        await asyncio.sleep(0)
        pq.take(3)
        await asyncio.sleep(0)
        assert not waiter.done()  # taken messages still count as cached
        pq.commit()
        assert await asyncio.wait_for(waiter, 1)

    asyncio.run(main())


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "take", "commit", "rollback", "again"]),
            st.integers(min_value=1, max_value=5),
        ),
        max_size=40,
    )
)
def test_consuming_subset_matches_a_reference_model(ops: list[tuple[str, int]]) -> None:
    pq = ProcessQueue(MQ)
    cached: list[int] = []  # the model: cached offsets, the consuming prefix length
    consuming = 0
    next_offset = 0
    top = -1
    for op, n in ops:
        if op == "put":
            offsets = list(range(next_offset, next_offset + 2 * n, 2))  # gaps: filtered tags
            next_offset += 2 * n
            pq.put([msg(o) for o in offsets])
            cached += offsets
            top = offsets[-1]
        elif op == "take":
            got = [m.queue_offset for m in pq.take(n)]
            assert got == cached[consuming : consuming + n]
            consuming += len(got)
        elif op == "commit":
            result = pq.commit()
            if consuming == 0:
                assert result == -1
            else:
                del cached[:consuming]
                consuming = 0
                assert result == (cached[0] if cached else top + 1)
        elif op == "rollback":
            pq.rollback()
            consuming = 0
        elif op == "again" and consuming:
            k = min(n, consuming)
            tail = cached[consuming - k : consuming]
            pq.make_again([msg(o, 1) for o in tail])
            consuming -= k
        assert pq.consuming_count == consuming
        assert pq.cached_count == len(cached)


def test_lock_state_and_waiters() -> None:
    async def main() -> None:
        pq = ProcessQueue(MQ)
        assert not pq.lock_valid(0.0, 30.0)
        waiter = asyncio.create_task(pq.wait_lock_change())
        await asyncio.sleep(0)
        pq.set_locked(True, 100.0)
        await asyncio.wait_for(waiter, 1)
        assert pq.lock_valid(129.0, 30.0)
        assert not pq.lock_valid(131.0, 30.0)
        pq.set_locked(True, 90.0)  # an older grant never moves the lock time back
        assert pq.last_lock_time == 100.0
        waiter = asyncio.create_task(pq.wait_lock_change())
        await asyncio.sleep(0)
        pq.mark_dropped()
        await asyncio.wait_for(waiter, 1)
        await asyncio.wait_for(pq.wait_lock_change(), 1)  # returns at once when dropped

    asyncio.run(main())
