"""Which queue a message goes to (Java ``TopicPublishInfo`` and ``MessageQueueSelector``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from aiorocket._protocol.tags import java_hash
from aiorocket.models import MessageQueue

__all__ = ["QueueSelector", "TopicPublishInfo", "queue_for_key"]

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
