"""Resource names: the name rule, the system topics, retry and dead-letter topics, and the
client namespace.

A client namespace ``ns`` puts a topic or group ``name`` on the wire as ``ns%name``; the retry
and dead-letter topics of a namespaced group keep their prefix in front
(``%RETRY%ns%group``, ``%DLQ%ns%group``), and system topics are never namespaced. These are
the rules of Java's ``NamespaceUtil``; :func:`wrap_namespace` and :func:`without_namespace`
are the only place the client applies them.
"""

from __future__ import annotations

import re
import time
from typing import Final

from aiorocket.errors import InvalidNameError

__all__ = [
    "DLQ_PREFIX",
    "RETRY_PREFIX",
    "SCHEDULE_TOPIC",
    "TIMER_TOPIC",
    "MAX_LITE_TOPIC_LENGTH",
    "dlq_topic",
    "is_retry_topic",
    "is_valid_lite_topic",
    "is_valid_name",
    "now_ms",
    "pop_retry_topic",
    "retry_topic",
    "validate_name",
    "without_namespace",
    "wrap_namespace",
]

#: ``MixAll.RETRY_GROUP_TOPIC_PREFIX``.
RETRY_PREFIX: Final = "%RETRY%"
#: ``MixAll.DLQ_GROUP_TOPIC_PREFIX``.
DLQ_PREFIX: Final = "%DLQ%"
#: ``TopicValidator.RMQ_SYS_SCHEDULE_TOPIC``: delayed messages wait here, queue = level - 1.
SCHEDULE_TOPIC: Final = "SCHEDULE_TOPIC_XXXX"
#: ``TimerMessageStore.TIMER_TOPIC`` (5.x): timer messages wait here, one queue
#: (docs/protocol.md §12.4).
TIMER_TOPIC: Final = "rmq_sys_wheel_timer"

# TopicValidator's rule, for topics and groups alike; `%` and `|` are allowed because system
# names (retry, dead-letter, namespaced) contain them.
_NAME: Final = re.compile(r"[%|a-zA-Z0-9_-]{1,127}")

# TopicValidator.SYSTEM_TOPIC_SET (4.9) with the create-topic key TBW102, the system topic
# prefix and MixAll's system group prefix: NamespaceUtil.isSystemResource.
_SYSTEM_TOPICS: Final = frozenset(
    {
        "TBW102",
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
    """Whether ``name`` is a lite topic name (RocketMQ 5.5, docs/protocol.md §12.5) aiorocket
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


def retry_topic(group: str) -> str:
    """``MixAll.getRetryTopic``: the retry topic of a (wire) consumer group."""
    return RETRY_PREFIX + group


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


def _is_system(name: str) -> bool:
    return name in _SYSTEM_TOPICS or name.startswith(_SYSTEM_PREFIXES)


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
    if not namespace or not name or _is_system(name):
        return name
    prefix, rest = _split_prefix(name)
    if rest.startswith(namespace + _SEPARATOR):
        return name
    return f"{prefix}{namespace}{_SEPARATOR}{rest}"


def without_namespace(namespace: str | None, name: str) -> str:
    """``name`` without ``namespace`` (``NamespaceUtil.withoutNamespace(resource, ns)``):
    ``ns%name`` → ``name``, ``%RETRY%ns%group`` → ``%RETRY%group``; names of other
    namespaces and system names are returned as they are."""
    if not namespace or not name or _is_system(name):
        return name
    prefix, rest = _split_prefix(name)
    if rest.startswith(namespace + _SEPARATOR):
        return prefix + rest[len(namespace) + 1 :]
    return name
