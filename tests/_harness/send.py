"""Send loops the tests share."""

from __future__ import annotations

from collections.abc import Iterable

from aiorocket._producer.producer import Producer
from aiorocket.models import Message, MessageQueue

__all__ = ["fill_queue"]


async def fill_queue(
    producer: Producer, topic: str, bodies: Iterable[bytes], queue_id: int = 0
) -> MessageQueue:
    """Send one message per body, in order, to queue ``queue_id`` of ``topic`` on broker-a;
    returns that queue."""
    queue = MessageQueue(topic, "broker-a", queue_id)
    for body in bodies:
        await producer.send(Message(topic, body), queue=queue)
    return queue
