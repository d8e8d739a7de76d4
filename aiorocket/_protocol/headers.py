"""The catalogue of typed ``extFields`` headers of the remoting commands (docs/protocol.md §1.8,
§2.2), client, broker and admin requests alike.

Each header is declared with `header_class` and
`wire`; the typing rules are in
`aiorocket._protocol.schema`.

Codes that carry no header, so have no class here: HEART_BEAT (34, JSON body only),
LOCK_BATCH_MQ / UNLOCK_BATCH_MQ (41/42, JSON bodies), CHECK_CLIENT_CONFIG (46),
GET_BROKER_CLUSTER_INFO (106) and GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206).
"""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Self

from aiorocket._names import CREATE_TOPIC_KEY
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.schema import Header, WireField, WireKind, header_class, wire

__all__ = [
    "REQUEST_HEADERS",
    "RESPONSE_HEADERS",
    "UNIQUE_KEY_QUERY",
    "CheckTransactionStateRequestHeader",
    "ConsumeMessageDirectlyResultRequestHeader",
    "ConsumerSendMsgBackRequestHeader",
    "CreateTopicRequestHeader",
    "DeleteKVConfigRequestHeader",
    "DeleteSubscriptionGroupRequestHeader",
    "DeleteTopicFromNamesrvRequestHeader",
    "DeleteTopicRequestHeader",
    "EndTransactionRequestHeader",
    "GetConsumeStatsRequestHeader",
    "GetConsumerConnectionListRequestHeader",
    "GetConsumerListByGroupRequestHeader",
    "GetConsumerRunningInfoRequestHeader",
    "GetConsumerStatusRequestHeader",
    "GetEarliestMsgStoretimeRequestHeader",
    "GetEarliestMsgStoretimeResponseHeader",
    "GetKVConfigRequestHeader",
    "GetKVListByNamespaceRequestHeader",
    "GetMaxOffsetRequestHeader",
    "GetMaxOffsetResponseHeader",
    "GetMinOffsetRequestHeader",
    "GetMinOffsetResponseHeader",
    "GetProducerConnectionListRequestHeader",
    "GetRouteInfoRequestHeader",
    "GetTopicConfigRequestHeader",
    "GetTopicStatsInfoRequestHeader",
    "Header",
    "NotifyConsumerIdsChangedRequestHeader",
    "PullMessageRequestHeader",
    "PullMessageResponseHeader",
    "PutKVConfigRequestHeader",
    "QueryConsumeQueueRequestHeader",
    "QueryConsumerOffsetRequestHeader",
    "QueryConsumerOffsetResponseHeader",
    "QueryMessageRequestHeader",
    "QueryMessageResponseHeader",
    "QueryTopicConsumeByWhoRequestHeader",
    "ReplyMessageRequestHeader",
    "ResetOffsetRequestHeader",
    "SearchOffsetRequestHeader",
    "SearchOffsetResponseHeader",
    "SendMessageRequestHeader",
    "SendMessageResponseHeader",
    "UnregisterClientRequestHeader",
    "UpdateConsumerOffsetRequestHeader",
    "UpdateConsumerOffsetResponseHeader",
    "ViewMessageRequestHeader",
    "WireField",
    "WireKind",
    "decode_request_header",
    "decode_send_header",
    "header_class",
    "wire",
]


_INT = WireKind.INT
_LONG = WireKind.LONG

#: ``MixAll.UNIQUE_MSG_QUERY_FLAG``: the ext field a QUERY_MESSAGE by UNIQ_KEY carries.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"


# --------------------------------------------------------------------------- send


