"""Headers and JSON bodies of the admin requests ``mqadmin`` and dashboards send (REMOTING.md
§5.8): consume stats (lag), topic stats, connections, runtime info, subscription groups, topic
configs, consume-queue dumps and the name server's KV config.

Field names and the members each body writes follow the 4.9.8 beans (read with ``javap`` from
``rocketmq-4.9.8-all.jar``): ``ConsumeStats``/``OffsetWrapper``, ``TopicStatsTable``/
``TopicOffset``, ``KVTable``, ``ConsumerConnection``/``Connection``, ``SubscriptionGroupConfig``
and its wrapper, ``TopicConfigSerializeWrapper``, ``QueryConsumeQueueResponseBody``,
``GroupList``. Maps keyed by ``MessageQueue`` are written with fastjson object keys, which every
Java tool reads (and :func:`~aiorocket._protocol.fastjson.loads` reads back). As in
:mod:`~aiorocket._protocol.bodies`, ``to_json`` writes members in alphabetical order and
``from_json`` tolerates absent members (Java defaults) and numeric strings; anything malformed
raises :class:`~aiorocket.errors.RemoteProtocolError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, TypeVar

from aiorocket._protocol import fastjson
from aiorocket._protocol.bodies import (
    CONSUME_FROM_WHERE,
    CONSUME_TYPES,
    MESSAGE_MODELS,
    SubscriptionData,
    _as_int,
    _as_map,
    _as_object,
    _as_str,
    _bool_field,
    _enum_field,
    _float_field,
    _int_field,
    _load_object,
    _opt_str,
    _req_str,
    _str_tuple,
    message_queue_from_dict,
)
from aiorocket._protocol.headers import Header, WireKind, header_class, wire
from aiorocket.models import MessageQueue

__all__ = [
    "UNIQUE_KEY_QUERY",
    "Connection",
    "ConsumeQueueEntry",
    "ConsumeStats",
    "ConsumerConnection",
    "DataVersion",
    "DeleteKVConfigRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "DeleteTopicRequestHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetKVConfigRequestHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetProducerConnectionListRequestHeader",
    "GetTopicConfigRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "GroupList",
    "KVTable",
    "OffsetWrapper",
    "ProducerConnection",
    "PutKVConfigRequestHeader",
    "QueryConsumeQueueRequestHeader",
    "QueryConsumeQueueResponseBody",
    "QueryTopicConsumeByWhoRequestHeader",
    "SubscriptionGroupConfig",
    "SubscriptionGroupWrapper",
    "TopicConfigBody",
    "TopicConfigSerializeWrapper",
    "TopicOffset",
    "TopicStatsTable",
]

_INT = WireKind.INT
_LONG = WireKind.LONG
_INT32 = 32

#: ``MixAll.UNIQUE_MSG_QUERY_FLAG``: the ext field a QUERY_MESSAGE by UNIQ_KEY carries.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


# --------------------------------------------------------------------------------------------
# Headers


@header_class
class GetConsumeStatsRequestHeader(Header):
    """GET_CONSUME_STATS (208); without ``topic`` every topic the group has offsets for."""

    consumer_group: str = wire("consumerGroup", required=True)
    topic: str | None = wire("topic", default=None)


@header_class
class GetTopicStatsInfoRequestHeader(Header):
    """GET_TOPIC_STATS_INFO (202)."""

    topic: str = wire("topic", required=True)


@header_class
class GetTopicConfigRequestHeader(Header):
    """GET_TOPIC_CONFIG (351, 5.x); ``lo`` asks for the static-topic mapping as well."""

    topic: str = wire("topic", required=True)


@header_class
class GetConsumerConnectionListRequestHeader(Header):
    """GET_CONSUMER_CONNECTION_LIST (203)."""

    consumer_group: str = wire("consumerGroup", required=True)


@header_class
class GetProducerConnectionListRequestHeader(Header):
    """GET_PRODUCER_CONNECTION_LIST (204)."""

    producer_group: str = wire("producerGroup", required=True)


@header_class
class DeleteTopicRequestHeader(Header):
    """DELETE_TOPIC_IN_BROKER (215)."""

    topic: str = wire("topic", required=True)


@header_class
class DeleteTopicFromNamesrvRequestHeader(Header):
    """DELETE_TOPIC_IN_NAMESRV (216); 4.9.8's tools send no ``clusterName``."""

    topic: str = wire("topic", required=True)
    cluster_name: str | None = wire("clusterName", default=None)


