"""What expires in the embedded broker's lite topics (docs/protocol.md §12.8): idle lite topics
(Java ``AbstractLiteLifecycleManager`` / ``LiteLifecycleManager``) and clients whose lite
subscriptions were not repeated in time (``LiteSubscriptionRegistryImpl.run``).

A lite topic expires when its parent has a positive ``lite.topic.expiration`` (minutes; one
minute is ``lite_expiration_minute`` seconds) and its last message was stored longer ago than
that and than ``min_lite_ttl``; nothing expires in the first ``min_lite_ttl`` after the broker
starts. Its queue is deleted with every group's offset and batch of it, and its subscriptions
are dropped without notice (clients that still want it subscribe again with their next sync).
"""

from __future__ import annotations

import asyncio
import logging

from aiorocket._protocol.attributes import LITE_EXPIRATION
from aiorocket._protocol.lite import parse_lite_queue
from aiorocket.embedded.context import BrokerContext
from aiorocket.embedded.lite import LiteService
from aiorocket.embedded.topics import TopicConfig

__all__ = ["expire_idle_lite_topics", "run_lite_expiry", "run_subscription_expiry"]

log = logging.getLogger("aiorocket.embedded")


def _expiration_minutes(cfg: TopicConfig | None) -> int:
    """``TopicConfig.getLiteTopicExpiration``: the attribute of a LITE topic, else -1."""
    if cfg is None:
        return -1
    raw = cfg.attributes.get(LITE_EXPIRATION, "-1")
    try:
        return int(raw)
    except ValueError:
        return -1


def expire_idle_lite_topics(ctx: BrokerContext, lite: LiteService, now_ms: int) -> list[str]:
    """``cleanExpiredLiteTopic``: delete the lite topics idle past their parent's expiration
    at ``now_ms``; returns their queue names.

    Raises:
        OSError: an index file could not be deleted.
    """
    config = ctx.config
    store = ctx.store
    floor_ms = config.min_lite_ttl * 1000
    gone: list[str] = []
    for name, queue_ids in store.queues().items():
        parts = parse_lite_queue(name)
        if parts is None or queue_ids != [0]:
            continue
        minutes = _expiration_minutes(ctx.topics.get(parts[0]))
        top = store.max_offset(name, 0)
        if minutes <= 0 or top <= 0:
            continue
        last = store.store_timestamp(name, 0, top - 1)
        idle = now_ms - last
        if last < 0 or idle < floor_ms or idle <= minutes * config.lite_expiration_minute * 1000:
            continue
        store.delete_topic(name)
        lite.forget_queue(name)
        gone.append(name)
    if gone:
        log.info("%d idle lite topic(s) expired", len(gone))
    return gone


async def run_lite_expiry(ctx: BrokerContext, lite: LiteService) -> None:
    """Every ``lite_expiry_check_interval``, once ``min_lite_ttl`` has passed since the start,
    ``expire_idle_lite_topics`` (a failure is logged; the next round tries again)."""
    config = ctx.config
    clock = ctx.clock
    started = clock.monotonic()
    while True:
        await clock.sleep(config.lite_expiry_check_interval)
        if clock.monotonic() - started < config.min_lite_ttl:
            continue  # "base protection for restart"
        try:
            expire_idle_lite_topics(ctx, lite, clock.now_ms())
        except Exception:
            log.exception("expiring idle lite topics failed")


async def run_subscription_expiry(ctx: BrokerContext, lite: LiteService) -> None:
    """Every ``lite_subscription_check_interval``, forget the clients whose subscriptions did
    not change for ``lite_subscription_timeout`` (their ready lite topics go to the others)."""
    # Real time, not the broker clock: a client re-sends its subscriptions on its own timer,
    # as it sends heartbeats, so a broker clock moved on by hand must not expire it.
    config = ctx.config
    while True:
        await asyncio.sleep(config.lite_subscription_check_interval)
        for client in lite.registry.expire(config.lite_subscription_timeout):
            log.info("lite subscriptions of %s (group %s) expired", client.client_id, client.group)
            lite.client_gone(client)
