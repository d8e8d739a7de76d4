"""The broker's pure parts without sockets: settings, locks, groups, held pulls, topics."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from aiorocket._protocol.bodies import ConsumerData, SubscriptionData
from aiorocket.embedded import (
    DEFAULT_DELAY_LEVELS,
    BrokerConfig,
    EmbeddedBroker,
    parse_delay_levels,
)
from aiorocket.embedded.groups import ClientGroups
from aiorocket.embedded.locks import QueueLocks
from aiorocket.embedded.long_polling import PullWaiters
from aiorocket.embedded.send import born_ipv4
from aiorocket.embedded.topics import TopicTable, is_valid_name
from aiorocket.errors import ConfigurationError
from aiorocket.models import MessageQueue
from tests.embedded.test_broker_kit import running_broker


def test_delay_levels_parse_and_default() -> None:
    assert parse_delay_levels("1s 5s 1m 2h 100ms 1d") == (1, 5, 60, 7200, 0.1, 86400)
    assert len(DEFAULT_DELAY_LEVELS) == 18
    assert DEFAULT_DELAY_LEVELS[2] == 10
    assert DEFAULT_DELAY_LEVELS[-1] == 7200
    for bad in ("", "5", "1x", "-1s"):
        with pytest.raises(ConfigurationError):
            parse_delay_levels(bad)


@pytest.mark.parametrize(
    "options",
    [
        {"flush": "never"},
        {"flush_interval": 0.6},
        {"max_pull_messages": 31},
        {"default_queues": 0},
        {"delay_levels": ()},
        {"delay_levels": (1.0, 0.0)},
        {"lock_lease": 0},
        {"access_key": "ak"},
        {"access_key": "", "secret_key": ""},
        {"max_message_size": 20 * 1024 * 1024},
        {"broker_name": "a b"},
        {"advertised_host": "0.0.0.0.0"},
        {"advertised_host": "::1"},
    ],
)
def test_config_refuses_out_of_range_values(options: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        BrokerConfig(**options)  # type: ignore[arg-type]


def test_config_defaults_follow_a_4_9_8_broker() -> None:
    c = BrokerConfig()
    assert (c.lock_lease, c.channel_expiry, c.max_reconsume_times) == (60.0, 120.0, 16)
    assert (c.max_message_size, c.max_pull_messages, c.default_queues) == (4 << 20, 32, 4)
    assert c.flush == "async"
    assert c.flush_interval <= 0.5
    assert not c.acl_enabled
    assert "secret" not in repr(BrokerConfig(access_key="a", secret_key="secret"))


def test_names() -> None:
    for ok in ("T", "%RETRY%g", "a|b", "A-b_9", "x" * 127):
        assert is_valid_name(ok)
    for bad in ("", "x" * 128, "a b", "a/b", "..", "é", "a\x00"):
        assert not is_valid_name(bad)
    assert born_ipv4("10.0.0.1") == "10.0.0.1"
    assert born_ipv4("::ffff:10.0.0.2") == "10.0.0.2"
    assert born_ipv4("::1") == "127.0.0.1"


def test_lock_table() -> None:
    locks = QueueLocks(lease=10)
    a, b = MessageQueue("T", "b", 0), MessageQueue("T", "b", 1)
    assert locks.try_lock("G", [a, b], "c1", now=0) == [a, b]
    assert locks.try_lock("G", [a, b], "c2", now=5) == []
    assert locks.try_lock("G2", [a], "c2", now=5) == [a]  # per group
    assert locks.try_lock("G", [a], "c1", now=9) == [a]  # renewal
    assert locks.try_lock("G", [a, b], "c2", now=10.5) == [b]  # b expired, a renewed at 9
    assert locks.holder("G", a, now=11) == "c1"
    locks.unlock("G", [a], "c2")
    assert locks.holder("G", a, now=11) == "c1"
    locks.unlock("G", [a], "c1")
    assert locks.holder("G", a, now=11) is None
    assert locks.expire(now=100) == 2


def _consumer(group: str, *topics: str, expr: str = "*", version: int = 1) -> ConsumerData:
    subs = tuple(SubscriptionData(t, expr, (), (), version) for t in topics)
    return ConsumerData(group, "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_LAST_OFFSET", subs)


def test_group_membership_and_notifications() -> None:
    calls: list[tuple[str, list[object]]] = []
    groups = ClientGroups(notify=lambda g, chs: calls.append((g, list(chs))))
    reg = groups.register_consumer
    assert reg("ch1", client_id="c1", language="JAVA", version=409, data=_consumer("G", "T"), now=0)
    assert calls == [("G", ["ch1"])]
    assert not reg(
        "ch1", client_id="c1", language="JAVA", version=409, data=_consumer("G", "T"), now=1
    )
    # a changed expression (a resubscribe: a newer subVersion) is not a membership change,
    # but it is applied
    assert not reg(
        "ch1",
        client_id="c1",
        language="JAVA",
        version=409,
        data=_consumer("G", "T", expr="A", version=2),
        now=1,
    )
    sub = groups.subscription("G", "T")
    assert sub is not None
    assert sub.tag_filter is not None
    assert not sub.tag_filter.matches_code(0)
    assert reg("ch2", client_id="c2", language="CPP", version=333, data=_consumer("G", "T"), now=2)
    assert groups.consumer_ids("G") == ["c1", "c2"]
    assert sorted(map(str, groups.expire(now=100, max_idle=50))) == ["ch1", "ch2"]
    assert groups.consumer_ids("G") == []
    assert calls[-1] == ("G", [])


def test_only_a_newer_sub_version_replaces_a_group_subscription() -> None:
    # ConsumerGroupInfo.updateSubscription replaces only on a greater subVersion. Members of a
    # group subscribed at different times (Java: the subscribe time in ms) send different
    # versions; the newest must stay, or its pulls (which carry its version and no
    # subscription) are answered SUBSCRIPTION_NOT_LATEST and the Java client backs off 3 s.
    groups = ClientGroups(notify=lambda g, chs: None)
    # heartbeats of two members, the newer subscriber first; the older also changed its
    # expression without a newer version
    for channel, version, expr in (("new", 200, "*"), ("old", 100, "*"), ("old", 100, "X")):
        groups.register_consumer(
            channel,
            client_id=channel,
            language="JAVA",
            version=409,
            data=_consumer("G", "T", expr=expr, version=version),
            now=0,
        )
    sub = groups.subscription("G", "T")
    assert sub is not None
    assert (sub.data.sub_version, sub.data.sub_string) == (200, "*")


def test_expired_channel_still_registered_elsewhere_is_not_closed() -> None:
    groups = ClientGroups(notify=lambda g, chs: None)
    groups.register_consumer(
        "ch", client_id="c", language="JAVA", version=409, data=_consumer("G1", "T"), now=0
    )
    groups.register_producer("ch", group="P", client_id="c", language="JAVA", version=409, now=90)
    assert groups.expire(now=100, max_idle=50) == []  # the producer registration is fresh
    assert groups.consumer_ids("G1") == []
    assert groups.producer_groups() == ["P"]
    assert groups.channel_closed("ch") == []
    assert groups.producer_groups() == []


async def test_pull_waiters() -> None:
    waiters = PullWaiters()
    only_seven = asyncio.create_task(
        waiters.wait("T", 0, 5, matches=lambda code: code == 7, timeout=5)
    )
    any_tag = asyncio.create_task(waiters.wait("T", 0, 5, matches=None, timeout=5))
    await asyncio.sleep(0)
    assert len(waiters) == 2
    assert waiters.notify("T", 0, 4, 7) == 0  # below the requested offset
    assert waiters.notify("T", 1, 5, 7) == 0  # another queue
    assert waiters.notify("T", 0, 5, 3) == 1  # only the match-all one
    assert await any_tag is True
    assert not only_seven.done()
    assert waiters.notify("T", 0, 6, 7) == 1
    assert await only_seven is True
    assert len(waiters) == 0
    assert await waiters.wait("T", 0, 0, matches=None, timeout=0.01) is False
    cancelled = asyncio.create_task(waiters.wait("T", 0, 0, matches=None, timeout=5))
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert len(waiters) == 0


def test_topic_table_persists_and_auto_creates(tmp_path: Path) -> None:
    path = tmp_path / "topics.json"
    table = TopicTable(path, config=BrokerConfig())
    assert table.is_system("TBW102")
    assert not path.exists()
    made = table.create_on_send("Made", "TBW102", 16)
    assert made is not None
    assert (made.write_queue_nums, made.perm) == (8, 6)  # min(16, TBW102's 8), INHERIT dropped
    assert table.create_on_send("Other", "NoTemplate", 4) is None
    retry = table.create_on_send("%RETRY%G", "NoTemplate", 4)
    assert retry is not None
    assert retry.queue_count == 1
    assert set(json.loads(path.read_text())["topicConfigTable"]) == {"Made", "%RETRY%G"}
    again = TopicTable(path, config=BrokerConfig(auto_create_topics=False))
    again.load()
    assert again.get("Made") == made
    assert again.get("TBW102") is None
    assert again.create_on_lookup("Nope") is None
    with pytest.raises(ValueError, match="invalid topic name"):
        table.ensure("bad name", 1)


async def test_a_data_dir_serves_one_broker_and_ports_must_be_free(tmp_path: Path) -> None:
    async with running_broker(tmp_path) as broker:
        with pytest.raises(ConfigurationError, match="in use"):
            await EmbeddedBroker(data_dir=tmp_path).start()
        port = int(broker.address.rsplit(":", 1)[1])
        with pytest.raises(OSError):
            await EmbeddedBroker(port=port).start()
    with pytest.raises(ConfigurationError):
        EmbeddedBroker(host="::1")
    with pytest.raises(ConfigurationError):
        EmbeddedBroker(port=70000)


async def test_temporary_data_dir_is_removed_at_exit() -> None:
    async with running_broker() as broker:
        data_dir = broker.data_dir
        assert data_dir.exists()
    assert not data_dir.exists()
