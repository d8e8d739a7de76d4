"""The JSON bodies of the admin requests ``mqadmin`` and dashboards send (docs/protocol.md
§5.8): consume stats (lag), topic stats, connections, runtime info, subscription groups, topic
configs, consume-queue dumps and the name server's KV config.

Field names and the members each body writes follow the 4.9.8 beans (read with ``javap`` from
``rocketmq-4.9.8-all.jar``): ``ConsumeStats``/``OffsetWrapper``, ``TopicStatsTable``/
``TopicOffset``, ``KVTable``, ``ConsumerConnection``/``Connection``, ``SubscriptionGroupConfig``
and its wrapper, ``TopicConfigSerializeWrapper``, ``QueryConsumeQueueResponseBody``,
``GroupList``. Maps keyed by ``MessageQueue`` are written with fastjson object keys, which every
Java tool reads (and `loads` reads back). The
declarations and lenient readings are those of `aiorocket._protocol.schema`; the headers
of these requests are in `aiorocket._protocol.headers`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, PlainValidator

from aiorocket._protocol.bodies import (
    ConsumeFromWhere,
    ConsumeType,
    MessageModel,
    SubscriptionData,
)
from aiorocket._protocol.schema import (
    BLANK_IS_ABSENT,
    MQ,
    OMIT_IF_NONE,
    Body,
    Bool,
    Float,
    Int32,
    Int64,
    member,
)

__all__ = [
    "Connection",
    "ConsumeQueueEntry",
    "ConsumeStats",
    "ConsumerConnection",
    "DataVersion",
    "GroupList",
    "KVTable",
    "OffsetWrapper",
    "ProducerConnection",
    "QueryConsumeQueueResponseBody",
    "SubscriptionGroupConfig",
    "SubscriptionGroupWrapper",
    "TopicConfigBody",
    "TopicConfigSerializeWrapper",
    "TopicOffset",
    "TopicStatsTable",
]

# java.util.Map<String, …> keys and KVTable values, taken as their text whatever JSON type.
_Text = Annotated[str, PlainValidator(str)]


@dataclass(frozen=True, slots=True)
class OffsetWrapper(Body):
    """One queue of `ConsumeStats`: the broker's next offset, the group's committed
    offset, and the store time of the last consumed message (0 when unknown)."""

    broker_offset: Int64 = 0
    consumer_offset: Int64 = 0
    last_timestamp: Int64 = 0

    @property
    def diff(self) -> int:
        """``brokerOffset - consumerOffset``: what ``mqadmin consumerProgress`` calls #Diff."""
        return self.broker_offset - self.consumer_offset


@dataclass(frozen=True, slots=True)
class ConsumeStats(Body):
    """The GET_CONSUME_STATS (208) response body: a group's progress per queue."""

    offset_table: dict[MQ, OffsetWrapper] = field(default_factory=dict)
    consume_tps: Float = 0.0

    def total_diff(self) -> int:
        """``computeTotalDiff``: the summed lag of every queue."""
        return sum(w.diff for w in self.offset_table.values())


@dataclass(frozen=True, slots=True)
class TopicOffset(Body):
    """One queue of `TopicStatsTable`: min and max offsets and the store time of the
    newest message (0 for an empty queue)."""

    min_offset: Int64 = 0
    max_offset: Int64 = 0
    last_update_timestamp: Int64 = 0


@dataclass(frozen=True, slots=True)
class TopicStatsTable(Body):
    """The GET_TOPIC_STATS_INFO (202) response body."""

    offset_table: dict[MQ, TopicOffset] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class KVTable(Body):
    """A string map (Java ``KVTable``): GET_BROKER_RUNTIME_INFO, GET_KVLIST_BY_NAMESPACE.

    Non-string values are read as their text.
    """

    table: dict[_Text, _Text] = field(default_factory=dict)


def _language(value: Any) -> str:
    return value if isinstance(value, str) else str(value or "")


@dataclass(frozen=True, slots=True)
class Connection(Body):
    """One client connection of a group (Java ``Connection``)."""

    client_id: Annotated[str, member(default="")]
    client_addr: Annotated[str, member(default="")]
    language: Annotated[str, PlainValidator(_language), member(default="")]
    version: Annotated[Int32, member(default=0)]


def _connections(value: Any) -> Any:
    # A lone connection may arrive as an object instead of a one-element array.
    if not value:
        return []
    return value if isinstance(value, list) else [value]


def _by_client_id(body: dict[str, Any], connections: tuple[Connection, ...]) -> dict[str, Any]:
    body["connectionSet"] = [c.to_dict() for c in sorted(connections, key=lambda c: c.client_id)]
    return body


