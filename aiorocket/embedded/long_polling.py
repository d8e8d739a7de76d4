"""Held pulls (``PullRequestHoldService``, docs/protocol.md §6.4), woken by arrival, not polling.

A pull that found nothing new parks a future under (topic, queue). The send path calls
`PullWaiters.notify` synchronously right after each store, so a matching waiter's
future is resolved in the same loop iteration and its pull re-executes within a few ms. A
Java broker checks expiry every 5 s; here each waiter has its own timer, so a pull is held
exactly its suspend time. A waiter disappears when its pull task is cancelled (the client's
connection closed), through the ``finally`` of `PullWaiters.wait`.

Other waiters (held POP and NOTIFICATION requests, ``pop_polling.py``) hear of every stored
message through `PullWaiters.add_listener`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

__all__ = ["ArrivalListener", "PullWaiters"]

TagMatcher = Callable[[int], bool]
#: ``(topic, queue id, queue offset, tags code)`` of a message just stored; must not raise
ArrivalListener = Callable[[str, int, int, int], None]


class _Waiter:
    __slots__ = ("future", "matches", "offset")

    def __init__(self, offset: int, matches: TagMatcher | None, future: asyncio.Future[bool]):
        self.offset = offset
        self.matches = matches
        self.future = future


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class PullWaiters:
    """The registry of suspended pulls, keyed by (topic, queue id)."""

    def __init__(self) -> None:
        self._waiters: dict[tuple[str, int], list[_Waiter]] = {}
        self._listeners: list[ArrivalListener] = []

    def __len__(self) -> int:
        return sum(len(v) for v in self._waiters.values())

    async def wait(
        self,
        topic: str,
        queue_id: int,
        offset: int,
        *,
        matches: TagMatcher | None,
        timeout: float,
    ) -> bool:
        """Wait until a message at ``offset`` or later, whose tag code ``matches`` accepts
        (``None``: any), is stored in the queue. Returns False when ``timeout`` ran out first.

        Cancelling the caller removes the waiter.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[bool] = loop.create_future()
        waiter = _Waiter(offset, matches, fut)
        key = (topic, queue_id)
        waiters = self._waiters.get(key)
        if waiters is None:
            waiters = self._waiters[key] = []
        waiters.append(waiter)
        timer = loop.call_later(max(timeout, 0.0), _expire, fut)
        try:
            return await fut
        finally:
            timer.cancel()
            current = self._waiters.get(key)
            if current is not None:
                with contextlib.suppress(ValueError):
                    current.remove(waiter)
                if not current:
                    del self._waiters[key]

    def add_listener(self, listener: ArrivalListener) -> None:
        """Tell ``listener`` of every message `notify` hears of."""
        self._listeners.append(listener)

    def remove_listener(self, listener: ArrivalListener) -> None:
        """Stop telling ``listener`` (absent: nothing happens)."""
        if listener in self._listeners:
            self._listeners.remove(listener)

    def notify(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> int:
        """A message was stored at ``queue_offset`` with ``tags_code``: wake the pulls it
        satisfies (``NotifyMessageArrivingListener``) and tell the listeners. Returns how many
        pulls were woken. Never raises.
        """
        for listener in self._listeners:
            listener(topic, queue_id, queue_offset, tags_code)
        waiters = self._waiters.get((topic, queue_id))
        if not waiters:
            return 0
        woken = 0
        for w in waiters:
            fut = w.future
            if fut.done() or queue_offset < w.offset:
                continue
            if w.matches is None or w.matches(tags_code):
                fut.set_result(True)
                woken += 1
        return woken

    def wake_all(self) -> None:
        """Answer every held pull now (shutdown): each re-executes and sends what it finds."""
        for waiters in self._waiters.values():
            for w in waiters:
                if not w.future.done():
                    w.future.set_result(True)
