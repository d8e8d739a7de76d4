"""``TraceDispatcher``: batching, the bounded queue, failures that never reach the caller,
the flush on close; and the producer's send hooks."""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

import aiorocket as rmq
from aiorocket._client.instance import ClientInstance
from aiorocket._protocol.headers import SendMessageRequestHeader
from aiorocket._protocol.properties import decode_properties
from aiorocket._trace import TraceBean, TraceContext, TraceDispatcher, TraceType, decode_trace
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.errors import ConnectError
from aiorocket.models import MessageQueue
from tests._harness.wait import wait_for

# no trace topic and no auto-creation: every trace send fails
pytestmark = pytest.mark.broker(
    default_queues=1, trace_topic_enable=False, auto_create_topics=False
)


@dataclass
class _Route:
    queue_datas: list[Any] = field(default_factory=list)

    def publish_queues(self, topic: str) -> list[MessageQueue]:
        return [MessageQueue(topic, "broker-a", 0)]


class FakeClient:
    """What the dispatcher uses of a ClientInstance; records each trace message."""

    ip = "127.0.0.1"

    def __init__(self, *, fail: bool = False, delay: float = 0.0) -> None:
        self.sent: list[tuple[SendMessageRequestHeader, bytes]] = []
        self.fail = fail
        self.delay = delay

    def route(self, topic: str) -> _Route | None:
        return None

    async def fetch_route(self, topic: str) -> _Route:
        return _Route()

    async def refresh_route(self, topic: str) -> None:
        return None

    async def find_broker(self, name: str, topic: str, *, master: bool = False) -> str:
        return "127.0.0.1:10911"

    async def send_message(
        self, addr: str, header: SendMessageRequestHeader, body: bytes, *, timeout: float
    ) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.fail:
            raise ConnectError("down")
        self.sent.append((header, body))


def _record(i: int, topic: str = "T") -> TraceContext:
    bean = TraceBean(topic=topic, msg_id=f"ID{i}", keys=f"k{i}", store_host="h:1")
    return TraceContext(TraceType.Pub, timestamp=i, region_id="R", group="g", beans=[bean])


def _dispatcher(client: FakeClient, **kw: Any) -> TraceDispatcher:
    return TraceDispatcher(cast(ClientInstance, client), group="g", kind="PRODUCE", **kw)


async def test_batches_by_count_then_by_interval() -> None:
    client = FakeClient()
    d = _dispatcher(client, flush_interval=0.3, batch_size=10)
    task = asyncio.create_task(d.run())
    for i in range(10):
        assert d.append(_record(i))
    # a full batch goes at once; the next five wait for the interval
    await wait_for(lambda: len(client.sent) == 1, timeout=2.0, what="a full batch")
    for i in range(10, 15):
        assert d.append(_record(i))
    await asyncio.sleep(0.1)
    assert len(client.sent) == 1
    await wait_for(lambda: len(client.sent) == 2, timeout=2.0, what="the interval's batch")
    await d.close()
    await asyncio.wait_for(task, 1.0)  # run() returns once closed
    counts = [len(decode_trace(body.decode())) for _, body in client.sent]
    assert counts == [10, 5]
    header, _body = client.sent[0]
    assert header.topic == "RMQ_SYS_TRACE_TOPIC"
    assert header.producer_group.startswith("_INNER_TRACE_PRODUCER-g-PRODUCE-")
    keys = decode_properties(header.properties or "")["KEYS"].split(" ")
    # every message id and key of the batch, so QUERY_MESSAGE by key finds it
    assert keys == [x for i in range(10) for x in (f"ID{i}", f"k{i}")]


async def test_a_backlog_goes_in_fewer_bigger_messages() -> None:
    client = FakeClient()
    d = _dispatcher(client, batch_size=10)
    for i in range(25):
        assert d.append(_record(i))
    task = asyncio.create_task(d.run())
    # more than a batch waits: one batch takes them all, one trace message
    await wait_for(lambda: len(client.sent) == 1, timeout=2.0, what="the packed batch")
    await d.close()
    await asyncio.wait_for(task, 1.0)
    assert [len(decode_trace(b.decode())) for _, b in client.sent] == [25]


