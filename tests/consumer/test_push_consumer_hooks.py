"""Push consumer: consume hooks and the statistics they see."""

from __future__ import annotations

import asyncio

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message
from tests._harness.wait import wait_for

from .conftest import FAST


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
        await wait_for(lambda: n == 7, timeout=10.0, what="7 calls")
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