@header_class
class SendMessageRequestHeader(Header):
    """SEND_MESSAGE (10) long names, SEND_MESSAGE_V2 (310) / SEND_BATCH_MESSAGE (320) short names.

    Mirrors Java's ``SendMessageRequestHeader`` and its twin ``SendMessageRequestHeaderV2``
    (keys ``a`` ... ``n``). The broker picks the naming by request code (see
    `decode_send_header`), then ``batch`` alone chooses the batch-body path.
    ``to_ext()`` / ``from_ext()`` without ``v2`` use the long names of code 10.
    """

    producer_group: str = wire("producerGroup", required=True, short="a")
    topic: str = wire("topic", required=True, short="b")
    #: the template topic for auto-creation (``TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC``).
    default_topic: str = wire("defaultTopic", required=True, default=CREATE_TOPIC_KEY, short="c")
    default_topic_queue_nums: int = wire(
        "defaultTopicQueueNums", _INT, required=True, default=4, short="d"
    )
    #: a negative id lets the broker pick a random writable queue.
    queue_id: int = wire("queueId", _INT, required=True, short="e")
    #: message sysFlag bits (compression, transaction), a plain int.
    sys_flag: int = wire("sysFlag", _INT, required=True, default=0, short="f")
    born_timestamp: int = wire("bornTimestamp", _LONG, required=True, short="g")
    #: the user's ``Message.flag``, stored as is.
    flag: int = wire("flag", _INT, required=True, default=0, short="h")
    #: the properties string (``\x01`` between key and value, ``\x02`` after each pair).
    properties: str | None = wire("properties", default=None, short="i")
    reconsume_times: int | None = wire("reconsumeTimes", _INT, default=None, short="j")
    unit_mode: bool = wire("unitMode", default=False, short="k")
    #: honoured by the broker only when the request ``version`` is >= 121 (V3_4_9).
    max_reconsume_times: int | None = wire("maxReconsumeTimes", _INT, default=None, short="l")
    #: True: the body is a batch body (docs/protocol.md §4.6), whatever the request code.
    batch: bool = wire("batch", default=False, short="m")
    broker_name: str | None = wire("bname", default=None, short="n")

    @classmethod
    def from_ext(cls, ext: Mapping[str, str], *, v2: bool = False) -> Self:
        """Parse ``extFields``; ``v2`` selects the short keys of codes 310 and 320.

        Raises:
            MissingHeaderFieldError: a mandatory field is absent, empty or not a number.
        """
        return (cls._short_decoder if v2 else cls._decoder)(cls, ext)  # type: ignore[no-any-return]

    def to_ext(self, *, v2: bool = False) -> dict[str, str]:
        """Render as ``extFields``; ``v2`` selects the short keys of codes 310 and 320.

        Raises:
            LocalProtocolError: an integer does not fit its Java int/long field.
        """
        return self._short_encoder() if v2 else self._encoder()


def decode_send_header(code: int, ext: Mapping[str, str]) -> SendMessageRequestHeader:
    """Parse a send request's header: long names for codes 10 and 324, short names for 310,
    320 and 325.

    This mirrors ``SendMessageProcessor.parseRequestHeader`` (and ``ReplyMessageProcessor``'s),
    which choose by code alone.

    Raises:
        MissingHeaderFieldError: a mandatory field is absent, empty or not a number.
        ValueError: ``code`` is not a send code.
    """
    if code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_REPLY_MESSAGE):
        return SendMessageRequestHeader.from_ext(ext, v2=False)
    if code in (
        RequestCode.SEND_MESSAGE_V2,
        RequestCode.SEND_BATCH_MESSAGE,
        RequestCode.SEND_REPLY_MESSAGE_V2,
    ):
        return SendMessageRequestHeader.from_ext(ext, v2=True)
    raise ValueError(f"request code {code} is not a send")


@header_class
class SendMessageResponseHeader(Header):
    """The response to codes 10, 310 and 320 — Java's ``SendMessageResponseHeader``.

    ``msg_id`` is the offset message id (comma-joined for a batch). ``msg_region`` and
    ``trace_on`` travel as the extra keys ``MSG_REGION`` and ``TRACE_ON``, which the Java
    client reads straight from ``extFields``; a 4.9.8 broker always sends both.
    """

    msg_id: str = wire("msgId", required=True)
    queue_id: int = wire("queueId", _INT, required=True)
    queue_offset: int = wire("queueOffset", _LONG, required=True)
    transaction_id: str | None = wire("transactionId", default=None)
    msg_region: str | None = wire("MSG_REGION", default=None)
    trace_on: bool | None = wire("TRACE_ON", default=None)
    #: 5.3.2+: the handle that recalls a timer message (§12.7); absent for any other
    recall_handle: str | None = wire("recallHandle", default=None)


