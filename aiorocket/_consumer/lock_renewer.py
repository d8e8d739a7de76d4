"""Broker queue locks of an orderly clustering consumer (Java ``RebalanceImpl.lock`` /
``lockAll`` / ``unlock`` / ``unlockAll``; docs/protocol.md §6.8).

The broker leases a queue lock to one client id for 60 s from its last renewal; this client
trusts a lock for ``lock_expiry`` (30 s) from the moment it *sent* the granted request, which
is never later than the broker's grant, so the client always stops trusting a lock before the
broker can hand it to another member. `BrokerLocks.renew` runs every
``lock_renew_interval`` (20 s) from the consumer's ``lock renewal`` periodic task.

Every LOCK/UNLOCK request of one consumer goes through one `asyncio.Lock` and is
awaited: a drop's unlock and a later re-add's lock of the same queue therefore reach the broker
in that order (Java sends the drop's unlock oneway, which a broker may run after the re-lock).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.process_queue import ProcessQueue
from aiorocket.errors import BrokerError, TransportError
from aiorocket.models import MessageQueue

__all__ = ["BrokerLocks"]

_T = TypeVar("_T")

log = logging.getLogger("aiorocket.consumer")


class BrokerLocks:
    """LOCK_BATCH_MQ and UNLOCK_BATCH_MQ for one consumer group, grouped per broker.

    Args:
        client: the consumer's client instance (its client id is the lock owner).
        group: the wire consumer group.
    """

    def __init__(self, *, client: ClientInstance, group: str) -> None:
        self._client = client
        self._group = group
        self._rpc = asyncio.Lock()

    def _by_broker(self, mqs: Iterable[MessageQueue]) -> dict[str, list[MessageQueue]]:
        out: dict[str, list[MessageQueue]] = defaultdict(list)
        for mq in mqs:
            out[mq.broker_name].append(mq)
        return out

    async def _on_master(
        self,
        verb: str,
        broker_name: str,
        queues: list[MessageQueue],
        call: Callable[[str], Awaitable[_T]],
    ) -> tuple[_T, float] | None:
        """One batch request to the master of ``broker_name`` (one at a time): its answer and
        when it was sent, or ``None`` when the broker could not be asked (logged)."""
        async with self._rpc:
            # (a lock granted by the retry at a moved master was sent later: trusting it from
            # here on is the safe side)
            sent = asyncio.get_running_loop().time()
            try:
                answer = await self._client.call_broker(
                    broker_name, queues[0].topic, call, master=True
                )
            except (TransportError, BrokerError) as exc:
                log.warning("%s %d queue(s) on %s failed: %s", verb, len(queues), broker_name, exc)
                return None
        return answer, sent

    async def _lock_on(
        self, broker_name: str, queues: list[MessageQueue]
    ) -> tuple[set[MessageQueue], float] | None:
        """One LOCK_BATCH_MQ: the granted queues and when the request was sent, or ``None``
        when the broker could not be asked (logged)."""
        client, group = self._client, self._group
        return await self._on_master(
            "locking", broker_name, queues, lambda addr: client.lock_batch(addr, group, queues)
        )

    async def lock(self, mqs: Sequence[MessageQueue]) -> dict[MessageQueue, float]:
        """Lock ``mqs`` (``RebalanceImpl.lock`` for a batch); the queues granted, each with
        the monotonic time its request was sent. A broker that cannot be reached grants
        nothing (logged).
        """
        granted: dict[MessageQueue, float] = {}
        for broker_name, queues in self._by_broker(mqs).items():
            result = await self._lock_on(broker_name, queues)
            if result is not None:
                ok, sent = result
                granted.update((mq, sent) for mq in queues if mq in ok)
        return granted

    async def renew(
        self, queues: Mapping[MessageQueue, ProcessQueue], *, expiry: float
    ) -> tuple[list[ProcessQueue], list[ProcessQueue]]:
        """Renew the locks of ``queues`` (``lockAll``) and record the outcome on each
        process queue. Returns two lists of process queues:

        * *lost*: the broker refused the lock, another member holds it now (this member's
          lease ran out while it was silent);
        * *regained*: granted, but the lock had expired here (no renewal got through for
          ``expiry``): another member may have held and consumed the queue meanwhile, so
          its cache and offset here cannot be trusted any more.

        A broker that cannot be reached changes nothing: its queues keep their last lock
        time and so expire on schedule.
        """
        lost: list[ProcessQueue] = []
        regained: list[ProcessQueue] = []
        for broker_name, mqs in self._by_broker(queues).items():
            result = await self._lock_on(broker_name, mqs)
            if result is None:
                continue
            ok, sent = result
            for mq in mqs:
                pq = queues[mq]
                if mq in ok:
                    if not pq.lock_valid(sent, expiry):
                        log.info("%s locked again after its lock had expired", mq)
                        regained.append(pq)
                    pq.set_locked(True, sent)
                else:
                    # lockAll sets locked=false; the caller also drops the queue, since its
                    # cache and offset are stale once another member consumed it.
                    log.warning("%s: lock refused, another member holds it", mq)
                    pq.set_locked(False)
                    lost.append(pq)
        return lost, regained

    async def unlock(self, mqs: Iterable[MessageQueue]) -> None:
        """Release ``mqs`` (``RebalanceImpl.unlock``); failures are logged (the broker lease
        then runs out on its own)."""
        for broker_name, queues in self._by_broker(mqs).items():
            await self._unlock_on(broker_name, queues)

    async def _unlock_on(self, broker_name: str, queues: list[MessageQueue]) -> None:
        client, group = self._client, self._group
        done = await self._on_master(
            "unlocking", broker_name, queues, lambda addr: client.unlock_batch(addr, group, queues)
        )
        if done is not None:
            log.info("unlocked %s", ", ".join(str(mq) for mq in queues))
