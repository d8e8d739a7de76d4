"""The push consumer against the embedded broker over real loopback TCP."""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict

import pytest

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.errors import ConfigurationError, TransportError
from aiorocket.models import Message
from tests._harness.send import fill_queue
from tests._harness.wait import wait_for

from .conftest import FAST, dlq_reader, push_consumer


async def test_round_trip_keeps_body_tags_keys_and_properties(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    sent = {}
    for i in range(20):
        body = (b"%d-" % i) + bytes(range(256)) * (30 if i == 7 else 1)  # #7 is compressed
        msg = Message(
            "RoundTrip",
            body,
            tags=f"tag{i % 3}",
            keys=[f"k{i}", f"order-{i}"],
            properties={"user": f"u{i}", "unicode": "ünï\u4e2d"},
        )
        result = await producer.send(msg)
        sent[result.msg_id] = msg
    got: dict[str, rmq.ReceivedMessage] = {}
    consumer = push_consumer(broker, "rt", "RoundTrip")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        for m in msgs:
            got[m.msg_id] = m

    async with consumer:
        await wait_for(lambda: len(got) == 20, timeout=10.0, what="20 messages")
    for msg_id, msg in sent.items():
        m = got[msg_id]
        assert m.topic == "RoundTrip"
        assert m.body == msg.body
        assert m.tags == msg.tags
        assert m.keys == list(msg.keys)
        assert {k: m.properties[k] for k in msg.properties} == dict(msg.properties)
        assert m.reconsume_times == 0
        assert m.broker_name == "broker-a"
        assert len(m.offset_msg_id) == 32
        assert m.offset_msg_id != m.msg_id
        assert m.store_timestamp >= m.born_timestamp > 0


async def test_tag_expression_filters_messages(broker: EmbeddedBroker, producer: Producer) -> None:
    for i in range(30):
        await producer.send(Message("Tagged", b"%d" % i, tags="ABC"[i % 3]))
    await producer.send(Message("Tagged", b"untagged"))
    got: list[str] = []
    consumer = rmq.PushConsumer(group="tags", namesrv=broker.address, **FAST)
    consumer.subscribe("Tagged", "A || C")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.tags or "" for m in msgs)

    async with consumer:
        await wait_for(lambda: len(got) >= 20, timeout=10.0, what="20 tagged messages")
        await asyncio.sleep(0.3)
        # Queues whose messages were all filtered out still move their offset on.
        stats = consumer.statistics()
    assert Counter(got) == {"A": 10, "C": 10}
    assert all(q.cached_count == 0 for q in stats.queues.values())


async def test_retry_twice_then_success_through_the_retry_topic(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    await producer.send(Message("Retry", b"flaky", keys=["flaky"]))
    seen: list[tuple[str, int, str]] = []
    consumer = push_consumer(broker, "retry", "Retry")

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
    ) -> rmq.ConsumeStatus | None:
        (m,) = msgs
        seen.append((m.topic, m.reconsume_times, ctx.queue.topic))
        if m.reconsume_times == 0:
            raise RuntimeError("first try fails")
        if m.reconsume_times == 1:
            return rmq.ConsumeStatus.RECONSUME_LATER
        return None

    async with consumer:
        await wait_for(lambda: len(seen) == 3, timeout=10.0, what="three deliveries")
        await asyncio.sleep(0.5)
        stats = consumer.statistics()
    assert [(t, r) for t, r, _ in seen] == [("Retry", 0), ("Retry", 1), ("Retry", 2)]
    # The second and third deliveries came through %RETRY%retry, shown under the real topic.
    assert [q for _, _, q in seen] == ["Retry", "%RETRY%retry", "%RETRY%retry"]
    assert len(seen) == 3
    assert stats.topics["Retry"].consumed_failed_total == 1
    assert stats.topics["%RETRY%retry"].consumed_failed_total == 1
    assert stats.topics["%RETRY%retry"].consumed_ok_total == 1


