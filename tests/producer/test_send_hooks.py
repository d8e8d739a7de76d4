"""Send hooks on the embedded broker: the call-level ``send_prepare`` / ``send_done`` (what
``send_prepare`` adds travels with the message), and batches running the attempt-level hooks
and the message trace as Java runs them for a ``MessageBatch``."""

from __future__ import annotations

import pytest

import aiorocket as rmq
from aiorocket._producer.hooks import SendCallContext, SendHookContext
from aiorocket._protocol.message import decode_batch_body
from aiorocket._trace import TraceContext, TraceType
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import TopicNotExistError
from tests._harness.wait import wait_for

TOPIC = "Hooked"


pytestmark = pytest.mark.broker(default_queues=1, auto_create_topics=False)


class CallHook:
    def __init__(self) -> None:
        self.prepared: list[tuple[str, int, bool, bool]] = []
        self.done: list[tuple[list[str], str | None]] = []

    def send_prepare(self, call: SendCallContext) -> None:
        self.prepared.append((call.topic, len(call.messages), call.batch, call.oneway))
        for i, props in enumerate(call.properties):
            props["hooked"] = f"{i}"
        call.props["mark"] = 1

    def send_done(self, call: SendCallContext) -> None:
        assert call.props["mark"] == 1
        error = type(call.exception).__name__ if call.exception is not None else None
        self.done.append(([r.msg_id for r in call.results], error))


class Broken:
    def send_prepare(self, call: SendCallContext) -> None:
        raise RuntimeError("a hook bug must not fail the send")

    def send_done(self, call: SendCallContext) -> None:
        raise RuntimeError("nor after")


async def test_prepare_adds_properties_that_travel_and_done_sees_the_outcome(
    broker: EmbeddedBroker,
) -> None:
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic(TOPIC, queues=1)
    hook = CallHook()
    async with rmq.Producer(namesrv=broker.address, group="hook-pg") as producer:
        producer.register_hook(Broken())
        producer.register_hook(hook)
        one = await producer.send(rmq.Message(TOPIC, b"one"))
        await producer.send_oneway(rmq.Message(TOPIC, b"two"))
        batch = await producer.send_batch([rmq.Message(TOPIC, b"b0"), rmq.Message(TOPIC, b"b1")])
        with pytest.raises(TopicNotExistError):
            await producer.send(rmq.Message("NoSuchTopic", b"x"))
    assert hook.prepared == [
        (TOPIC, 1, False, False),
        (TOPIC, 1, False, True),
        (TOPIC, 2, True, False),
        ("NoSuchTopic", 1, False, False),
    ]
    assert hook.done == [
        ([one.msg_id], None),
        ([], None),
        ([batch[0].msg_id], None),
        ([], "TopicNotExistError"),
    ]
    got: list[rmq.ReceivedMessage] = []
    pull = rmq.PullConsumer(group="hook-reader", namesrv=broker.address, consume_from="first")
    pull.subscribe(TOPIC)
    async with pull:
        while len(got) < 4:
            got.extend(await pull.poll(10, timeout=10))
    by_body = {m.body: m.properties.get("hooked") for m in got}
    assert by_body == {b"one": "0", b"two": "0", b"b0": "0", b"b1": "1"}


class AttemptHook:
    def __init__(self) -> None:
        self.seen: list[SendHookContext] = []

    def send_before(self, ctx: SendHookContext) -> None:
        ctx.props["before"] = True

    def send_after(self, ctx: SendHookContext) -> None:
        assert ctx.props["before"] is True
        self.seen.append(ctx)


async def test_batches_run_the_attempt_hooks_and_the_message_trace(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic(TOPIC, queues=1)
    hook = AttemptHook()
    records: list[TraceContext] = []
    msgs = [rmq.Message(TOPIC, f"m{i}".encode(), keys=[f"k{i}"], tags="T") for i in range(3)]
    async with rmq.Producer(namesrv=broker.address, group="batch-pg", trace=True) as producer:
        producer.register_hook(hook)
        tracer = producer.tracer
        assert tracer is not None
        append = tracer.append

        def capture(record: TraceContext) -> bool:
            records.append(record)
            return append(record)

        monkeypatch.setattr(tracer, "append", capture)
        (result,) = await producer.send_batch(msgs)
    (ctx,) = hook.seen
    assert list(ctx.batch) == msgs
    # the sub-batch as one message, as Java's MessageBatch: its topic and encoded body
    assert ctx.message.topic == TOPIC
    assert [item.body for item in decode_batch_body(ctx.message.body)] == [m.body for m in msgs]
    assert (ctx.message.tags, ctx.message.keys) == (None, ())
    assert ctx.result == result
    assert ctx.exception is None
    assert ctx.broker_addr == broker.address
    await wait_for(lambda: records, timeout=5, what="the Pub record")
    (pub,) = [r for r in records if r.trace_type is TraceType.Pub]
    (bean,) = pub.beans
    # SendMessageTraceHookImpl on a MessageBatch: no tags or keys, the encoded body's length,
    # the batch's ids
    assert (bean.topic, bean.tags, bean.keys) == (TOPIC, None, None)
    assert bean.body_length == len(ctx.message.body)
    assert bean.msg_id == result.msg_id
    assert len(bean.msg_id.split(",")) == 3
    assert bean.offset_msg_id == result.offset_msg_id
    assert pub.group == "batch-pg"
    assert pub.success