@header_class
class ReplyMessageRequestHeader(Header):
    """PUSH_REPLY_MESSAGE_TO_CLIENT (326, broker to the requesting client): the reply's send
    header as the responder sent it, plus where and when it was stored.

    Mirrors Java's ``ReplyMessageRequestHeader`` (docs/protocol.md §13); ``born_host`` and
    ``store_host`` are Java's ``SocketAddress.toString()`` (``"/127.0.0.1:51234"``).
    """

    producer_group: str = wire("producerGroup", required=True)
    topic: str = wire("topic", required=True)
    default_topic: str = wire("defaultTopic", required=True, default=CREATE_TOPIC_KEY)
    default_topic_queue_nums: int = wire("defaultTopicQueueNums", _INT, required=True, default=4)
    queue_id: int = wire("queueId", _INT, required=True)
    sys_flag: int = wire("sysFlag", _INT, required=True, default=0)
    born_timestamp: int = wire("bornTimestamp", _LONG, required=True)
    flag: int = wire("flag", _INT, required=True, default=0)
    properties: str | None = wire("properties", default=None)
    reconsume_times: int | None = wire("reconsumeTimes", _INT, default=None)
    unit_mode: bool = wire("unitMode", default=False)
    born_host: str = wire("bornHost", required=True)
    store_host: str = wire("storeHost", required=True)
    store_timestamp: int = wire("storeTimestamp", _LONG, required=True)


# --------------------------------------------------------------------------- pull


@header_class
class PullMessageRequestHeader(Header):
    """PULL_MESSAGE (11), also LITE_PULL_MESSAGE (361) — Java's ``PullMessageRequestHeader``.

    ``sys_flag`` holds the pull flag bits (`PullSysFlag`)
    as a plain int; ``commit_offset`` counts only when bit 0x1 is set.
    """

    consumer_group: str = wire("consumerGroup", required=True)
    topic: str = wire("topic", required=True)
    queue_id: int = wire("queueId", _INT, required=True)
    queue_offset: int = wire("queueOffset", _LONG, required=True)
    max_msg_nums: int = wire("maxMsgNums", _INT, required=True)
    sys_flag: int = wire("sysFlag", _INT, required=True)
    commit_offset: int = wire("commitOffset", _LONG, required=True)
    suspend_timeout_millis: int = wire("suspendTimeoutMillis", _LONG, required=True)
    #: the tag expression, used when sysFlag bit 0x4 is set.
    subscription: str | None = wire("subscription", default=None)
    sub_version: int = wire("subVersion", _LONG, required=True)
    #: ``TAG`` when absent or empty, or ``SQL92``.
    expression_type: str | None = wire("expressionType", default=None)
    broker_name: str | None = wire("bname", default=None)


@header_class
class PullMessageResponseHeader(Header):
    """The response to PULL_MESSAGE — Java's ``PullMessageResponseHeader``.

    ``max_offset`` is one past the last message of the queue.
    """

    suggest_which_broker_id: int = wire("suggestWhichBrokerId", _LONG, required=True)
    next_begin_offset: int = wire("nextBeginOffset", _LONG, required=True)
    min_offset: int = wire("minOffset", _LONG, required=True)
    max_offset: int = wire("maxOffset", _LONG, required=True)


# --------------------------------------------------------------------------- consumer offsets


@header_class
class QueryConsumerOffsetRequestHeader(Header):
    """QUERY_CONSUMER_OFFSET (14) — Java's ``QueryConsumerOffsetRequestHeader``."""

    consumer_group: str = wire("consumerGroup", required=True)
    topic: str = wire("topic", required=True)
    queue_id: int = wire("queueId", _INT, required=True)
    broker_name: str | None = wire("bname", default=None)


@header_class
class QueryConsumerOffsetResponseHeader(Header):
    """The response to QUERY_CONSUMER_OFFSET — Java's ``QueryConsumerOffsetResponseHeader``."""

    offset: int = wire("offset", _LONG, required=True)


@header_class
class UpdateConsumerOffsetRequestHeader(Header):
    """UPDATE_CONSUMER_OFFSET (15) — Java's ``UpdateConsumerOffsetRequestHeader``."""

    consumer_group: str = wire("consumerGroup", required=True)
    topic: str = wire("topic", required=True)
    queue_id: int = wire("queueId", _INT, required=True)
    commit_offset: int = wire("commitOffset", _LONG, required=True)
    broker_name: str | None = wire("bname", default=None)


