"""What POP tests share: simple consumers of one group draining a backlog together."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import aiorocket as rmq

__all__ = ["drain_together"]


async def drain_together(
    consumers: Sequence[rmq.SimpleConsumer], n: int, *, timeout: float
) -> tuple[list[bytes], Counter[int]]:
    """Run ``consumers`` (started) until they received ``n`` messages between them, each
    batch acked with ``ack_all``; every body received (duplicates kept) and how many each
    consumer got, by index."""
    counts: Counter[int] = Counter()
    seen: list[bytes] = []

    async def member(i: int, c: rmq.SimpleConsumer) -> None:
        while len(seen) < n:
            msgs = await c.receive(32)
            if msgs:
                await c.ack_all(msgs)
                counts[i] += len(msgs)
                seen.extend(m.body for m in msgs)
            await asyncio.sleep(0)

    await asyncio.wait_for(
        asyncio.gather(*(member(i, c) for i, c in enumerate(consumers))), timeout=timeout
    )
    return seen, counts
