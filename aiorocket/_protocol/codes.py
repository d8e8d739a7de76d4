"""Numeric codes of the RocketMQ 4.x remoting protocol (docs/protocol.md §1.4, §1.6, §2.1, §3.1).

Plain ``IntEnum``s: they compare equal to the ints on the wire, so decoded commands keep raw
``int`` codes (a peer may send codes this table does not know) and callers compare freely.
"""

from __future__ import annotations

import enum

__all__ = [
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "LanguageCode",
    "PullSysFlag",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "MessageSysFlag",
    "Perm",
    "VERSION_V4_9_8",
    "VERSION_V5_0_0",
    "VERSION_V5_0_0_SNAPSHOT",
    "VERSION_V5_3_2",
    "VERSION_V5_4_0",
    "VERSION_V5_5_0",
]

#: flag bit 0: the frame is a response (docs/protocol.md §1.6).
FLAG_RESPONSE = 0x1
#: flag bit 1: the sender wants no response. Only Java puts it on the wire.
FLAG_ONEWAY = 0x2

#: ``MQVersion.Version.V4_9_8`` ordinal: what we send, and what the embedded broker answers with.
#: >= 401 makes 4.9.4+ name servers emit standard JSON for routes (§0.3, §5.1).
VERSION_V4_9_8 = 409
#: ``V5_0_0_SNAPSHOT``: from this ordinal on a broker is 5.x: it has the timer wheel
#: (``TimerMessageStore``, §12.4), and a request of this version comes from a 5.x client.
VERSION_V5_0_0_SNAPSHOT = 412
#: ``V5_0_0``: the first 5.x release.
VERSION_V5_0_0 = 413
#: ``V5_3_2``: from here a broker serves RECALL_MESSAGE (§12.7).
VERSION_V5_3_2 = 477
#: ``V5_4_0``: from here a broker orders a priority message by ``_SYS_MSG_PRIORITY_`` (§12.6).
VERSION_V5_4_0 = 493
#: ``V5_5_0``: what the embedded broker stamps on its responses by default; a request of this
#: version or later comes from a 5.5+ client (its tools expect a runtime table without
#: ``brokerVersion``, §12.1).
VERSION_V5_5_0 = 513


class SerializeType(enum.IntEnum):
    """The header dialect, carried in the top byte of the header-length word (§1.2)."""

    JSON = 0
    ROCKETMQ = 1


