"""Push consumer: hooks, statistics, per-topic thresholds, namespace, OFFSET_ILLEGAL."""

from __future__ import annotations

import asyncio

import pytest

import aiorocket as rmq
from aiorocket._client.instance import ClientInstance
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message
from aiorocket.settings import ClientSettings

from .conftest import FAST, wait_for


class Recorder:
    def __init__(self) -> None:
        self.before: list[int] = []
        self.after: list[tuple[str, bool, str]] = []

    def consume_before(self, ctx: rmq.ConsumeHookContext) -> None:
        self.before.append(len(ctx.messages))
        ctx.props["seen"] = True

    def consume_after(self, ctx: rmq.ConsumeHookContext) -> None:
        assert ctx.props["seen"] is True
        assert ctx.status is not None
        self.after.append((ctx.status.value, ctx.success, ctx.return_type))


class Broken:
    def consume_before(self, ctx: rmq.ConsumeHookContext) -> None:
        raise RuntimeError("a hook bug must not stop consumption")

    def consume_after(self, ctx: rmq.ConsumeHookContext) -> None:
        raise RuntimeError("nor here")


async def test_hooks_and_statistics(broker: EmbeddedBroker, producer: Producer) -> None:
    for i in range(5):
        await producer.send(Message("Hooked", b"%d" % i))
    hook = Recorder()
    consumer = rmq.PushConsumer(group="hooked", namesrv=broker.address, **FAST)
    consumer.subscribe("Hooked")
    consumer.register_hook(hook)
    consumer.register_hook(Broken())
    n = 0

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
    ) -> rmq.ConsumeStatus | None:
        nonlocal n
        n += 1
        if msgs[0].body == b"3" and msgs[0].reconsume_times == 0:
            raise ValueError("fails once")
        if msgs[0].body == b"4" and msgs[0].reconsume_times == 0:
            return rmq.ConsumeStatus.RECONSUME_LATER
        return None

    async with consumer:
        await wait_for(lambda: n == 7, what="7 calls")
        await asyncio.sleep(0.2)
        stats = consumer.statistics()
    assert hook.before == [1] * 7
    assert sorted(hook.after) == sorted(
        [("CONSUME_SUCCESS", True, "SUCCESS")] * 5
        + [("RECONSUME_LATER", False, "EXCEPTION"), ("RECONSUME_LATER", False, "FAILED")]
    )
    t = stats.topics["Hooked"]
    assert (t.pulled_total, t.consumed_ok_total, t.consumed_failed_total) == (5, 3, 2)
    assert t.pull_tps > 0
    assert t.consume_ok_tps > 0
    assert stats.topics["%RETRY%hooked"].consumed_ok_total == 2
    assert stats.rebalances >= 1
    queues = [q for mq, q in stats.queues.items() if mq.topic == "Hooked"]
    assert len(queues) == 8
    assert sum(q.committed_offset for q in queues if q.committed_offset > 0) == 5
    assert all(q.cached_count == 0 for q in queues)
    assert all(q.last_pull_time > 1e9 for q in queues)  # epoch seconds


