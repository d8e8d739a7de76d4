"""The JSON bodies of the remoting protocol (docs/protocol.md §5), as frozen value types.

Every body has ``to_json()``, which writes compact JSON with members in alphabetical order
as fastjson writes beans, and ``from_json()``, which reads what any of the four client
families send; nested beans convert through ``to_dict()``/``from_dict()``. The declarations
and the lenient readings (numeric strings, ordinals, ``null`` as absent, ...) are those of
`aiorocket._protocol.schema`. Everything malformed raises
[`RemoteProtocolError`][aiorocket.errors.RemoteProtocolError].
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, PlainValidator

from aiorocket._protocol import fastjson
from aiorocket._protocol.codes import Perm
from aiorocket._protocol.schema import (
    BLANK_IS_ABSENT,
    DECIMAL,
    MQ,
    OMIT_IF_NONE,
    Body,
    Bool,
    Float,
    Int32,
    Int64,
    MQSet,
    as_int,
    as_object,
    java_enum,
    java_order,
    member,
    message_queue_from_dict,
    message_queue_to_dict,
)
from aiorocket.errors import RemoteProtocolError
from aiorocket.models import MessageQueue

__all__ = [
    "CONSUME_FROM_WHERE",
    "CONSUME_RESULTS",
    "CONSUME_TYPES",
    "MESSAGE_MODELS",
    "ConsumeFromWhere",
    "ConsumeType",
    "MessageModel",
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
#: ``ConsumeType``: pull consumer, push consumer, and (5.x) POP consumer (docs/protocol.md §12.3).
CONSUME_TYPES: tuple[str, ...] = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY", "CONSUME_POP")
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

# --------------------------------------------------------------------------------------------
# HEART_BEAT (§5.2)


@dataclass(frozen=True, slots=True)
class SubscriptionData(Body):
    """One topic subscription of a consumer group (Java ``SubscriptionData``).

    ``code_set`` is what the peer sent; C++ and Go fill it wrongly (§11.1 item 1), so a broker
    recomputes tag codes from ``sub_string`` rather than trusting it. Read leniently: a missing
    ``subString`` is ``*``, a missing ``expressionType`` ``TAG``.
    """

    topic: str
    sub_string: Annotated[str, BLANK_IS_ABSENT, member(default="*")]
    tags_set: Annotated[tuple[str, ...], member(default=())]
    code_set: Annotated[tuple[Int32, ...], member(default=())]
    sub_version: Annotated[Int64, member(default=0)]
    expression_type: Annotated[str, BLANK_IS_ABSENT] = "TAG"
    class_filter_mode: Bool = False


# The enum members of a consumer (read from names or ordinals); absent ones mean a push
# consumer, clustering, from the last offset.
ConsumeType = Annotated[
    str, java_enum(CONSUME_TYPES), BLANK_IS_ABSENT, member(default="CONSUME_PASSIVELY")
]
MessageModel = Annotated[
    str, java_enum(MESSAGE_MODELS), BLANK_IS_ABSENT, member(default="CLUSTERING")
]
ConsumeFromWhere = Annotated[
    str,
    java_enum(CONSUME_FROM_WHERE),
    BLANK_IS_ABSENT,
    member(default="CONSUME_FROM_LAST_OFFSET"),
]


@dataclass(frozen=True, slots=True)
class ConsumerData(Body):
    """One consumer group of a heartbeat (Java ``ConsumerData``).

    The enum members hold the Java constant names (see `CONSUME_TYPES`,
    `MESSAGE_MODELS`, `CONSUME_FROM_WHERE`); ordinals are read as names.
    """

    group_name: str
    consume_type: ConsumeType
    message_model: MessageModel
    consume_from_where: ConsumeFromWhere
    subscriptions: Annotated[
        tuple[SubscriptionData, ...], member("subscriptionDataSet", default=())
    ]
    unit_mode: Bool = False


@dataclass(frozen=True, slots=True)
class ProducerData(Body):
    """One producer group of a heartbeat (Java ``ProducerData``)."""

    group_name: str


@dataclass(frozen=True, slots=True)
class HeartbeatData(Body):
    """The HEART_BEAT (34) request body (§5.2); absent data sets are empty (C++ omits them)."""

    client_id: Annotated[str, member("clientID")]
    producers: Annotated[tuple[ProducerData, ...], member("producerDataSet")] = ()
    consumers: Annotated[tuple[ConsumerData, ...], member("consumerDataSet")] = ()


@dataclass(frozen=True, slots=True)
class CheckClientRequestBody(Body):
    """The CHECK_CLIENT_CONFIG (46) request body (Java ``CheckClientRequestBody``): a consumer
    asks each broker whether it can serve a non-TAG subscription before it starts."""

    client_id: Annotated[str, member(default="")]
    group: Annotated[str, member(default="")]
    subscription: Annotated[SubscriptionData | None, member("subscriptionData", default=None)]


# --------------------------------------------------------------------------------------------
# Routes and cluster info (§5.3, §5.4, §7)


@dataclass(frozen=True, slots=True)
class QueueData(Body):
    """The queues of one topic on one broker name (Java ``QueueData``); absent numbers are 0."""

    broker_name: str
    read_queue_nums: Annotated[Int32, member(default=0)]
    write_queue_nums: Annotated[Int32, member(default=0)]
    perm: Annotated[Int32, member(default=0)]
    topic_sys_flag: Int32 = 0


@dataclass(frozen=True, slots=True)
class BrokerData(Body):
    """The addresses of one broker name (Java ``BrokerData``): id 0 is the master.

    Ids may arrive bare (``{0:…}``) or quoted; they are written quoted and sorted (§7.5).
    """

    cluster: Annotated[str, member(default="")]
    broker_name: str
    broker_addrs: Annotated[dict[Int64, str], member(default={})]

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
        if not sep or not DECIMAL.fullmatch(count):
            raise RemoteProtocolError(f"malformed orderTopicConf entry {part!r}")
        entries.append((name, as_int(count, "orderTopicConf", _INT32)))
    return entries


def _check_order_topic_conf(conf: str | None) -> str | None:
    if conf is not None:
        _parse_order_topic_conf(conf)
    return conf


@dataclass(frozen=True, slots=True)
class TopicRouteData(Body):
    """The GET_ROUTEINFO_BY_TOPIC (105) response body (§5.3).

    Read in either fastjson form (bare or quoted broker ids); written as compact standard JSON
    with quoted ids, as every client accepts. ``filterServerTable`` and 5.x members are
    ignored; a malformed ``orderTopicConf`` raises.
    """

    _constants: ClassVar[dict[str, Any]] = {"filterServerTable": {}}

    queue_datas: Annotated[tuple[QueueData, ...], member(default=())]
    broker_datas: Annotated[tuple[BrokerData, ...], member(default=())]
    order_topic_conf: Annotated[
        str | None, OMIT_IF_NONE, BLANK_IS_ABSENT, AfterValidator(_check_order_topic_conf)
    ] = None

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
            for q in sorted(self.queue_datas, key=lambda q: java_order(q.broker_name))
            if q.perm & Perm.WRITE and q.broker_name in with_master
            for i in range(q.write_queue_nums)
        ]

    def subscribe_queues(self, topic: str) -> list[MessageQueue]:
        """The queues a consumer may pull ``topic`` from: readable QueueData, ids
        ``0 … readQueueNums-1``, sorted by broker name (Java keeps them in a set).
        """
        return [
            MessageQueue(topic, q.broker_name, i)
            for q in sorted(self.queue_datas, key=lambda q: java_order(q.broker_name))
            if q.perm & Perm.READ
            for i in range(q.read_queue_nums)
        ]


@dataclass(frozen=True, slots=True)
class ClusterInfo(Body):
    """The GET_BROKER_CLUSTER_INFO (106) response body (§5.4); 4.9.8 writes bare broker ids."""

    broker_addr_table: Annotated[dict[str, BrokerData], member(default={})]
    cluster_addr_table: Annotated[dict[str, tuple[str, ...]], member(default={})]


# --------------------------------------------------------------------------------------------
# Consumer-group bodies (§5.5 to §5.7)


@dataclass(frozen=True, slots=True)
class ConsumerListBody(Body):
    """The GET_CONSUMER_LIST_BY_GROUP (38) response body (§5.5), in the broker's order."""

    consumer_id_list: Annotated[tuple[str, ...], member(default=())]


