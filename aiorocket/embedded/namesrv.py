"""The embedded name server: routes that point at the broker itself (docs/protocol.md §7), and the
name server's admin requests (its ``DefaultRequestProcessor``).

There is one broker, so the name server's tables are the broker's own topic table. Routes list
one QueueData and one BrokerData whose master (id 0) is the broker's advertised address;
``TBW102`` is served with perm 7 so producers of unknown topics fall back to it (§7.3). A lookup
only reads, as Java's ``getRouteInfoByTopic`` does: an unknown topic (an unknown group's
``%RETRY%`` topic too) is answered TOPIC_NOT_EXIST (17) with Java's remark, unless the opt-in
shortcut ``create_topics_on_lookup`` (with ``auto_create_topics``) creates it (§7.5). Bodies
are compact standard JSON with quoted broker ids, which all four client families accept (§5.1).

Admin requests: PUT/GET/DELETE_KV_CONFIG (100-102), GET_KVLIST_BY_NAMESPACE (219) and
DELETE_TOPIC_IN_NAMESRV (216). What differs from Java:

* DELETE_TOPIC_IN_NAMESRV has little to do: the routes are the broker's own topic table, which
  DELETE_TOPIC_IN_BROKER already changed. A route lookup may create the topic again when
  ``create_topics_on_lookup`` is on (§7.5).
* The KV config is stored and served, but routes carry no ``orderTopicConf``, as a 4.9.8 name
  server's routes do not with its default ``orderMessageEnable=false``.
"""

from __future__ import annotations

from typing import Final

from aiorocket._protocol.admin_bodies import KVTable
from aiorocket._protocol.bodies import BrokerData, ClusterInfo, QueueData, TopicList, TopicRouteData
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    DeleteKVConfigRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    GetKVConfigRequestHeader,
    GetKVListByNamespaceRequestHeader,
    GetRouteInfoRequestHeader,
    PutKVConfigRequestHeader,
)
from aiorocket._remoting import Connection
from aiorocket.embedded.context import Processor, handles

__all__ = ["NAMESRV_CODES", "NameServer"]

_NO_ROUTE = (
    "No topic route info in name server for the topic: {}\n"
    "See http://rocketmq.apache.org/docs/faq/ for further details."
)


class NameServer(Processor):
    """Answers the name-server codes (`NAMESRV_CODES`): GET_ROUTEINFO_BY_TOPIC (105),
    GET_BROKER_CLUSTER_INFO (106) and GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206) from the
    broker's topic table, and the admin requests from the KV table.

    Args:
        ctx: the broker's topic table, KV table, settings (broker and cluster names) and
            advertised address (known once it listens).
    """

    def _broker_data(self) -> BrokerData:
        return BrokerData(
            self._config.cluster_name, self._config.broker_name, {0: self._ctx.address()}
        )

    def route(self, topic: str) -> TopicRouteData | None:
        """The route of ``topic``, creating the topic if ``create_topics_on_lookup`` allows;
        ``None`` if the topic neither exists nor may be created.

        Raises:
            OSError: the topic table cannot be written.
        """
        cfg = self._topics.create_on_lookup(topic)
        if cfg is None:
            return None
        queue = QueueData(
            self._config.broker_name,
            cfg.read_queue_nums,
            cfg.write_queue_nums,
            cfg.perm,
            cfg.topic_sys_flag,
        )
        return TopicRouteData((queue,), (self._broker_data(),))

    @handles(RequestCode.GET_ROUTEINFO_BY_TOPIC)
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

    @handles(RequestCode.GET_BROKER_CLUSTER_INFO)
    async def get_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_BROKER_CLUSTER_INFO: this broker as the only member of its cluster (§5.4)."""
        info = ClusterInfo(
            {self._config.broker_name: self._broker_data()},
            {self._config.cluster_name: (self._config.broker_name,)},
        )
        return cmd.make_response(ResponseCode.SUCCESS, body=info.to_json())

    @handles(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    async def get_all_topics(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ALL_TOPIC_LIST_FROM_NAMESERVER: ``{"topicList":[…]}``."""
        body = TopicList(tuple(self._topics.names()))
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    # -- admin requests -----------------------------------------------------------------------

    @handles(RequestCode.PUT_KV_CONFIG)
    async def put_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """PUT_KV_CONFIG.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent.
            OSError: the table cannot be written.
        """
        h = PutKVConfigRequestHeader.from_ext(cmd.ext_fields)
        self._ctx.kv.put(h.namespace, h.key, h.value)
        return cmd.make_response(ResponseCode.SUCCESS)

    @handles(RequestCode.GET_KV_CONFIG)
    async def get_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_KV_CONFIG: the value in the ``value`` ext field, or QUERY_NOT_FOUND (22).

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent.
        """
        h = GetKVConfigRequestHeader.from_ext(cmd.ext_fields)
        value = self._ctx.kv.get(h.namespace, h.key)
        if value is None:
            return cmd.make_response(
                ResponseCode.QUERY_NOT_FOUND,
                remark=f"No config item, Namespace: {h.namespace} Key: {h.key}",
            )
        return cmd.make_response(ResponseCode.SUCCESS, ext_fields={"value": value})

    @handles(RequestCode.DELETE_KV_CONFIG)
    async def delete_kv(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """DELETE_KV_CONFIG.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent.
            OSError: the table cannot be written.
        """
        h = DeleteKVConfigRequestHeader.from_ext(cmd.ext_fields)
        self._ctx.kv.delete(h.namespace, h.key)
        return cmd.make_response(ResponseCode.SUCCESS)

    @handles(RequestCode.GET_KVLIST_BY_NAMESPACE)
    async def kv_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_KVLIST_BY_NAMESPACE: a `KVTable`, or QUERY_NOT_FOUND (22).

        Raises:
            MissingHeaderFieldError: no ``namespace``.
        """
        h = GetKVListByNamespaceRequestHeader.from_ext(cmd.ext_fields)
        table = self._ctx.kv.namespace(h.namespace)
        if not table:
            return cmd.make_response(
                ResponseCode.QUERY_NOT_FOUND, remark=f"No config item, Namespace: {h.namespace}"
            )
        return cmd.make_response(ResponseCode.SUCCESS, body=KVTable(table).to_json())

    @handles(RequestCode.DELETE_TOPIC_IN_NAMESRV)
    async def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """DELETE_TOPIC_IN_NAMESRV: the routes are the broker's own topic table, which
        DELETE_TOPIC_IN_BROKER already changed; only the topic's order config goes.

        Raises:
            MissingHeaderFieldError: no ``topic``.
            OSError: the KV table cannot be written.
        """
        h = DeleteTopicFromNamesrvRequestHeader.from_ext(cmd.ext_fields)
        self._ctx.kv.delete("ORDER_TOPIC_CONFIG", h.topic)
        return cmd.make_response(ResponseCode.SUCCESS)


#: Request codes answered by the name server half of the port (never ACL-checked: a 4.x name
#: server does not validate signatures, §8).
NAMESRV_CODES: Final = NameServer.codes()