@header_class
class DeleteSubscriptionGroupRequestHeader(Header):
    """DELETE_SUBSCRIPTIONGROUP (207); ``removeOffset`` also forgets the group's offsets."""

    group_name: str = wire("groupName", required=True)
    remove_offset: bool = wire("removeOffset", default=False)


@header_class
class QueryConsumeQueueRequestHeader(Header):
    """QUERY_CONSUME_QUEUE (321): ``count`` index entries of a queue from ``index``."""

    topic: str = wire("topic", required=True)
    queue_id: int = wire("queueId", _INT, required=True)
    index: int = wire("index", _LONG, required=True)
    count: int = wire("count", _INT, required=True)
    consumer_group: str | None = wire("consumerGroup", default=None)


@header_class
class QueryTopicConsumeByWhoRequestHeader(Header):
    """QUERY_TOPIC_CONSUME_BY_WHO (300)."""

    topic: str = wire("topic", required=True)


@header_class
class GetKVConfigRequestHeader(Header):
    """GET_KV_CONFIG (101); the value comes back in the ``value`` ext field."""

    namespace: str = wire("namespace", required=True)
    key: str = wire("key", required=True)


@header_class
class PutKVConfigRequestHeader(Header):
    """PUT_KV_CONFIG (100)."""

    namespace: str = wire("namespace", required=True)
    key: str = wire("key", required=True)
    value: str = wire("value", required=True)


@header_class
class DeleteKVConfigRequestHeader(Header):
    """DELETE_KV_CONFIG (102)."""

    namespace: str = wire("namespace", required=True)
    key: str = wire("key", required=True)


@header_class
class GetKVListByNamespaceRequestHeader(Header):
    """GET_KVLIST_BY_NAMESPACE (219); the answer is a :class:`KVTable`."""

    namespace: str = wire("namespace", required=True)


# --------------------------------------------------------------------------------------------
# Bodies


def _finite(x: float) -> float:
    # fastjson writes NaN/Infinity as null, which Java reads as 0.
    return x if math.isfinite(x) else 0.0


def _mq_map(value: Any, where: str) -> list[tuple[MessageQueue, Any]]:
    return [
        (message_queue_from_dict(k, f"{where} key"), v) for k, v in _as_map(value, where).items()
    ]


@dataclass(frozen=True, slots=True)
class OffsetWrapper:
    """One queue of :class:`ConsumeStats`: the broker's next offset, the group's committed
    offset, and the store time of the last consumed message (0 when unknown)."""

    broker_offset: int = 0
    consumer_offset: int = 0
    last_timestamp: int = 0

    @property
    def diff(self) -> int:
        """``brokerOffset - consumerOffset``: what ``mqadmin consumerProgress`` calls #Diff."""
        return self.broker_offset - self.consumer_offset

    def to_dict(self) -> dict[str, Any]:
        """The bean as fastjson writes it."""
        return {
            "brokerOffset": self.broker_offset,
            "consumerOffset": self.consumer_offset,
            "lastTimestamp": self.last_timestamp,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "OffsetWrapper") -> Self:
        """Read the bean; absent members are 0.

        Raises:
            RemoteProtocolError: a member is not an integer.
        """
        obj = _as_object(value, where)
        return cls(
            broker_offset=_int_field(obj, "brokerOffset", where),
            consumer_offset=_int_field(obj, "consumerOffset", where),
            last_timestamp=_int_field(obj, "lastTimestamp", where),
        )


