"""The consumer's public names: exported, documented, and the models behave as values."""

from __future__ import annotations

import inspect
from datetime import datetime

import pytest

import aiorocket as rmq
from aiorocket.errors import ConfigurationError
from aiorocket.settings import ConsumerSettings, build_settings

CONSUMER_NAMES = [
    "PushConsumer",
    "ConsumeStatus",
    "ConcurrentContext",
    "ReceivedMessage",
    "ConsumeHook",
    "ConsumeHookContext",
    "ConsumerStatistics",
    "QueueStatistics",
    "TopicStatistics",
]


@pytest.mark.parametrize("name", CONSUMER_NAMES)
def test_exported_and_documented(name: str) -> None:
    assert name in rmq.__all__
    obj = getattr(rmq, name)
    assert inspect.getdoc(obj)
    if name == "PushConsumer":
        for meth in (
            "subscribe",
            "listener",
            "register_listener",
            "register_hook",
            "start",
            "close",
            "wait_closed",
            "statistics",
        ):
            doc = inspect.getdoc(getattr(obj, meth))
            assert doc, meth
            if meth not in ("statistics",):
                assert "Raises" in doc, meth


def test_consumer_settings_keep_java_defaults() -> None:
    s = build_settings(ConsumerSettings, {"namesrv": "127.0.0.1:9876", "group": "g"})
    assert (s.message_model, s.consume_from, s.allocation) == ("clustering", "last", "averagely")
    assert (s.pull_batch_size, s.consume_batch_size, s.concurrency) == (32, 1, 64)
    assert (s.pull_threshold_for_queue, s.pull_threshold_size_for_queue) == (1000, 100)
    assert (s.pull_threshold_for_topic, s.pull_threshold_size_for_topic) == (-1, -1)
    assert (s.max_span, s.pull_interval, s.effective_max_reconsume_times) == (2000, 0.0, 16)
    assert (s.consume_timeout, s.offset_persist_interval) == (900.0, 5.0)
    assert (s.heartbeat_interval, s.route_refresh_interval, s.rebalance_interval) == (30, 30, 20)
    assert (s.pull_suspend_timeout, s.pull_timeout) == (15.0, 30.0)
    for doc_name in ConsumerSettings.model_fields:
        assert doc_name in (ConsumerSettings.__doc__ or "") + (
            rmq.settings.ClientSettings.__doc__ or ""
        ), doc_name
    when = datetime(2024, 1, 1)
    assert (
        build_settings(
            ConsumerSettings, {"namesrv": "h:1", "group": "g", "consume_from": when}
        ).consume_from
        == when
    )
    for bad in (
        {"allocation": "random"},
        {"allocation": "by_config"},
        {"pull_timeout": 10.0},
        {"message_model": "p2p"},
        {"consume_from": "middle"},
    ):
        with pytest.raises(ConfigurationError):
            build_settings(ConsumerSettings, {"namesrv": "h:1", "group": "g", **bad})


def test_received_message_is_read_only() -> None:
    m = rmq.ReceivedMessage.create(
        topic="T", body=b"b", tags="t", keys=["a", "b"], msg_id="ID", store_host="10.0.0.2:10911"
    )
    assert (m.tags, m.keys, m.msg_id, m.properties["KEYS"]) == ("t", ["a", "b"], "ID", "a b")
    assert m.store_host == "10.0.0.2:10911"
    assert m.queue == rmq.MessageQueue("T", "", 0)
    with pytest.raises(AttributeError):
        m.topic = "other"  # type: ignore[misc]
    ctx = rmq.ConcurrentContext(m.queue)
    assert ctx.delay_level == 0
    assert ctx.ack_index >= 2**31 - 1
