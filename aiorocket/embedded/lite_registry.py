"""Who subscribes which lite topic on the embedded broker, and which lite topics each client
may pop from now (Java ``LiteSubscriptionRegistryImpl`` and ``LiteEventDispatcher``;
docs/protocol.md §12.8).

Subscriptions map a client id to its group, its parent topic, the queues (LMQ names) of the lite
topics it subscribes and the connection it subscribed on; and each LMQ to its subscribers. They
are kept in memory, as Apache keeps them: clients repeat their whole set every 30 s, and a
client whose set has not changed for the broker's ``lite_subscription_timeout`` is forgotten.

*Ready* lite topics are Apache's events: per client, an ordered set of LMQs that may have
something to pop for it. ``LiteRegistry.offer`` hands an LMQ to one subscriber per group
(at random among those whose connection is open, as Apache picks one at random) and wakes that
client's held POP_LITE_MESSAGE; the pop takes its ready LMQs in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

__all__ = ["LiteClient", "LiteQuotaExceeded", "LiteRegistry"]


class LiteQuotaExceeded(Exception):
    """The broker holds ``max_subscriptions`` subscriptions already (``LiteQuotaException``)."""


@dataclass(slots=True, eq=False)
class LiteClient:
    """One client's lite subscriptions (Java ``LiteSubscription``)."""

    client_id: str
    group: str
    #: the parent topic
    topic: str
    #: the connection NOTIFY_UNSUBSCRIBE_LITE goes to (the last one that subscribed)
    channel: Hashable | None
    #: when the set last changed (monotonic seconds)
    changed: float
    #: the LMQs subscribed
    lmqs: set[str] = field(default_factory=set)
    #: the LMQs that may have something to pop, in the order they were offered
    ready: dict[str, None] = field(default_factory=dict)


def _open(channel: Hashable | None) -> bool:
    return channel is not None and not getattr(channel, "is_closed", False)


