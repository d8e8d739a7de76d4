"""Which queue a message goes to (Java ``TopicPublishInfo``, ``MessageQueueSelector`` and the
producer's ``topicPublishInfoTable``)."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from aiorocket._client.instance import ClientInstance
from aiorocket._protocol.tags import java_hash
from aiorocket.errors import RocketError, TopicNotExistError
from aiorocket.models import MessageQueue

__all__ = [
    "ROUND_ROBIN",
    "PublishRoutes",
    "QueueChoice",
    "QueueSelector",
    "TopicPublishInfo",
    "consistent_hash",
    "queue_for_key",
    "queue_for_lite_topic",
]

log = logging.getLogger("aiorocket.producer")

_MASK64 = (1 << 64) - 1
# Guava's LinearCongruentialGenerator multiplier (Hashing.consistentHash)
_LCG = 2862933555777941757

#: ``selector(queues, message, sharding_key) -> queue``; ``queues`` are the writable ones.
QueueSelector = Callable[[Sequence[MessageQueue], object, "str | None"], MessageQueue]


def queue_for_key(queues: Sequence[MessageQueue], key: str) -> MessageQueue:
    """The queue of ``key``: Java ``SelectMessageQueueByHash`` (``abs(hashCode % n)``).

    Using Java's String hash keeps our producer and a Java producer mapping the same key to
    the same queue, and it is stable across restarts (Python's own ``hash`` is salted).
    """
    h = java_hash(key)
    # Java's % truncates toward zero, Python's floors: take the remainder of |h| and keep sign.
    value = abs(h) % len(queues)
    return queues[value]


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(key, buckets)`` (Lamping and Veach's jump hash) of a
    Java ``long``: a bucket in ``[0, buckets)`` that few keys leave when ``buckets`` grows.

    Raises:
        ValueError: ``buckets`` < 1.
    """
    if buckets < 1:
        raise ValueError("buckets must be positive")
    state = key & _MASK64
    candidate = 0
    while True:
        state = (_LCG * state + 1) & _MASK64
        # (double) ((int) (state >>> 33) + 1) / 0x1.0p31, in (0, 1]
        fraction = ((state >> 33) + 1) / 2.0**31
        jump = int((candidate + 1) / fraction)
        if not 0 <= jump < buckets:
            return candidate
        candidate = jump


def queue_for_lite_topic(queues: Sequence[MessageQueue], lite_topic: str) -> MessageQueue:
    """The queue a lite topic's messages go to (RocketMQ 5.5, docs/protocol.md §12.8): as the
    proxy's ``SendMessageActivity`` and the broker's ``LiteShardingImpl`` pick it,
    ``consistentHash(liteTopic.hashCode(), n)`` over the ``n`` writable queues, so the broker
    a lite topic belongs to is the one that holds it."""
    return queues[consistent_hash(java_hash(lite_topic), len(queues))]


@dataclass(slots=True)
class TopicPublishInfo:
    """The writable queues of a topic and the round-robin position over them.

    ``via_default_topic`` is true while the topic has no route of its own and sends go to the
    brokers of ``TBW102`` so that the broker auto-creates it (docs/protocol.md §7.3).
    """

    queues: list[MessageQueue]
    via_default_topic: bool = False
    _next: int = field(default=0, repr=False)

    def next_queue(self, *, avoid_broker: str | None = None) -> MessageQueue:
        """Round-robin over the queues; after a failure, prefer a queue of another broker
        (``selectOneMessageQueue(lastBrokerName)``)."""
        n = len(self.queues)
        for _ in range(n):
            mq = self.queues[self._next % n]
            self._next = (self._next + 1) % (1 << 31)
            if avoid_broker is None or mq.broker_name != avoid_broker:
                return mq
        mq = self.queues[self._next % n]
        self._next = (self._next + 1) % (1 << 31)
        return mq


@dataclass(frozen=True, slots=True)
class QueueChoice:
    """How a send picks its queue at each attempt: ``queue`` itself (a wire queue), the queue
    of ``sharding_key`` or of ``lite_topic``, ``selector``'s pick, else round-robin
    (`ROUND_ROBIN`), the first that applies."""

    queue: MessageQueue | None = None
    sharding_key: str | None = None
    selector: QueueSelector | None = None
    lite_topic: str | None = None

    @property
    def pinned(self) -> bool:
        """Whether a retry keeps the queue: a keyed, selected or explicit queue must not change,
        moving the message elsewhere would break the order its key promises."""
        return (
            self.queue is not None
            or self.sharding_key is not None
            or self.selector is not None
            or self.lite_topic is not None
        )

    def pick(
        self, info: TopicPublishInfo, message: object, avoid_broker: str | None
    ) -> MessageQueue:
        """The queue of this attempt; round-robin skips ``avoid_broker``, the broker the
        previous attempt failed on (``selectOneMessageQueue(tpInfo, lastBrokerName)``)."""
        if self.queue is not None:
            return self.queue
        if self.sharding_key is not None:
            return queue_for_key(info.queues, self.sharding_key)
        if self.lite_topic is not None:
            return queue_for_lite_topic(info.queues, self.lite_topic)
        if self.selector is not None:
            return self.selector(info.queues, message, self.sharding_key)
        return info.next_queue(avoid_broker=avoid_broker)


#: the choice of a send without queue, key, lite topic or selector (shared: no allocation)
ROUND_ROBIN: Final = QueueChoice()


class PublishRoutes:
    """The publish info of every topic a producer sends to, by wire topic (Java's
    ``topicPublishInfoTable``): loaded on first use, through the template topic (TBW102) while
    the topic has no route of its own, refreshed after a failed send and periodically.

    Args:
        client: the producer's client instance.
        create_topic_key: the template topic (``createTopicKey``).
        default_topic_queue_nums: queues of a topic created through it.
    """

    def __init__(
        self, client: ClientInstance, *, create_topic_key: str, default_topic_queue_nums: int
    ) -> None:
        self._client = client
        self._create_topic_key = create_topic_key
        self._default_queues = default_topic_queue_nums
        self._publish: dict[str, TopicPublishInfo] = {}
        self._route_locks: dict[str, asyncio.Lock] = {}

    async def get(self, topic: str, *, refresh: bool = False) -> TopicPublishInfo:
        """The publish info of ``topic`` (a wire topic): loaded on first use; ``refresh``
        (after a failed send) asks the name server again, keeping what is known when it
        cannot answer.

        Raises:
            TopicNotExistError: no route, and no template topic to create it through.
            RocketError: the first lookup failed.
        """
        seen = self._publish.get(topic)
        if seen is not None and not refresh:
            return seen
        async with self._route_locks.setdefault(topic, asyncio.Lock()):
            current = self._publish.get(topic)
            if current is not None and current is not seen:
                return current  # another send refreshed it while we waited
            try:
                info = await self._load(topic, current)
            except RocketError:
                if current is None:
                    raise
                return current  # keep sending with what we know while the name server is away
            self._publish[topic] = info
            return info

    async def _load(self, topic: str, previous: TopicPublishInfo | None) -> TopicPublishInfo:
        try:
            # a refresh after a failed send is coalesced and rate-limited per topic
            refreshed = await self._client.refresh_route(topic) if previous else None
            route = refreshed or await self._client.fetch_route(topic)
            queues = route.publish_queues(topic)
            if queues:
                return TopicPublishInfo(
                    queues, _next=previous._next if previous else random.randrange(1 << 16)
                )
        except TopicNotExistError:
            pass
        # Unknown topic: send through TBW102's brokers so that the broker auto-creates the topic
        # with min(defaultTopicQueueNums, TBW102 queues) queues (§7.3).
        hint = await self._client.missing_topic_hint(topic)
        try:
            default = await self._client.fetch_route(self._create_topic_key)
        except TopicNotExistError:
            raise TopicNotExistError(
                f"no route for topic {topic} and auto-creation is not available{hint}; create "
                "it first (aiorocket admin create-topic, mqadmin updateTopic)"
            ) from None
        # The broker creates the topic on this send (autoCreateTopicEnable): say so, once per
        # topic, loudly when the name is close to an existing one (a typo's messages reach no
        # consumer of the intended topic).
        log.log(
            logging.WARNING if hint else logging.INFO,
            "topic %s does not exist: sending through %s lets the broker create it%s",
            topic,
            self._create_topic_key,
            hint,
        )
        queues = []
        for mq in default.publish_queues(topic):
            qd = next(q for q in default.queue_datas if q.broker_name == mq.broker_name)
            if mq.queue_id < min(self._default_queues, qd.read_queue_nums):
                queues.append(mq)
        if not queues:
            raise TopicNotExistError(f"no writable route for topic {topic}")
        return TopicPublishInfo(queues, via_default_topic=True)

    async def refresh_all(self) -> None:
        """Fetch the route of every known topic again (``updateTopicRouteInfoFromNameServer``,
        every ``route_refresh_interval``)."""
        for topic, info in list(self._publish.items()):
            try:
                route = await self._client.fetch_route(topic)
            except TopicNotExistError:
                continue
            queues = route.publish_queues(topic)
            if queues and queues != info.queues:
                self._publish[topic] = TopicPublishInfo(queues, _next=info._next)
