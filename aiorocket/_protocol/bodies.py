"""The JSON bodies of the remoting protocol (REMOTING.md §5), as frozen value types.

Every body has ``to_json()``, which writes compact JSON with members in alphabetical order
as fastjson writes beans, and ``from_json()``, which reads what any of the four client
families send (§5.2 "Broker parsing rules"):

* absent members and explicit ``null`` mean "unset": Java's default for primitives (0,
  ``false``), empty for collections; a missing mandatory string raises;
* integers may arrive as numeric strings (Go's ``codeSet``, C++'s ``subVersion``);
* booleans may arrive as ``0``/``1`` or ``"true"``/``"false"``;
* enums may arrive as their Java name or ordinal (C++), and are normalised to the name;
  unknown names are kept as they are, unknown ordinals raise;
* map keys may be bare integers, quoted integers, or JSON objects (``MessageQueue`` keys).

Nested beans convert through ``to_dict()``/``from_dict()`` so other bodies can embed them.
Everything malformed raises :class:`~aiorocket.errors.RemoteProtocolError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Self

from aiorocket._protocol import fastjson
from aiorocket._protocol.codes import Perm
from aiorocket.errors import RemoteProtocolError
from aiorocket.models import MessageQueue

__all__ = [
    "CONSUME_FROM_WHERE",
    "CONSUME_RESULTS",
    "CONSUME_TYPES",
    "MESSAGE_MODELS",
    "BrokerData",
    "CheckClientRequestBody",
    "ClusterInfo",
    "ConsumeMessageDirectlyResult",
    "ConsumerData",
    "ConsumerListBody",
    "ConsumerRunningInfo",
    "HeartbeatData",
    "LockBatchRequestBody",
    "LockBatchResponseBody",
    "ProcessQueueInfo",
    "ProducerData",
    "QueueData",
    "ResetOffsetBody",
    "SubscriptionData",
    "TopicConsumeStatus",
    "TopicList",
    "TopicRouteData",
    "UnlockBatchRequestBody",
    "message_queue_from_dict",
    "message_queue_to_dict",
]

# Java enum constants in ordinal order: fastjson reads an ordinal as the constant at that index.
#: ``ConsumeType``: pull consumer, push consumer.
CONSUME_TYPES: tuple[str, ...] = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
#: ``MessageModel``.
MESSAGE_MODELS: tuple[str, ...] = ("BROADCASTING", "CLUSTERING")
#: ``ConsumeFromWhere``, deprecated constants included so ordinals line up.
CONSUME_FROM_WHERE: tuple[str, ...] = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)
#: ``CMResult``, the outcome of CONSUME_MESSAGE_DIRECTLY.
CONSUME_RESULTS: tuple[str, ...] = (
    "CR_SUCCESS",
    "CR_LATER",
    "CR_ROLLBACK",
    "CR_COMMIT",
    "CR_THROW_EXCEPTION",
    "CR_RETURN_NULL",
)

_INT32 = 32
_INT64 = 64
_DECIMAL = re.compile(r"[+-]?[0-9]{1,20}")  # what Java's Long.parseLong accepts, bounded


# --------------------------------------------------------------------------------------------
# Tolerant field readers. ``where`` names the member for error messages.


def _bad(where: str, expected: str, value: Any) -> RemoteProtocolError:
    return RemoteProtocolError(f"{where}: expected {expected}, got {type(value).__name__}")


def _as_object(value: Any, where: str) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise _bad(where, "a JSON object", value)
    return value


def _as_str(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _bad(where, "a string", value)
    return value


def _as_int(value: Any, where: str, bits: int = _INT64) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and _DECIMAL.fullmatch(value):
        number = int(value)
    else:
        raise _bad(where, "an integer", value)
    limit = 1 << (bits - 1)
    if not -limit <= number < limit:
        raise RemoteProtocolError(f"{where}: {number} does not fit a {bits}-bit integer")
    return number


def _as_bool(value: Any, where: str) -> bool:
    # fastjson's castToBoolean also takes 0/1 and the strings "true"/"false"/"1"/"0".
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise _bad(where, "a boolean", value)


def _as_float(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise _bad(where, "a number", value)
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise _bad(where, "a number", value) from None
    else:
        raise _bad(where, "a number", value)
    if not math.isfinite(number):
        raise RemoteProtocolError(f"{where}: {value!r} is not a finite number")
    return number


def _as_list(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(where, "a JSON array", value)
    return value


def _as_map(value: Any, where: str) -> dict[Any, Any]:
    if value is None:
        return {}
    return _as_object(value, where)


def _as_enum(value: Any, names: tuple[str, ...], where: str) -> str:
    # C++ sends ordinals; everyone else the constant's name.
    if isinstance(value, str) and not _DECIMAL.fullmatch(value):
        return value
    index = _as_int(value, where, _INT32)
    if not 0 <= index < len(names):
        raise RemoteProtocolError(f"{where}: no constant with ordinal {index}")
    return names[index]


def _req_str(obj: dict[Any, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if value is None:
        raise RemoteProtocolError(f"{where}.{key} is missing")
    return _as_str(value, f"{where}.{key}")


def _opt_str(obj: dict[Any, Any], key: str, where: str) -> str | None:
    value = obj.get(key)
    return None if value is None else _as_str(value, f"{where}.{key}")


def _int_field(obj: dict[Any, Any], key: str, where: str, bits: int = _INT64) -> int:
    value = obj.get(key)
    return 0 if value is None else _as_int(value, f"{where}.{key}", bits)


def _bool_field(obj: dict[Any, Any], key: str, where: str, default: bool = False) -> bool:
    value = obj.get(key)
    return default if value is None else _as_bool(value, f"{where}.{key}")


def _float_field(obj: dict[Any, Any], key: str, where: str) -> float:
    value = obj.get(key)
    return 0.0 if value is None else _as_float(value, f"{where}.{key}")


def _enum_field(
    obj: dict[Any, Any], key: str, names: tuple[str, ...], where: str, default: str
) -> str:
    value = obj.get(key)
    if value is None or value == "":
        # fastjson reads null or "" as a null enum.
        return default
    return _as_enum(value, names, f"{where}.{key}")


def _str_tuple(value: Any, where: str) -> tuple[str, ...]:
    return tuple(_as_str(v, f"{where}[{i}]") for i, v in enumerate(_as_list(value, where)))


def _load_object(data: bytes | str, what: str) -> dict[Any, Any]:
    return _as_object(fastjson.loads(data), what)


def _java_order(text: str) -> bytes:
    # Java's String.compareTo orders by UTF-16 code unit; big-endian UTF-16 bytes sort alike.
    return text.encode("utf-16-be", "surrogatepass")


def message_queue_to_dict(mq: MessageQueue) -> dict[str, Any]:
    """Return ``mq`` as fastjson writes a ``MessageQueue`` bean."""
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def message_queue_from_dict(value: Any, where: str = "MessageQueue") -> MessageQueue:
    """Read a ``MessageQueue`` from a decoded JSON object or an object key.

    Raises:
        RemoteProtocolError: ``value`` is not an object with ``topic`` and ``brokerName``
            strings and an int32 ``queueId``.
    """
    if isinstance(value, fastjson.ObjectKey):
        value = value.to_dict()
    obj = _as_object(value, where)
    return MessageQueue(
        topic=_req_str(obj, "topic", where),
        broker_name=_req_str(obj, "brokerName", where),
        queue_id=_int_field(obj, "queueId", where, _INT32),
    )


def _mq_set(value: Any, where: str) -> tuple[MessageQueue, ...]:
    # Java holds these in a HashSet: drop duplicates, keep the first-seen order.
    queues = (message_queue_from_dict(v, f"{where}[{i}]") for i, v in enumerate(value))
    return tuple(dict.fromkeys(queues))


# --------------------------------------------------------------------------------------------
# HEART_BEAT (§5.2)


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """One topic subscription of a consumer group (Java ``SubscriptionData``).

    ``code_set`` is what the peer sent; C++ and Go fill it wrongly (§11.1 item 1), so a broker
    recomputes tag codes from ``sub_string`` rather than trusting it.
    """

    topic: str
    sub_string: str
    tags_set: tuple[str, ...]
    code_set: tuple[int, ...]
    sub_version: int
    expression_type: str = "TAG"
    class_filter_mode: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it."""
        return {
            "classFilterMode": self.class_filter_mode,
            "codeSet": list(self.code_set),
            "expressionType": self.expression_type,
            "subString": self.sub_string,
            "subVersion": self.sub_version,
            "tagsSet": list(self.tags_set),
            "topic": self.topic,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "SubscriptionData") -> Self:
        """Read the bean from decoded JSON.

        Missing ``subString`` becomes ``*``, missing ``expressionType`` ``TAG``; ``codeSet``
        members and ``subVersion`` may be numeric strings.

        Raises:
            RemoteProtocolError: ``topic`` is missing or a member has the wrong type.
        """
        obj = _as_object(value, where)
        codes = _as_list(obj.get("codeSet"), f"{where}.codeSet")
        return cls(
            topic=_req_str(obj, "topic", where),
            sub_string=_opt_str(obj, "subString", where) or "*",
            tags_set=_str_tuple(obj.get("tagsSet"), f"{where}.tagsSet"),
            code_set=tuple(
                _as_int(c, f"{where}.codeSet[{i}]", _INT32) for i, c in enumerate(codes)
            ),
            sub_version=_int_field(obj, "subVersion", where),
            expression_type=_opt_str(obj, "expressionType", where) or "TAG",
            class_filter_mode=_bool_field(obj, "classFilterMode", where),
        )

    def to_json(self) -> bytes:
        """Encode the body."""
        return fastjson.dumps(self.to_dict())

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body.

        Raises:
            RemoteProtocolError: the body is not JSON or not a valid ``SubscriptionData``.
        """
        return cls.from_dict(fastjson.loads(data))


@dataclass(frozen=True, slots=True)
class ConsumerData:
    """One consumer group of a heartbeat (Java ``ConsumerData``).

    The enum members hold the Java constant names (see :data:`CONSUME_TYPES`,
    :data:`MESSAGE_MODELS`, :data:`CONSUME_FROM_WHERE`).
    """

    group_name: str
    consume_type: str
    message_model: str
    consume_from_where: str
    subscriptions: tuple[SubscriptionData, ...]
    unit_mode: bool = False

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it."""
        return {
            "consumeFromWhere": self.consume_from_where,
            "consumeType": self.consume_type,
            "groupName": self.group_name,
            "messageModel": self.message_model,
            "subscriptionDataSet": [s.to_dict() for s in self.subscriptions],
            "unitMode": self.unit_mode,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "ConsumerData") -> Self:
        """Read the bean from decoded JSON, normalising enum ordinals to names.

        Absent enums default to a push consumer in clustering mode from the last offset.

        Raises:
            RemoteProtocolError: ``groupName`` is missing, an ordinal is out of range, or a
                member has the wrong type.
        """
        obj = _as_object(value, where)
        subs = _as_list(obj.get("subscriptionDataSet"), f"{where}.subscriptionDataSet")
        return cls(
            group_name=_req_str(obj, "groupName", where),
            consume_type=_enum_field(obj, "consumeType", CONSUME_TYPES, where, "CONSUME_PASSIVELY"),
            message_model=_enum_field(obj, "messageModel", MESSAGE_MODELS, where, "CLUSTERING"),
            consume_from_where=_enum_field(
                obj, "consumeFromWhere", CONSUME_FROM_WHERE, where, "CONSUME_FROM_LAST_OFFSET"
            ),
            subscriptions=tuple(
                SubscriptionData.from_dict(s, f"{where}.subscriptionDataSet[{i}]")
                for i, s in enumerate(subs)
            ),
            unit_mode=_bool_field(obj, "unitMode", where),
        )


