"""Held POP_MESSAGE and NOTIFICATION requests (Java ``PopLongPollingService``), woken by the
write path as held pulls are (``long_polling.py``).

A request that found nothing waits under keys (topic, group, queue id), queue -1 meaning any
queue of the topic; a POP also waits under its POP retry topics, since it reads them too. The
write path reports every stored message through `PopWaiters.on_arrival`: for each group
waiting on the topic, the oldest request of the message's queue and the oldest of queue -1
are woken (Apache wakes one per key too; the woken one re-reads and, if another consumer got
the message first, waits again). A tag filter is checked against the message's tag code
before waking; an SQL92 one is not (it wakes on any arrival and re-reads).

Full (``POLLING_FULL``): more than ``max_total`` requests held, or a key already holding
``max_per_key`` (Apache ``maxPopPollingSize`` / ``popPollingSize``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable

__all__ = ["PollKey", "PopWaiters"]

#: (topic, group, queue id); queue -1: any queue of the topic
PollKey = tuple[str, str, int]
_TagMatcher = Callable[[int], bool]


class _Held:
    __slots__ = ("future", "matches")

    def __init__(self, future: asyncio.Future[bool], matches: _TagMatcher | None) -> None:
        self.future = future
        self.matches = matches


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class PopWaiters:
    """The registry of held requests of one kind (POP or NOTIFICATION).

    Args:
        max_total: more held requests than this and a new one is refused (POLLING_FULL).
        max_per_key: a key holding more than this refuses a new one.
    """

    def __init__(self, *, max_total: int, max_per_key: int) -> None:
        self._max_total = max_total
        self._max_per_key = max_per_key
        # topic -> (group, queue id) -> held requests, oldest first
        self._by_topic: dict[str, dict[tuple[str, int], deque[_Held]]] = {}
        self._total = 0

    def __len__(self) -> int:
        return self._total

    def full(self, keys: list[PollKey]) -> bool:
        """Whether a request waiting under ``keys`` would be refused (POLLING_FULL)."""
        if self._total >= self._max_total:
            return True
        for topic, group, queue_id in keys:
            held = self._by_topic.get(topic, {}).get((group, queue_id))
            if held is not None and len(held) > self._max_per_key:
                return True
        return False

    async def wait(
        self, keys: list[PollKey], *, matches: _TagMatcher | None, timeout: float
    ) -> bool:
        """Hold until something arrives under one of ``keys`` (a message whose tag code
        ``matches`` accepts; ``None``: any) or ``timeout`` seconds pass; returns whether it
        was woken. Cancelling the caller removes the request."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        held = _Held(fut, matches)
        for topic, group, queue_id in keys:
            by_queue = self._by_topic.setdefault(topic, {})
            by_queue.setdefault((group, queue_id), deque()).append(held)
        self._total += 1
        timer = loop.call_later(max(timeout, 0.0), _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            self._total -= 1
            for topic, group, queue_id in keys:
                queues = self._by_topic.get(topic)
                if queues is None:
                    continue
                waiting = queues.get((group, queue_id))
                if waiting is not None:
                    with contextlib.suppress(ValueError):
                        waiting.remove(held)
                    if not waiting:
                        del queues[(group, queue_id)]
                if not queues:
                    del self._by_topic[topic]

    @staticmethod
    def _wake_first(waiting: deque[_Held] | None, tags_code: int | None) -> bool:
        if not waiting:
            return False
        for held in waiting:
            fut = held.future
            if fut.done():
                continue
            if tags_code is None or held.matches is None or held.matches(tags_code):
                fut.set_result(True)
                return True
        return False

    def on_arrival(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        """A message was stored in ``topic``/``queue_id``: wake, per group, the oldest
        request of that queue and the oldest of any queue whose filter accepts it (the
        write path's listener; never raises)."""
        queues = self._by_topic.get(topic)
        if not queues:
            return
        for (_group, waited), waiting in list(queues.items()):
            if waited == queue_id or waited == -1:
                self._wake_first(waiting, tags_code)

    def wake(self, topic: str, group: str, queue_id: int) -> bool:
        """Wake the oldest request of ``group`` under (``topic``, ``queue_id``) whatever its
        filter (more may be there, or an ordered queue was unblocked); returns whether one
        was woken."""
        queues = self._by_topic.get(topic)
        if not queues:
            return False
        return self._wake_first(queues.get((group, queue_id)), None)
