"""What the pull consumer asks brokers about its queues' positions (Java
``DefaultLitePullConsumerImpl``'s ``commitSync``, ``seek`` and ``offsetForTimestamp``): commits
awaited, each queue's stored range, and the first offset stored at a time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from datetime import datetime

from aiorocket._client.time_search import first_offset_at, store_time
from aiorocket._consumer.context import ConsumerContext
from aiorocket.models import MessageQueue

__all__ = ["BrokerPositions"]


class BrokerPositions:
    """The broker side of a pull consumer's positions (see the module docs)."""

    def __init__(self, ctx: ConsumerContext) -> None:
        self._ctx = ctx
        self._clustering = ctx.settings.message_model == "clustering"

    async def write(self, pairs: Sequence[tuple[MessageQueue, int]]) -> None:
        """Commit ``(queue, offset)`` pairs, awaited (the offsets store holds them already):
        to each queue's broker (clustering), else to the local file.

        Raises:
            TransportError, BrokerError: the first error, after every queue was tried.
        """
        if not pairs:
            return
        ctx = self._ctx
        if not self._clustering:
            await ctx.offsets.persist_all([mq for mq, _ in pairs], sync=True)
            return

        async def one(mq: MessageQueue, offset: int) -> None:
            addr = await self._broker(mq)
            await ctx.client.update_consumer_offset(addr, ctx.group, mq, offset, oneway=False)

        results = await asyncio.gather(*(one(mq, o) for mq, o in pairs), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def _broker(self, mq: MessageQueue) -> str:
        # offsets and bounds: the master, else any broker of the group (ClientInstance)
        return await self._ctx.client.find_broker(mq.broker_name, mq.topic)

    async def committed(self, mq: MessageQueue) -> int | None:
        """The group's offset of ``mq`` on its broker (clustering); ``None`` if none.

        Raises:
            TransportError, BrokerError: the broker could not be asked.
        """
        addr = await self._broker(mq)
        return await self._ctx.client.query_consumer_offset(addr, self._ctx.group, mq)

    async def bounds(self, mq: MessageQueue) -> tuple[int, int]:
        """The smallest stored offset of ``mq`` and its next offset to be written.

        Raises:
            TransportError, BrokerError: the broker could not be asked.
        """
        client = self._ctx.client
        addr = await self._broker(mq)
        lo = await client.get_min_offset(addr, mq)
        hi = await client.get_max_offset(addr, mq)
        return lo, hi

    async def offset_at(self, mq: MessageQueue, when: datetime) -> int:
        """The first offset of ``mq`` stored at or after ``when`` (its next offset if none is
        that recent): the broker's SEARCH_OFFSET_BY_TIMESTAMP answer, refined by reading the
        store times of messages around it (`aiorocket._client.time_search`).

        Raises:
            TransportError, BrokerError: the broker could not be asked.
        """
        ctx = self._ctx
        ts = int(when.timestamp() * 1000)
        addr = await self._broker(mq)
        guess = await ctx.client.search_offset(addr, mq, ts)
        lo, hi = await self.bounds(mq)

        def stored_at(offset: int) -> Awaitable[float]:
            return store_time(
                ctx.client, addr, mq, offset, group=ctx.group, timeout=ctx.settings.request_timeout
            )

        return await first_offset_at(ts, lo=lo, hi=hi, guess=guess, stored_at=stored_at)
