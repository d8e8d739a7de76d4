"""Resource names: the name rule, the system topics, retry and dead-letter topics, and the
client namespace.

A client namespace ``ns`` puts a topic or group ``name`` on the wire as ``ns%name``; the retry
and dead-letter topics of a namespaced group keep their prefix in front
(``%RETRY%ns%group``, ``%DLQ%ns%group``), and system topics are never namespaced. These are
the rules of Java's ``NamespaceUtil``; `wrap_namespace` and `without_namespace`
are the only place the client applies them.
"""

from __future__ import annotations

import re
import time
from typing import Final

from aiorocket.errors import ConfigurationError, InvalidNameError

__all__ = [
    "CREATE_TOPIC_KEY",
    "DLQ_PREFIX",
    "RESERVED_GROUPS",
    "RETRY_PREFIX",
    "SCHEDULE_TOPIC",
    "SYSTEM_PROPERTIES",
    "TIMER_TOPIC",
    "MAX_LITE_TOPIC_LENGTH",
    "dlq_topic",
    "is_retry_topic",
    "is_system_resource",
    "is_valid_lite_topic",
    "is_valid_name",
    "now_ms",
    "pop_retry_topic",
    "reply_topic",
    "retry_topic",
    "validate_group",
    "validate_name",
    "validate_user_property",
    "without_namespace",
    "wrap_namespace",
]

#: ``MixAll.RETRY_GROUP_TOPIC_PREFIX``.
RETRY_PREFIX: Final = "%RETRY%"
#: ``MixAll.DLQ_GROUP_TOPIC_PREFIX``.
DLQ_PREFIX: Final = "%DLQ%"
#: ``TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC``: the template topic through which a send to an
#: unknown topic has the broker create it (the producer's ``createTopicKey``, docs/protocol.md
#: §7.3).
CREATE_TOPIC_KEY: Final = "TBW102"
#: ``TopicValidator.RMQ_SYS_SCHEDULE_TOPIC``: delayed messages wait here, queue = level - 1.
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
#: ``TimerMessageStore.TIMER_TOPIC`` (5.x): timer messages wait here, one queue
#: (docs/protocol.md §12.4).
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"

# TopicValidator's rule, for topics and groups alike; `%` and `|` are allowed because system
# names (retry, dead-letter, namespaced) contain them.
_NAME: Final = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")

# TopicValidator.SYSTEM_TOPIC_SET (4.9) with the create-topic key, the system topic
# prefix and MixAll's system group prefix: NamespaceUtil.isSystemResource.
_SYSTEM_TOPICS: Final = frozenset(
    {
        CREATE_TOPIC_KEY,
        SCHEDULE_TOPIC,
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
    }
)
_SYSTEM_PREFIXES: Final = ("rmq_sys_", "CID_RMQ_SYS_")

#: The groups brokers reserve for themselves and their tools (5.x ``MixAll.PREDEFINE_GROUP_SET``;
#: 4.9's clients refuse ``DEFAULT_CONSUMER`` in ``checkConfig``); ``CID_RMQ_SYS_`` names are
#: system groups too (``MixAll.isSysConsumerGroup``). ``DEFAULT_PRODUCER`` is the producer's
#: default here, so only consumers are refused it.
RESERVED_GROUPS: Final = frozenset(
    {
        "DEFAULT_CONSUMER",
        "DEFAULT_PRODUCER",
        "TOOLS_CONSUMER",
        "SCHEDULE_CONSUMER",
        "FILTERSRV_CONSUMER",
        "__MONITOR_CONSUMER",
        "CLIENT_INNER_PRODUCER",
        "SELF_TEST_P_GROUP",
        "SELF_TEST_C_GROUP",
        "CID_ONS-HTTP-PROXY",
        "CID_ONSAPI_PERMISSION",
        "CID_ONSAPI_OWNER",
        "CID_ONSAPI_PULL",
        "CID_RMQ_SYS_TRANS",
    }
)
_PRODUCER_DEFAULT: Final = "DEFAULT_PRODUCER"