@dataclass(frozen=True, slots=True)
class _BatchQueuesBody(Body):
    """The shape shared by the lock and unlock request bodies (§5.6); duplicate queues are
    dropped (Java holds a set)."""

    consumer_group: str
    client_id: str
    mq_set: Annotated[MQSet, member(default=())]


@dataclass(frozen=True, slots=True)
class LockBatchRequestBody(_BatchQueuesBody):
    """The LOCK_BATCH_MQ (41) request body (§5.6). Note the wire's ``clientId``."""


@dataclass(frozen=True, slots=True)
class UnlockBatchRequestBody(_BatchQueuesBody):
    """The UNLOCK_BATCH_MQ (42) request body: the same shape as the lock request."""


@dataclass(frozen=True, slots=True)
class LockBatchResponseBody(Body):
    """The LOCK_BATCH_MQ response body: the queues now locked by the requester."""

    lock_ok_mq_set: Annotated[MQSet, member("lockOKMQSet", default=())]


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
        obj = as_object(fastjson.loads(data), w)
        table = obj.get("offsetTable")
        entries: Iterable[tuple[Any, Any]]
        if isinstance(table, list):
            entries = (_reset_row(row, f"{w}.offsetTable[{i}]") for i, row in enumerate(table))
        else:
            entries = ({} if table is None else as_object(table, f"{w}.offsetTable")).items()
        offsets: dict[MessageQueue, int] = {}
        for key, offset in entries:
            mq = message_queue_from_dict(key, f"{w}.offsetTable key")
            offsets[mq] = as_int(offset, f"{w}.offsetTable[{mq}]")
        return cls(offsets)


