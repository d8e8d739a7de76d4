"""The client forgets brokers no route names any more (Java ``cleanOfflineBroker``)."""

from __future__ import annotations

from aiorocket._client.instance import ClientInstance
from aiorocket._protocol.bodies import BrokerData, QueueData, TopicRouteData
from aiorocket.settings import ClientSettings


def route(*brokers: str) -> TopicRouteData:
    return TopicRouteData(
        queue_datas=tuple(QueueData(b, 4, 4, 6) for b in brokers),
        broker_datas=tuple(
            BrokerData("DefaultCluster", b, {0: f"127.0.0.1:{1000 + i}"})
            for i, b in enumerate(brokers)
        ),
    )


def test_a_broker_gone_from_every_route_is_forgotten_and_new_again_when_it_returns() -> None:
    client = ClientInstance(ClientSettings(namesrv=("127.0.0.1:9876",)))
    news: list[set[str]] = []
    client.on_new_brokers = news.append
    client._remember("T", route("broker-a", "broker-b"))
    client._remember("U", route("broker-b"))
    assert news == [{"broker-a", "broker-b"}]
    # broker-b died: T's route lost it, but U's (not refreshed yet) still names it
    client._remember("T", route("broker-a"))
    assert sorted(client.broker_names()) == ["broker-a", "broker-b"]
    client._remember("U", route("broker-a"))
    assert client.broker_names() == ["broker-a"]
    assert client.all_broker_addresses() == ["127.0.0.1:1000"]  # no heartbeats to broker-b
    assert client.master_address("broker-b") is None
    # it came back: a new broker again (the consumer and producer heartbeat it at once)
    client._remember("T", route("broker-a", "broker-b"))
    assert news == [{"broker-a", "broker-b"}, {"broker-b"}]
    assert client.master_address("broker-b") == "127.0.0.1:1001"