#: Property names the client and broker give a meaning (``MessageConst.STRING_HASH_SET`` of
#: 4.9.7 and of 5.x, which adds POP, timer, DLQ and priority names), which Java's
#: ``Message.putUserProperty`` refuses: a user property of one of these names would be read
#: as that system setting (``DELAY=2`` would delay the message). The 5.x message group
#: (``__SHARDINGKEY``) and timer time (``__STARTDELIVERTIME``) have their own arguments.
SYSTEM_PROPERTIES: Final = frozenset(
    {
        "TRACE_ON", "MSG_REGION", "KEYS", "TAGS", "WAIT", "DELAY", "RETRY_TOPIC",
        "ORIGIN_GROUP", "REAL_TOPIC", "REAL_QID", "TRAN_MSG", "PGROUP", "MIN_OFFSET",
        "MAX_OFFSET", "BUYER_ID", "ORIGIN_MESSAGE_ID", "TRANSFER_FLAG", "CORRECTION_FLAG",
        "MQ2_FLAG", "RECONSUME_TIME", "UNIQ_KEY", "MAX_RECONSUME_TIMES", "CONSUME_START_TIME",
        "POP_CK", "POP_CK_OFFSET", "1ST_POP_TIME", "TRAN_PREPARED_QUEUE_OFFSET", "DUP_INFO",
        "EXTEND_UNIQ_INFO", "INSTANCE_ID", "CORRELATION_ID", "REPLY_TO_CLIENT", "TTL",
        "ARRIVE_TIME", "PUSH_REPLY_TIME", "CLUSTER", "MSG_TYPE", "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS", "TIMER_DELAY_SEC", "TIMER_DELIVER_MS", "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS", "TIMER_ROLL_TIMES", "TIMER_OUT_MS", "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL", "__BORNHOST", "BORN_TIMESTAMP", "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID", "_SYS_MSG_PRIORITY_", "__LITE_TOPIC",
        "__SHARDINGKEY", "__STARTDELIVERTIME",
    }
)  # fmt: skip
# What to use instead of a refused user property, where there is an argument for it.
_PROPERTY_ARGUMENTS: Final = {
    "TAGS": "Message(tags=...)",
    "KEYS": "Message(keys=[...])",
    "DELAY": "Message(delay_level=...) or send(delay_level=...)",
    "__SHARDINGKEY": "Message(message_group=...) or send(sharding_key=...)",
    "TIMER_DELIVER_MS": "send(deliver_at=...)",
    "__STARTDELIVERTIME": "send(deliver_at=...)",
    "TIMER_DELAY_SEC": "send(deliver_after=...)",
    "TIMER_DELAY_MS": "send(deliver_after=...)",
}
_SEPARATOR: Final = "%"


#: ``ProxyConfig.maxLiteTopicSize``: the longest lite topic name (RocketMQ 5.5).
MAX_LITE_TOPIC_LENGTH: Final = 64
# GrpcValidator.validateLiteTopic: letters, digits, '-' and '_' (no '$', which separates the
# parts of a lite topic's queue name, nor '/', since the embedded store makes a directory of it).
_LITE_NAME: Final = re.compile(rf"[a-zA-Z0-9_-]{{1,{MAX_LITE_TOPIC_LENGTH}}}")


def now_ms() -> int:
    """The wall clock in milliseconds (Java's ``System.currentTimeMillis``)."""
    return time.time_ns() // 1_000_000


def is_valid_name(name: str) -> bool:
    """Whether ``name`` is a legal topic or group name: ``[%|a-zA-Z0-9_-]``, 1 to 127 chars.

    Never raises.
    """
    return _NAME.fullmatch(name) is not None


def is_valid_lite_topic(name: str) -> bool:
    """Whether ``name`` is a lite topic name (RocketMQ 5.5, docs/protocol.md §12.8) aiorocket
    sends and its broker stores: 1 to 64 characters from ``[a-zA-Z0-9_-]`` (the 5.5 proxy's
    rule). Never raises."""
    return isinstance(name, str) and _LITE_NAME.fullmatch(name) is not None


def validate_name(name: str, what: str = "topic") -> str:
    """Return ``name`` if RocketMQ accepts it as a topic or group name.

    The rule is the broker's ``^[%|a-zA-Z0-9_-]{1,127}$`` (``TopicValidator``).

    Raises:
        InvalidNameError: the name is empty, too long or has other characters.
    """
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidNameError(
            f"invalid {what} name {name!r}: use 1-127 characters from [%|a-zA-Z0-9_-]"
        )
    return name


