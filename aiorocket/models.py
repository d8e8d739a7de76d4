"""Value types shared by every layer: plain, frozen and slotted."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MessageQueue"]


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker: ``(topic, broker_name, queue_id)``.

    Ordering is by topic, then broker name, then queue id: the order in which the Java client
    sorts ``mqAll`` before allocating queues (AllocateMessageQueueAveragely), so every member
    of a group computes the same allocation.
    """

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"