@header_class
class UpdateConsumerOffsetResponseHeader(Header):
    """The response to UPDATE_CONSUMER_OFFSET — Java's ``UpdateConsumerOffsetResponseHeader``.

    It has no fields.
    """


# --------------------------------------------------------------------------- offset lookups


@header_class
class GetMaxOffsetRequestHeader(Header):
    """GET_MAX_OFFSET (30) — Java's ``GetMaxOffsetRequestHeader``."""

    topic: str = wire("topic", required=True)
    queue_id: int = wire("queueId", _INT, required=True)
    broker_name: str | None = wire("bname", default=None)


@header_class
class GetMaxOffsetResponseHeader(Header):
    """The response to GET_MAX_OFFSET — Java's ``GetMaxOffsetResponseHeader``."""

    offset: int = wire("offset", _LONG, required=True)


@header_class
class GetMinOffsetRequestHeader(Header):
    """GET_MIN_OFFSET (31) — Java's ``GetMinOffsetRequestHeader``."""

    topic: str = wire("topic", required=True)
    queue_id: int = wire("queueId", _INT, required=True)
    broker_name: str | None = wire("bname", default=None)


@header_class
class GetMinOffsetResponseHeader(Header):
    """The response to GET_MIN_OFFSET — Java's ``GetMinOffsetResponseHeader``."""

    offset: int = wire("offset", _LONG, required=True)


@header_class
class SearchOffsetRequestHeader(Header):
    """SEARCH_OFFSET_BY_TIMESTAMP (29) — Java's ``SearchOffsetRequestHeader``."""

    topic: str = wire("topic", required=True)
    queue_id: int = wire("queueId", _INT, required=True)
    #: milliseconds since the epoch.
    timestamp: int = wire("timestamp", _LONG, required=True)
    broker_name: str | None = wire("bname", default=None)


@header_class
class SearchOffsetResponseHeader(Header):
    """The response to SEARCH_OFFSET_BY_TIMESTAMP — Java's ``SearchOffsetResponseHeader``."""

    offset: int = wire("offset", _LONG, required=True)


@header_class
class GetEarliestMsgStoretimeRequestHeader(Header):
    """GET_EARLIEST_MSG_STORETIME (32) — Java's ``GetEarliestMsgStoretimeRequestHeader``."""

    topic: str = wire("topic", required=True)
    queue_id: int = wire("queueId", _INT, required=True)
    broker_name: str | None = wire("bname", default=None)


@header_class
class GetEarliestMsgStoretimeResponseHeader(Header):
    """The response to GET_EARLIEST_MSG_STORETIME — ``GetEarliestMsgStoretimeResponseHeader``."""

    timestamp: int = wire("timestamp", _LONG, required=True)


@header_class
class ViewMessageRequestHeader(Header):
    """VIEW_MESSAGE_BY_ID (33) — Java's ``ViewMessageRequestHeader``.

    ``offset`` is the commit-log (physical) offset decoded from an offset message id.
    """

    offset: int = wire("offset", _LONG, required=True)


@header_class
class QueryMessageRequestHeader(Header):
    """QUERY_MESSAGE (12) — Java's ``QueryMessageRequestHeader``.

    ``unique_key_query`` is the extra key ``_UNIQUE_KEY_QUERY`` the Java client adds when it
    looks a message up by its UNIQ_KEY.
    """

    topic: str = wire("topic", required=True)
    key: str = wire("key", required=True)
    max_num: int = wire("maxNum", _INT, required=True)
    begin_timestamp: int = wire("beginTimestamp", _LONG, required=True)
    end_timestamp: int = wire("endTimestamp", _LONG, required=True)
    unique_key_query: bool | None = wire("_UNIQUE_KEY_QUERY", default=None)


@header_class
class QueryMessageResponseHeader(Header):
    """The response to QUERY_MESSAGE — Java's ``QueryMessageResponseHeader``."""

    index_last_update_timestamp: int = wire("indexLastUpdateTimestamp", _LONG, required=True)
    index_last_update_phyoffset: int = wire("indexLastUpdatePhyoffset", _LONG, required=True)