@dataclass(frozen=True, slots=True)
class ConsumerConnection(Body):
    """The GET_CONSUMER_CONNECTION_LIST (203) response body (connections and topics sorted)."""

    connection_set: Annotated[
        tuple[Connection, ...], BeforeValidator(_connections), member(default=())
    ]
    subscription_table: Annotated[dict[str, SubscriptionData], member(default={})]
    consume_type: ConsumeType = "CONSUME_PASSIVELY"
    message_model: MessageModel = "CLUSTERING"
    consume_from_where: ConsumeFromWhere = "CONSUME_FROM_LAST_OFFSET"

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it, connections sorted by client id."""
        return _by_client_id(Body.to_dict(self), self.connection_set)


@dataclass(frozen=True, slots=True)
class ProducerConnection(Body):
    """The GET_PRODUCER_CONNECTION_LIST (204) response body."""

    connection_set: Annotated[tuple[Connection, ...], member(default=())]

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it, connections sorted by client id."""
        return _by_client_id(Body.to_dict(self), self.connection_set)


@dataclass(frozen=True, slots=True)
class DataVersion(Body):
    """Java ``DataVersion``: a change counter and the time of the last change (ms)."""

    timestamp: Int64 = 0
    counter: Int64 = 0

    @classmethod
    def from_dict(cls, value: Any, where: str | None = None) -> DataVersion:
        """Read the bean; absent (``None``) is zero.

        Raises:
            RemoteProtocolError: a member is not an integer.
        """
        return cls() if value is None else cls._read(value, where)


@dataclass(frozen=True, slots=True)
class SubscriptionGroupConfig(Body):
    """A consumer group's broker-side settings (Java ``SubscriptionGroupConfig``), the
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200) request body. Defaults are Java's."""

    group_name: str
    consume_enable: Bool = True
    consume_from_min_enable: Bool = True
    consume_broadcast_enable: Bool = True
    retry_queue_nums: Int64 = 1
    retry_max_times: Int64 = 16
    broker_id: Int64 = 0
    which_broker_when_consume_slowly: Int64 = 1
    notify_consumer_ids_changed_enable: Bool = True
    #: 5.x group attributes (``lite.bind.topic``, ...); a request body names changes with a
    #: ``+`` (set) or ``-`` (remove) prefix (``_protocol/attributes.py``)
    attributes: Annotated[dict[_Text, _Text] | None, OMIT_IF_NONE] = None


@dataclass(frozen=True, slots=True)
class SubscriptionGroupWrapper(Body):
    """The GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) response body (groups sorted by name)."""

    subscription_group_table: Annotated[dict[_Text, SubscriptionGroupConfig], member(default={})]
    data_version: DataVersion = DataVersion()


@dataclass(frozen=True, slots=True)
class TopicConfigBody(Body):
    """A topic's configuration as Java ``TopicConfig`` serialises it."""

    topic_name: str
    read_queue_nums: Annotated[Int32, member(default=0)]
    write_queue_nums: Annotated[Int32, member(default=0)]
    perm: Annotated[Int32, member(default=0)]
    topic_filter_type: Annotated[str, BLANK_IS_ABSENT] = "SINGLE_TAG"
    topic_sys_flag: Int32 = 0
    order: Bool = False
    #: 5.x topic attributes (``message.type``, ``lite.topic.expiration``, ...)
    attributes: Annotated[dict[_Text, _Text] | None, OMIT_IF_NONE] = None


@dataclass(frozen=True, slots=True)
class TopicConfigSerializeWrapper(Body):
    """The GET_ALL_TOPIC_CONFIG (21) response body (topics sorted by name)."""

    topic_config_table: Annotated[dict[_Text, TopicConfigBody], member(default={})]
    data_version: DataVersion = DataVersion()


@dataclass(frozen=True, slots=True)
class ConsumeQueueEntry(Body):
    """One consume-queue entry of a `QueryConsumeQueueResponseBody` (Java
    ``ConsumeQueueData``)."""

    _constants: ClassVar[dict[str, Any]] = {"eval": False}

    physic_offset: Int64
    physic_size: Int32
    tags_code: Int64


@dataclass(frozen=True, slots=True)
class QueryConsumeQueueResponseBody(Body):
    """The QUERY_CONSUME_QUEUE (321) response body (``mqadmin queryCq``); unset members are
    omitted, as fastjson omits nulls."""

    max_queue_index: Int64
    min_queue_index: Int64
    queue_data: tuple[ConsumeQueueEntry, ...] = ()
    subscription_data: Annotated[SubscriptionData | None, OMIT_IF_NONE] = None
    filter_data: Annotated[str | None, OMIT_IF_NONE] = None


@dataclass(frozen=True, slots=True)
class GroupList(Body):
    """A set of group names (Java ``GroupList``): QUERY_TOPIC_CONSUME_BY_WHO's answer."""

    group_list: Annotated[tuple[str, ...], member(default=())]

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it, names sorted."""
        return {"groupList": sorted(self.group_list)}