def validate_group(name: str, what: str = "consumer group") -> str:
    """Return ``name`` if it is a legal group name that the broker does not reserve.

    Raises:
        InvalidNameError: a bad name (as `validate_name`), or one of `RESERVED_GROUPS`
            or a ``CID_RMQ_SYS_``
            system group (a producer may keep the default ``DEFAULT_PRODUCER``).
    """
    validate_name(name, what)
    if what.startswith("producer") and name == _PRODUCER_DEFAULT:
        return name
    if name in RESERVED_GROUPS or name.startswith("CID_RMQ_SYS_"):
        raise InvalidNameError(
            f"{what} {name!r} is reserved by the broker for its own clients; "
            f"name your own group (for example 'my-app-{what.split()[0]}s')"
        )
    return name


def validate_user_property(name: str) -> str:
    """Return ``name`` if it may name a user property (Java ``Message.putUserProperty``).

    Raises:
        ConfigurationError: ``name`` is blank or one of `SYSTEM_PROPERTIES`.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"a property name must be a non-blank string, not {name!r}")
    if name in SYSTEM_PROPERTIES:
        instead = _PROPERTY_ARGUMENTS.get(name)
        fix = f"use {instead} instead" if instead else "pick another name"
        raise ConfigurationError(
            f"property {name!r} is a RocketMQ system property and cannot be set as a user "
            f"property (the broker would act on it); {fix}"
        )
    return name


def retry_topic(group: str) -> str:
    """``MixAll.getRetryTopic``: the retry topic of a (wire) consumer group."""
    return RETRY_PREFIX + group


def reply_topic(cluster: str) -> str:
    """``MixAll.getReplyTopic``: ``<cluster>_REPLY_TOPIC``, the topic replies to requests are
    sent to; every broker of the cluster creates it at start (docs/protocol.md §13)."""
    return f"{cluster}_REPLY_TOPIC"


def dlq_topic(group: str) -> str:
    """``MixAll.getDLQTopic``: the dead-letter topic of a (wire) consumer group."""
    return DLQ_PREFIX + group


def pop_retry_topic(topic: str, group: str, *, v2: bool = False) -> str:
    """The topic a POP consumer group's retried messages of ``topic`` go to
    (``KeyBuilder.buildPopRetryTopicV1/V2``): ``%RETRY%group_topic``, or with ``+`` (v2,
    a broker with ``enableRetryTopicV2``)."""
    return f"{RETRY_PREFIX}{group}{'+' if v2 else '_'}{topic}"


def is_retry_topic(topic: str) -> bool:
    """Whether ``topic`` is a group's retry topic (``%RETRY%…``)."""
    return topic.startswith(RETRY_PREFIX)


def is_system_resource(name: str) -> bool:
    """Whether ``name`` is a system topic or group (``NamespaceUtil.isSystemResource``): the
    broker's own, never namespaced, never a user's typo. A cluster's reply topic counts
    (TopicConfigManager creates it): a namespaced requester still gets its reply there."""
    return (
        name in _SYSTEM_TOPICS or name.startswith(_SYSTEM_PREFIXES) or name.endswith("_REPLY_TOPIC")
    )


def _split_prefix(name: str) -> tuple[str, str]:
    # The retry or dead-letter prefix and the rest of the name.
    for prefix in (RETRY_PREFIX, DLQ_PREFIX):
        if name.startswith(prefix):
            return prefix, name[len(prefix) :]
    return "", name


def wrap_namespace(namespace: str | None, name: str) -> str:
    """``name`` as it goes on the wire under ``namespace`` (``NamespaceUtil.wrapNamespace``):
    ``ns%name``, ``%RETRY%ns%group`` for ``%RETRY%group`` and ``%DLQ%ns%group`` for
    ``%DLQ%group``; system topics and names already in the namespace are returned as they are.
    """
    if not namespace or not name or is_system_resource(name):
        return name
    prefix, rest = _split_prefix(name)
    if rest.startswith(namespace + _SEPARATOR):
        return name
    return f"{prefix}{namespace}{_SEPARATOR}{rest}"


def without_namespace(namespace: str | None, name: str) -> str:
    """``name`` without ``namespace`` (``NamespaceUtil.withoutNamespace(resource, ns)``):
    ``ns%name`` → ``name``, ``%RETRY%ns%group`` → ``%RETRY%group``; names of other
    namespaces and system names are returned as they are."""
    if not namespace or not name or is_system_resource(name):
        return name
    prefix, rest = _split_prefix(name)
    if rest.startswith(namespace + _SEPARATOR):
        return prefix + rest[len(namespace) + 1 :]
    return name
