"""RocketMQ 5.x topic and group attributes: the change strings admin requests carry and how a
broker applies them (Java ``AttributeParser`` and ``AttributeUtil.alterCurrentAttributes``;
docs/protocol.md §12.5 and §12.8).

A change names each attribute with ``+`` (set to the value) or ``-`` (remove):
``+message.type=LITE,+lite.topic.expiration=10,-foo``. UPDATE_AND_CREATE_TOPIC carries that
string in its ``attributes`` header field; UPDATE_AND_CREATE_SUBSCRIPTIONGROUP carries the same
changes as its body's ``attributes`` map (``{"+lite.bind.topic": "agents"}``). Creating allows
only ``+``. Sans-IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

__all__ = [
    "GROUP_ATTRIBUTES",
    "LITE_BIND_TOPIC",
    "LITE_EXPIRATION",
    "LITE_SUB_MODEL",
    "MESSAGE_TYPE",
    "MESSAGE_TYPES",
    "TOPIC_ATTRIBUTES",
    "TOPIC_ATTRIBUTE_RULES",
    "InvalidAttributesError",
    "alter_attributes",
    "format_changes",
    "parse_changes",
]

#: ``TopicAttributes.TOPIC_MESSAGE_TYPE_ATTRIBUTE``: NORMAL, FIFO, DELAY, TRANSACTION,
#: PRIORITY, LITE or MIXED
MESSAGE_TYPE: Final = "message.type"
#: ``TopicMessageType`` values
MESSAGE_TYPES: Final = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE", "MIXED")
#: ``TopicAttributes.LITE_EXPIRATION_ATTRIBUTE``: minutes after its last message a lite topic
#: is deleted (-1: never)
LITE_EXPIRATION: Final = "lite.topic.expiration"
#: ``SubscriptionGroupAttributes.LITE_BIND_TOPIC_ATTRIBUTE``: the parent a lite group reads
LITE_BIND_TOPIC: Final = "lite.bind.topic"
#: ``SubscriptionGroupAttributes.LITE_SUB_MODEL_ATTRIBUTE``: ``Shared`` or ``Exclusive``
LITE_SUB_MODEL: Final = "lite.sub.model"

#: ``TopicAttributes.ALL`` of 5.5: each attribute's allowed values (a set) or range, and whether
#: an update may change it (``EnumAttribute`` / ``LongRangeAttribute`` "changeable")
TOPIC_ATTRIBUTE_RULES: Final[Mapping[str, tuple[frozenset[str] | tuple[int, int], bool]]] = {
    MESSAGE_TYPE: (frozenset({"UNSPECIFIED", *MESSAGE_TYPES}), True),
    "queue.type": (frozenset({"BatchCQ", "SimpleCQ"}), False),
    "cleanup.policy": (frozenset({"DELETE", "COMPACTION"}), False),
    "reserve.time": ((-1, 2**63 - 1), True),
    LITE_EXPIRATION: ((-1, 30 * 24 * 60), True),
}
#: the attributes a 5.5 topic accepts
TOPIC_ATTRIBUTES: Final = frozenset(TOPIC_ATTRIBUTE_RULES)
#: ``SubscriptionGroupAttributes.ALL``: the attributes a 5.5 group accepts
GROUP_ATTRIBUTES: Final = frozenset(
    {
        "priority.factor",
        LITE_BIND_TOPIC,
        "lite.sub.client.quota",
        LITE_SUB_MODEL,
        "lite.sub.reset.offset.exclusive",
        "lite.sub.reset.offset.unsubscribe",
        "lite.sub.client.max.event.cnt",
        "lite.sub.wildcard",
    }
)


class InvalidAttributesError(ValueError):
    """A change string or change set a broker refuses (its ``RuntimeException`` message)."""


def format_changes(values: Mapping[str, str]) -> str:
    """``AttributeParser.parseToString`` of ``+``-prefixed changes setting ``values``."""
    return ",".join(f"+{key}={value}" for key, value in values.items())


def parse_changes(text: str | None) -> dict[str, str]:
    """``AttributeParser.parseToMap``: ``"+a=b,-c"`` → ``{"+a": "b", "-c": ""}``.

    Raises:
        InvalidAttributesError: a ``key=value`` without ``+``, a bare key without ``-``, a
            key twice.
    """
    out: dict[str, str] = {}
    if not text:
        return out
    for part in text.split(","):
        if "=" in part:
            key, _, value = part.partition("=")
            if "+" not in key:
                raise InvalidAttributesError(f"add/alter attribute format is wrong: {key}")
        else:
            key, value = part, ""
            if "-" not in key:
                raise InvalidAttributesError(f"delete attribute format is wrong: {key}")
        if key in out:
            raise InvalidAttributesError(f"key duplication: {key}")
        out[key] = value
    return out


def alter_attributes(
    current: Mapping[str, str],
    changes: Mapping[str, str],
    *,
    create: bool,
    allowed: frozenset[str],
    rules: Mapping[str, tuple[frozenset[str] | tuple[int, int], bool]] | None = None,
) -> dict[str, str]:
    """``AttributeUtil.alterCurrentAttributes``: ``current`` with ``changes`` applied, each
    value checked against its entry of ``rules`` (``TOPIC_ATTRIBUTE_RULES``) when there is one.

    Raises:
        InvalidAttributesError: creating with a ``-`` change, removing an absent key, a key without
            a sign, a key outside ``allowed``, a key given twice, a value outside its rule's set
            or range, or a change of an unchangeable attribute (the messages are Java's).
    """
    out = dict(current)
    seen: set[str] = set()
    for key, value in changes.items():
        real = key[1:] if key[:1] in ("+", "-") else key
        if not real or "+" in real or "-" in real:
            raise InvalidAttributesError("kv string format wrong.")
        if real in seen:
            raise InvalidAttributesError(f"alter duplication key. key: {real}")
        seen.add(real)
        if real not in allowed:
            raise InvalidAttributesError(f"unsupported key: {real}")
        if key.startswith("+"):
            if rules is not None and real in rules:
                _check_value(real, value, current, rules[real])
            out[real] = value
        elif create:
            raise InvalidAttributesError(
                f"only add attribute is supported while creating topic. key: {real}"
            )
        elif key.startswith("-"):
            if real not in current:
                raise InvalidAttributesError(f"attempt to delete a nonexistent key: {real}")
            out.pop(real)
        else:
            raise InvalidAttributesError(f"wrong format key: {real}")
    return out


def _check_value(
    key: str,
    value: str,
    current: Mapping[str, str],
    rule: tuple[frozenset[str] | tuple[int, int], bool],
) -> None:
    allowed, changeable = rule
    if not changeable and key in current and current[key] != value:
        raise InvalidAttributesError(f"attempt to update an unchangeable attribute. key: {key}")
    if isinstance(allowed, frozenset):
        if value not in allowed:
            raise InvalidAttributesError(f"value is not in set: {sorted(allowed)}")
        return
    try:
        number = int(value)
    except ValueError:
        raise InvalidAttributesError(f"value is not a number: {value}") from None
    if not allowed[0] <= number <= allowed[1]:
        raise InvalidAttributesError(f"value is not in range({allowed[0]}, {allowed[1]})")
