"""The name-server half of the port: routes that point at the broker (docs/protocol.md §7)."""

from __future__ import annotations

from aiorocket._protocol.bodies import ClusterInfo, TopicList
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from tests.embedded.test_broker_kit import RawClient, running_broker


async def test_tbw102_route_has_perm_7() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp, route = await c.route("TBW102")
        assert resp.code == 0
        assert route is not None
        (q,) = route.queue_datas
        assert (q.perm, q.read_queue_nums, q.write_queue_nums) == (7, 8, 8)
        (b,) = route.broker_datas
        assert b.broker_addrs == {0: broker.address}
        assert (b.broker_name, b.cluster) == ("broker-a", "DefaultCluster")
        # compact standard JSON with a quoted broker id (Go splits the text on ',' and ':')
        assert f'"brokerAddrs":{{"0":"{broker.address}"}}'.encode() in resp.body
        assert b" " not in resp.body


async def test_the_opt_in_shortcut_creates_unknown_topics_on_lookup_or_17() -> None:
    async with (
        running_broker(default_queues=3, create_topics_on_lookup=True) as broker,
        RawClient(broker.address) as c,
    ):
        resp, route = await c.route("Brand_New")
        assert route is not None
        (q,) = route.queue_datas
        assert (q.perm, q.read_queue_nums, q.write_queue_nums) == (6, 3, 3)
        assert [str(mq) for mq in route.publish_queues("Brand_New")] == [
            "Brand_New@broker-a:0",
            "Brand_New@broker-a:1",
            "Brand_New@broker-a:2",
        ]
        resp, _ = await c.route("bad topic")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
    async with (
        running_broker(auto_create_topics=False, create_topics_on_lookup=True) as broker,
        RawClient(broker.address) as c,
    ):
        resp, _ = await c.route("Brand_New")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST
        assert resp.remark is not None
        assert resp.remark.startswith("No topic route info in name server for the topic: ")
        resp, _ = await c.route("TBW102")
        assert resp.code == ResponseCode.TOPIC_NOT_EXIST  # no template without auto-create


async def test_cluster_info_and_topic_list() -> None:
    async with running_broker() as broker, RawClient(broker.address) as c:
        resp = await c.request(RequestCode.GET_BROKER_CLUSTER_INFO)
        info = ClusterInfo.from_json(resp.body)
        assert info.cluster_addr_table == {"DefaultCluster": ("broker-a",)}
        assert info.broker_addr_table["broker-a"].broker_addrs == {0: broker.address}
        await c.create_topic("Listed")
        resp = await c.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        topics = TopicList.from_json(resp.body).topic_list
        assert "Listed" in topics
        assert "TBW102" in topics


async def test_all_interfaces_never_advertise_0000() -> None:
    config = BrokerConfig(broker_name="b1", cluster_name="C1")
    async with EmbeddedBroker(host="0.0.0.0", config=config) as broker:
        host, port = broker.address.rsplit(":", 1)
        assert host != "0.0.0.0"
        async with RawClient(f"127.0.0.1:{port}") as c:
            _, route = await c.route("TBW102")
            assert route is not None
            assert route.broker_datas[0].broker_addrs[0] == broker.address
            assert route.broker_datas[0].broker_name == "b1"
    config = BrokerConfig(advertised_host="10.1.2.3")
    async with EmbeddedBroker(config=config) as broker:
        assert broker.address.startswith("10.1.2.3:")


async def test_lookups_answer_17_and_create_nothing_by_default() -> None:
    # create_topics_on_lookup off (the default): lookups only read, as Java's
    # getRouteInfoByTopic; creation stays where Java does it (a send through TBW102, a consumer
    # heartbeat's %RETRY% topic).
    assert BrokerConfig().create_topics_on_lookup is False
    async with running_broker() as broker, RawClient(broker.address) as c:
        before = TopicList.from_json(
            (await c.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).body
        ).topic_list
        for topic in ("Unknown_T", "%RETRY%unknownG", "%DLQ%unknownG"):
            resp, route = await c.route(topic)
            assert (resp.code, route) == (ResponseCode.TOPIC_NOT_EXIST, None)
            assert resp.remark == (
                f"No topic route info in name server for the topic: {topic}\n"
                "See http://rocketmq.apache.org/docs/faq/ for further details."
            )
        resp = await c.request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert TopicList.from_json(resp.body).topic_list == before
        assert "Unknown_T" not in broker.topics
        resp, route = await c.route("TBW102")  # the template is still served
        assert resp.code == 0
        assert route is not None
        assert route.queue_datas[0].perm == 7
