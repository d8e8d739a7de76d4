"""Which broker a request goes to in a broker group (master, slaves), and the on-demand route
refresh behind it: unit tests of :class:`ClientInstance` with a name server stand-in (its
``fetch_route`` replaced), no sockets."""

from __future__ import annotations

import asyncio

import pytest

from aiorocket._client.instance import ClientInstance
from aiorocket._protocol.bodies import BrokerData, QueueData, TopicRouteData
from aiorocket.errors import (
    ConnectError,
    ConnectionClosedError,
    RequestTimeoutError,
    ServiceNotAvailableError,
)
from aiorocket.settings import ClientSettings

MASTER, SLAVE = "10.0.0.1:10911", "10.0.0.2:10911"


def route(addrs: dict[int, str]) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=(QueueData("broker-a", 4, 4, 6),),
        broker_datas=(BrokerData("DefaultCluster", "broker-a", dict(addrs)),),
    )


class NameServer:
    """Answers route fetches with :attr:`current`, counting them; each takes ``delay``."""

    def __init__(self, client: ClientInstance, current: TopicRouteData) -> None:
        self.current = current
        self.fetches = 0
        self.delay = 0.0
        self._client = client
        client.fetch_route = self.fetch  # type: ignore[method-assign]

    async def fetch(self, topic: str) -> TopicRouteData:
        self.fetches += 1
        await asyncio.sleep(self.delay)
        self._client._remember(topic, self.current)
        return self.current


def client(interval: float = 0.2) -> ClientInstance:
    return ClientInstance(ClientSettings(namesrv=("ns:9876",), route_retry_interval=interval))


async def test_reads_go_to_the_suggested_broker_or_master_else_a_slave() -> None:
    c = client()
    ns = NameServer(c, route({0: MASTER, 1: SLAVE}))
    await ns.fetch("T")
    assert await c.find_broker("broker-a", "T") == MASTER
    assert await c.find_broker("broker-a", "T", broker_id=1) == SLAVE
    assert await c.find_broker("broker-a", "T", master=True) == MASTER
    # the master is gone from the route: reads (and offset commits) go to the slave, after
    # one route refresh; sends and locks need the master and say so
    ns.current = route({1: SLAVE})
    await asyncio.sleep(0.25)
    await ns.fetch("T")
    fetched = ns.fetches
    assert await c.find_broker("broker-a", "T") == SLAVE
    assert ns.fetches == fetched + 1
    with pytest.raises(ServiceNotAvailableError, match="no master address for broker broker-a"):
        await c.find_broker("broker-a", "T", master=True)


async def test_a_new_master_is_found_by_the_refresh() -> None:
    c = client()
    ns = NameServer(c, route({1: SLAVE}))
    await ns.fetch("T")
    ns.current = route({0: SLAVE})  # the slave became the master (a DLedger election)
    await asyncio.sleep(0.25)
    assert await c.find_broker("broker-a", "T", master=True) == SLAVE


async def test_refreshes_are_coalesced_and_rate_limited() -> None:
    c = client(interval=0.5)
    ns = NameServer(c, route({0: MASTER}))
    ns.delay = 0.05
    # twenty requests fail at once: one fetch, all of them get its route
    got = await asyncio.gather(*(c.refresh_route("T") for _ in range(20)))
    assert ns.fetches == 1
    assert all(r is ns.current for r in got)
    # within the interval the cached route is returned without asking
    assert await c.refresh_route("T") is ns.current
    assert ns.fetches == 1
    await asyncio.sleep(0.5)
    await c.refresh_route("T")
    assert ns.fetches == 2
    # another topic has its own budget
    await c.refresh_route("U")
    assert ns.fetches == 3


async def test_a_cancelled_waiter_leaves_the_refresh_to_the_others() -> None:
    c = client()
    ns = NameServer(c, route({0: MASTER}))
    ns.delay = 0.1
    first = asyncio.ensure_future(c.refresh_route("T"))
    second = asyncio.ensure_future(c.refresh_route("T"))
    await asyncio.sleep(0.01)
    first.cancel()
    assert await second is ns.current
    assert ns.fetches == 1


async def test_a_failed_refresh_keeps_what_is_known() -> None:
    c = client()
    ns = NameServer(c, route({0: MASTER}))
    await ns.fetch("T")

    async def down(topic: str) -> TopicRouteData:
        raise ConnectError("name server down")

    c.fetch_route = down  # type: ignore[method-assign]
    await asyncio.sleep(0.25)
    assert await c.refresh_route("T") is ns.current
    assert await c.find_broker("broker-a", "T") == MASTER


class Broker:
    """A request function: each call is recorded and answered by ``outcomes`` in turn."""

    def __init__(self, *outcomes: str | Exception) -> None:
        self.calls: list[str] = []
        self._outcomes = list(outcomes)

    async def __call__(self, addr: str) -> str:
        self.calls.append(addr)
        outcome = self._outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


async def test_a_dead_cached_address_is_refreshed_and_the_request_sent_once_more() -> None:
    c = client()
    ns = NameServer(c, route({0: MASTER}))
    await ns.fetch("T")
    ns.current = route({0: SLAVE})  # the master restarted on another host
    await asyncio.sleep(0.25)
    call = Broker(ConnectError("refused"), "ok")
    assert await c.call_broker("broker-a", "T", call, master=True) == "ok"
    assert call.calls == [MASTER, SLAVE]


async def test_a_dead_address_the_route_still_names_fails_without_a_second_request() -> None:
    c = client()
    ns = NameServer(c, route({0: MASTER}))
    await ns.fetch("T")
    await asyncio.sleep(0.25)
    fetched = ns.fetches
    call = Broker(ConnectionClosedError("closed"), "ok")
    with pytest.raises(ConnectionClosedError):
        await c.call_broker("broker-a", "T", call)
    assert call.calls == [MASTER]
    assert ns.fetches == fetched + 1  # it asked


@pytest.mark.parametrize(
    ("error", "after_close"),
    [
        (RequestTimeoutError("slow"), True),  # not the connection: the broker may be busy
        (ConnectionClosedError("closed"), False),  # the broker may have run it
    ],
)
async def test_what_may_not_be_sent_again_is_not(error: Exception, after_close: bool) -> None:
    c = client()
    ns = NameServer(c, route({0: MASTER}))
    await ns.fetch("T")
    ns.current = route({0: SLAVE})
    await asyncio.sleep(0.25)
    call = Broker(error, "ok")
    with pytest.raises(type(error)):
        await c.call_broker("broker-a", "T", call, master=True, after_close=after_close)
    assert call.calls == [MASTER]
