"""Ordered by key inside a queue: one process queue's messages in per-key lanes.

Orderly consumption in Java (and in every RocketMQ client, 5.x's FIFO "message groups"
included) serializes a whole queue. With ``order_by`` set, an orderly consumer keeps the order
of each *key* instead (a business key: an order id, an account), so the keys sharing a queue
are handled concurrently. The rules this state keeps:

* Every message goes, in offset order, to the *lane* of its key: the ``__SHARDINGKEY``
  property (``order_by="sharding_key"``, the message group of RocketMQ 5.x, which aiorocket's
  producer sets from ``sharding_key``) or what a callable returns. Messages without a key
  (``None`` or an empty string) share one lane of their own: they keep queue order among
  themselves and run concurrently with keyed ones, like one more key.
* A lane is *busy* from `KeyLanes.take` until `KeyLanes.release`: while its
  handler call runs, and while it is suspended after a failure. A busy lane hands nothing out,
  so at most one call per key runs at a time and a failed key holds back only its own later
  messages.
* `take` serves the ready lane whose first message has the smallest offset,
  so the smallest unfinished offset of the queue (the one committed) moves on first.
* `put_back` returns messages to the front of their lane after a failure.

The process queue still caches every message from pull to finished consumption and answers
the offset to commit (its smallest cached offset); these lanes only decide what runs next.
No I/O, no clock.
"""

from __future__ import annotations

import heapq
import logging
from collections import deque
from collections.abc import Callable, Sequence
from itertools import count
from typing import Any

from aiorocket._protocol.properties import SHARDING_KEY
from aiorocket.models import ReceivedMessage

__all__ = ["KeyFunction", "KeyLanes", "key_function", "safe_key"]

log = logging.getLogger("aiorocket.consumer")

#: ``msg -> key``: the ordering key of a message; ``None`` (or ``""``) for no key
KeyFunction = Callable[[ReceivedMessage], str | None]


def _sharding_key(msg: ReceivedMessage) -> str | None:
    # MessageConst.PROPERTY_SHARDING_KEY (RocketMQ 5.x: the FIFO message group).
    return msg._r.properties.get(SHARDING_KEY) or None


def key_function(order_by: str | Callable[..., Any]) -> KeyFunction | None:
    """The key function of an ``order_by`` setting: ``None`` for ``"queue"`` (the whole queue
    in order), the ``__SHARDINGKEY`` property for ``"sharding_key"``, else the callable."""
    if order_by == "queue":
        return None
    if order_by == "sharding_key":
        return _sharding_key
    if not callable(order_by):
        raise TypeError(f"order_by must be 'queue', 'sharding_key' or a callable: {order_by!r}")
    return order_by


def safe_key(fn: KeyFunction, msg: ReceivedMessage) -> str | None:
    """``fn(msg)``, where a failure or a value that is not a string (a bug of the user's key
    function) is logged and the message handled without a key, rather than stopping the
    queue's pulls."""
    try:
        key = fn(msg)
    except Exception:
        log.error(
            "order_by key function failed on message %s: it is handled with the keyless ones",
            msg.msg_id,
            exc_info=True,
        )
        return None
    if key is None or type(key) is str:
        return key or None
    log.error(
        "order_by key function returned %r (not a str or None) for message %s: it is handled "
        "with the keyless ones",
        key,
        msg.msg_id,
    )
    return None


class KeyLanes:
    """The messages of one process queue not handed out yet, in one FIFO lane per key.

    Attributes:
        last_offset: the largest offset added so far (-1 before the first); smaller or equal
            offsets are duplicates of a pull overlapping the cache and are ignored.
    """

    __slots__ = ("_busy", "_heap", "_lanes", "_seq", "last_offset", "pending")

    def __init__(self) -> None:
        self._lanes: dict[str | None, deque[ReceivedMessage]] = {}
        self._busy: set[str | None] = set()
        #: ready lanes as (offset of the first message, tie-breaker, key)
        self._heap: list[tuple[int, int, str | None]] = []
        self._seq = count()
        self.last_offset = -1
        #: messages in the lanes (not handed out)
        self.pending = 0

    @property
    def ready(self) -> bool:
        """Whether a lane can hand out messages now."""
        return bool(self._heap)

    @property
    def busy(self) -> int:
        """Keys handed out or suspended."""
        return len(self._busy)

    def is_busy(self, key: str | None) -> bool:
        """Whether ``key``'s lane is busy."""
        return key in self._busy

    def add(self, msgs: Sequence[ReceivedMessage], key_of: KeyFunction) -> int:
        """Append freshly pulled messages (ascending offsets) to their lanes; returns how
        many were new. ``key_of`` must not raise (see `safe_key`)."""
        lanes = self._lanes
        busy = self._busy
        last = self.last_offset
        added = 0
        for m in msgs:
            offset = m._r.queue_offset
            if offset <= last:
                continue
            last = offset
            key = key_of(m) or None
            lane = lanes.get(key)
            if lane is None:
                lanes[key] = deque((m,))
                if key not in busy:
                    heapq.heappush(self._heap, (offset, next(self._seq), key))
            else:
                lane.append(m)
            added += 1
        self.last_offset = last
        self.pending += added
        return added

    def take(self, n: int) -> tuple[str | None, list[ReceivedMessage]] | None:
        """Hand out up to ``n`` messages from the front of the ready lane whose first message
        has the smallest offset, and mark that lane busy; ``None`` when no lane is ready."""
        if not self._heap:
            return None
        _, _, key = heapq.heappop(self._heap)
        lane = self._lanes[key]
        if n >= len(lane):
            batch = list(lane)
            del self._lanes[key]
        else:
            batch = [lane.popleft() for _ in range(n)]
        self._busy.add(key)
        self.pending -= len(batch)
        return key, batch

    def release(self, key: str | None) -> None:
        """``key``'s lane is no longer busy (its call ended, or its suspension is over): it is
        ready again if it holds messages."""
        if key not in self._busy:
            return
        self._busy.discard(key)
        lane = self._lanes.get(key)
        if lane:
            heapq.heappush(self._heap, (lane[0]._r.queue_offset, next(self._seq), key))

    def put_back(self, key: str | None, msgs: Sequence[ReceivedMessage]) -> None:
        """Return ``msgs`` (taken from ``key``'s lane, in order) to the front of it, to be
        handed out again once the lane is released (Java ``makeMessageToConsumeAgain``)."""
        if not msgs:
            return
        lane = self._lanes.get(key)
        if lane is None:
            self._lanes[key] = deque(msgs)
        else:
            lane.extendleft(reversed(msgs))
        self.pending += len(msgs)

    def clear(self) -> None:
        """Forget every lane."""
        self._lanes.clear()
        self._busy.clear()
        self._heap.clear()
        self.pending = 0

    def __repr__(self) -> str:
        return f"KeyLanes(keys={len(self._lanes)}, pending={self.pending}, busy={self.busy})"
