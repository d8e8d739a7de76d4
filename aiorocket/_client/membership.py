"""One client's membership of its brokers (the part of Java ``MQClientInstance`` every
consumer and producer shares): route refresh, heartbeats, the client id, unregistering, and
the watch of subscribed topics that have no route yet.

A [`Membership`][aiorocket._client.membership.Membership] is built by its owner's start with
what it needs passed in (the client, the wire group, the heartbeat's data, where to run tasks),
and is driven by the owner's start-up and shutdown: `start` runs its timers, `leave` stops
heartbeating and unregisters. A consumer gives it the topics it reads, whose routes it
refreshes and watches; a producer gives it its own route refresh (its routes are looked up
when a topic is first sent to).
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
from collections.abc import Awaitable, Callable, Collection, Coroutine
from typing import Any, Literal

from aiorocket._client.instance import ClientInstance
from aiorocket._concurrency import Backoff, Periodic
from aiorocket._names import is_retry_topic
from aiorocket._protocol.bodies import HeartbeatData
from aiorocket.errors import BrokerError, RocketError, TopicNotExistError, TransportError
from aiorocket.settings import ClientSettings

__all__ = ["Membership"]


def _nothing() -> None:
    return None


class Membership:
    """Routes, heartbeats, client id and unregistering of one consumer or producer.

    Args:
        client: the owner's client.
        group: the wire group (with its namespace).
        role: ``"consumer"`` or ``"producer"``: a producer heartbeats masters only and
            unregisters as a producer (``MQClientInstance.sendHeartbeatToAllBroker``).
        settings: the intervals (``heartbeat_interval``, ``route_refresh_interval``).
        heartbeat_data: the heartbeat's body, built when it is sent.
        spawn: starts a task in the owner's task group.
        closing: whether the owner is closing.
        topics: a consumer's subscribed wire topics (their routes are refreshed and watched).
        refresh: a producer's route refresh (instead of ``topics``).
        on_routes_changed: a subscribed topic's queues changed, or a missing route appeared
            (a consumer rebalances).
        missing_route_retry: the first wait before a missing route is looked up again.
    """

    def __init__(
        self,
        client: ClientInstance,
        *,
        group: str,
        role: Literal["consumer", "producer"],
        settings: ClientSettings,
        heartbeat_data: Callable[[], HeartbeatData],
        spawn: Callable[[Coroutine[Any, Any, Any], str | None], asyncio.Task[Any]],
        closing: Callable[[], bool],
        topics: Callable[[], Collection[str]] = tuple,
        refresh: Callable[[], Awaitable[None]] | None = None,
        on_routes_changed: Callable[[], None] = _nothing,
        missing_route_retry: float = 1.0,
    ) -> None:
        self.client = client
        #: the owner's logger (what users filter on: ``aiorocket.consumer`` or ``.producer``)
        self._log = logging.getLogger(f"aiorocket.{role}")
        self._group = group
        self._role = role
        self._settings = settings
        self._heartbeat_data = heartbeat_data
        self._spawn = spawn
        self._closing = closing
        self._topics = topics
        self._on_routes_changed = on_routes_changed
        self._missing_route_retry = missing_route_retry
        self._heartbeat_timer = Periodic(
            self.send_heartbeats, settings.heartbeat_interval, name="heartbeat", run_first=False
        )
        self._route_timer = Periodic(
            refresh or self.refresh_routes,
            settings.route_refresh_interval,
            name="route refresh",
            run_first=False,
        )
        #: the heartbeat timer's task once `start` ran it (it outlives the other tasks at
        #: shutdown: the member stays registered until it unregisters)
        self.heartbeat_task: asyncio.Task[Any] | None = None
        #: whether brokers may know this member (it heartbeats): `leave` unregisters then
        self._registered = False
        #: the look-ups of subscribed topics that have no route yet (`watch_missing`)
        self._route_watch: asyncio.Task[None] | None = None
        #: subscribed topics whose missing route was logged (once each, until it appears)
        self._warned_missing: set[str] = set()

    @property
    def client_id(self) -> str:
        """The client id (``<ip>@<instance>``, made unique by `claim_client_id` if needed)."""
        return self.client.client_id

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self, *, heartbeats: bool = True) -> None:
        """Run the route refresh and (``heartbeats``) the heartbeats, and heartbeat a new
        broker at once when a route names one (a pull consumer reading assigned queues and a
        lite consumer do not heartbeat)."""
        if heartbeats:
            self._registered = True
            self.heartbeat_task = self._spawn(self._heartbeat_timer.run(), "heartbeat")
            self.client.on_new_brokers = self._on_new_brokers
        self._spawn(self._route_timer.run(), "route refresh")

    def stop_refresh(self) -> None:
        """Stop refreshing routes (the shutdown's first steps; heartbeats go on)."""
        self._route_timer.stop()
        if self._route_watch is not None:
            self._route_watch.cancel()

    async def leave(self) -> None:
        """Stop heartbeating and unregister from every broker (the shutdown's last step
        before the connections close; failures are logged). A member that never heartbeated
        (a pull consumer of assigned queues, a lite consumer) has nothing to unregister."""
        self.stop_refresh()
        self._heartbeat_timer.stop()
        if self._registered:
            await self.unregister()

    def wake_heartbeats(self) -> None:
        """Heartbeat now (new brokers to be known by)."""
        if not self._closing():
            self._heartbeat_timer.wake()

    def _on_new_brokers(self, names: set[str]) -> None:
        self.wake_heartbeats()

    # -- heartbeats ---------------------------------------------------------------------------

    def _addresses(self) -> list[str]:
        # Producer-only clients heartbeat masters only (sendHeartbeatToAllBroker).
        return self.client.all_broker_addresses(masters_only=self._role == "producer")

    async def send_heartbeats(self, *, at_start: bool = False) -> None:
        """Heartbeat every broker of the known routes (failures logged).

        Raises:
            RocketError: ``at_start``, and no broker took it (the first failure).
        """
        self._registered = True
        data = self._heartbeat_data()
        addrs = self._addresses()
        errors: list[RocketError] = []
        for addr in addrs:
            try:
                await self.client.heartbeat(addr, data)
            except RocketError as exc:
                errors.append(exc)
                self._log.warning("heartbeat to %s failed: %s", addr, exc)
        if at_start and addrs and len(errors) == len(addrs):
            raise errors[0]

    async def unregister(self) -> None:
        """UNREGISTER_CLIENT at every broker (failures logged)."""
        group = self._group
        for addr in self._addresses():
            try:
                if self._role == "producer":
                    await self.client.unregister_client(addr, producer_group=group)
                else:
                    await self.client.unregister_client(addr, consumer_group=group)
            except RocketError as exc:
                self._log.debug("unregister from %s failed: %s", addr, exc)

    # -- routes -------------------------------------------------------------------------------

    async def refresh_routes(self, *, at_start: bool = False) -> None:
        """Look up the route of each subscribed topic; tell the owner when a topic's queues
        changed, and watch the topics that have none yet (`watch_missing`).

        Raises:
            TransportError: ``at_start``, and no name server answered for any topic.
        """
        client = self.client
        topics = list(self._topics())
        changed = False
        unreachable: list[TransportError] = []
        for topic in topics:
            before = client.route(topic)
            try:
                route = await client.fetch_route(topic)
            except TopicNotExistError:
                await self._missing(topic)
                continue
            except (TransportError, BrokerError) as exc:
                # At start the caller gets the error itself; later, the log is all there is.
                level = logging.DEBUG if at_start else logging.WARNING
                self._log.log(level, "route of %s not refreshed: %s", topic, exc)
                if isinstance(exc, TransportError):
                    unreachable.append(exc)
                continue
            self._warned_missing.discard(topic)
            if before is None or before.subscribe_queues(topic) != route.subscribe_queues(topic):
                changed = True
        if at_start and unreachable and len(unreachable) == len(topics):
            raise unreachable[0]  # no name server answered: a start-up error
        if changed and not at_start:
            self._on_routes_changed()
        self.watch_missing()

    async def _missing(self, topic: str) -> None:
        if is_retry_topic(topic) or topic in self._warned_missing:
            self._log.debug("topic %s has no route yet", topic)
            return
        # Once per topic; one that does not exist yet may be a typo: name the existing
        # topics close to it.
        self._warned_missing.add(topic)
        self._log.warning(
            "topic %s has no route yet: consuming it once it is created%s",
            topic,
            await self.client.missing_topic_hint(topic),
        )

    def missing_routes(self) -> list[str]:
        """The subscribed topics without a route."""
        return [t for t in self._topics() if self.client.route(t) is None]

    def watch_missing(self) -> None:
        """Look up the subscribed topics that have no route yet in the background, until each
        has one (one task at a time; see `_look_up_missing`)."""
        if self._closing() or not self.missing_routes():
            return
        if self._route_watch is None or self._route_watch.done():
            self._route_watch = self._spawn(self._look_up_missing(), "missing routes")

    async def _look_up_missing(self) -> None:
        """Ask the name server again for the topics without a route, after
        ``missing_route_retry``, then twice as long each time up to ``route_refresh_interval``;
        when one appears, heartbeat its new brokers and tell the owner at once.

        Not Java's behaviour: a Java consumer of a topic that does not exist yet (it started
        before any producer; a Java name server does not create topics on look-up) finds it
        only at its next route poll (``pollNameServerInterval``, 30 s), so its first messages
        wait that long. Asking again soon costs one small request per missing topic.
        """
        cap = self._settings.route_refresh_interval
        backoff = Backoff(initial=min(self._missing_route_retry, cap), maximum=cap, jitter=0.1)
        while True:
            missing = self.missing_routes()
            if self._closing() or not missing:
                return
            await asyncio.sleep(backoff.next_delay())
            found: list[str] = []
            for topic in missing:
                try:
                    await self.client.fetch_route(topic)
                except TopicNotExistError:
                    continue
                except (TransportError, BrokerError) as exc:
                    self._log.debug("route of %s not looked up: %s", topic, exc)
                    continue
                found.append(topic)
            if not found or self._closing():
                continue
            self._log.info("topic(s) %s have a route now; rebalancing", ", ".join(found))
            backoff.reset()  # more may follow (the retry topic, created by our heartbeat)
            if self.heartbeat_task is not None:
                # Be registered with the new brokers before the rebalance asks them for the
                # group's members, instead of waiting for their notification.
                await self.send_heartbeats()
            self._on_routes_changed()

    # -- client id ----------------------------------------------------------------------------

    async def claim_client_id(self) -> None:
        """Before joining a consumer group: if the group already has a member with this
        client's id — another instance started with the same ``instance_name`` on this host,
        or behind the same address — take a unique one first."""
        client = self.client
        for addr in client.all_broker_addresses():
            try:
                ids = await client.get_consumer_list(addr, self._group)
            except (TransportError, BrokerError):
                continue  # (no member yet answers code 1) the rebalances check again
            if client.client_id in ids:
                self._rename_client()
            return

    async def disambiguate_client_id(self) -> None:
        """The group lists this client's id more than once: another instance uses it too.
        Take a unique id and register it with every broker at once, so the next consumer
        list holds each member once and allocation leaves no queue without an owner."""
        self._rename_client()
        await self.send_heartbeats()

    def _rename_client(self) -> None:
        client = self.client
        old = client.client_id
        base = old.split("#~", 1)[0]
        client.client_id = f"{base}#~{os.getpid()}-{secrets.token_hex(3)}"
        self._log.warning(
            "consumer group %s: client id %s is used by another live instance (same "
            "instance_name %r, or the same host and process id); this member continues as %s. "
            "Give each instance its own instance_name.",
            self._group,
            old,
            self._settings.instance_name,
            client.client_id,
        )
