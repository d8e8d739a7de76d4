"""The embedded name server: routes that point at the broker itself (REMOTING.md §7).

There is one broker, so the name server's tables are the broker's own topic table. Routes list
one QueueData and one BrokerData whose master (id 0) is the broker's advertised address;
``TBW102`` is served with perm 7 so producers of unknown topics fall back to it (§7.3), and
with auto-creation on an unknown valid topic is created on lookup (§7.5). Bodies are compact
standard JSON with quoted broker ids, which all four client families accept (§5.1).
"""

from __future__ import annotations

from collections.abc import Callable

from aiorocket._protocol.bodies import BrokerData, ClusterInfo, QueueData, TopicList, TopicRouteData
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import GetRouteInfoRequestHeader
from aiorocket._remoting import Connection, Dispatcher
from aiorocket.embedded.topics import TopicTable

__all__ = ["NAMESRV_CODES", "NameServer"]

#: Request codes answered by the name server half of the port (never ACL-checked: a 4.x name
#: server does not validate signatures, §8).
NAMESRV_CODES = frozenset(
    {
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        RequestCode.GET_BROKER_CLUSTER_INFO,
        RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
        # admin requests of the name server (``admin.NameServerAdmin``)
        RequestCode.PUT_KV_CONFIG,
        RequestCode.GET_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.GET_KVLIST_BY_NAMESPACE,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
    }
)

_NO_ROUTE = (
    "No topic route info in name server for the topic: {}\n"
    "See http://rocketmq.apache.org/docs/faq/ for further details."
)


class NameServer:
    """Answers GET_ROUTEINFO_BY_TOPIC (105), GET_BROKER_CLUSTER_INFO (106) and
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) from ``topics``.

    Args:
        topics: the broker's topic table.
        broker_name: the name used in routes, lock bodies and ``bname`` headers.
        cluster_name: the cluster the broker belongs to.
        address: returns the broker's advertised ``ip:port`` (known once it listens).
    """

    def __init__(
        self,
        topics: TopicTable,
        *,
        broker_name: str,
        cluster_name: str,
        address: Callable[[], str],
    ) -> None:
        self._topics = topics
        self._broker_name = broker_name
        self._cluster_name = cluster_name
        self._address = address

    def register(self, dispatcher: Dispatcher) -> None:
        """Install the handlers of :data:`NAMESRV_CODES`."""
        dispatcher.register(RequestCode.GET_ROUTEINFO_BY_TOPIC, self.get_route)
        dispatcher.register(RequestCode.GET_BROKER_CLUSTER_INFO, self.get_cluster_info)
        dispatcher.register(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, self.get_all_topics)

    def _broker_data(self) -> BrokerData:
        return BrokerData(self._cluster_name, self._broker_name, {0: self._address()})

    def route(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``, creating the topic if auto-creation allows; ``None`` if
        the topic neither exists nor may be created.

        Raises:
            OSError: the topic table cannot be written.
        """
        cfg = self._topics.create_on_lookup(topic)
        if cfg is None:
            return None
        queue = QueueData(
            self._broker_name,
            cfg.read_queue_nums,
            cfg.write_queue_nums,
            cfg.perm,
            cfg.topic_sys_flag,
        )
        return TopicRouteData((queue,), (self._broker_data(),))

    async def get_route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ROUTEINFO_BY_TOPIC: code 0 with TopicRouteData, or 17 (§7.1).

        Raises:
            MissingHeaderFieldError: no ``topic`` in the request.
        """
        header = GetRouteInfoRequestHeader.from_ext(cmd.ext_fields)
        route = self.route(header.topic)
        if route is None:
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST, remark=_NO_ROUTE.format(header.topic)
            )
        return cmd.make_response(ResponseCode.SUCCESS, body=route.to_json())

    async def get_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO: this broker as the only member of its cluster (§5.4)."""
        info = ClusterInfo(
            {self._broker_name: self._broker_data()},
            {self._cluster_name: (self._broker_name,)},
        )
        return cmd.make_response(ResponseCode.SUCCESS, body=info.to_json())

    async def get_all_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ``{"topicList":[…]}``."""
        body = TopicList(tuple(self._topics.names()))
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())