async def test_poison_message_ends_in_the_dlq_while_its_queue_flows(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = await fill_queue(
        producer, "Poison", [b"poison" if i == 3 else b"ok-%d" % i for i in range(10)]
    )
    delivered: Counter[bytes] = Counter()
    consumer = push_consumer(broker, "poison", "Poison", max_reconsume_times=2)

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        for m in msgs:
            delivered[m.body] += 1
            if m.body == b"poison":
                raise ValueError("poison")

    reader, dlq = dlq_reader(broker, "dlq-reader", "poison")

    async with consumer:
        # Every other message flows at once, the poison is retried twice (3 deliveries).
        await wait_for(lambda: sum(delivered.values()) == 12, timeout=10.0, what="deliveries")
        stats = consumer.statistics()
        assert stats.queues[queue].committed_offset == 10  # the offset passed the poison
        await asyncio.sleep(0.5)
    assert delivered[b"poison"] == 3
    assert all(delivered[b"ok-%d" % i] == 1 for i in range(10) if i != 3)
    async with reader:
        await wait_for(lambda: len(dlq) == 1, timeout=10.0, what="the DLQ message")
    assert dlq[0].body == b"poison"
    assert dlq[0].reconsume_times == 3


async def test_ack_index_retries_only_the_rest_of_a_batch(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    await fill_queue(producer, "Batch", [b"%d" % i for i in range(4)])
    calls: list[list[tuple[bytes, int]]] = []
    consumer = push_consumer(broker, "batch", "Batch", consume_batch_size=4)

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
    ) -> rmq.ConsumeStatus:
        calls.append([(m.body, m.reconsume_times) for m in msgs])
        if len(msgs) == 4:
            ctx.ack_index = 1  # 0 and 1 done; 2 and 3 go back
        return rmq.ConsumeStatus.CONSUME_SUCCESS

    async with consumer:
        await wait_for(lambda: sum(len(c) for c in calls) == 6, timeout=10.0, what="retries")
    assert calls[0] == [(b"0", 0), (b"1", 0), (b"2", 0), (b"3", 0)]
    assert sorted(x for c in calls[1:] for x in c) == [(b"2", 1), (b"3", 1)]


async def test_start_errors_reach_the_caller(broker: EmbeddedBroker) -> None:
    consumer = rmq.PushConsumer(group="errs", namesrv=broker.address)
    with pytest.raises(ConfigurationError):
        await consumer.start()  # no listener

    def sync_handler(msgs: object, ctx: object) -> None:
        pass

    with pytest.raises(ConfigurationError):
        consumer.listener(sync_handler)  # type: ignore[type-var]

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        pass

    with pytest.raises(ConfigurationError):
        await consumer.start()  # no subscription
    with pytest.raises(ConfigurationError):
        rmq.PushConsumer(group="x", namesrv=broker.address, orderly=True, lock_expiry=20.0)
    with pytest.raises(ConfigurationError):
        rmq.PushConsumer(group="x", namesrv=broker.address, pull_batch_size=0)

    dead = rmq.PushConsumer(group="dead", namesrv="127.0.0.1:1", connect_timeout=0.5)
    dead.subscribe("T")
    dead.register_listener(handle)
    with pytest.raises(TransportError):
        await dead.start()
    await dead.close()


async def test_queues_are_shared_and_rebalanced_on_join_and_leave(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    owners: dict[str, set[rmq.MessageQueue]] = defaultdict(set)
    consumers = []
    for i in range(3):
        # The periodic rebalance is 60 s away: only NOTIFY_CONSUMER_IDS_CHANGED moves queues.
        c = rmq.PushConsumer(
            group="shared",
            namesrv=broker.address,
            instance_name=f"c{i}",
            **{**FAST, "rebalance_interval": 60.0},
        )
        c.subscribe("Shared")

        async def handle(
            msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext, i: int = i
        ) -> None:
            owners[f"c{i}"].add(ctx.queue)

        c.register_listener(handle)
        consumers.append(c)

    def assignment() -> list[set[rmq.MessageQueue]]:
        return [{mq for mq in c.statistics().queues if mq.topic == "Shared"} for c in consumers]

    def settled(active: list[rmq.PushConsumer]) -> bool:
        held = [{mq for mq in c.statistics().queues if mq.topic == "Shared"} for c in active]
        union = set().union(*held)
        return len(union) == 8 and sum(len(h) for h in held) == 8

    await consumers[0].start()
    await producer.send(Message("Shared", b"x"))
    await wait_for(lambda: settled(consumers[:1]), timeout=10.0, what="one owner of all")
    await consumers[1].start()
    await consumers[2].start()
    # The broker's NOTIFY_CONSUMER_IDS_CHANGED triggers the rebalance well before 20 s.
    elapsed = await wait_for(lambda: settled(consumers), timeout=5, what="three owners")
    sizes = sorted(len(h) for h in assignment())
    assert sizes == [2, 3, 3]
    assert elapsed < 2
    await consumers[1].close()
    await wait_for(lambda: settled([consumers[0], consumers[2]]), timeout=2, what="two owners")
    assert sorted(len(h) for h in assignment()[::2]) == [4, 4]
    for c in (consumers[0], consumers[2]):
        await c.close()