class LanguageCode(enum.IntEnum):
    """``LanguageCode``: names travel in JSON headers, ordinals in binary headers (§1.4)."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12


class RequestCode(enum.IntEnum):
    """Request codes used by producers, push consumers, brokers and name servers (§2.1)."""

    SEND_MESSAGE = 10
    PULL_MESSAGE = 11
    QUERY_MESSAGE = 12
    QUERY_CONSUMER_OFFSET = 14
    UPDATE_CONSUMER_OFFSET = 15
    UPDATE_AND_CREATE_TOPIC = 17
    GET_ALL_TOPIC_CONFIG = 21
    GET_BROKER_CONFIG = 26
    GET_BROKER_RUNTIME_INFO = 28
    SEARCH_OFFSET_BY_TIMESTAMP = 29
    GET_MAX_OFFSET = 30
    GET_MIN_OFFSET = 31
    GET_EARLIEST_MSG_STORETIME = 32
    VIEW_MESSAGE_BY_ID = 33
    HEART_BEAT = 34
    UNREGISTER_CLIENT = 35
    CONSUMER_SEND_MSG_BACK = 36
    END_TRANSACTION = 37
    GET_CONSUMER_LIST_BY_GROUP = 38
    CHECK_TRANSACTION_STATE = 39
    NOTIFY_CONSUMER_IDS_CHANGED = 40
    LOCK_BATCH_MQ = 41
    UNLOCK_BATCH_MQ = 42
    CHECK_CLIENT_CONFIG = 46
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    UPDATE_AND_CREATE_SUBSCRIPTIONGROUP = 200
    GET_ALL_SUBSCRIPTIONGROUP_CONFIG = 201
    GET_TOPIC_STATS_INFO = 202
    GET_CONSUMER_CONNECTION_LIST = 203
    GET_PRODUCER_CONNECTION_LIST = 204
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_SUBSCRIPTIONGROUP = 207
    GET_CONSUME_STATS = 208
    DELETE_TOPIC_IN_BROKER = 215
    DELETE_TOPIC_IN_NAMESRV = 216
    GET_KVLIST_BY_NAMESPACE = 219
    RESET_CONSUMER_CLIENT_OFFSET = 220
    GET_CONSUMER_STATUS_FROM_CLIENT = 221
    INVOKE_BROKER_TO_RESET_OFFSET = 222
    QUERY_TOPIC_CONSUME_BY_WHO = 300
    GET_CONSUMER_RUNNING_INFO = 307
    CONSUME_MESSAGE_DIRECTLY = 309
    SEND_MESSAGE_V2 = 310
    SEND_BATCH_MESSAGE = 320
    QUERY_CONSUME_QUEUE = 321
    #: request/reply (4.6+, docs/protocol.md §13): a responder's reply, long and short header
    #: names, as SEND_MESSAGE (10) and SEND_MESSAGE_V2 (310)
    SEND_REPLY_MESSAGE = 324
    SEND_REPLY_MESSAGE_V2 = 325
    #: broker to the requesting client: the reply, pushed on that client's connection
    PUSH_REPLY_MESSAGE_TO_CLIENT = 326
    #: 5.x: one topic's configuration (``mqadmin topicStatus`` asks each broker first)
    GET_TOPIC_CONFIG = 351
    LITE_PULL_MESSAGE = 361
    RECALL_MESSAGE = 370
    #: 5.x server-side assignment (§12.3): the queues a client is to consume, and their mode
    QUERY_ASSIGNMENT = 400
    SET_MESSAGE_REQUEST_MODE = 401
    GET_ALL_MESSAGE_REQUEST_MODE = 402
    #: 5.x POP consumption (§12.3); beyond the binary header's int16, so always sent as JSON
    POP_MESSAGE = 200050
    ACK_MESSAGE = 200051
    PEEK_MESSAGE = 200052
    CHANGE_MESSAGE_INVISIBLETIME = 200053
    NOTIFICATION = 200054
    POLLING_INFO = 200055
    BATCH_ACK_MESSAGE = 200151
    #: 5.5 lite topics (§12.8): pop, subscription control, (unused) ack, the broker's notice
    POP_LITE_MESSAGE = 200070
    LITE_SUBSCRIPTION_CTL = 200071
    ACK_LITE_MESSAGE = 200072
    NOTIFY_UNSUBSCRIBE_LITE = 200073
    #: 5.5 lite admin requests (``mqadmin getBrokerLiteInfo`` ... ``triggerLiteDispatch``)
    GET_BROKER_LITE_INFO = 200074
    GET_PARENT_TOPIC_INFO = 200075
    GET_LITE_TOPIC_INFO = 200076
    GET_LITE_CLIENT_INFO = 200077
    GET_LITE_GROUP_INFO = 200078
    TRIGGER_LITE_DISPATCH = 200079


class ResponseCode(enum.IntEnum):
    """Response codes of the 4.9.8 broker and name server (§3.1)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    TRANSACTION_FAILED = 4
    FLUSH_DISK_TIMEOUT = 10
    SLAVE_NOT_AVAILABLE = 11
    FLUSH_SLAVE_TIMEOUT = 12
    MESSAGE_ILLEGAL = 13
    SERVICE_NOT_AVAILABLE = 14
    VERSION_NOT_SUPPORTED = 15
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    TOPIC_EXIST_ALREADY = 18
    PULL_NOT_FOUND = 19
    PULL_RETRY_IMMEDIATELY = 20
    PULL_OFFSET_MOVED = 21
    QUERY_NOT_FOUND = 22
    SUBSCRIPTION_PARSE_FAILED = 23
    SUBSCRIPTION_NOT_EXIST = 24
    SUBSCRIPTION_NOT_LATEST = 25
    SUBSCRIPTION_GROUP_NOT_EXIST = 26
    FILTER_DATA_NOT_EXIST = 27
    FILTER_DATA_NOT_LATEST = 28
    #: 5.x: a request field out of range (a POP of more than 32 messages, a bad queue id)
    INVALID_PARAMETER = 29
    TRANSACTION_SHOULD_COMMIT = 200
    TRANSACTION_SHOULD_ROLLBACK = 201
    TRANSACTION_STATE_UNKNOW = 202
    TRANSACTION_STATE_GROUP_WRONG = 203
    NO_BUYER_ID = 204
    NOT_IN_CURRENT_UNIT = 205
    CONSUMER_NOT_ONLINE = 206
    CONSUME_MSG_TIMEOUT = 207
    NO_MESSAGE = 208
    #: 5.x meanings (4.x used 209-211 for ACL admin failures, §3.1): too many held POPs,
    #: a held POP that found nothing in its poll time
    POLLING_FULL = 209
    POLLING_TIMEOUT = 210
    FLOW_CONTROL = 215
    #: 5.x: a request the broker's state forbids (a recall after the due time, §12.7; a lite
    #: subscription of a group that may not consume, a batch ack of lite messages)
    ILLEGAL_OPERATION = 604
    #: 5.5: the broker holds too many lite subscriptions (§12.8)
    LITE_SUBSCRIPTION_QUOTA_EXCEEDED = 2018


class PullSysFlag(enum.IntFlag):
    """Bits of the pull request's ``sysFlag`` (§6.4)."""

    COMMIT_OFFSET = 0x1
    SUSPEND = 0x2
    SUBSCRIPTION = 0x4
    CLASS_FILTER = 0x8
    LITE_PULL = 0x10


class MessageSysFlag(enum.IntFlag):
    """Bits of a message's ``sysFlag`` (§4.3)."""

    COMPRESSED = 0x1
    MULTI_TAGS = 0x2
    TRANSACTION_PREPARED = 0x4
    TRANSACTION_COMMIT = 0x8
    TRANSACTION_ROLLBACK = 0xC
    BORNHOST_V6 = 0x10
    STOREHOST_V6 = 0x20
    NEED_UNWRAP = 0x40
    INNER_BATCH = 0x80
    COMPRESSION_TYPE_MASK = 0x700
    COMPRESSION_ZLIB = 0x300


class Perm(enum.IntFlag):
    """Permission bits of a topic or broker (§7.2)."""

    INHERIT = 1
    WRITE = 2
    READ = 4
    PRIORITY = 8