# --------------------------------------------------------------------------- client management


@header_class
class UnregisterClientRequestHeader(Header):
    """UNREGISTER_CLIENT (35) — Java's ``UnregisterClientRequestHeader``.

    The key is ``clientID`` with a capital "ID". The C++ client sends both groups, with ``""``
    for the one that does not apply, which reads as absent here.
    """

    client_id: str = wire("clientID", required=True)
    producer_group: str | None = wire("producerGroup", default=None)
    consumer_group: str | None = wire("consumerGroup", default=None)


@header_class
class GetConsumerListByGroupRequestHeader(Header):
    """GET_CONSUMER_LIST_BY_GROUP (38) — Java's ``GetConsumerListByGroupRequestHeader``.

    The response has no header; the ids come in a JSON body.
    """

    consumer_group: str = wire("consumerGroup", required=True)


@header_class
class NotifyConsumerIdsChangedRequestHeader(Header):
    """NOTIFY_CONSUMER_IDS_CHANGED (40, broker to client, oneway).

    Mirrors Java's ``NotifyConsumerIdsChangedRequestHeader``.
    """

    consumer_group: str = wire("consumerGroup", required=True)


@header_class
class ConsumerSendMsgBackRequestHeader(Header):
    """CONSUMER_SEND_MSG_BACK (36) — Java's ``ConsumerSendMsgBackRequestHeader``.

    ``offset`` is the failed message's commit-log offset. ``delay_level``: 0 lets the broker
    choose, -1 goes straight to the DLQ, n > 0 is that level.
    """

    offset: int = wire("offset", _LONG, required=True)
    group: str = wire("group", required=True)
    delay_level: int = wire("delayLevel", _INT, required=True)
    origin_msg_id: str | None = wire("originMsgId", default=None)
    origin_topic: str | None = wire("originTopic", default=None)
    unit_mode: bool = wire("unitMode", default=False)
    #: honoured by the broker only when the request ``version`` is >= 121 (V3_4_9).
    max_reconsume_times: int | None = wire("maxReconsumeTimes", _INT, default=None)
    broker_name: str | None = wire("bname", default=None)


# --------------------------------------------------------------------------- broker to client


@header_class
class GetConsumerRunningInfoRequestHeader(Header):
    """GET_CONSUMER_RUNNING_INFO (307) — Java's ``GetConsumerRunningInfoRequestHeader``.

    The key is ``clientId`` with a lower-case "d", unlike UNREGISTER_CLIENT's ``clientID``.
    """

    consumer_group: str = wire("consumerGroup", required=True)
    client_id: str = wire("clientId", required=True)
    jstack_enable: bool = wire("jstackEnable", default=False)


@header_class
class ResetOffsetRequestHeader(Header):
    """RESET_CONSUMER_CLIENT_OFFSET (220) and INVOKE_BROKER_TO_RESET_OFFSET (222).

    Mirrors Java's ``ResetOffsetRequestHeader``; the key ``isForce`` is spelt that way.
    """

    topic: str = wire("topic", required=True)
    group: str = wire("group", required=True)
    #: milliseconds since the epoch.
    timestamp: int = wire("timestamp", _LONG, required=True)
    is_force: bool = wire("isForce", required=True)


@header_class
class GetConsumerStatusRequestHeader(Header):
    """GET_CONSUMER_STATUS_FROM_CLIENT (221) — Java's ``GetConsumerStatusRequestHeader``."""

    topic: str = wire("topic", required=True)
    group: str = wire("group", required=True)
    client_addr: str | None = wire("clientAddr", default=None)


@header_class
class ConsumeMessageDirectlyResultRequestHeader(Header):
    """CONSUME_MESSAGE_DIRECTLY (309) — Java's ``ConsumeMessageDirectlyResultRequestHeader``."""

    consumer_group: str = wire("consumerGroup", required=True)
    client_id: str | None = wire("clientId", default=None)
    msg_id: str | None = wire("msgId", default=None)
    broker_name: str | None = wire("brokerName", default=None)


# --------------------------------------------------------------------------- transactions


