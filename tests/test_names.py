"""The client namespace rule (Java ``NamespaceUtil``), the name rule and the system names."""

from __future__ import annotations

import pytest

from aiorocket._names import (
    dlq_topic,
    is_valid_name,
    retry_topic,
    validate_name,
    without_namespace,
    wrap_namespace,
)
from aiorocket.errors import InvalidNameError


@pytest.mark.parametrize(
    ("name", "wire"),
    [
        ("orders", "ns%orders"),
        ("ns%orders", "ns%orders"),  # never wrapped twice
        ("other%orders", "ns%other%orders"),
        ("%RETRY%group", "%RETRY%ns%group"),
        ("%RETRY%ns%group", "%RETRY%ns%group"),
        ("%DLQ%group", "%DLQ%ns%group"),
        ("%DLQ%ns%group", "%DLQ%ns%group"),
        ("TBW102", "TBW102"),  # system topics and groups stay as they are
        ("SCHEDULE_TOPIC_XXXX", "SCHEDULE_TOPIC_XXXX"),
        ("RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_HALF_TOPIC"),
        ("rmq_sys_anything", "rmq_sys_anything"),
        ("CID_RMQ_SYS_group", "CID_RMQ_SYS_group"),
    ],
)
def test_wrap_and_unwrap_follow_namespace_util(name: str, wire: str) -> None:
    assert wrap_namespace("ns", name) == wire
    assert wrap_namespace(None, name) == name
    assert wrap_namespace("", name) == name
    if not name.startswith(("ns%", "other%", "%RETRY%ns%", "%DLQ%ns%")):
        assert without_namespace("ns", wire) == name


def test_unwrap_leaves_other_namespaces_alone() -> None:
    assert without_namespace("ns", "other%orders") == "other%orders"
    assert without_namespace("ns", "%RETRY%other%g") == "%RETRY%other%g"
    assert without_namespace("ns", "%DLQ%ns%g") == "%DLQ%g"
    assert without_namespace(None, "ns%orders") == "ns%orders"


def test_retry_and_dead_letter_topics_of_a_wire_group() -> None:
    group = wrap_namespace("ns", "billing")
    assert retry_topic(group) == "%RETRY%ns%billing"
    assert dlq_topic(group) == "%DLQ%ns%billing"
    assert dlq_topic(group) == wrap_namespace("ns", dlq_topic("billing"))


def test_the_name_rule() -> None:
    assert is_valid_name("%RETRY%a|b_c-1")
    assert not is_valid_name("")
    assert not is_valid_name("a" * 128)
    assert not is_valid_name("a.b")
    assert validate_name("ok") == "ok"
    with pytest.raises(InvalidNameError):
        validate_name("not ok", "consumer group")