async def test_a_message_stops_growing_at_the_keys_budget() -> None:
    client = FakeClient()
    d = _dispatcher(client)
    for i in range(8):
        long_keys = " ".join(f"key-{i}-{j:04d}-" + "x" * 40 for j in range(100))  # ~5,000 chars
        bean = TraceBean(topic="T", msg_id=f"ID{i}", keys=long_keys)
        d.append(TraceContext(TraceType.Pub, timestamp=i, region_id="R", group="g", beans=[bean]))
    await d.close()
    sizes = [len(decode_properties(h.properties or "")["KEYS"]) for h, _ in client.sent]
    assert len(client.sent) > 1
    assert max(sizes) < 32767
    # bodies over 4 KiB go compressed, as the trace producer's would
    bodies = [zlib.decompress(b).decode() for _, b in client.sent]
    assert sum(len(decode_trace(b)) for b in bodies) == 8


async def test_grouped_per_topic_and_split_by_size() -> None:
    client = FakeClient()
    d = _dispatcher(client, max_msg_size=60, trace_topic="MyTrace", namespace="ns")
    for i in range(6):
        d.append(_record(i, topic="A" if i % 2 else "B"))
    await d.close()
    assert {h.topic for h, _ in client.sent} == {"ns%MyTrace"}
    records = [decode_trace(b.decode()) for _, b in client.sent]
    assert all(len({r.beans[0].topic for r in rs}) == 1 for rs in records)
    assert sum(len(rs) for rs in records) == 6
    assert len(client.sent) == 4  # ~40 characters a record: two, then one, per topic


async def test_close_waits_for_the_batch_in_flight() -> None:
    # The owner cancels run()'s task once close() returns (a consumer's shutdown does): a
    # batch run() was still sending must be stored first, not cut off.
    client = FakeClient(delay=0.3)
    d = _dispatcher(client, batch_size=2)
    task = asyncio.create_task(d.run())
    d.append(_record(0))
    d.append(_record(1))  # a full batch: run() starts sending it
    await wait_for(lambda: d.pending == 0, timeout=2.0, what="run() took the batch")
    assert not client.sent
    await d.close()
    task.cancel()
    assert sum(len(decode_trace(b.decode())) for _, b in client.sent) == 2


async def test_bounded_queue_drops_and_counts() -> None:
    d = _dispatcher(FakeClient(), queue_size=3)
    results = [d.append(_record(i)) for i in range(5)]
    assert results == [True, True, True, False, False]
    assert (d.dropped, d.pending) == (2, 3)


async def test_failed_sends_are_counted_not_raised() -> None:
    client = FakeClient(fail=True)
    d = _dispatcher(client, flush_interval=0.01)
    task = asyncio.create_task(d.run())
    d.append(_record(1))
    await wait_for(lambda: d.failed == 1, timeout=2.0, what="a failed send")
    assert d.append(_record(2))  # still accepting
    await d.close()
    await asyncio.wait_for(task, 1.0)
    assert (d.failed, d.sent) == (2, 0)
    assert not d.append(_record(3))  # closed: dropped
    assert d.dropped == 1


async def test_records_without_region_are_skipped() -> None:
    client = FakeClient()
    d = _dispatcher(client)
    rec = _record(1)
    rec.region_id = None
    d.append(rec)
    await d.close()
    assert client.sent == []


# -- the producer's hooks --------------------------------------------------------------------


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, bool]] = []

    def send_before(self, ctx: rmq.SendHookContext) -> None:
        ctx.props["t"] = 1

    def send_after(self, ctx: rmq.SendHookContext) -> None:
        assert ctx.props["t"] == 1
        assert ctx.cost_ms >= 0
        ok = ctx.result is not None and ctx.exception is None
        self.seen.append((ctx.message.topic, ctx.broker_addr, ok))
        raise RuntimeError("a hook bug must not fail the send")


async def test_hooks_and_a_failing_trace_never_fail_a_send(broker: EmbeddedBroker) -> None:
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic("Hooked", queues=1)
    hook = Recorder()
    async with rmq.Producer(namesrv=broker.address, group="hooked", trace=True) as producer:
        producer.register_hook(hook)
        result = await producer.send(rmq.Message("Hooked", b"x"))
        await producer.send_oneway(rmq.Message("Hooked", b"y"))
        assert result.status is rmq.SendStatus.SEND_OK
        tracer = producer.tracer
        assert tracer is not None
    assert hook.seen == [("Hooked", broker.address, True), ("Hooked", broker.address, False)]
    # the trace topic does not exist here: its send failed, quietly
    assert (tracer.sent, tracer.failed) == (0, 1)


async def test_slow_trace_sends_do_not_slow_sends() -> None:
    client = FakeClient(delay=0.5)
    d = _dispatcher(client, flush_interval=0.0)
    task = asyncio.create_task(d.run())
    loop = asyncio.get_running_loop()
    start = loop.time()
    for i in range(100):
        d.append(_record(i))
        await asyncio.sleep(0)
    assert loop.time() - start < 0.2
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
