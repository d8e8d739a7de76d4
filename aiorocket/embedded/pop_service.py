"""The embedded broker's POP consumption state (docs/protocol.md §12.3), built once per broker:
the checkpoints in flight and their revive log, the ordered-POP table, the held POP and
NOTIFICATION requests, and the revive service.

`PopService.load` replays the revive log (``pop_log.py``) before the broker serves and
restores the POP offsets a crash kept from being written; `PopService.start` starts the
revive task and hooks the held requests to the write path; `PopService.flush` records
the revive offset in the offset table and writes the ordered-POP table (the broker calls it
before writing offsets); `PopService.stop` stops the revive task. The request
processors (``pop.py``, ``pop_ack.py``) share a `PopContext`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from aiorocket.embedded.context import BrokerContext
from aiorocket.embedded.pop_inflight import InflightTable
from aiorocket.embedded.pop_log import ReviveLog
from aiorocket.embedded.pop_order import ConsumerOrderInfo
from aiorocket.embedded.pop_polling import PopWaiters
from aiorocket.embedded.pop_revive import ReviveService

__all__ = ["PopContext", "PopService"]

log = logging.getLogger("aiorocket.embedded")


@dataclass(frozen=True, slots=True, kw_only=True)
class PopContext:
    """What the POP request processors share.

    Attributes:
        inflight: the checkpoints of non-ordered POPs not acked yet.
        revive_log: makes every checkpoint and ack durable before it is applied.
        orders: the ordered-POP batches.
        pops: held POP_MESSAGE requests.
        notifications: held NOTIFICATION requests.
        revive: the revive service (woken when a checkpoint due sooner is added).
    """

    inflight: InflightTable
    revive_log: ReviveLog
    orders: ConsumerOrderInfo
    pops: PopWaiters
    notifications: PopWaiters
    revive: ReviveService


class PopService:
    """Owns the POP state of one broker.

    Args:
        ctx: the broker's collaborators (store, writer, topics, offsets, settings, held pulls).
        conf_dir: where ``consumerOrderInfo.json`` lives; ``None`` keeps it in memory.
    """

    def __init__(self, ctx: BrokerContext, conf_dir: Path | None) -> None:
        config = ctx.config
        self._ctx = ctx
        inflight = InflightTable()
        revive_log = ReviveLog(
            ctx.store,
            ctx.offsets,
            cluster=config.cluster_name,
            broker_name=config.broker_name,
            store_address=ctx.store_address,
        )
        orders = ConsumerOrderInfo(
            None if conf_dir is None else conf_dir / "consumerOrderInfo.json"
        )
        self.context = PopContext(
            inflight=inflight,
            revive_log=revive_log,
            orders=orders,
            pops=PopWaiters(
                max_total=config.pop_max_polling, max_per_key=config.pop_max_polling_per_queue
            ),
            notifications=PopWaiters(
                max_total=config.pop_max_polling, max_per_key=config.pop_max_polling_per_queue
            ),
            revive=ReviveService(
                inflight,
                revive_log,
                ctx.writer,
                ctx.topics,
                ctx.offsets,
                config,
                ctx.store_address,
            ),
        )

    def load(self) -> None:
        """Load the ordered-POP table, replay the revive log and restore the POP offsets it
        shows were popped; before the broker serves.

        Raises:
            OSError: a file or the store cannot be read.
            ValueError: ``consumerOrderInfo.json`` is malformed.
        """
        pop = self.context
        pop.orders.load()
        positions = pop.revive_log.replay(pop.inflight)
        offsets = self._ctx.offsets
        for (group, topic, queue_id), next_offset in positions.items():
            stored = offsets.query(group, topic, queue_id)
            if stored is None or stored < next_offset:
                log.info(
                    "POP offset of %s on %s:%d restored to %d from the revive log",
                    group,
                    topic,
                    queue_id,
                    next_offset,
                )
                offsets.commit(group, topic, queue_id, next_offset)
        pop.revive_log.commit_progress(pop.inflight)

    async def start(self) -> None:
        """Start reviving and listen to the write path (once the broker's address is known:
        revived messages carry it)."""
        self._ctx.waiters.add_listener(self._on_arrival)
        await self.context.revive.start()

    def _on_arrival(self, topic: str, queue_id: int, queue_offset: int, tags_code: int) -> None:
        self.context.pops.on_arrival(topic, queue_id, queue_offset, tags_code)
        self.context.notifications.on_arrival(topic, queue_id, queue_offset, tags_code)

    async def close(self) -> None:
        """Stop reviving (idempotent); held requests end with their connections."""
        self._ctx.waiters.remove_listener(self._on_arrival)
        await self.context.revive.close()

    async def flush(self) -> None:
        """Record the revive offset in the offset table (written after this by the caller)
        and write the ordered-POP table if it changed.

        Raises:
            OSError: the ordered-POP table cannot be written.
        """
        self.context.revive_log.commit_progress(self.context.inflight)
        await self.context.orders.flush(self._ctx.clock.now_ms())