@header_class
class EndTransactionRequestHeader(Header):
    """END_TRANSACTION (37) — Java's ``EndTransactionRequestHeader``.

    ``commit_or_rollback`` uses the message sysFlag values: 0 unknown, 8 commit, 12 rollback.
    """

    producer_group: str = wire("producerGroup", required=True)
    tran_state_table_offset: int = wire("tranStateTableOffset", _LONG, required=True)
    commit_log_offset: int = wire("commitLogOffset", _LONG, required=True)
    commit_or_rollback: int = wire("commitOrRollback", _INT, required=True)
    from_transaction_check: bool = wire("fromTransactionCheck", default=False)
    msg_id: str = wire("msgId", required=True)
    transaction_id: str | None = wire("transactionId", default=None)


@header_class
class CheckTransactionStateRequestHeader(Header):
    """CHECK_TRANSACTION_STATE (39, broker to client).

    Mirrors Java's ``CheckTransactionStateRequestHeader``.
    """

    tran_state_table_offset: int = wire("tranStateTableOffset", _LONG, required=True)
    commit_log_offset: int = wire("commitLogOffset", _LONG, required=True)
    msg_id: str | None = wire("msgId", default=None)
    transaction_id: str | None = wire("transactionId", default=None)
    offset_msg_id: str | None = wire("offsetMsgId", default=None)


# --------------------------------------------------------------------------- name server / admin


@header_class
class GetRouteInfoRequestHeader(Header):
    """GET_ROUTEINFO_BY_TOPIC (105) — Java's ``GetRouteInfoRequestHeader``.

    ``accept_standard_json_only`` ("true") makes a 4.9.4+ name server emit standard JSON.
    """

    topic: str = wire("topic", required=True)
    accept_standard_json_only: bool | None = wire("acceptStandardJsonOnly", default=None)


@header_class
class CreateTopicRequestHeader(Header):
    """UPDATE_AND_CREATE_TOPIC (17) — Java's ``CreateTopicRequestHeader``."""

    topic: str = wire("topic", required=True)
    default_topic: str = wire("defaultTopic", required=True, default=CREATE_TOPIC_KEY)
    read_queue_nums: int = wire("readQueueNums", _INT, required=True)
    write_queue_nums: int = wire("writeQueueNums", _INT, required=True)
    #: permission bits (PermName): 2 read, 4 write, 6 both.
    perm: int = wire("perm", _INT, required=True)
    #: ``SINGLE_TAG`` or ``MULTI_TAG``.
    topic_filter_type: str = wire("topicFilterType", required=True, default="SINGLE_TAG")
    topic_sys_flag: int | None = wire("topicSysFlag", _INT, default=None)
    order: bool = wire("order", required=True, default=False)
    #: 5.x attribute changes, ``+name=value`` / ``-name`` comma-separated
    #: (``+message.type=LITE,+lite.topic.expiration=10``, ``_protocol/attributes.py``); 4.x
    #: brokers ignore the field.
    attributes: str | None = wire("attributes", default=None)


# --------------------------------------------------------------------------- admin tools (mqadmin)


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
    """GET_KVLIST_BY_NAMESPACE (219); the answer is a `KVTable`."""

    namespace: str = wire("namespace", required=True)


# --------------------------------------------------------------------------- registries

_RC = RequestCode