async def test_topic_thresholds_are_shared_by_its_queues(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    for q in range(8):
        mq = rmq.MessageQueue("TopicCap", "broker-a", q)
        await producer.send_batch([Message("TopicCap", b"x") for _ in range(60)], queue=mq)
    release = asyncio.Event()
    consumer = rmq.PushConsumer(
        group="topic-cap",
        namesrv=broker.address,
        pull_threshold_for_topic=40,  # 40 / 8 queues = 5 per queue
        pull_batch_size=8,
        concurrency=2,
        **FAST,
    )
    consumer.subscribe("TopicCap")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        await release.wait()

    async with consumer:
        await wait_for(
            lambda: (
                sum(
                    q.cached_count
                    for mq, q in consumer.statistics().queues.items()
                    if mq.topic == "TopicCap"
                )
                >= 8 * 6
            ),
            what="every queue filled up to its share",
        )
        await asyncio.sleep(0.2)
        cached = [
            q.cached_count
            for mq, q in consumer.statistics().queues.items()
            if mq.topic == "TopicCap"
        ]
        release.set()
    assert all(c <= 5 + 8 for c in cached), cached


async def test_namespace_is_applied_on_the_wire_and_hidden_from_handlers(
    broker: EmbeddedBroker,
) -> None:
    async with Producer(namesrv=broker.address, group="p", namespace="tenant") as producer:
        await producer.send(Message("Spaced", b"hello"))
    seen: list[tuple[str, int]] = []
    consumer = rmq.PushConsumer(group="spaced", namesrv=broker.address, namespace="tenant", **FAST)
    consumer.subscribe("Spaced")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        seen.append((msgs[0].topic, msgs[0].reconsume_times))
        if msgs[0].reconsume_times == 0:
            raise RuntimeError("retry me")

    async with consumer:
        await wait_for(lambda: len(seen) == 2, what="delivery and retry")
        wire = {mq.topic for mq in consumer.statistics().queues}
    assert seen == [("Spaced", 0), ("Spaced", 1)]
    assert wire == {"tenant%Spaced", "%RETRY%tenant%spaced"}


async def test_offset_illegal_resets_to_the_broker_offset(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = rmq.MessageQueue("Illegal", "broker-a", 0)
    for i in range(3):
        await producer.send(Message("Illegal", b"old-%d" % i), queue=queue)
    # A committed offset far beyond the queue's end: the pull answers OFFSET_ILLEGAL (21).
    client = ClientInstance(ClientSettings(namesrv=(broker.address,)))
    client.start(lambda coro: None)
    await client.fetch_route("Illegal")
    addr = client.master_address("broker-a")
    assert addr is not None
    await client.update_consumer_offset(addr, "illegal", queue, 1000, oneway=False)
    await client.close()
    got: list[bytes] = []
    consumer = rmq.PushConsumer(
        group="illegal", namesrv=broker.address, offset_illegal_delay=0.2, **FAST
    )
    consumer.subscribe("Illegal")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    async with consumer:
        # The queue is re-added at nextBeginOffset (the queue's max, 3): nothing old again.
        await wait_for(
            lambda: (
                consumer.statistics().queues.get(queue) is not None
                and consumer.statistics().queues[queue].committed_offset == 3
            ),
            what="the corrected offset",
        )
        await producer.send(Message("Illegal", b"new"), queue=queue)
        await wait_for(lambda: got == [b"new"], what="the new message")


class Bug(BaseException):
    """Stands for a programming error the consumer does not expect."""


async def test_an_unexpected_error_crashes_the_consumer_loudly(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    await producer.send(Message("Crash", b"boom"))
    consumer = rmq.PushConsumer(group="crash", namesrv=broker.address, **FAST)
    consumer.subscribe("Crash")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        raise Bug("not an ordinary handler failure")

    async def start_and_wait() -> None:
        # The bug may strike during start-up (then start() raises it) or just after.
        await consumer.start()
        await asyncio.wait_for(consumer.wait_closed(), 10)

    with pytest.raises(BaseExceptionGroup) as info:
        await start_and_wait()
    assert info.value.subgroup(Bug) is not None
    await consumer.close()  # already stopped: a no-op

    await producer.send(Message("Crash2", b"boom"))
    late = rmq.PushConsumer(group="crash2", namesrv=broker.address, **FAST)
    late.subscribe("Crash2")
    gate = asyncio.Event()

    @late.listener
    async def handle_late(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        await gate.wait()
        raise Bug("after start-up")

    await late.start()
    gate.set()
    with pytest.raises(BaseExceptionGroup) as info:
        await asyncio.wait_for(late.wait_closed(), 10)
    assert info.value.subgroup(Bug) is not None


async def test_acl_credentials_sign_every_request(tmp_path: object) -> None:
    from aiorocket.embedded.config import BrokerConfig

    config = BrokerConfig(access_key="ak", secret_key="sk-secret")
    async with EmbeddedBroker(config=config) as secured:
        async with Producer(
            namesrv=secured.address, group="p", access_key="ak", secret_key="sk-secret"
        ) as producer:
            await producer.send(Message("Secured", b"signed"))
        got: list[bytes] = []
        consumer = rmq.PushConsumer(
            group="acl", namesrv=secured.address, access_key="ak", secret_key="sk-secret", **FAST
        )
        consumer.subscribe("Secured")

        @consumer.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            got.extend(m.body for m in msgs)

        async with consumer:
            await wait_for(lambda: got == [b"signed"], what="the signed message")


async def test_wrong_acl_credentials_raise_access_denied() -> None:
    from aiorocket.embedded.config import BrokerConfig
    from aiorocket.errors import AccessDeniedError

    config = BrokerConfig(access_key="ak", secret_key="sk-secret")
    async with EmbeddedBroker(config=config) as secured:
        async with Producer(
            namesrv=secured.address, group="p", access_key="ak", secret_key="sk-secret"
        ) as producer:
            await producer.send(Message("Secured", b"signed"))
        async with Producer(
            namesrv=secured.address, group="p", access_key="ak", secret_key="wrong"
        ) as producer:
            # typed, one line with the broker's reason, and not retried
            with pytest.raises(AccessDeniedError, match="Check signature failed") as info:
                await producer.send(Message("Secured", b"refused"))
        assert not info.value.retriable
        # only the signed message was stored (four queues: the producer's default)
        assert sum(secured.store.max_offset("Secured", q) for q in range(4)) == 1
        consumer = rmq.PushConsumer(
            group="acl", namesrv=secured.address, access_key="who", secret_key="x", **FAST
        )
        consumer.subscribe("Secured")

        @consumer.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            raise AssertionError("refused")

        with pytest.raises(AccessDeniedError, match="No acl config for who"):
            await consumer.start()
        await consumer.close()
