"""SQL92 subscriptions against the embedded broker over real loopback TCP: push, pull and App
consumers get exactly the matching messages, committed offsets move past the filtered-out
ones, a broker without property filtering refuses at start, bad expressions are refused at
subscribe."""

from __future__ import annotations

import asyncio
import warnings
from pathlib import Path

import pytest

import aiorocket as rmq
from aiorocket._consumer.pull_consumer import PullConsumer
from aiorocket._producer.producer import Producer
from aiorocket._protocol.codes import PullSysFlag, RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.message import decode_messages
from aiorocket.app import App
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.embedded.config import BrokerConfig
from aiorocket.errors import (
    BrokerSystemError,
    ConfigurationError,
    IgnoredSelectorTextWarning,
    InvalidSelectorError,
)
from aiorocket.models import Message, MessageQueue
from tests._harness.child import started_broker_cli as start_cli
from tests._harness.protocol import pull_header
from tests._harness.wait import wait_for
from tests.embedded.test_broker_kit import RawClient

from .conftest import FAST, create_topic

QUEUES = 4
EXPRESSION = "region = 'eu' AND amount > 100"


#: the broker of the SQL92 tests: property filtering on, QUEUES queues
SQL_BROKER: pytest.MarkDecorator = pytest.mark.broker(
    default_queues=QUEUES, enable_property_filter=True
)


def props(i: int) -> dict[str, str]:
    """Message ``i``'s properties: regions eu/us/none in turn, amount 10*i."""
    out = {"amount": str(10 * i)}
    if i % 3 != 2:
        out["region"] = "eu" if i % 3 == 0 else "us"
    return out


def matching(n: int) -> set[bytes]:
    """The bodies of the first ``n`` messages that EXPRESSION selects (by a plain model)."""
    return {b"m%d" % i for i in range(n) if props(i).get("region") == "eu" and 10 * i > 100}


async def produce(broker: EmbeddedBroker, topic: str, n: int) -> None:
    async with Producer(namesrv=broker.address, group="sql-producer") as producer:
        for i in range(n):
            await producer.send(Message(topic, b"m%d" % i, tags="T", properties=props(i)))


async def committed(broker: EmbeddedBroker, group: str, topic: str) -> dict[int, int | None]:
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        return {
            q: await reader.committed_offset(group, MessageQueue(topic, "broker-a", q))
            for q in range(QUEUES)
        }


async def max_offsets(broker: EmbeddedBroker, topic: str) -> dict[int, int]:
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        return {
            q: await reader.max_offset(MessageQueue(topic, "broker-a", q)) for q in range(QUEUES)
        }


@SQL_BROKER
async def test_push_consumer_gets_exactly_the_matching_messages_and_commits_past_the_rest(
    broker: EmbeddedBroker,
) -> None:
    await produce(broker, "SqlPush", 40)
    got: list[bytes] = []
    # A held pull at the queue's end answers NO_NEW_MSG when its hold ends, and only then
    # does a queue whose tail was filtered out commit past it (correctTagsOffset): hold short.
    consumer = rmq.PushConsumer(
        group="sql-push",
        namesrv=broker.address,
        consume_from="first",
        pull_suspend_timeout=0.5,
        **FAST,
    )
    consumer.subscribe("SqlPush", sql=EXPRESSION)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    want = matching(40)
    async with consumer:
        await wait_for(lambda: len(got) >= len(want), timeout=10.0, what="the matching messages")
        top = await max_offsets(broker, "SqlPush")

        async def all_committed() -> bool:
            await consumer._persist_offsets()
            return await committed(broker, "sql-push", "SqlPush") == top

        deadline = asyncio.get_running_loop().time() + 5
        while not await all_committed():
            assert asyncio.get_running_loop().time() < deadline, (
                await committed(broker, "sql-push", "SqlPush"),
                top,
            )
            await asyncio.sleep(0.1)
    assert sorted(got) == sorted(want)
    assert len(got) == len(want)  # nothing twice