#: Request code → the class of its request header, for every code that carries one. The send
#: codes share `SendMessageRequestHeader`, whose keys depend on the code: decode those
#: with `decode_request_header` or `decode_send_header`.
REQUEST_HEADERS: Mapping[int, type[Header]] = types.MappingProxyType(
    {
        _RC.SEND_MESSAGE: SendMessageRequestHeader,
        _RC.SEND_MESSAGE_V2: SendMessageRequestHeader,
        _RC.SEND_BATCH_MESSAGE: SendMessageRequestHeader,
        _RC.SEND_REPLY_MESSAGE: SendMessageRequestHeader,
        _RC.SEND_REPLY_MESSAGE_V2: SendMessageRequestHeader,
        _RC.PUSH_REPLY_MESSAGE_TO_CLIENT: ReplyMessageRequestHeader,
        _RC.PULL_MESSAGE: PullMessageRequestHeader,
        _RC.LITE_PULL_MESSAGE: PullMessageRequestHeader,
        _RC.QUERY_MESSAGE: QueryMessageRequestHeader,
        _RC.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetRequestHeader,
        _RC.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetRequestHeader,
        _RC.UPDATE_AND_CREATE_TOPIC: CreateTopicRequestHeader,
        _RC.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetRequestHeader,
        _RC.GET_MAX_OFFSET: GetMaxOffsetRequestHeader,
        _RC.GET_MIN_OFFSET: GetMinOffsetRequestHeader,
        _RC.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeRequestHeader,
        _RC.VIEW_MESSAGE_BY_ID: ViewMessageRequestHeader,
        _RC.UNREGISTER_CLIENT: UnregisterClientRequestHeader,
        _RC.CONSUMER_SEND_MSG_BACK: ConsumerSendMsgBackRequestHeader,
        _RC.END_TRANSACTION: EndTransactionRequestHeader,
        _RC.GET_CONSUMER_LIST_BY_GROUP: GetConsumerListByGroupRequestHeader,
        _RC.CHECK_TRANSACTION_STATE: CheckTransactionStateRequestHeader,
        _RC.NOTIFY_CONSUMER_IDS_CHANGED: NotifyConsumerIdsChangedRequestHeader,
        _RC.GET_ROUTEINFO_BY_TOPIC: GetRouteInfoRequestHeader,
        _RC.RESET_CONSUMER_CLIENT_OFFSET: ResetOffsetRequestHeader,
        _RC.GET_CONSUMER_STATUS_FROM_CLIENT: GetConsumerStatusRequestHeader,
        _RC.INVOKE_BROKER_TO_RESET_OFFSET: ResetOffsetRequestHeader,
        _RC.GET_CONSUMER_RUNNING_INFO: GetConsumerRunningInfoRequestHeader,
        _RC.CONSUME_MESSAGE_DIRECTLY: ConsumeMessageDirectlyResultRequestHeader,
    }
)

#: Request code → the class of the header of its success response, where it has fields.
RESPONSE_HEADERS: Mapping[int, type[Header]] = types.MappingProxyType(
    {
        _RC.SEND_MESSAGE: SendMessageResponseHeader,
        _RC.SEND_MESSAGE_V2: SendMessageResponseHeader,
        _RC.SEND_BATCH_MESSAGE: SendMessageResponseHeader,
        _RC.SEND_REPLY_MESSAGE: SendMessageResponseHeader,
        _RC.SEND_REPLY_MESSAGE_V2: SendMessageResponseHeader,
        _RC.PULL_MESSAGE: PullMessageResponseHeader,
        _RC.LITE_PULL_MESSAGE: PullMessageResponseHeader,
        _RC.QUERY_MESSAGE: QueryMessageResponseHeader,
        _RC.QUERY_CONSUMER_OFFSET: QueryConsumerOffsetResponseHeader,
        _RC.UPDATE_CONSUMER_OFFSET: UpdateConsumerOffsetResponseHeader,
        _RC.SEARCH_OFFSET_BY_TIMESTAMP: SearchOffsetResponseHeader,
        _RC.GET_MAX_OFFSET: GetMaxOffsetResponseHeader,
        _RC.GET_MIN_OFFSET: GetMinOffsetResponseHeader,
        _RC.GET_EARLIEST_MSG_STORETIME: GetEarliestMsgStoretimeResponseHeader,
    }
)

_SEND_CODES = frozenset(
    (
        _RC.SEND_MESSAGE,
        _RC.SEND_MESSAGE_V2,
        _RC.SEND_BATCH_MESSAGE,
        _RC.SEND_REPLY_MESSAGE,
        _RC.SEND_REPLY_MESSAGE_V2,
    ),
)


def decode_request_header(code: int, ext: Mapping[str, str]) -> Header | None:
    """Parse the header of a request with ``code``; None for codes without a header class.

    Send codes go through `decode_send_header`, so their naming follows the code.

    Raises:
        MissingHeaderFieldError: a mandatory field is absent, empty or not a number.
    """
    if code in _SEND_CODES:
        return decode_send_header(code, ext)
    cls = REQUEST_HEADERS.get(code)
    return None if cls is None else cls.from_ext(ext)
