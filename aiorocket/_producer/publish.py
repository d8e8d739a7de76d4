"""Which queue a message goes to (Java ``TopicPublishInfo`` and ``MessageQueueSelector``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiorocket._protocol.tags import java_hash
from aiorocket.models import MessageQueue

__all__ = [
    "QueueSelector",
    "TopicPublishInfo",
    "consistent_hash",
    "queue_for_key",
    "queue_for_lite_topic",
]

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
    """The queue a lite topic's messages go to (RocketMQ 5.5, docs/protocol.md §12.5): as the
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