@dataclass(frozen=True, slots=True)
class ProducerData:
    """One producer group of a heartbeat (Java ``ProducerData``)."""

    group_name: str

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it."""
        return {"groupName": self.group_name}

    @classmethod
    def from_dict(cls, value: Any, where: str = "ProducerData") -> Self:
        """Read the bean from decoded JSON.

        Raises:
            RemoteProtocolError: ``groupName`` is missing or not a string.
        """
        return cls(_req_str(_as_object(value, where), "groupName", where))


@dataclass(frozen=True, slots=True)
class HeartbeatData:
    """The HEART_BEAT (34) request body (§5.2)."""

    client_id: str
    producers: tuple[ProducerData, ...] = ()
    consumers: tuple[ConsumerData, ...] = ()

    def to_json(self) -> bytes:
        """Encode the body as the Java client does (test vector V1 of §9)."""
        return fastjson.dumps(
            {
                "clientID": self.client_id,
                "consumerDataSet": [c.to_dict() for c in self.consumers],
                "producerDataSet": [p.to_dict() for p in self.producers],
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode a heartbeat from any client; absent data sets are empty (C++ omits them).

        Raises:
            RemoteProtocolError: the body is not JSON, ``clientID`` is missing, or a member
                is malformed.
        """
        w = "HeartbeatData"
        obj = _load_object(data, w)
        producers = _as_list(obj.get("producerDataSet"), f"{w}.producerDataSet")
        consumers = _as_list(obj.get("consumerDataSet"), f"{w}.consumerDataSet")
        return cls(
            client_id=_req_str(obj, "clientID", w),
            producers=tuple(
                ProducerData.from_dict(p, f"{w}.producerDataSet[{i}]")
                for i, p in enumerate(producers)
            ),
            consumers=tuple(
                ConsumerData.from_dict(c, f"{w}.consumerDataSet[{i}]")
                for i, c in enumerate(consumers)
            ),
        )


