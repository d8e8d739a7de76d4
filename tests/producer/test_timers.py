"""Timer messages and message groups from the producer's side (docs/protocol.md §12.4): the
``deliver_at`` / ``deliver_after`` arguments, their validation, the refusal of a 4.x broker,
and ``Message.message_group``; end to end against the embedded broker over loopback TCP."""

from __future__ import annotations

import asyncio
import datetime
import statistics
from pathlib import Path

import pytest

import aiorocket as rmq
from aiorocket._names import now_ms
from aiorocket._producer.producer import Producer
from aiorocket._producer.publish import queue_for_key
from aiorocket._producer.transaction import TransactionProducer, TransactionState
from aiorocket._protocol import properties as mp
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from aiorocket.embedded.topics import TIMER_TOPIC
from aiorocket.errors import ConfigurationError, MessageIllegalError, UnsupportedFeatureError
from aiorocket.models import Message, MessageQueue
from tests._harness.wait import wait_for
from tests.producer.test_producer import pull_all

UTC = datetime.UTC


def _ceil_ms(at: datetime.datetime) -> int:
    """``at`` in ms since the epoch, rounded up (what the producer sends)."""
    return -((datetime.datetime(1970, 1, 1, tzinfo=UTC) - at) // datetime.timedelta(milliseconds=1))


async def test_fifty_timers_reach_a_consumer_on_time(broker: EmbeddedBroker) -> None:
    received: list[tuple[rmq.ReceivedMessage, int]] = []
    consumer = rmq.PushConsumer(
        group="timers", namesrv=broker.address, consume_from="first", rebalance_interval=1.0
    )
    consumer.subscribe("Timers")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        at = now_ms()
        received.extend((m, at) for m in msgs)

    async with Producer(namesrv=broker.address, group="pg") as producer, consumer:
        start = datetime.datetime.now(UTC)
        # due from +0.2 s to +3 s, every 57 ms
        dues = [start + datetime.timedelta(milliseconds=200 + i * 2800 // 49) for i in range(50)]
        for i, due in enumerate(dues):
            await producer.send(Message("Timers", b"%d" % i), deliver_at=due)
        await wait_for(lambda: len(received) >= 50, timeout=15, what="50 timer messages")
        await asyncio.sleep(0.2)
    assert sorted(int(m.body) for m, _ in received) == list(range(50))
    late = []
    for m, at in received:
        due_ms = int(m.properties[mp.TIMER_DELIVER_MS])
        assert due_ms == _ceil_ms(dues[int(m.body)])
        assert at >= due_ms, "a timer message reached the consumer early"
        late.append(m.store_timestamp - due_ms)  # the broker's delivery, exact
    late.sort()
    print(
        f"lateness of 50 timers (store time - due): max {late[-1]} ms, "
        f"median {statistics.median(late)} ms"
    )
    # none early; how late is benchmarks/timer_precision.py's figure, not a test's
    assert late[0] >= 0


async def test_deliver_after_and_oneway(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="pg") as producer:
        before = now_ms()
        await producer.send(Message("After", b"sync"), deliver_after=0.3)
        await producer.send_oneway(Message("After", b"oneway"), deliver_after=0.3)
        await wait_for(lambda: broker.timers.pending == 2, timeout=5, what="two parked")
        assert await pull_all(broker.address, "After") == []
        await wait_for(lambda: broker.timers.pending == 0, timeout=5, what="both delivered")
    got = await pull_all(broker.address, "After")
    assert sorted(m.body for m in got) == [b"oneway", b"sync"]
    for m in got:
        assert int(m.properties[mp.TIMER_DELIVER_MS]) >= before + 300
        assert m.store_timestamp >= int(m.properties[mp.TIMER_DELIVER_MS])


async def test_deliver_at_is_rounded_up_to_the_millisecond(broker: EmbeddedBroker) -> None:
    base = datetime.datetime.now(UTC).replace(microsecond=0) + datetime.timedelta(seconds=30)
    at = base + datetime.timedelta(microseconds=1500)  # x.0015 s: due at x.002 s
    # the same instant in another zone is the same time
    tokyo = at.astimezone(datetime.timezone(datetime.timedelta(hours=9)))
    async with Producer(namesrv=broker.address, group="pg") as producer:
        await producer.send(Message("Round", b"a"), deliver_at=at)
        await producer.send(Message("Round", b"b"), deliver_at=tokyo)
    parked = await pull_all(broker.address, TIMER_TOPIC)
    expected = int(base.timestamp()) * 1000 + 2
    assert [int(m.properties[mp.TIMER_DELIVER_MS]) for m in parked] == [expected, expected]


async def test_timer_arguments_are_validated_before_sending(broker: EmbeddedBroker) -> None:
    soon = datetime.datetime.now(UTC) + datetime.timedelta(seconds=5)
    async with Producer(namesrv=broker.address, group="pg") as producer:
        bad: list[tuple[Message, dict[str, object]]] = [
            (Message("V", b"x"), {"deliver_at": soon, "deliver_after": 1.0}),
            (Message("V", b"x"), {"deliver_at": soon.replace(tzinfo=None)}),
            (Message("V", b"x"), {"deliver_at": soon.date()}),
            (Message("V", b"x"), {"deliver_after": -1.0}),
            (Message("V", b"x"), {"deliver_after": float("nan")}),
            (Message("V", b"x"), {"deliver_after": float("inf")}),
            (Message("V", b"x"), {"deliver_after": True}),
            (Message("V", b"x"), {"deliver_at": soon, "delay_level": 3}),
            (Message("V", b"x", delay_level=3), {"deliver_after": 1.0}),
            (Message("V", b"x"), {"deliver_after": 1.0, "sharding_key": "k"}),
            (Message("V", b"x", message_group="g"), {"deliver_after": 1.0}),
            (Message.with_properties("V", b"x", {mp.TIMER_DELAY_SEC: "5"}), {"deliver_after": 1.0}),
        ]
        for msg, kwargs in bad:
            with pytest.raises(ConfigurationError):
                await producer.send(msg, **kwargs)  # type: ignore[arg-type]
            with pytest.raises(ConfigurationError):
                await producer.send_oneway(msg, **kwargs)  # type: ignore[arg-type]
        # an explicit delay_level=0 overrides the message's level: no conflict
        await producer.send(Message("V", b"ok", delay_level=3), delay_level=0, deliver_after=5.0)
        with pytest.raises(ConfigurationError):
            await producer.send_batch(
                [Message.with_properties("V", b"x", {mp.TIMER_DELAY_MS: "9"})]
            )
        # beyond timerMaxDelaySec (3 days): the broker refuses it, as 5.3.3 does
        with pytest.raises(MessageIllegalError, match="max delay 259200000ms"):
            await producer.send(Message("V", b"x"), deliver_after=3 * 86400 + 60)
    assert broker.timers.pending == 1
    assert all(broker.store.max_offset("V", q) == 0 for q in range(8))


async def test_a_4x_broker_is_refused_a_timer_message(tmp_path: Path) -> None:
    config = BrokerConfig(remoting_version=409)  # answers as 4.9.8, ignores timers as it does
    async with (
        EmbeddedBroker(data_dir=tmp_path / "b", config=config) as broker,
        Producer(namesrv=broker.address, group="pg") as producer,
    ):
        with pytest.raises(UnsupportedFeatureError) as info:
            await producer.send(Message("Old", b"x"), deliver_after=60.0)
        assert (info.value.broker, info.value.version, info.value.needed) == (
            broker.address,
            409,
            412,
        )
        assert isinstance(info.value, ConfigurationError)
        with pytest.raises(UnsupportedFeatureError):
            await producer.send_oneway(Message("Old", b"x"), deliver_after=60.0)
        # timer properties set by hand are timer messages too
        with pytest.raises(UnsupportedFeatureError):
            await producer.send(Message.with_properties("Old", b"x", {mp.TIMER_DELAY_SEC: "60"}))
        # a broker that never answered us yet is asked with a heartbeat first
        producer._client._versions.clear()
        with pytest.raises(UnsupportedFeatureError):
            await producer.send(Message("Old", b"x"), deliver_after=60.0)
        assert producer._client.server_version(broker.address) == 409
        # nothing was sent: the first send of a topic would have created it
        assert "Old" not in broker.topics
        # everything else still goes
        await producer.send(Message("Old", b"plain"))
    async with (
        EmbeddedBroker(data_dir=tmp_path / "c") as broker,
        Producer(namesrv=broker.address, group="pg") as producer,
    ):
        producer._client._versions.clear()
        await producer.send(Message("New", b"x"), deliver_after=0.05)
        assert producer._client.server_version(broker.address) == 513


async def test_transactional_messages_refuse_timers_and_groups(broker: EmbeddedBroker) -> None:
    async def execute(msg: Message, arg: object) -> TransactionState:
        return TransactionState.COMMIT

    async def check(msg: rmq.ReceivedMessage) -> TransactionState:
        return TransactionState.COMMIT

    async with TransactionProducer(
        namesrv=broker.address, group="tx", execute_local=execute, check=check
    ) as producer:
        for msg in (
            Message("Tx", b"x", message_group="g"),
            Message.with_properties("Tx", b"x", {mp.TIMER_DELIVER_MS: str(now_ms() + 5000)}),
        ):
            with pytest.raises(ConfigurationError):
                await producer.send_in_transaction(msg)
        result = await producer.send_in_transaction(Message("Tx", b"ok"))
        assert result.state is TransactionState.COMMIT
        # the ordinary sends of a transactional producer take timers like any producer
        await producer.send(Message("Tx", b"later"), deliver_after=0.05)
    assert broker.store.max_offset("RMQ_SYS_TRANS_HALF_TOPIC", 0) == 1


async def test_message_group_is_the_sharding_key(broker: EmbeddedBroker) -> None:
    with pytest.raises(ConfigurationError):
        Message("G", b"x", message_group=" ")
    with pytest.raises(ConfigurationError):
        Message("G", b"x", message_group="a\x01b")
    async with Producer(namesrv=broker.address, group="pg") as producer:
        queues: dict[str, set[MessageQueue]] = {}
        for i in range(40):
            group = f"order-{i % 5}"
            result = await producer.send(Message("Grouped", b"%d" % i, message_group=group))
            queues.setdefault(group, set()).add(result.queue)
        # the same key passed both ways is fine; different keys are not
        await producer.send(
            Message("Grouped", b"same", message_group="order-0"), sharding_key="order-0"
        )
        with pytest.raises(ConfigurationError):
            await producer.send(Message("Grouped", b"x", message_group="a"), sharding_key="b")
        # a batch: one common group, carried by every message
        await producer.send_batch([Message("Grouped", b"b", message_group="order-1")] * 3)
        with pytest.raises(ConfigurationError):
            await producer.send_batch(
                [Message("Grouped", b"b", message_group="a"), Message("Grouped", b"b")]
            )
        with pytest.raises(ConfigurationError):
            await producer.send_batch(
                [Message("Grouped", b"b", message_group="a")], sharding_key="b"
            )
        info = await producer._publish_info("Grouped")
    assert all(len(qs) == 1 for qs in queues.values())  # each group keeps to one queue
    for group, qs in queues.items():
        [mq] = qs
        assert mq.queue_id == queue_for_key(info.queues, group).queue_id  # as sharding_key does
    got = await pull_all(broker.address, "Grouped")
    assert len(got) == 44
    for m in got:
        key = m.properties[mp.SHARDING_KEY]
        assert m.queue_id == queue_for_key(info.queues, key).queue_id
        if m.body.isdigit():
            assert key == f"order-{int(m.body) % 5}"
