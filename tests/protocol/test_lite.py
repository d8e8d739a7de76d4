"""Lite topics on the wire (docs/protocol.md §12.8): names, the subscription body as the Java
beans read it, the per-record delivery counts, the attribute grammar, and the queue a lite
topic maps to (Guava's consistent hash, checked against values Guava 32 computed)."""

from __future__ import annotations

import pytest

from aiorocket._names import is_valid_lite_topic
from aiorocket._producer.publish import consistent_hash, queue_for_lite_topic
from aiorocket._protocol import fastjson
from aiorocket._protocol.attributes import (
    GROUP_ATTRIBUTES,
    TOPIC_ATTRIBUTES,
    InvalidAttributesError,
    alter_attributes,
    format_changes,
    parse_changes,
)
from aiorocket._protocol.lite import (
    LiteSubscriptionCtlRequestBody,
    LiteSubscriptionDTO,
    OffsetOption,
    is_lite_queue,
    lite_queue_name,
    parse_lite_order_counts,
    parse_lite_queue,
)
from aiorocket._protocol.tags import java_hash
from aiorocket.models import MessageQueue

# (key, {buckets: Hashing.consistentHash(key.hashCode(), buckets)}) printed by Guava 32.0.1
GUAVA = [
    ("conv-1", {1: 0, 2: 1, 3: 1, 4: 3, 8: 3, 16: 3, 100: 3}),
    ("a", {2: 0, 8: 0, 100: 29}),
    ("agent_42-reply", {2: 1, 3: 2, 4: 3, 8: 3, 16: 8, 100: 69}),
    ("", {1: 0, 100: 0}),
    ("x-0000001", {2: 1, 16: 1, 100: 54}),
    ("polygenelubricants", {2: 1, 5: 2, 7: 2, 64: 58}),  # hashCode Integer.MIN_VALUE
    ("negative-hash-zzzzzzzz", {2: 0, 5: 3, 7: 3, 64: 10}),
    ("conversation-9f3a", {2: 1, 5: 3, 7: 3, 64: 62}),
]


@pytest.mark.parametrize(("key", "expected"), GUAVA)
def test_consistent_hash_is_guavas(key: str, expected: dict[int, int]) -> None:
    assert {n: consistent_hash(java_hash(key), n) for n in expected} == expected


def test_a_lite_topic_maps_to_a_queue_by_its_name() -> None:
    queues = [MessageQueue("agents", b, q) for b in ("broker-a", "broker-b") for q in range(4)]
    assert queue_for_lite_topic(queues, "agent_42-reply") == queues[3]
    with pytest.raises(ValueError, match="positive"):
        consistent_hash(1, 0)


def test_names() -> None:
    assert lite_queue_name("agents", "c1") == "%LMQ%$agents$c1"
    assert parse_lite_queue("%LMQ%$agents$c1") == ("agents", "c1")
    for bad in ("%LMQ%agents$c1", "%LMQ%$agents", "%LMQ%$$c1", "%LMQ%$a$b$c", "agents"):
        assert parse_lite_queue(bad) is None
    assert is_lite_queue("%LMQ%$agents$c-1_X")
    assert not is_lite_queue("%LMQ%$bad topic$c1")
    assert is_valid_lite_topic("x" * 64)
    for bad in ("", "x" * 65, "a$b", "a/b", "é"):
        assert not is_valid_lite_topic(bad)


def test_subscription_body_as_java_writes_it() -> None:
    dto = LiteSubscriptionDTO(
        action="PARTIAL_ADD",
        client_id="127.0.0.1@1",
        group="g",
        topic="agents",
        lite_topic_set=("c1", "c2"),
        offset_option=OffsetOption("POLICY", 1),
    )
    body = LiteSubscriptionCtlRequestBody((dto,))
    assert fastjson.loads(body.to_json()) == {
        "subscriptionSet": [
            {
                "action": "PARTIAL_ADD",
                "clientId": "127.0.0.1@1",
                "group": "g",
                "liteTopicSet": ["c1", "c2"],
                "offsetOption": {"type": "POLICY", "value": 1},
                "topic": "agents",
                "version": 0,
            }
        ]
    }
    assert LiteSubscriptionCtlRequestBody.from_json(body.to_json()) == body
    # fastjson2 as the Java client writes an unset option and an ordinal action
    java = b'{"subscriptionSet":[{"action":2,"clientId":"c","group":"g","topic":"t"}]}'
    [read] = LiteSubscriptionCtlRequestBody.from_json(java).subscription_set
    assert (read.action, read.lite_topic_set, read.offset_option) == ("COMPLETE_ADD", (), None)


def test_order_counts() -> None:
    assert parse_lite_order_counts("0;1;2", 3) == [0, 1, 2]
    assert parse_lite_order_counts("0 qo0%5 3;x", 2) == [3, 0]
    assert parse_lite_order_counts("0;1", 3) is None  # not one per record: ignored
    assert parse_lite_order_counts(None, 1) is None


def test_attribute_changes() -> None:
    text = format_changes({"message.type": "LITE", "lite.topic.expiration": "10"})
    assert text == "+message.type=LITE,+lite.topic.expiration=10"
    assert parse_changes(text + ",-queue.type") == {
        "+message.type": "LITE",
        "+lite.topic.expiration": "10",
        "-queue.type": "",
    }
    for bad in ("message.type=LITE", "queue.type", "+a=1,+a=2"):
        with pytest.raises(InvalidAttributesError):
            parse_changes(bad)
    created = alter_attributes({}, parse_changes(text), create=True, allowed=TOPIC_ATTRIBUTES)
    assert created == {"message.type": "LITE", "lite.topic.expiration": "10"}
    altered = alter_attributes(
        created,
        {"-lite.topic.expiration": "", "+message.type": "NORMAL"},
        create=False,
        allowed=TOPIC_ATTRIBUTES,
    )
    assert altered == {"message.type": "NORMAL"}
    refused = [
        ({"-message.type": ""}, True),  # only + when creating
        ({"-queue.type": ""}, False),  # removing what is not there
        ({"+nope": "1"}, False),  # unknown
        ({"message.type": "LITE"}, False),  # no sign
    ]
    for changes, create in refused:
        with pytest.raises(InvalidAttributesError):
            alter_attributes(created, changes, create=create, allowed=TOPIC_ATTRIBUTES)
    assert alter_attributes(
        {}, {"+lite.bind.topic": "agents"}, create=True, allowed=GROUP_ATTRIBUTES
    ) == {"lite.bind.topic": "agents"}