@SQL_BROKER
async def test_pull_consumer_gets_exactly_the_matching_messages_and_commits_past_the_rest(
    broker: EmbeddedBroker,
) -> None:
    await produce(broker, "SqlPull", 40)
    want = matching(40)
    got: list[bytes] = []
    consumer = PullConsumer(
        group="sql-pull", namesrv=broker.address, consume_from="first", rebalance_interval=1.0
    )
    consumer.subscribe("SqlPull", sql=EXPRESSION)
    async with consumer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 8
        while len(got) < len(want) and loop.time() < deadline:
            got.extend(m.body for m in await consumer.poll(max_messages=64, timeout=0.5))
        # one more poll: nothing else may come
        got.extend(m.body for m in await consumer.poll(max_messages=64, timeout=0.5))
        await consumer.commit()
        top = await max_offsets(broker, "SqlPull")
        assert await committed(broker, "sql-pull", "SqlPull") == top
    assert sorted(got) == sorted(want)


@SQL_BROKER
async def test_new_messages_arriving_during_a_held_pull_are_filtered(
    broker: EmbeddedBroker,
) -> None:
    got: list[bytes] = []
    consumer = rmq.PushConsumer(
        group="sql-live", namesrv=broker.address, consume_from="first", **FAST
    )
    consumer.subscribe("SqlLive", sql="TAGS = 'T' AND amount BETWEEN 50 AND 150")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    await produce(broker, "SqlLive", 1)  # the topic exists before the consumer starts
    async with consumer:
        await produce(broker, "SqlLive", 20)
        want = {b"m%d" % i for i in range(20) if 50 <= 10 * i <= 150}
        await wait_for(
            lambda: len(got) >= len(want), timeout=10.0, what="the matching live messages"
        )
        await asyncio.sleep(0.2)
    assert sorted(got) == sorted(want)


@SQL_BROKER
async def test_app_subscriber_with_sql(broker: EmbeddedBroker) -> None:
    app = App(namesrv=broker.address, consumer=dict(FAST, consume_from="first"))
    got: list[str] = []

    @app.subscriber("SqlApp", group="sql-app", sql="region IN ('us') AND amount >= 200")
    async def on_msg(body: str) -> None:
        got.append(body)

    await produce(broker, "SqlApp", 30)
    want = {f"m{i}" for i in range(30) if props(i).get("region") == "us" and 10 * i >= 200}
    async with app:
        await wait_for(lambda: len(got) >= len(want), timeout=10.0, what="the matching messages")
    assert sorted(got) == sorted(want)


@pytest.mark.broker
async def test_a_broker_without_property_filtering_refuses_at_start(broker: EmbeddedBroker) -> None:
    await produce(broker, "SqlOff", 1)
    push = rmq.PushConsumer(group="sql-off", namesrv=broker.address, **FAST)
    push.subscribe("SqlOff", sql="a = 1")

    @push.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        pass

    with pytest.raises(BrokerSystemError) as info:
        async with push:
            pass
    assert "does not support consumer to filter message by SQL92" in str(info.value)
    assert "SqlOff" in str(info.value)

    pull = PullConsumer(group="sql-off-pull", namesrv=broker.address)
    pull.subscribe("SqlOff", sql="a = 1")
    with pytest.raises(BrokerSystemError, match="filter message by SQL92"):
        async with pull:
            pass


async def pull_raw(
    broker: EmbeddedBroker, subscription: str
) -> tuple[RemotingCommand, list[bytes]]:
    """PULL_MESSAGE of queue 0 from offset 0 carrying an SQL92 subscription."""
    header = pull_header(
        consumer_group="raw",
        topic="SqlRaw",
        sys_flag=int(PullSysFlag.SUBSCRIPTION),
        subscription=subscription,
        expression_type="SQL92",
    )
    async with RawClient(broker.address) as c:
        resp = await c.request(RequestCode.PULL_MESSAGE, header.to_ext())
    bodies = [r.body for r in decode_messages(resp.body)] if resp.code == 0 else []
    return resp, bodies