@dataclass(frozen=True, slots=True)
class CheckClientRequestBody:
    """The CHECK_CLIENT_CONFIG (46) request body (Java ``CheckClientRequestBody``): a consumer
    asks each broker whether it can serve a non-TAG subscription before it starts."""

    client_id: str
    group: str
    subscription: SubscriptionData | None

    def to_json(self) -> bytes:
        """Encode the body."""
        return fastjson.dumps(
            {
                "clientId": self.client_id,
                "group": self.group,
                "subscriptionData": None
                if self.subscription is None
                else self.subscription.to_dict(),
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body; ``subscriptionData`` may be absent.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        w = "CheckClientRequestBody"
        obj = _load_object(data, w)
        sub = obj.get("subscriptionData")
        return cls(
            client_id=_opt_str(obj, "clientId", w) or "",
            group=_opt_str(obj, "group", w) or "",
            subscription=None
            if sub is None
            else SubscriptionData.from_dict(sub, f"{w}.subscriptionData"),
        )


# --------------------------------------------------------------------------------------------
# Routes and cluster info (§5.3, §5.4, §7)


@dataclass(frozen=True, slots=True)
class QueueData:
    """The queues of one topic on one broker name (Java ``QueueData``)."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it."""
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "QueueData") -> Self:
        """Read the bean from decoded JSON; absent numbers are 0.

        Raises:
            RemoteProtocolError: ``brokerName`` is missing or a member has the wrong type.
        """
        obj = _as_object(value, where)
        return cls(
            broker_name=_req_str(obj, "brokerName", where),
            read_queue_nums=_int_field(obj, "readQueueNums", where, _INT32),
            write_queue_nums=_int_field(obj, "writeQueueNums", where, _INT32),
            perm=_int_field(obj, "perm", where, _INT32),
            topic_sys_flag=_int_field(obj, "topicSysFlag", where, _INT32),
        )


@dataclass(frozen=True, slots=True)
class BrokerData:
    """The addresses of one broker name (Java ``BrokerData``): id 0 is the master."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str]

    def to_dict(self) -> dict[str, Any]:
        """Return the bean with ids written as quoted, sorted keys (standard JSON, §7.5)."""
        return {
            "brokerAddrs": {k: self.broker_addrs[k] for k in sorted(self.broker_addrs)},
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "BrokerData") -> Self:
        """Read the bean from decoded JSON; ids may be bare (``{0:…}``) or quoted.

        Raises:
            RemoteProtocolError: ``brokerName`` is missing, an id is not an integer, or an
                address is not a string.
        """
        obj = _as_object(value, where)
        addrs: dict[int, str] = {}
        for key, addr in _as_map(obj.get("brokerAddrs"), f"{where}.brokerAddrs").items():
            broker_id = _as_int(key, f"{where}.brokerAddrs key")
            addrs[broker_id] = _as_str(addr, f"{where}.brokerAddrs[{broker_id}]")
        return cls(
            cluster=_opt_str(obj, "cluster", where) or "",
            broker_name=_req_str(obj, "brokerName", where),
            broker_addrs=addrs,
        )

    @property
    def master_addr(self) -> str | None:
        """The master's address (id 0), or ``None`` if the broker has no master."""
        return self.broker_addrs.get(0)


def _parse_order_topic_conf(conf: str) -> list[tuple[str, int]]:
    # "brokerName:queueNum;brokerName:queueNum" (namesrv KV namespace ORDER_TOPIC_CONFIG).
    entries = []
    parts = conf.split(";")
    while parts and not parts[-1]:  # Java's String.split drops trailing empty strings
        parts.pop()
    for part in parts:
        name, sep, count = part.partition(":")
        if not sep or not _DECIMAL.fullmatch(count):
            raise RemoteProtocolError(f"malformed orderTopicConf entry {part!r}")
        entries.append((name, _as_int(count, "orderTopicConf", _INT32)))
    return entries


@dataclass(frozen=True, slots=True)
class TopicRouteData:
    """The GET_ROUTEINFO_BY_TOPIC (105) response body (§5.3)."""

    queue_datas: tuple[QueueData, ...]
    broker_datas: tuple[BrokerData, ...]
    order_topic_conf: str | None = None

    def to_json(self) -> bytes:
        """Encode as compact standard JSON with quoted broker ids, as every client accepts."""
        body: dict[str, Any] = {
            "brokerDatas": [b.to_dict() for b in self.broker_datas],
            "filterServerTable": {},
        }
        if self.order_topic_conf is not None:
            body["orderTopicConf"] = self.order_topic_conf
        body["queueDatas"] = [q.to_dict() for q in self.queue_datas]
        return fastjson.dumps(body)

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode a route in either fastjson form (bare or quoted broker ids).

        ``filterServerTable`` and 5.x members are ignored.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed, including a
                malformed ``orderTopicConf``.
        """
        w = "TopicRouteData"
        obj = _load_object(data, w)
        queues = _as_list(obj.get("queueDatas"), f"{w}.queueDatas")
        brokers = _as_list(obj.get("brokerDatas"), f"{w}.brokerDatas")
        conf = _opt_str(obj, "orderTopicConf", w) or None
        if conf is not None:
            _parse_order_topic_conf(conf)
        return cls(
            queue_datas=tuple(
                QueueData.from_dict(q, f"{w}.queueDatas[{i}]") for i, q in enumerate(queues)
            ),
            broker_datas=tuple(
                BrokerData.from_dict(b, f"{w}.brokerDatas[{i}]") for i, b in enumerate(brokers)
            ),
            order_topic_conf=conf,
        )

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a producer may send ``topic`` to, as the Java client lists them.

        With an ``orderTopicConf``, its ``broker:count`` entries in order. Otherwise, for each
        writable QueueData sorted by broker name whose broker has a master (id 0), queue ids
        ``0 … writeQueueNums-1`` (``MQClientInstance.topicRouteData2TopicPublishInfo``).

        Raises:
            RemoteProtocolError: ``order_topic_conf`` is malformed.
        """
        if self.order_topic_conf:
            return [
                MessageQueue(topic, name, i)
                for name, count in _parse_order_topic_conf(self.order_topic_conf)
                for i in range(count)
            ]
        with_master = {b.broker_name for b in self.broker_datas if 0 in b.broker_addrs}
        return [
            MessageQueue(topic, q.broker_name, i)
            for q in sorted(self.queue_datas, key=lambda q: _java_order(q.broker_name))
            if q.perm & Perm.WRITE and q.broker_name in with_master
            for i in range(q.write_queue_nums)
        ]

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a consumer may pull ``topic`` from: readable QueueData, ids
        ``0 … readQueueNums-1``, sorted by broker name (Java keeps them in a set).
        """
        return [
            MessageQueue(topic, q.broker_name, i)
            for q in sorted(self.queue_datas, key=lambda q: _java_order(q.broker_name))
            if q.perm & Perm.READ
            for i in range(q.read_queue_nums)
        ]


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """The GET_BROKER_CLUSTER_INFO (106) response body (§5.4)."""

    broker_addr_table: dict[str, BrokerData]
    cluster_addr_table: dict[str, tuple[str, ...]]

    def to_json(self) -> bytes:
        """Encode with sorted map entries and quoted broker ids."""
        return fastjson.dumps(
            {
                "brokerAddrTable": {
                    k: self.broker_addr_table[k].to_dict() for k in sorted(self.broker_addr_table)
                },
                "clusterAddrTable": {
                    k: list(self.cluster_addr_table[k]) for k in sorted(self.cluster_addr_table)
                },
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body; 4.9.8 always writes bare broker ids here.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        w = "ClusterInfo"
        obj = _load_object(data, w)
        brokers = _as_map(obj.get("brokerAddrTable"), f"{w}.brokerAddrTable")
        clusters = _as_map(obj.get("clusterAddrTable"), f"{w}.clusterAddrTable")
        return cls(
            broker_addr_table={
                _as_str(k, f"{w}.brokerAddrTable key"): BrokerData.from_dict(
                    v, f"{w}.brokerAddrTable[{k}]"
                )
                for k, v in brokers.items()
            },
            cluster_addr_table={
                _as_str(k, f"{w}.clusterAddrTable key"): _str_tuple(v, f"{w}.clusterAddrTable[{k}]")
                for k, v in clusters.items()
            },
        )


# --------------------------------------------------------------------------------------------
# Consumer-group bodies (§5.5 to §5.7)


@dataclass(frozen=True, slots=True)
class ConsumerListBody:
    """The GET_CONSUMER_LIST_BY_GROUP (38) response body (§5.5), in the broker's order."""

    consumer_id_list: tuple[str, ...]

    def to_json(self) -> bytes:
        """Encode the body."""
        return fastjson.dumps({"consumerIdList": list(self.consumer_id_list)})

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body; a missing list is empty.

        Raises:
            RemoteProtocolError: the body is not JSON or the list holds a non-string.
        """
        obj = _load_object(data, "ConsumerListBody")
        return cls(_str_tuple(obj.get("consumerIdList"), "ConsumerListBody.consumerIdList"))


@dataclass(frozen=True, slots=True)
class _BatchQueuesBody:
    """The shape shared by the lock and unlock request bodies (§5.6)."""

    consumer_group: str
    client_id: str
    mq_set: tuple[MessageQueue, ...]

    def to_json(self) -> bytes:
        """Encode the body."""
        return fastjson.dumps(
            {
                "clientId": self.client_id,
                "consumerGroup": self.consumer_group,
                "mqSet": [message_queue_to_dict(mq) for mq in self.mq_set],
            }
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body; duplicate queues are dropped (Java holds a set).

        Raises:
            RemoteProtocolError: the body is not JSON, ``consumerGroup`` or ``clientId`` is
                missing, or a queue is malformed.
        """
        w = cls.__name__
        obj = _load_object(data, w)
        return cls(
            consumer_group=_req_str(obj, "consumerGroup", w),
            client_id=_req_str(obj, "clientId", w),
            mq_set=_mq_set(_as_list(obj.get("mqSet"), f"{w}.mqSet"), f"{w}.mqSet"),
        )


@dataclass(frozen=True, slots=True)
class LockBatchRequestBody(_BatchQueuesBody):
    """The LOCK_BATCH_MQ (41) request body (§5.6). Note the wire's ``clientId``."""


@dataclass(frozen=True, slots=True)
class UnlockBatchRequestBody(_BatchQueuesBody):
    """The UNLOCK_BATCH_MQ (42) request body: the same shape as the lock request."""


@dataclass(frozen=True, slots=True)
class LockBatchResponseBody:
    """The LOCK_BATCH_MQ response body: the queues now locked by the requester."""

    lock_ok_mq_set: tuple[MessageQueue, ...]

    def to_json(self) -> bytes:
        """Encode the body (wire member ``lockOKMQSet``)."""
        return fastjson.dumps(
            {"lockOKMQSet": [message_queue_to_dict(mq) for mq in self.lock_ok_mq_set]}
        )

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body; a missing set is empty.

        Raises:
            RemoteProtocolError: the body is not JSON or a queue is malformed.
        """
        w = "LockBatchResponseBody"
        obj = _load_object(data, w)
        mqs = _as_list(obj.get("lockOKMQSet"), f"{w}.lockOKMQSet")
        return cls(_mq_set(mqs, f"{w}.lockOKMQSet"))


@dataclass(frozen=True, slots=True)
class ResetOffsetBody:
    """The RESET_CONSUMER_CLIENT_OFFSET (220) request body (§5.7): queue → new offset."""

    offset_table: dict[MessageQueue, int]

    def to_json(self) -> bytes:
        """Encode with ``MessageQueue`` object keys, as a Java broker sends ``ResetOffsetBody``."""
        return fastjson.dumps({"offsetTable": {mq: self.offset_table[mq] for mq in self._order()}})

    def to_json_for_cpp(self) -> bytes:
        """Encode in the list form of ``ResetOffsetBodyForC`` (what C++ can read, §5.7)."""
        rows = [
            {
                "brokerName": mq.broker_name,
                "offset": self.offset_table[mq],
                "queueId": mq.queue_id,
                "topic": mq.topic,
            }
            for mq in self._order()
        ]
        return fastjson.dumps({"offsetTable": rows})

    def _order(self) -> list[MessageQueue]:
        return sorted(self.offset_table)

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode any of the forms: object keys (Java), a list of rows carrying ``offset``
        (C++ form), or a list of ``[queue, offset]`` pairs (gson form, read by Go).

        Raises:
            RemoteProtocolError: the body is not JSON or an entry is malformed.
        """
        w = "ResetOffsetBody"
        obj = _load_object(data, w)
        table = obj.get("offsetTable")
        entries: Iterable[tuple[Any, Any]]
        if isinstance(table, list):
            entries = (_reset_row(row, f"{w}.offsetTable[{i}]") for i, row in enumerate(table))
        else:
            entries = _as_map(table, f"{w}.offsetTable").items()
        offsets: dict[MessageQueue, int] = {}
        for key, offset in entries:
            mq = message_queue_from_dict(key, f"{w}.offsetTable key")
            offsets[mq] = _as_int(offset, f"{w}.offsetTable[{mq}]")
        return cls(offsets)


def _reset_row(row: Any, where: str) -> tuple[Any, Any]:
    if isinstance(row, list):
        if len(row) != 2:
            raise RemoteProtocolError(f"{where}: expected a [queue, offset] pair")
        return row[0], row[1]
    obj = _as_object(row, where)
    return obj, obj.get("offset", 0)


# --------------------------------------------------------------------------------------------
# Bodies a client answers to broker or admin requests (§5.8)


@dataclass(frozen=True, slots=True)
class ProcessQueueInfo:
    """The state of one queue's local cache (Java ``ProcessQueueInfo``)."""

    commit_offset: int = 0
    cached_msg_min_offset: int = 0
    cached_msg_max_offset: int = 0
    cached_msg_count: int = 0
    cached_msg_size_in_mib: int = 0
    transaction_msg_min_offset: int = 0
    transaction_msg_max_offset: int = 0
    transaction_msg_count: int = 0
    locked: bool = False
    try_unlock_times: int = 0
    last_lock_timestamp: int = 0
    dropped: bool = False
    last_pull_timestamp: int = 0
    last_consume_timestamp: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it (note the Java spelling ``droped``)."""
        return {
            "cachedMsgCount": self.cached_msg_count,
            "cachedMsgMaxOffset": self.cached_msg_max_offset,
            "cachedMsgMinOffset": self.cached_msg_min_offset,
            "cachedMsgSizeInMiB": self.cached_msg_size_in_mib,
            "commitOffset": self.commit_offset,
            "droped": self.dropped,
            "lastConsumeTimestamp": self.last_consume_timestamp,
            "lastLockTimestamp": self.last_lock_timestamp,
            "lastPullTimestamp": self.last_pull_timestamp,
            "locked": self.locked,
            "transactionMsgCount": self.transaction_msg_count,
            "transactionMsgMaxOffset": self.transaction_msg_max_offset,
            "transactionMsgMinOffset": self.transaction_msg_min_offset,
            "tryUnlockTimes": self.try_unlock_times,
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "ProcessQueueInfo") -> Self:
        """Read the bean from decoded JSON; absent members are 0/false.

        Raises:
            RemoteProtocolError: a member has the wrong type.
        """
        obj = _as_object(value, where)

        def num(key: str, bits: int = _INT64) -> int:
            return _int_field(obj, key, where, bits)

        return cls(
            commit_offset=num("commitOffset"),
            cached_msg_min_offset=num("cachedMsgMinOffset"),
            cached_msg_max_offset=num("cachedMsgMaxOffset"),
            cached_msg_count=num("cachedMsgCount", _INT32),
            cached_msg_size_in_mib=num("cachedMsgSizeInMiB", _INT32),
            transaction_msg_min_offset=num("transactionMsgMinOffset"),
            transaction_msg_max_offset=num("transactionMsgMaxOffset"),
            transaction_msg_count=num("transactionMsgCount", _INT32),
            locked=_bool_field(obj, "locked", where),
            try_unlock_times=num("tryUnlockTimes"),
            last_lock_timestamp=num("lastLockTimestamp"),
            dropped=_bool_field(obj, "droped", where),
            last_pull_timestamp=num("lastPullTimestamp"),
            last_consume_timestamp=num("lastConsumeTimestamp"),
        )


@dataclass(frozen=True, slots=True)
class TopicConsumeStatus:
    """Consumption statistics of one topic (Java ``ConsumeStatus``)."""

    pull_rt: float = 0.0
    pull_tps: float = 0.0
    consume_rt: float = 0.0
    consume_ok_tps: float = 0.0
    consume_failed_tps: float = 0.0
    consume_failed_msgs: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it.

        A NaN or infinite rate is written as 0.0: fastjson writes it as ``null``, which a
        Java reader turns into 0.
        """

        def finite(x: float) -> float:
            return x if math.isfinite(x) else 0.0

        return {
            "consumeFailedMsgs": self.consume_failed_msgs,
            "consumeFailedTPS": finite(self.consume_failed_tps),
            "consumeOKTPS": finite(self.consume_ok_tps),
            "consumeRT": finite(self.consume_rt),
            "pullRT": finite(self.pull_rt),
            "pullTPS": finite(self.pull_tps),
        }

    @classmethod
    def from_dict(cls, value: Any, where: str = "ConsumeStatus") -> Self:
        """Read the bean from decoded JSON; absent members are 0.

        Raises:
            RemoteProtocolError: a member is not a finite number.
        """
        obj = _as_object(value, where)
        return cls(
            pull_rt=_float_field(obj, "pullRT", where),
            pull_tps=_float_field(obj, "pullTPS", where),
            consume_rt=_float_field(obj, "consumeRT", where),
            consume_ok_tps=_float_field(obj, "consumeOKTPS", where),
            consume_failed_tps=_float_field(obj, "consumeFailedTPS", where),
            consume_failed_msgs=_int_field(obj, "consumeFailedMsgs", where),
        )


def _property_value(value: Any, where: str) -> str:
    # java.util.Properties holds strings; render stray scalars the way Java's toString would.
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise _bad(where, "a string", value)


@dataclass(frozen=True, slots=True)
class ConsumerRunningInfo:
    """The GET_CONSUMER_RUNNING_INFO (307) response body (§5.8).

    ``mq_table`` is written with ``MessageQueue`` object keys, as the Java admin expects.
    """

    properties: dict[str, str]
    subscriptions: tuple[SubscriptionData, ...]
    mq_table: dict[MessageQueue, ProcessQueueInfo] = field(default_factory=dict)
    status_table: dict[str, TopicConsumeStatus] = field(default_factory=dict)
    jstack: str | None = None

    def to_json(self) -> bytes:
        """Encode the body; maps are written sorted, as Java's TreeMaps iterate."""
        body: dict[str, Any] = {}
        if self.jstack is not None:
            body["jstack"] = self.jstack
        body["mqTable"] = {mq: self.mq_table[mq].to_dict() for mq in sorted(self.mq_table)}
        body["properties"] = {k: self.properties[k] for k in sorted(self.properties)}
        body["statusTable"] = {k: self.status_table[k].to_dict() for k in sorted(self.status_table)}
        body["subscriptionSet"] = [s.to_dict() for s in self.subscriptions]
        return fastjson.dumps(body)

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body; ``mqTable`` keys are ``MessageQueue`` object keys.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        w = "ConsumerRunningInfo"
        obj = _load_object(data, w)
        props = _as_map(obj.get("properties"), f"{w}.properties")
        subs = _as_list(obj.get("subscriptionSet"), f"{w}.subscriptionSet")
        mqs = _as_map(obj.get("mqTable"), f"{w}.mqTable")
        statuses = _as_map(obj.get("statusTable"), f"{w}.statusTable")
        mq_table: dict[MessageQueue, ProcessQueueInfo] = {}
        for key, info in mqs.items():
            mq = message_queue_from_dict(key, f"{w}.mqTable key")
            mq_table[mq] = ProcessQueueInfo.from_dict(info, f"{w}.mqTable[{mq}]")
        return cls(
            properties={
                _as_str(k, f"{w}.properties key"): _property_value(v, f"{w}.properties[{k}]")
                for k, v in props.items()
            },
            subscriptions=tuple(
                SubscriptionData.from_dict(s, f"{w}.subscriptionSet[{i}]")
                for i, s in enumerate(subs)
            ),
            mq_table=mq_table,
            status_table={
                _as_str(k, f"{w}.statusTable key"): TopicConsumeStatus.from_dict(
                    v, f"{w}.statusTable[{k}]"
                )
                for k, v in statuses.items()
            },
            jstack=_opt_str(obj, "jstack", w),
        )


@dataclass(frozen=True, slots=True)
class ConsumeMessageDirectlyResult:
    """The CONSUME_MESSAGE_DIRECTLY (309) response body (§5.8).

    ``consume_result`` holds a :data:`CONSUME_RESULTS` name, or ``None`` if unset.
    """

    order: bool
    auto_commit: bool
    consume_result: str | None
    remark: str | None
    spent_time_mills: int

    def to_json(self) -> bytes:
        """Encode the body; unset members are omitted, as fastjson omits nulls."""
        body: dict[str, Any] = {"autoCommit": self.auto_commit}
        if self.consume_result is not None:
            body["consumeResult"] = self.consume_result
        body["order"] = self.order
        if self.remark is not None:
            body["remark"] = self.remark
        body["spentTimeMills"] = self.spent_time_mills
        return fastjson.dumps(body)

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body; ``autoCommit`` defaults to true as in Java.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        w = "ConsumeMessageDirectlyResult"
        obj = _load_object(data, w)
        result = obj.get("consumeResult")
        return cls(
            order=_bool_field(obj, "order", w),
            auto_commit=_bool_field(obj, "autoCommit", w, default=True),
            consume_result=None
            if result is None
            else _as_enum(result, CONSUME_RESULTS, f"{w}.consumeResult"),
            remark=_opt_str(obj, "remark", w),
            spent_time_mills=_int_field(obj, "spentTimeMills", w),
        )


@dataclass(frozen=True, slots=True)
class TopicList:
    """A list of topic names (Java ``TopicList``), e.g. GET_ALL_TOPIC_LIST_FROM_NAMESERVER."""

    topic_list: tuple[str, ...]
    broker_addr: str | None = None

    def to_json(self) -> bytes:
        """Encode the body; ``brokerAddr`` is omitted when unset."""
        body: dict[str, Any] = {}
        if self.broker_addr is not None:
            body["brokerAddr"] = self.broker_addr
        body["topicList"] = list(self.topic_list)
        return fastjson.dumps(body)

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body; a missing list is empty.

        Raises:
            RemoteProtocolError: the body is not JSON or a member is malformed.
        """
        obj = _load_object(data, "TopicList")
        return cls(
            topic_list=_str_tuple(obj.get("topicList"), "TopicList.topicList"),
            broker_addr=_opt_str(obj, "brokerAddr", "TopicList"),
        )
