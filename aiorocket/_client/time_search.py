"""The first offset of a queue stored at or after a time: SEARCH_OFFSET_BY_TIMESTAMP, refined.

The broker answers *a* message stored closest to the time (docs/protocol.md §6.5): maybe
one just before it, maybe one in the middle of several stored in the same millisecond (a
batch). `first_offset_at` refines that answer by reading the store times of single
messages around it (exponential, then binary search); the pull consumer's ``seek_to_time``
and the queue reader's ``offset_for_timestamp`` both use it. Store times are assumed not to
decrease along a queue, which holds for messages appended by one broker.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiorocket._client.instance import ClientInstance
from aiorocket._client.pull import PullStatus
from aiorocket._protocol.codes import PullSysFlag
from aiorocket._protocol.headers import PullMessageRequestHeader
from aiorocket._protocol.message import decode_messages
from aiorocket.models import MessageQueue

__all__ = ["StoredAt", "first_offset_at", "store_time"]

#: ``async (offset) -> store time (ms)`` of the message at ``offset``; ``-inf`` when it is
#: gone below the queue's min, ``+inf`` when it cannot be read otherwise (past the end)
StoredAt = Callable[[int], Awaitable[float]]


async def first_offset_at(
    timestamp_ms: int, *, lo: int, hi: int, guess: int, stored_at: StoredAt
) -> int:
    """The first offset in ``[lo, hi)`` stored at or after ``timestamp_ms``, ``hi`` if none.

    Args:
        timestamp_ms: the time (epoch ms).
        lo: the queue's min offset.
        hi: the queue's max offset (one past its last message).
        guess: the broker's SEARCH_OFFSET_BY_TIMESTAMP answer.
        stored_at: reads one message's store time (see `StoredAt`).

    Raises:
        Whatever ``stored_at`` raises.
    """
    if lo >= hi:
        return hi
    guess = min(max(guess, lo), hi - 1)
    # Invariant: every offset below lo is older than the time; hi is stored at or after
    # it (or is the end of the queue). The answer lies in [lo, hi].
    if await stored_at(guess) >= timestamp_ms:
        hi = guess
        step = 1
        while guess - step >= lo:
            probe = guess - step
            if await stored_at(probe) >= timestamp_ms:
                hi = probe
                step *= 2
            else:
                lo = probe + 1
                break
    else:
        lo = guess + 1
        step = 1
        while guess + step < hi:
            probe = guess + step
            if await stored_at(probe) >= timestamp_ms:
                hi = probe
                break
            lo = probe + 1
            step *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if await stored_at(mid) >= timestamp_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


async def store_time(
    client: ClientInstance,
    addr: str,
    mq: MessageQueue,
    offset: int,
    *,
    group: str,
    timeout: float,
) -> float:
    """The store time (ms) of the message at ``offset`` of ``mq`` (wire names), read by a
    one-message pull that registers nothing (sysFlag SUBSCRIPTION, ``*``); as
    `StoredAt` when it is gone.

    Raises:
        BrokerError, TransportError: the pull failed.
    """
    header = PullMessageRequestHeader(
        consumer_group=group,
        topic=mq.topic,
        queue_id=mq.queue_id,
        queue_offset=offset,
        max_msg_nums=1,
        sys_flag=int(PullSysFlag.SUBSCRIPTION),
        commit_offset=0,
        suspend_timeout_millis=0,
        subscription="*",
        sub_version=0,
        broker_name=mq.broker_name,
    )
    resp = await client.pull_message(addr, header, timeout=timeout)
    if resp.code == PullStatus.FOUND:
        records = decode_messages(resp.body)
        if records and records[0].queue_offset == offset:
            return records[0].store_timestamp
    return float("-inf") if offset < resp.header.min_offset else float("inf")