async def test_raw_pulls_with_an_sql92_subscription(tmp_path: Path) -> None:
    async with EmbeddedBroker(data_dir=tmp_path / "off") as off:
        await produce(off, "SqlRaw", 4)
        resp, _ = await pull_raw(off, "amount > 0")
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == "The broker does not support consumer to filter message by SQL92"
    config = BrokerConfig(default_queues=1, enable_property_filter=True)
    async with EmbeddedBroker(data_dir=tmp_path / "on", config=config) as on:
        await create_topic(on, "SqlRaw", queues=1)
        await produce(on, "SqlRaw", 4)  # amounts 0, 10, 20, 30, all on queue 0
        resp, bodies = await pull_raw(on, "amount > 10")
        assert resp.code == ResponseCode.SUCCESS
        assert bodies == [b"m2", b"m3"]
        assert resp.ext_fields["nextBeginOffset"] == "4"
        resp, _ = await pull_raw(on, "amount > 1000")
        # Nothing matched: the offset still moves past what was examined.
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
        assert resp.remark == "NO_MATCHED_MESSAGE"
        assert resp.ext_fields["nextBeginOffset"] == "4"
        resp, _ = await pull_raw(on, "amount >")
        assert resp.code == ResponseCode.SUBSCRIPTION_PARSE_FAILED


def test_bad_expressions_are_refused_at_subscribe_with_their_position() -> None:
    push = rmq.PushConsumer(group="sql-bad", namesrv="127.0.0.1:1")
    with pytest.raises(InvalidSelectorError) as info:
        push.subscribe("T", sql="region = 'eu' AND amount >")
    assert info.value.position == 26
    assert (info.value.line, info.value.column) == (1, 27)
    assert "position 26" in str(info.value)
    assert isinstance(info.value, ValueError)
    with pytest.raises(ConfigurationError, match="not both"):
        push.subscribe("T", "TagA", sql="a = 1")
    pull = PullConsumer(group="sql-bad", namesrv="127.0.0.1:1")
    with pytest.raises(InvalidSelectorError):
        pull.subscribe("T", sql="a BETWEEN 5 AND 1")
    app = App(namesrv="127.0.0.1:1")
    with pytest.raises(InvalidSelectorError):
        app.subscriber("T", group="g", sql="a = NULL")
    with pytest.raises(ConfigurationError, match="not both"):
        app.subscriber("T", group="g", tags="A", sql="a = 1")


def test_text_after_the_expression_is_accepted_with_a_warning_naming_it() -> None:
    # Java's parser stops where no rule goes on and ignores the rest; subscribe accepts the
    # selector as Java does, with a warning at the caller's line naming what is ignored.
    push = rmq.PushConsumer(group="sql-tail", namesrv="127.0.0.1:1")
    with pytest.warns(IgnoredSelectorTextWarning) as caught:
        push.subscribe("T", sql="region = 'eu' garbage")
    (w,) = caught
    assert w.filename == __file__
    assert "'garbage' after the expression is ignored" in str(w.message)
    assert "filtered by \"region = 'eu'\"" in str(w.message)
    pull = PullConsumer(group="sql-tail", namesrv="127.0.0.1:1")
    with pytest.warns(IgnoredSelectorTextWarning, match=r"'\)' after the expression"):
        pull.subscribe("T", sql="a = 1 )")
    app = App(namesrv="127.0.0.1:1")
    with pytest.warns(IgnoredSelectorTextWarning, match="'extra words'"):
        app.subscriber("T", group="g", sql="a = 1 AND b = 2 extra words")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a whole expression, comments and spaces: no warning
        push.subscribe("T2", sql="region = 'eu' /* a comment */  ")
        push.subscribe("T3", sql="a = 1 -- a line comment ends with its line\n")


async def test_cli_flag_enables_property_filtering(tmp_path: Path) -> None:
    proc, address = await start_cli(tmp_path, "--enable-property-filter")
    try:
        header = pull_header(
            consumer_group="cli",
            topic="SqlCli",
            sys_flag=int(PullSysFlag.SUBSCRIPTION),
            subscription="a = 1",
            expression_type="SQL92",
        )
        async with RawClient(address) as c:
            assert (await c.send("SqlCli", b"x")).code == 0
            resp = await c.request(RequestCode.PULL_MESSAGE, header.to_ext())
        # not refused: filtered (nothing matches), the offset moved past the message
        assert resp.code == ResponseCode.PULL_RETRY_IMMEDIATELY
    finally:
        proc.kill()
        await proc.wait()