class LiteRegistry:
    """The lite subscriptions and ready lite topics of one broker.

    Args:
        max_subscriptions: (client, lite topic) subscriptions at most (``add`` refuses more).
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self, *, max_subscriptions: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._max = max_subscriptions
        self._clock = clock
        self._clients: dict[str, LiteClient] = {}
        self._subscribers: dict[str, set[str]] = {}
        self._count = 0
        self._waiters: dict[str, deque[asyncio.Future[bool]]] = {}
        self._held = 0
        self._random = random.Random()

    def __len__(self) -> int:
        """How many (client, lite topic) subscriptions there are."""
        return self._count

    @property
    def held(self) -> int:
        """How many POP_LITE_MESSAGE requests are held."""
        return self._held

    def held_by(self, client_id: str) -> int:
        """How many requests of ``client_id`` are held."""
        return len(self._waiters.get(client_id, ()))

    def client(self, client_id: str) -> LiteClient | None:
        """The client's subscriptions, or None."""
        return self._clients.get(client_id)

    def clients(self) -> list[LiteClient]:
        """Every client with subscriptions."""
        return list(self._clients.values())

    def subscribers(self, lmq: str) -> list[LiteClient]:
        """The clients subscribing ``lmq``."""
        return [self._clients[c] for c in self._subscribers.get(lmq, ())]

    # -- changes --------------------------------------------------------------------------------

    def _client_for(
        self, client_id: str, group: str, topic: str, channel: Hashable | None
    ) -> LiteClient:
        # getOrCreateLiteSubscription: a client keeps the group and topic it first came with.
        c = self._clients.get(client_id)
        if c is None:
            c = self._clients[client_id] = LiteClient(client_id, group, topic, channel, 0.0)
        if channel is not None:
            c.channel = channel  # updateClientChannel
        c.changed = self._clock()
        return c

    def _link(self, c: LiteClient, lmq: str) -> bool:
        if lmq in c.lmqs:
            return False
        c.lmqs.add(lmq)
        self._subscribers.setdefault(lmq, set()).add(c.client_id)
        self._count += 1
        return True

    def _unlink(self, c: LiteClient, lmq: str) -> bool:
        if lmq not in c.lmqs:
            return False
        c.lmqs.discard(lmq)
        c.ready.pop(lmq, None)
        subs = self._subscribers.get(lmq)
        if subs is not None:
            subs.discard(c.client_id)
            if not subs:
                del self._subscribers[lmq]
        self._count -= 1
        return True

    def add(
        self,
        client_id: str,
        group: str,
        topic: str,
        lmqs: Iterable[str],
        channel: Hashable | None,
    ) -> list[str]:
        """PARTIAL_ADD: subscribe ``lmqs``; returns those that were not subscribed yet.

        Raises:
            LiteQuotaExceeded: the broker holds ``max_subscriptions`` already.
        """
        if self._count >= self._max:
            raise LiteQuotaExceeded(f"lite subscription quota exceeded {self._max}")
        c = self._client_for(client_id, group, topic, channel)
        return [lmq for lmq in lmqs if self._link(c, lmq)]

    def remove(self, client_id: str, lmqs: Iterable[str]) -> list[str]:
        """PARTIAL_REMOVE: unsubscribe ``lmqs``; returns those that were subscribed."""
        c = self._clients.get(client_id)
        if c is None:
            return []
        c.changed = self._clock()
        return [lmq for lmq in lmqs if self._unlink(c, lmq)]

    def replace(
        self,
        client_id: str,
        group: str,
        topic: str,
        lmqs: Iterable[str],
        channel: Hashable | None,
    ) -> list[str]:
        """COMPLETE_ADD: the client subscribes exactly ``lmqs``; returns the newly added."""
        c = self._client_for(client_id, group, topic, channel)
        wanted = set(lmqs)
        for lmq in c.lmqs - wanted:
            self._unlink(c, lmq)
        return [lmq for lmq in wanted if self._link(c, lmq)]

    def drop(self, client_id: str) -> LiteClient | None:
        """COMPLETE_REMOVE: forget the client; returns what it had (its ready LMQs included)."""
        c = self._clients.pop(client_id, None)
        if c is None:
            return None
        ready = list(c.ready)
        for lmq in list(c.lmqs):
            self._unlink(c, lmq)
        c.ready = dict.fromkeys(ready)
        return c

    def expire(self, timeout: float) -> list[LiteClient]:
        """``cleanupExpiredSubscriptions``: forget the clients whose set has not changed for
        ``timeout`` seconds; returns them."""
        limit = self._clock() - timeout
        stale = [c.client_id for c in self._clients.values() if c.changed < limit]
        return [c for cid in stale if (c := self.drop(cid)) is not None]

    def clean(self, lmq: str) -> None:
        """``cleanSubscription``: the LMQ is gone; nobody subscribes it any more."""
        for cid in list(self._subscribers.get(lmq, ())):
            self._unlink(self._clients[cid], lmq)

    def others_in_group(self, lmq: str, group: str, client_id: str) -> list[LiteClient]:
        """The other clients of ``group`` subscribing ``lmq`` (an exclusive group's losers)."""
        return [c for c in self.subscribers(lmq) if c.group == group and c.client_id != client_id]

    # -- ready lite topics ----------------------------------------------------------------------

    def offer(self, lmq: str, group: str | None = None, *, exclude: str | None = None) -> None:
        """``doDispatch``: make ``lmq`` ready for one subscriber of each group (of ``group``
        only when given), preferring an open connection and not ``exclude``."""
        by_group: dict[str, list[LiteClient]] = {}
        for c in self.subscribers(lmq):
            if group is None or c.group == group:
                by_group.setdefault(c.group, []).append(c)
        for clients in by_group.values():
            others = [c for c in clients if c.client_id != exclude] or clients
            live = [c for c in others if _open(c.channel)] or others
            self.offer_to(self._random.choice(live).client_id, lmq)

    def offer_to(self, client_id: str, lmq: str) -> None:
        """Make ``lmq`` ready for ``client_id`` if it subscribes it, and wake its oldest held
        request."""
        c = self._clients.get(client_id)
        if c is None or lmq not in c.lmqs:
            return
        c.ready[lmq] = None
        for fut in self._waiters.get(client_id, ()):
            if not fut.done():
                fut.set_result(True)
                return

    def ready(self, client_id: str) -> list[str]:
        """The client's ready LMQs, oldest first."""
        c = self._clients.get(client_id)
        return [] if c is None else list(c.ready)

    def taken(self, client_id: str, lmq: str) -> None:
        """A pop looked at ``lmq`` for ``client_id``: it is no longer ready."""
        c = self._clients.get(client_id)
        if c is not None:
            c.ready.pop(lmq, None)

    async def wait(self, client_id: str, timeout: float) -> bool:
        """Hold until an LMQ is offered to ``client_id`` or ``timeout`` seconds pass; returns
        whether one was. Cancelling the caller removes the request."""
        fut: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        waiting = self._waiters.setdefault(client_id, deque())
        waiting.append(fut)
        self._held += 1
        try:
            async with asyncio.timeout(max(timeout, 0.0)):
                return await fut
        except TimeoutError:
            return False
        finally:
            self._held -= 1
            with contextlib.suppress(ValueError):
                waiting.remove(fut)
            if not waiting:
                self._waiters.pop(client_id, None)