def _reset_row(row: Any, where: str) -> tuple[Any, Any]:
    if isinstance(row, list):
        if len(row) != 2:
            raise RemoteProtocolError(f"{where}: expected a [queue, offset] pair")
        return row[0], row[1]
    obj = as_object(row, where)
    return obj, obj.get("offset", 0)


# --------------------------------------------------------------------------------------------
# Bodies a client answers to broker or admin requests (§5.8)


@dataclass(frozen=True, slots=True)
class ProcessQueueInfo(Body):
    """The state of one queue's local cache (Java ``ProcessQueueInfo``); absent members are
    0/false. Note the Java spelling ``droped``."""

    commit_offset: Int64 = 0
    cached_msg_min_offset: Int64 = 0
    cached_msg_max_offset: Int64 = 0
    cached_msg_count: Int32 = 0
    cached_msg_size_in_mib: Annotated[Int32, member("cachedMsgSizeInMiB")] = 0
    transaction_msg_min_offset: Int64 = 0
    transaction_msg_max_offset: Int64 = 0
    transaction_msg_count: Int32 = 0
    locked: Bool = False
    try_unlock_times: Int64 = 0
    last_lock_timestamp: Int64 = 0
    dropped: Annotated[Bool, member("droped")] = False
    last_pull_timestamp: Int64 = 0
    last_consume_timestamp: Int64 = 0


@dataclass(frozen=True, slots=True)
class TopicConsumeStatus(Body):
    """Consumption statistics of one topic (Java ``ConsumeStatus``); absent members are 0.

    A NaN or infinite rate is written as 0.0: fastjson writes it as ``null``, which a Java
    reader turns into 0.
    """

    pull_rt: Annotated[Float, member("pullRT")] = 0.0
    pull_tps: Annotated[Float, member("pullTPS")] = 0.0
    consume_rt: Annotated[Float, member("consumeRT")] = 0.0
    consume_ok_tps: Annotated[Float, member("consumeOKTPS")] = 0.0
    consume_failed_tps: Annotated[Float, member("consumeFailedTPS")] = 0.0
    consume_failed_msgs: Int64 = 0


def _property_value(value: Any) -> str:
    # java.util.Properties holds strings; render stray scalars the way Java's toString would.
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    raise ValueError(f"expected a string, got {type(value).__name__}")


@dataclass(frozen=True, slots=True)
class ConsumerRunningInfo(Body):
    """The GET_CONSUMER_RUNNING_INFO (307) response body (§5.8).

    ``mq_table`` is written with ``MessageQueue`` object keys, as the Java admin expects; maps
    are written sorted, as Java's TreeMaps iterate.
    """

    properties: Annotated[
        dict[str, Annotated[str, PlainValidator(_property_value)]], member(default={})
    ]
    subscriptions: Annotated[tuple[SubscriptionData, ...], member("subscriptionSet", default=())]
    mq_table: dict[MQ, ProcessQueueInfo] = field(default_factory=dict)
    status_table: dict[str, TopicConsumeStatus] = field(default_factory=dict)
    jstack: Annotated[str | None, OMIT_IF_NONE] = None


@dataclass(frozen=True, slots=True)
class ConsumeMessageDirectlyResult(Body):
    """The CONSUME_MESSAGE_DIRECTLY (309) response body (§5.8).

    ``consume_result`` holds a `CONSUME_RESULTS` name, or ``None`` if unset; unset
    members are omitted, as fastjson omits nulls. ``autoCommit`` defaults to true as in Java.
    """

    order: Annotated[Bool, member(default=False)]
    auto_commit: Annotated[Bool, member(default=True)]
    consume_result: Annotated[
        str | None, java_enum(CONSUME_RESULTS), OMIT_IF_NONE, member(default=None)
    ]
    remark: Annotated[str | None, OMIT_IF_NONE, member(default=None)]
    spent_time_mills: Annotated[Int64, member(default=0)]


@dataclass(frozen=True, slots=True)
class TopicList(Body):
    """A list of topic names (Java ``TopicList``), e.g. GET_ALL_TOPIC_LIST_FROM_NAMESERVER;
    ``brokerAddr`` is omitted when unset."""

    topic_list: Annotated[tuple[str, ...], member(default=())]
    broker_addr: Annotated[str | None, OMIT_IF_NONE] = None
