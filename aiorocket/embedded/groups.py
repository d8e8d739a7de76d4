"""Client groups: consumer and producer registrations by channel (``ConsumerManager``,
``ProducerManager``, ``ClientHousekeepingService``; docs/protocol.md §6.7).

A *channel* is one client connection. Every HEART_BEAT registers or refreshes the channel in
each group the body names; a channel leaves a group on UNREGISTER_CLIENT, when its connection
closes, or when it has not sent a heartbeat for ``channel_expiry`` seconds.

Membership changes of a consumer group (a new channel, a subscribed topic added or removed, a
channel gone) are reported through the ``notify`` callback with the group's remaining
channels; the broker turns that into NOTIFY_CONSUMER_IDS_CHANGED. Subscriptions keep tag codes
recomputed from the expression, never the client's ``codeSet`` (§5.2, §11.1 item 1).

No I/O here; times are monotonic seconds passed in by the caller.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from aiorocket._protocol.bodies import ConsumerData, SubscriptionData
from aiorocket._protocol.sql92 import EXPRESSION_TYPE_SQL92, Sql92Filter, compile_sql92
from aiorocket._protocol.tags import TagFilter, parse_tag_expression
from aiorocket.errors import InvalidSelectorError

__all__ = [
    "ClientChannel",
    "ClientGroups",
    "ConsumerGroup",
    "Subscription",
]

log = logging.getLogger("aiorocket.embedded")

#: ``notify(group, channels)``: the group's membership changed; tell these channels.
Notify = Callable[[str, list[Hashable]], None]


@dataclass(slots=True)
class ClientChannel:
    """One registered connection of a group (Java ``ClientChannelInfo``)."""

    channel: Hashable
    client_id: str
    language: str
    version: int
    last_update: float


@dataclass(frozen=True, slots=True)
class Subscription:
    """A consumer group's subscription to one topic, with broker-computed tag codes.

    ``tag_filter`` is ``None`` for any other expression type; ``sql_filter`` is the compiled
    expression of an SQL92 subscription, ``None`` when it does not compile (Java's
    ``ConsumerFilterManager`` then keeps no filter data for it).
    """

    data: SubscriptionData
    tag_filter: TagFilter | None
    sql_filter: Sql92Filter | None = None

    @classmethod
    def of(cls, data: SubscriptionData) -> Subscription:
        """Build from heartbeat data, recomputing the tag codes from ``subString``."""
        expression_type = (data.expression_type or "TAG").upper()
        if expression_type == "TAG":
            return cls(data, parse_tag_expression(data.sub_string))
        if expression_type == EXPRESSION_TYPE_SQL92:
            try:
                return cls(data, None, compile_sql92(data.sub_string))
            except InvalidSelectorError as exc:
                log.warning("group subscription to %s not compiled: %s", data.topic, exc)
        return cls(data, None)


@dataclass(slots=True)
class ConsumerGroup:
    """The channels and subscriptions of one consumer group (Java ``ConsumerGroupInfo``)."""

    name: str
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"
    channels: dict[Hashable, ClientChannel] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)

    def client_ids(self) -> list[str]:
        """``getAllClientId``: one id per channel, in registration order."""
        return [c.client_id for c in self.channels.values()]


class ClientGroups:
    """Every consumer and producer group with its channels.

    Args:
        notify: called with ``(group, channels)`` when a consumer group's membership changes
            (only when ``notify_enabled``); ``channels`` are the group's remaining channels.
        notify_enabled: ``notifyConsumerIdsChangedEnable``.
    """

    def __init__(self, *, notify: Notify, notify_enabled: bool = True) -> None:
        self._notify = notify
        self._notify_enabled = notify_enabled
        self._consumers: dict[str, ConsumerGroup] = {}
        self._producers: dict[str, dict[Hashable, ClientChannel]] = {}

    # -- consumers ---------------------------------------------------------------------------

    def consumer_group(self, group: str) -> ConsumerGroup | None:
        """The group's registration, or ``None`` when no channel is registered."""
        return self._consumers.get(group)

    def consumer_groups(self) -> list[str]:
        """Names of the consumer groups with at least one channel."""
        return sorted(self._consumers)

    def consumer_ids(self, group: str) -> list[str]:
        """The client ids of the group's channels (empty for an unknown group)."""
        info = self._consumers.get(group)
        return info.client_ids() if info is not None else []

    def subscription(self, group: str, topic: str) -> Subscription | None:
        """The group's subscription to ``topic`` from its latest heartbeats, or ``None``."""
        info = self._consumers.get(group)
        return info.subscriptions.get(topic) if info is not None else None

    def _changed(self, info: ConsumerGroup) -> None:
        if self._notify_enabled:
            self._notify(info.name, list(info.channels))

    def register_consumer(
        self,
        channel: Hashable,
        *,
        client_id: str,
        language: str,
        version: int,
        data: ConsumerData,
        now: float,
    ) -> bool:
        """Register or refresh ``channel`` in ``data.group_name`` (``registerConsumer``).

        Replaces the group's consume settings and subscriptions; returns (and notifies)
        whether the membership changed: a new channel, or a topic added or removed.
        """
        info = self._consumers.get(data.group_name)
        if info is None:
            info = self._consumers[data.group_name] = ConsumerGroup(data.group_name)
        info.consume_type = data.consume_type
        info.message_model = data.message_model
        info.consume_from_where = data.consume_from_where

        new_channel = False
        current = info.channels.get(channel)
        if current is None:
            info.channels[channel] = ClientChannel(channel, client_id, language, version, now)
            new_channel = True
        else:
            if current.client_id != client_id:
                log.warning(
                    "group %s: channel changed client id %s -> %s",
                    data.group_name,
                    current.client_id,
                    client_id,
                )
                current.client_id = client_id
            current.language = language
            current.version = version
            current.last_update = now

        # ConsumerGroupInfo.updateSubscription: only a newer subVersion replaces the
        # subscription (members of a group subscribed at different times send different
        # versions; letting an older one win would answer the newest member's pulls
        # SUBSCRIPTION_NOT_LATEST until its next heartbeat). An added or removed topic counts
        # as a membership change; a changed expression alone does not.
        topics_changed = False
        wanted: set[str] = set()
        for sub in data.subscriptions:
            wanted.add(sub.topic)
            old = info.subscriptions.get(sub.topic)
            if old is None:
                info.subscriptions[sub.topic] = Subscription.of(sub)
                topics_changed = True
            elif sub.sub_version > old.data.sub_version:
                info.subscriptions[sub.topic] = Subscription.of(sub)
        for topic in [t for t in info.subscriptions if t not in wanted]:
            del info.subscriptions[topic]
            topics_changed = True

        changed = new_channel or topics_changed
        if changed:
            self._changed(info)
        return changed

    def unregister_consumer(self, channel: Hashable, group: str) -> bool:
        """Remove ``channel`` from ``group`` (UNREGISTER_CLIENT); notifies the rest.

        Returns whether the channel was registered there.
        """
        info = self._consumers.get(group)
        if info is None or info.channels.pop(channel, None) is None:
            return False
        if not info.channels:
            del self._consumers[group]
        self._changed(info)
        return True

    # -- producers ---------------------------------------------------------------------------

    def register_producer(
        self,
        channel: Hashable,
        *,
        group: str,
        client_id: str,
        language: str,
        version: int,
        now: float,
    ) -> None:
        """Register or refresh ``channel`` in producer ``group``."""
        channels = self._producers.setdefault(group, {})
        current = channels.get(channel)
        if current is None:
            channels[channel] = ClientChannel(channel, client_id, language, version, now)
        else:
            current.client_id = client_id
            current.last_update = now

    def unregister_producer(self, channel: Hashable, group: str) -> bool:
        """Remove ``channel`` from producer ``group``; returns whether it was there."""
        channels = self._producers.get(group)
        if channels is None or channels.pop(channel, None) is None:
            return False
        if not channels:
            del self._producers[group]
        return True

    def producer_channels(self, group: str) -> list[ClientChannel]:
        """The registrations of producer ``group`` (empty for an unknown group)."""
        return list(self._producers.get(group, {}).values())

    def find_producer(self, client_id: str) -> Hashable | None:
        """The channel of the producer client ``client_id`` (any group; the one heard from
        last), where a reply to its request is pushed (``ProducerManager.findChannel``)."""
        found: ClientChannel | None = None
        for channels in self._producers.values():
            for info in channels.values():
                if info.client_id == client_id and (
                    found is None or info.last_update > found.last_update
                ):
                    found = info
        return None if found is None else found.channel

    def producer_groups(self) -> list[str]:
        """Names of the producer groups with at least one channel."""
        return sorted(self._producers)

    # -- channel lifecycle -------------------------------------------------------------------

    def channel_closed(self, channel: Hashable) -> list[str]:
        """Forget ``channel`` everywhere (``doChannelCloseEvent``); notifies each consumer
        group it left. Returns those consumer groups.
        """
        left = [g for g in list(self._consumers) if self.unregister_consumer(channel, g)]
        for group in list(self._producers):
            self.unregister_producer(channel, group)
        return left

    def expire(self, *, now: float, max_idle: float) -> list[Hashable]:
        """Drop registrations without a heartbeat for over ``max_idle`` seconds
        (``scanNotActiveChannel``), notifying the consumer groups concerned.

        Returns the channels that have no registration left afterwards: the caller closes
        them, as a Java broker closes an expired channel.
        """
        touched: set[Hashable] = set()
        for group in list(self._consumers):
            info = self._consumers[group]
            stale = [ch for ch, c in info.channels.items() if now - c.last_update > max_idle]
            for ch in stale:
                log.info("consumer %s of group %s expired", info.channels[ch].client_id, group)
                touched.add(ch)
                self.unregister_consumer(ch, group)
        for group in list(self._producers):
            channels = self._producers[group]
            for ch in [ch for ch, c in channels.items() if now - c.last_update > max_idle]:
                touched.add(ch)
                self.unregister_producer(ch, group)
        return [ch for ch in touched if not self._registered(ch)]

    def _registered(self, channel: Hashable) -> bool:
        return any(channel in g.channels for g in self._consumers.values()) or any(
            channel in chs for chs in self._producers.values()
        )
