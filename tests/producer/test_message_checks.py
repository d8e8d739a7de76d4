"""What a ``Message`` refuses at construction, naming the mistake and the fix: a body that is
neither bytes nor text (a ``dict``), user properties named after system properties (Java's
``Message.putUserProperty`` refuses ``MessageConst.STRING_HASH_SET``), and the groups brokers
reserve (``MixAll.PREDEFINE_GROUP_SET``; Java's ``checkConfig`` refuses ``DEFAULT_CONSUMER``)."""

from __future__ import annotations

import pytest

import aiorocket as rmq
from aiorocket.errors import ConfigurationError, InvalidNameError

NS = "127.0.0.1:9876"


def test_a_dict_body_is_refused_with_the_fix() -> None:
    with pytest.raises(ConfigurationError, match=r"bytes or str, not dict; encode it first"):
        rmq.Message("orders", {"a": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not int"):
        rmq.Message("orders", 42)  # type: ignore[arg-type]
    assert rmq.Message("orders", bytearray(b"x")).body == b"x"
    assert rmq.Message("orders", memoryview(b"y")).body == b"y"


@pytest.mark.parametrize(
    ("name", "fix"),
    [
        ("DELAY", "delay_level"),
        ("TAGS", "tags="),
        ("KEYS", "keys="),
        ("UNIQ_KEY", "another name"),
        ("WAIT", "another name"),
        ("__SHARDINGKEY", "message_group"),
        ("TIMER_DELIVER_MS", "deliver_at"),
        ("PGROUP", "another name"),
    ],
)
def test_system_property_names_are_refused(name: str, fix: str) -> None:
    with pytest.raises(ConfigurationError, match=f"{name}.*system property.*{fix}"):
        rmq.Message("orders", b"x", properties={name: "2"})


def test_user_properties_must_be_named_and_text() -> None:
    with pytest.raises(ConfigurationError, match="non-blank"):
        rmq.Message("orders", b"x", properties={" ": "v"})
    with pytest.raises(ConfigurationError, match=r"values must be str, not int \(use str\(1\)\)"):
        rmq.Message("orders", b"x", properties={"a": 1})  # type: ignore[dict-item]
    assert rmq.Message("orders", b"x", properties={"delay": "2"}).properties == {"delay": "2"}


def test_with_properties_forwards_system_names() -> None:
    msg = rmq.Message.with_properties("orders", b"x", {"UNIQ_KEY": "U1", "a": "b"}, tags="t")
    assert msg.properties == {"UNIQ_KEY": "U1", "a": "b"}
    assert msg.tags == "t"


@pytest.mark.parametrize(
    "group", ["DEFAULT_CONSUMER", "TOOLS_CONSUMER", "SCHEDULE_CONSUMER", "CID_RMQ_SYS_X"]
)
def test_reserved_consumer_groups_are_refused(group: str) -> None:
    with pytest.raises(InvalidNameError, match=f"{group}.*reserved by the broker"):
        rmq.PushConsumer(group=group, namesrv=NS)
    with pytest.raises(InvalidNameError, match="reserved"):
        rmq.PullConsumer(group=group, namesrv=NS)
    with pytest.raises(InvalidNameError, match="reserved"):
        rmq.SimpleConsumer(group=group, namesrv=NS)
    app = rmq.App(namesrv=NS)
    with pytest.raises(InvalidNameError, match="reserved"):

        @app.subscriber("orders", group=group)
        async def handle(body: bytes) -> None: ...


def test_reserved_producer_groups_are_refused_but_the_default() -> None:
    with pytest.raises(InvalidNameError, match=r"TOOLS_CONSUMER.*reserved"):
        rmq.Producer(namesrv=NS, group="TOOLS_CONSUMER")
    assert rmq.Producer(namesrv=NS).settings.group == "DEFAULT_PRODUCER"
