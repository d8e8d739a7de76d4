"""What a consumer's collaborators share: one frozen
[`ConsumerContext`][aiorocket._consumer.context.ConsumerContext], built once by the consumer's
start and passed to each of them (the queue table, the broker requests), as the embedded broker
passes its handlers a context. They get what they use, and never read the consumer's private
fields.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.offset_store import OffsetStore
from aiorocket._consumer.stats import StatsRecorder
from aiorocket._consumer.subscription import Subscription
from aiorocket.settings import ConsumerSettings

__all__ = ["ConsumerContext"]


@dataclass(frozen=True, slots=True)
class ConsumerContext:
    """The parts of one started consumer its collaborators use."""

    #: the consumer's client (connections, routes, requests)
    client: ClientInstance
    #: the consumer group with its namespace (the name brokers know)
    group: str
    settings: ConsumerSettings
    #: the subscribed wire topics (fixed once started)
    subscriptions: Mapping[str, Subscription]
    offsets: OffsetStore
    stats: StatsRecorder
    #: ``ConsumerData.consumeType`` of heartbeats and the running info
    consume_type: str
    #: when the consumer started (epoch milliseconds; ``PROP_CONSUMER_START_TIMESTAMP``)
    start_wall: int
    #: starts a task in the consumer's task group
    spawn: Callable[[Coroutine[Any, Any, Any], str | None], asyncio.Task[Any]]
    #: asks for a rebalance now (the group or an offset changed)
    wake_rebalance: Callable[[], None]
    #: awaits one last shutdown step, shielded and bounded; whether it completed
    cleanup: Callable[[Awaitable[object], str], Awaitable[bool]]
    #: whether the consumer is closing (or stopped)
    closing: Callable[[], bool]
