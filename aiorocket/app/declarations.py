"""What an App declares: its subscribers (with their counters) and publishers, each able to
describe itself as an operation of the app's AsyncAPI document."""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiorocket.app.asyncapi import Endpoint
from aiorocket.app.decoding import HandlerSignature
from aiorocket.app.failures import FailureLog
from aiorocket.app.signals import RetryPolicy
from aiorocket.errors import ConfigurationError
from aiorocket.models import ReceivedMessage

__all__ = [
    "OrderBy",
    "Publisher",
    "Subscriber",
    "SubscriberStatistics",
    "parse_tags",
]

#: what an orderly subscriber keeps in order (see [`App.subscriber`][aiorocket.app.App.subscriber])
OrderBy = Literal["queue", "sharding_key"] | Callable[[ReceivedMessage], str | None]
_LATENCY_SAMPLES = 20_000


@dataclass(slots=True)
class SubscriberStatistics:
    """Counters of one subscriber.

    Attributes:
        handled: messages whose handler returned.
        failed: deliveries that failed and were handed back for a retry.
        dead_lettered: messages sent to the dead-letter queue by the app (invalid bodies,
            retry policy exhausted, ``DeadLetter``).
        latencies_ms: recent store-to-handler latencies in milliseconds (bounded sample).
    """

    handled: int = 0
    failed: int = 0
    dead_lettered: int = 0
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_SAMPLES))


@dataclass(slots=True)
class Subscriber:
    """One subscriber of an [App][aiorocket.app.App]: what `subscriber` declared."""

    topic: str
    group: str
    tags: frozenset[str] | None  # None: every tag
    orderly: bool
    order_by: OrderBy
    batch: bool
    batch_size: int
    concurrency: int | None
    retry: RetryPolicy
    fn: Callable[..., Awaitable[Any]]
    sig: HandlerSignature
    failures: FailureLog
    stats: SubscriberStatistics = field(default_factory=SubscriberStatistics)
    sql: str | None = None  # an SQL92 subscription: the broker filters, ``tags`` is None
    settings: dict[str, Any] = field(default_factory=dict)  # its group's consumer settings

    @property
    def expression(self) -> str:
        """The subscription expression: its SQL92 selector or its tags (``*`` for all)."""
        if self.sql is not None:
            return self.sql
        return "*" if self.tags is None else " || ".join(sorted(self.tags))

    def matches(self, msg: ReceivedMessage) -> bool:
        """Whether ``msg`` is for this subscriber (its topic, one of its tags)."""
        return msg.topic == self.topic and (self.tags is None or msg.tags in self.tags)

    def check_joins(self, subscribers: list[Subscriber]) -> None:
        """Check that it may join the subscribers of its group already declared: they share
        one consumer, so one kind of ordering, and no two of them take the same message.

        Raises:
            ConfigurationError: the group would mix orderly and concurrent subscribers, or
                two orders, or two subscribers overlap on a topic.
        """
        group, topic = self.group, self.topic
        for other in subscribers:
            if other.group != group:
                continue
            if other.orderly != self.orderly:
                raise ConfigurationError(
                    f"group {group!r} mixes orderly and concurrent subscribers; use two groups"
                )
            if other.order_by != self.order_by:
                raise ConfigurationError(
                    f"group {group!r} mixes subscribers ordered by {other.order_by!r} and "
                    f"by {self.order_by!r}; use two groups"
                )
            if other.topic == topic and (
                other.tags is None
                or self.tags is None
                or other.tags & self.tags
                or (other.sql is not None or self.sql is not None)
            ):
                raise ConfigurationError(
                    f"two subscribers of group {group!r} overlap on topic {topic!r}; "
                    "give them distinct tags or groups"
                )

    def endpoint(self) -> Endpoint:
        """Its ``receive`` operation in the app's AsyncAPI document."""
        return Endpoint(
            action="receive",
            name=getattr(self.fn, "__name__", self.group),
            topic=self.topic,
            payload=self.sig.body_annotation,
            reply=self.sig.reply_annotation,
            tags=None if self.tags is None else " || ".join(sorted(self.tags)),
            sql=self.sql,
            group=self.group,
            orderly=self.orderly,
            description=inspect.getdoc(self.fn),
        )


@dataclass(frozen=True, slots=True)
class Publisher:
    """What an [App][aiorocket.app.App] declared it publishes (``App.publisher``)."""

    topic: str
    model: Any
    tags: str | None
    reply: Any
    description: str | None

    def endpoint(self) -> Endpoint:
        """Its ``send`` operation in the app's AsyncAPI document."""
        return Endpoint(
            action="send",
            name=f"publish_{self.topic}",
            topic=self.topic,
            payload=self.model,
            reply=self.reply,
            tags=self.tags,
            description=self.description,
        )


def parse_tags(tags: str) -> frozenset[str] | None:
    """The tags of a tag expression (``"a || b"``); ``None`` for every tag (``*``)."""
    parts = {t.strip() for t in tags.split("||") if t.strip()}
    return None if not parts or "*" in parts else frozenset(parts)