@dataclass(frozen=True, slots=True)
class ConsumeStats:
    """The GET_CONSUME_STATS (208) response body: a group's progress per queue."""

    offset_table: dict[MessageQueue, OffsetWrapper] = field(default_factory=dict)
    consume_tps: float = 0.0

    def total_diff(self) -> int:
        """``computeTotalDiff``: the summed lag of every queue."""
        return sum(w.diff for w in self.offset_table.values())

    def to_json(self) -> bytes:
        """Encode with ``MessageQueue`` object keys, queues sorted."""
        return fastjson.dumps(
            {
                "consumeTps": _finite(self.consume_tps),
                "offsetTable": {
                    mq: self.offset_table[mq].to_dict() for mq in sorted(self.offset_table)
                },
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        w = "ConsumeStats"
        obj = _load_object(data, w)
        table = {
            mq: OffsetWrapper.from_dict(v, f"{w}.offsetTable[{mq}]")
            for mq, v in _mq_map(obj.get("offsetTable"), f"{w}.offsetTable")
        }
        return cls(table, _float_field(obj, "consumeTps", w))


@dataclass(frozen=True, slots=True)
class TopicOffset:
    """One queue of :class:`TopicStatsTable`: min and max offsets and the store time of the
    newest message (0 for an empty queue)."""

    min_offset: int = 0
    max_offset: int = 0
    last_update_timestamp: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The bean as fastjson writes it."""
        return {
            "lastUpdateTimestamp": self.last_update_timestamp,
            "maxOffset": self.max_offset,
            "minOffset": self.min_offset,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "TopicOffset") -> Self:
        """Read the bean; absent members are 0.

        Raises:
            RemoteProtocolError: a member is not an integer.
        """
        obj = _as_object(value, where)
        return cls(
            min_offset=_int_field(obj, "minOffset", where),
            max_offset=_int_field(obj, "maxOffset", where),
            last_update_timestamp=_int_field(obj, "lastUpdateTimestamp", where),
        )


@dataclass(frozen=True, slots=True)
class TopicStatsTable:
    """The GET_TOPIC_STATS_INFO (202) response body."""

    offset_table: dict[MessageQueue, TopicOffset] = field(default_factory=dict)

    def to_json(self) -> bytes:
        """Encode with ``MessageQueue`` object keys, queues sorted."""
        return fastjson.dumps(
            {
                "offsetTable": {
                    mq: self.offset_table[mq].to_dict() for mq in sorted(self.offset_table)
                }
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        w = "TopicStatsTable"
        obj = _load_object(data, w)
        return cls(
            {
                mq: TopicOffset.from_dict(v, f"{w}.offsetTable[{mq}]")
                for mq, v in _mq_map(obj.get("offsetTable"), f"{w}.offsetTable")
            }
        )


@dataclass(frozen=True, slots=True)
class KVTable:
    """A string map (Java ``KVTable``): GET_BROKER_RUNTIME_INFO, GET_KVLIST_BY_NAMESPACE."""

    table: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> bytes:
        """Encode with sorted keys."""
        return fastjson.dumps({"table": {k: self.table[k] for k in sorted(self.table)}})

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body; non-string values are kept as their JSON text.

        Raises:
            RemoteProtocolError: the body is not JSON or ``table`` is not an object.
        """
        obj = _load_object(data, "KVTable")
        table = _as_map(obj.get("table"), "KVTable.table")
        return cls({str(k): v if isinstance(v, str) else str(v) for k, v in table.items()})


@dataclass(frozen=True, slots=True)
class Connection:
    """One client connection of a group (Java ``Connection``)."""

    client_id: str
    client_addr: str
    language: str
    version: int

    def to_dict(self) -> dict[str, Any]:
        """The bean as fastjson writes it."""
        return {
            "clientAddr": self.client_addr,
            "clientId": self.client_id,
            "language": self.language,
            "version": self.version,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "Connection") -> Self:
        """Read the bean.

        Raises:
            RemoteProtocolError: a member has the wrong type.
        """
        obj = _as_object(value, where)
        language = obj.get("language")
        return cls(
            client_id=_opt_str(obj, "clientId", where) or "",
            client_addr=_opt_str(obj, "clientAddr", where) or "",
            language=language if isinstance(language, str) else str(language or ""),
            version=_int_field(obj, "version", where, _INT32),
        )


@dataclass(frozen=True, slots=True)
class ConsumerConnection:
    """The GET_CONSUMER_CONNECTION_LIST (203) response body."""

    connection_set: tuple[Connection, ...]
    subscription_table: dict[str, SubscriptionData]
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"

    def to_json(self) -> bytes:
        """Encode the body (connections and topics sorted)."""
        return fastjson.dumps(
            {
                "connectionSet": [
                    c.to_dict() for c in sorted(self.connection_set, key=lambda c: c.client_id)
                ],
                "consumeFromWhere": self.consume_from_where,
                "consumeType": self.consume_type,
                "messageModel": self.message_model,
                "subscriptionTable": {
                    t: self.subscription_table[t].to_dict() for t in sorted(self.subscription_table)
                },
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        w = "ConsumerConnection"
        obj = _load_object(data, w)
        conns = obj.get("connectionSet") or []
        if not isinstance(conns, list):
            conns = [conns]
        subs = _as_map(obj.get("subscriptionTable"), f"{w}.subscriptionTable")
        return cls(
            connection_set=tuple(
                Connection.from_dict(c, f"{w}.connectionSet[{i}]") for i, c in enumerate(conns)
            ),
            subscription_table={
                _as_str(k, f"{w}.subscriptionTable key"): SubscriptionData.from_dict(
                    v, f"{w}.subscriptionTable[{k}]"
                )
                for k, v in subs.items()
            },
            consume_type=_enum_field(obj, "consumeType", CONSUME_TYPES, w, "CONSUME_PASSIVELY"),
            message_model=_enum_field(obj, "messageModel", MESSAGE_MODELS, w, "CLUSTERING"),
            consume_from_where=_enum_field(
                obj, "consumeFromWhere", CONSUME_FROM_WHERE, w, "CONSUME_FROM_LAST_OFFSET"
            ),
        )


@dataclass(frozen=True, slots=True)
class ProducerConnection:
    """The GET_PRODUCER_CONNECTION_LIST (204) response body."""

    connection_set: tuple[Connection, ...]

    def to_json(self) -> bytes:
        """Encode the body (connections sorted by client id)."""
        return fastjson.dumps(
            {
                "connectionSet": [
                    c.to_dict() for c in sorted(self.connection_set, key=lambda c: c.client_id)
                ]
            }
        )


@dataclass(frozen=True, slots=True)
class DataVersion:
    """Java ``DataVersion``: a change counter and the time of the last change (ms)."""

    timestamp: int = 0
    counter: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The bean as fastjson writes it."""
        return {"counter": self.counter, "timestamp": self.timestamp}

    @classmethod
    def from_dict(cls, value: Any, where: str = "DataVersion") -> Self:
        """Read the bean; absent is zero.

        Raises:
            RemoteProtocolError: a member is not an integer.
        """
        if value is None:
            return cls()
        obj = _as_object(value, where)
        return cls(_int_field(obj, "timestamp", where), _int_field(obj, "counter", where))


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig:
    """A consumer group's broker-side settings (Java ``SubscriptionGroupConfig``), the
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) request body. Defaults are Java's."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    notify_consumer_ids_changed_enable: bool = True

    def to_dict(self) -> dict[str, Any]:
        """The bean as fastjson writes it."""
        return {
            "brokerId": self.broker_id,
            "consumeBroadcastEnable": self.consume_broadcast_enable,
            "consumeEnable": self.consume_enable,
            "consumeFromMinEnable": self.consume_from_min_enable,
            "groupName": self.group_name,
            "notifyConsumerIdsChangedEnable": self.notify_consumer_ids_changed_enable,
            "retryMaxTimes": self.retry_max_times,
            "retryQueueNums": self.retry_queue_nums,
            "whichBrokerWhenConsumeSlowly": self.which_broker_when_consume_slowly,
        }

    def to_json(self) -> bytes:
        """Encode the bean."""
        return fastjson.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, value: Any, where: str = "SubscriptionGroupConfig") -> Self:
        """Read the bean; absent members take Java's defaults.

        Raises:
            RemoteProtocolError: ``groupName`` is missing or a member has the wrong type.
        """
        obj = _as_object(value, where)

        def num(key: str, default: int) -> int:
            v = obj.get(key)
            return default if v is None else _as_int(v, f"{where}.{key}")

        return cls(
            group_name=_req_str(obj, "groupName", where),
            consume_enable=_bool_field(obj, "consumeEnable", where, True),
            consume_from_min_enable=_bool_field(obj, "consumeFromMinEnable", where, True),
            consume_broadcast_enable=_bool_field(obj, "consumeBroadcastEnable", where, True),
            retry_queue_nums=num("retryQueueNums", 1),
            retry_max_times=num("retryMaxTimes", 16),
            broker_id=num("brokerId", 0),
            which_broker_when_consume_slowly=num("whichBrokerWhenConsumeSlowly", 1),
            notify_consumer_ids_changed_enable=_bool_field(
                obj, "notifyConsumerIdsChangedEnable", where, True
            ),
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the request body.

        Raises:
            RemoteProtocolError: the body is not JSON or not a valid config.
        """
        return cls.from_dict(fastjson.loads(data))


class _Bean(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


_B = TypeVar("_B", bound=_Bean)
_B_co = TypeVar("_B_co", bound=_Bean, covariant=True)


class _BeanType(Protocol[_B_co]):
    def from_dict(self, value: Any, where: str) -> _B_co: ...


def _table_to_json(key: str, table: Mapping[str, _Bean], version: DataVersion) -> bytes:
    """A ``{"dataVersion": ..., key: {name: bean}}`` wrapper body, names sorted."""
    return fastjson.dumps(
        {"dataVersion": version.to_dict(), key: {k: table[k].to_dict() for k in sorted(table)}}
    )


def _table_from_json(
    data: bytes | str, wrapper: str, key: str, bean: _BeanType[_B]
) -> tuple[dict[str, _B], DataVersion]:
    """Read a wrapper body written by :func:`_table_to_json` (or the Java broker).

    Raises:
        RemoteProtocolError: the body is not JSON or a member is malformed.
    """
    obj = _load_object(data, wrapper)
    table = _as_map(obj.get(key), f"{wrapper}.{key}")
    beans = {str(k): bean.from_dict(v, f"{wrapper}.{key}[{k}]") for k, v in table.items()}
    return beans, DataVersion.from_dict(obj.get("dataVersion"), f"{wrapper}.dataVersion")


@dataclass(frozen=True, slots=True)
class SubscriptionGroupWrapper:
    """The GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) response body."""

    subscription_group_table: dict[str, SubscriptionGroupConfig]
    data_version: DataVersion = DataVersion()

    def to_json(self) -> bytes:
        """Encode with groups sorted by name."""
        return _table_to_json(
            "subscriptionGroupTable", self.subscription_group_table, self.data_version
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        table, version = _table_from_json(
            data, "SubscriptionGroupWrapper", "subscriptionGroupTable", SubscriptionGroupConfig
        )
        return cls(table, version)


@dataclass(frozen=True, slots=True)
class TopicConfigBody:
    """A topic's configuration as Java ``TopicConfig`` serialises it."""

    topic_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The bean as fastjson writes it."""
        return {
            "order": self.order,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicFilterType": self.topic_filter_type,
            "topicName": self.topic_name,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "TopicConfig") -> Self:
        """Read the bean.

        Raises:
            RemoteProtocolError: ``topicName`` is missing or a member has the wrong type.
        """
        obj = _as_object(value, where)
        return cls(
            topic_name=_req_str(obj, "topicName", where),
            read_queue_nums=_int_field(obj, "readQueueNums", where, _INT32),
            write_queue_nums=_int_field(obj, "writeQueueNums", where, _INT32),
            perm=_int_field(obj, "perm", where, _INT32),
            topic_filter_type=_opt_str(obj, "topicFilterType", where) or "SINGLE_TAG",
            topic_sys_flag=_int_field(obj, "topicSysFlag", where, _INT32),
            order=_bool_field(obj, "order", where),
        )


@dataclass(frozen=True, slots=True)
class TopicConfigSerializeWrapper:
    """The GET_ALL_TOPIC_CONFIG (21) response body."""

    topic_config_table: dict[str, TopicConfigBody]
    data_version: DataVersion = DataVersion()

    def to_json(self) -> bytes:
        """Encode with topics sorted by name."""
        return _table_to_json("topicConfigTable", self.topic_config_table, self.data_version)

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        table, version = _table_from_json(
            data, "TopicConfigSerializeWrapper", "topicConfigTable", TopicConfigBody
        )
        return cls(table, version)


@dataclass(frozen=True, slots=True)
class ConsumeQueueEntry:
    """One consume-queue entry of a :class:`QueryConsumeQueueResponseBody`."""

    physic_offset: int
    physic_size: int
    tags_code: int

    def to_dict(self) -> dict[str, Any]:
        """The bean (Java ``ConsumeQueueData``) as fastjson writes it."""
        return {
            "eval": False,
            "physicOffset": self.physic_offset,
            "physicSize": self.physic_size,
            "tagsCode": self.tags_code,
        }


@dataclass(frozen=True, slots=True)
class QueryConsumeQueueResponseBody:
    """The QUERY_CONSUME_QUEUE (321) response body (``mqadmin queryCq``)."""

    max_queue_index: int
    min_queue_index: int
    queue_data: tuple[ConsumeQueueEntry, ...] = ()
    subscription_data: SubscriptionData | None = None
    filter_data: str | None = None

    def to_json(self) -> bytes:
        """Encode the body; unset members are omitted, as fastjson omits nulls."""
        body: dict[str, Any] = {}
        if self.filter_data is not None:
            body["filterData"] = self.filter_data
        body["maxQueueIndex"] = self.max_queue_index
        body["minQueueIndex"] = self.min_queue_index
        body["queueData"] = [e.to_dict() for e in self.queue_data]
        if self.subscription_data is not None:
            body["subscriptionData"] = self.subscription_data.to_dict()
        return fastjson.dumps(body)


@dataclass(frozen=True, slots=True)
class GroupList:
    """A set of group names (Java ``GroupList``): QUERY_TOPIC_CONSUME_BY_WHO's answer."""

    group_list: tuple[str, ...]

    def to_json(self) -> bytes:
        """Encode the body (sorted)."""
        return fastjson.dumps({"groupList": sorted(self.group_list)})

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body.

        Raises:
            RemoteProtocolError: the body is not JSON or holds a non-string.
        """
        obj = _load_object(data, "GroupList")
        return cls(_str_tuple(obj.get("groupList"), "GroupList.groupList"))
