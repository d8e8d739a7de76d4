"""Push consumer: broadcasting, graceful shutdown (R2), broker restart (R3), broker requests,
consume timeout, C++ interop — against the embedded broker over real TCP."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest

import aiorocket as rmq
from aiorocket._client.instance import ClientInstance
from aiorocket._producer.producer import Producer
from aiorocket._protocol.bodies import (
    ConsumeMessageDirectlyResult,
    ConsumerRunningInfo,
    ResetOffsetBody,
)
from aiorocket._protocol.codes import RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._remoting import Connection
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.embedded.config import BrokerConfig
from aiorocket.models import Message
from aiorocket.settings import ClientSettings

from .conftest import FAST, FAST_DELAYS, consume_directly, wait_for


async def test_broadcasting_delivers_everything_to_everyone_and_keeps_local_offsets(
    broker: EmbeddedBroker, producer: Producer, tmp_path: Path
) -> None:
    got: dict[str, list[bytes]] = defaultdict(list)

    def make(name: str) -> rmq.PushConsumer:
        c = rmq.PushConsumer(
            group="bcast",
            namesrv=broker.address,
            message_model="broadcasting",
            consume_from="first",
            instance_name=name,
            offset_store_dir=tmp_path / "offsets",
            **FAST,
        )
        c.subscribe("Bcast")

        @c.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            got[name].extend(m.body for m in msgs)
            if name == "b2" and msgs[0].body == b"5":
                raise RuntimeError("broadcasting failures are dropped, not retried")

        return c

    for i in range(20):
        await producer.send(Message("Bcast", b"%d" % i))
    b1, b2 = make("b1"), make("b2")
    async with b1, b2:
        await wait_for(lambda: len(got["b1"]) == 20 and len(got["b2"]) == 20, what="both")
        assert all(mq.topic == "Bcast" for mq in b1.statistics().queues)  # no retry topic
    await asyncio.sleep(0.2)
    assert sorted(got["b1"]) == sorted(got["b2"]) == sorted(b"%d" % i for i in range(20))
    files = list((tmp_path / "offsets").rglob("offsets.json"))
    assert len(files) == 2

    for i in range(20, 30):
        await producer.send(Message("Bcast", b"%d" % i))
    got.clear()
    async with make("b1"):
        await wait_for(lambda: len(got["b1"]) == 10, what="the new messages")
        await asyncio.sleep(0.3)
    assert sorted(got["b1"]) == sorted(b"%d" % i for i in range(20, 30))


async def _broker_offsets(client: ClientInstance, group: str, topic: str) -> dict[int, int]:
    out = {}
    addr = client.master_address("broker-a")
    assert addr is not None
    for q in range(8):
        off = await client.query_consumer_offset(
            addr, group, rmq.MessageQueue(topic, "broker-a", q)
        )
        out[q] = -1 if off is None else off
    return out


async def test_graceful_shutdown_commits_exactly_what_was_delivered(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    total = 2000
    for start in range(0, total, 100):
        await producer.send_batch(
            [Message("Graceful", b"%d" % i) for i in range(start, start + 100)]
        )
    delivered: list[tuple[int, int, bytes]] = []

    def make() -> rmq.PushConsumer:
        c = rmq.PushConsumer(group="graceful", namesrv=broker.address, concurrency=16, **FAST)
        c.subscribe("Graceful")

        @c.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            for m in msgs:
                await asyncio.sleep(0.001 * (m.queue_offset % 3))
                delivered.append((m.queue_id, m.queue_offset, m.body))

        return c

    first = make()
    async with first:
        await wait_for(lambda: len(delivered) >= 500, what="500 deliveries")
    # R2: the committed offset of every queue is the last delivered offset + 1.
    last: dict[int, int] = {}
    for q, off, _ in delivered:
        last[q] = max(last.get(q, -1), off)
    client = ClientInstance(ClientSettings(namesrv=(broker.address,)))
    client.start(lambda coro: None)
    await client.fetch_route("Graceful")
    committed = await _broker_offsets(client, "graceful", "Graceful")
    await client.close()
    for q in range(8):
        assert committed[q] == last.get(q, -1) + 1, (q, committed, last)
        per_queue = sorted(off for qq, off, _ in delivered if qq == q)
        assert per_queue == list(range(len(per_queue)))  # a contiguous prefix

    second = make()
    async with second:
        await wait_for(lambda: len(delivered) >= total, what="the rest", timeout=20)
        await asyncio.sleep(0.3)
    counts = Counter(body for _, _, body in delivered)
    assert len(counts) == total  # lost = 0
    assert max(counts.values()) == 1  # duplicates = 0


@pytest.mark.slow
async def test_broker_restart_resumes_quickly_and_offsets_never_regress(
    tmp_path: Path,
) -> None:
    config = BrokerConfig(default_queues=8, delay_levels=FAST_DELAYS)
    data = tmp_path / "b"
    b1 = EmbeddedBroker(data_dir=data, config=config)
    await b1.start()
    port = b1.port
    addr = b1.address
    got: list[tuple[bytes, float]] = []
    consumer = rmq.PushConsumer(group="restart", namesrv=addr, **FAST)
    consumer.subscribe("Restart")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend((m.body, time.monotonic()) for m in msgs)

    seen: dict[int, list[int]] = defaultdict(list)
    checker = ClientInstance(ClientSettings(namesrv=(addr,), request_timeout=0.5))

    async def watch_offsets() -> None:
        while True:
            try:
                offs = await _broker_offsets(checker, "restart", "Restart")
            except rmq.RocketError:
                await asyncio.sleep(0.05)
                continue
            for q, off in offs.items():
                if off >= 0:
                    seen[q].append(off)
            await asyncio.sleep(0.05)

    try:
        async with Producer(namesrv=addr, group="p1") as p:
            for i in range(50):
                await p.send(Message("Restart", b"a%d" % i))
        async with consumer:
            checker.start(lambda coro: None)
            await checker.fetch_route("Restart")
            watcher = asyncio.create_task(watch_offsets())
            await wait_for(lambda: len(got) == 50, what="first batch")
            await asyncio.sleep(1.2)  # let offsets persist
            await b1.close()
            await asyncio.sleep(1.5)  # pulls fail and back off meanwhile
            b2 = EmbeddedBroker(port=port, data_dir=data, config=config)
            await b2.start()
            listening = time.monotonic()
            try:
                async with Producer(namesrv=addr, group="p2") as p:
                    for i in range(20):
                        await p.send(Message("Restart", b"b%d" % i))
                await wait_for(lambda: len(got) >= 70, what="after the restart", timeout=10)
                resumed = min(t for body, t in got if body.startswith(b"b"))
                assert resumed - listening <= 2.0, resumed - listening
                await asyncio.sleep(1.2)
            finally:
                await consumer.close()
                watcher.cancel()
                await b2.close()
    finally:
        await checker.close()
        await b1.close()
    assert sorted(b for b, _ in got) == sorted(
        [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(20)]
    )
    for q, offs in seen.items():
        assert offs == sorted(offs), (q, offs)  # committed offsets never went backwards


def _consumer_channel(broker: EmbeddedBroker, group: str) -> Connection:
    info = broker._groups.consumer_group(group)  # type: ignore[union-attr]
    assert info is not None
    (conn,) = [c for c in info.channels if isinstance(c, Connection)]
    return conn


async def test_answers_running_info_consume_directly_and_reset_offset(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = rmq.MessageQueue("Admin", "broker-a", 0)
    for i in range(10):
        await producer.send(Message("Admin", b"%d" % i), queue=queue)
    got: list[bytes] = []
    consumer = rmq.PushConsumer(group="admin", namesrv=broker.address, **FAST)
    consumer.subscribe("Admin")

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
    ) -> rmq.ConsumeStatus | None:
        got.extend(m.body for m in msgs)
        return rmq.ConsumeStatus.RECONSUME_LATER if msgs[0].body == b"later" else None

    async with consumer:
        await wait_for(lambda: len(got) == 10, what="10 messages")
        await asyncio.sleep(0.2)
        conn = _consumer_channel(broker, "admin")

        # GET_CONSUMER_RUNNING_INFO (307)
        resp = await conn.request(
            RemotingCommand.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO,
                {"consumerGroup": "admin", "clientId": consumer.client_id},
            )
        )
        assert resp.code == 0
        info = ConsumerRunningInfo.from_json(resp.body)
        assert info.properties["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
        assert {s.topic for s in info.subscriptions} == {"Admin", "%RETRY%admin"}
        assert info.mq_table[queue].commit_offset == 10
        # a status row per subscribed topic, as Java's (the retry topic has no traffic)
        assert set(info.status_table) == {"Admin", "%RETRY%admin"}
        resp = await conn.request(
            RemotingCommand.request(
                RequestCode.GET_CONSUMER_RUNNING_INFO,
                {"consumerGroup": "other", "clientId": consumer.client_id},
            )
        )
        assert resp.code == 1

        # CONSUME_MESSAGE_DIRECTLY (309)
        for body, expected in ((b"direct", "CR_SUCCESS"), (b"later", "CR_LATER")):
            resp = await consume_directly(conn, "admin", "Admin", body)
            assert resp.code == 0
            assert ConsumeMessageDirectlyResult.from_json(resp.body).consume_result == expected
        assert got[-2:] == [b"direct", b"later"]

        # RESET_CONSUMER_CLIENT_OFFSET (220): back to offset 5, redelivering 5..9.
        got.clear()
        await conn.send_oneway(
            RemotingCommand.request(
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET,
                {"topic": "Admin", "group": "admin", "timestamp": "0", "isForce": "true"},
                ResetOffsetBody({queue: 5}).to_json(),
                oneway=True,
            )
        )
        await wait_for(lambda: len(got) == 5, what="redelivery after the reset")
    assert sorted(got) == [b"%d" % i for i in range(5, 10)]


async def test_a_handler_over_the_consume_timeout_is_sent_back(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = rmq.MessageQueue("Stuck", "broker-a", 0)
    await producer.send(Message("Stuck", b"stuck"), queue=queue)
    await producer.send(Message("Stuck", b"next"), queue=queue)
    calls: list[tuple[bytes, int]] = []
    release = asyncio.Event()
    consumer = rmq.PushConsumer(group="stuck", namesrv=broker.address, consume_timeout=0.3, **FAST)
    consumer.subscribe("Stuck")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        m = msgs[0]
        calls.append((m.body, m.reconsume_times))
        if m.body == b"stuck" and m.reconsume_times == 0:
            await release.wait()

    async with consumer:
        await wait_for(lambda: (b"stuck", 1) in calls, what="the send-back", timeout=5)
        assert consumer.statistics().queues[queue].committed_offset == 2
        release.set()
        await asyncio.sleep(0.2)
    assert sorted(calls) == [(b"next", 0), (b"stuck", 0), (b"stuck", 1)]


_CPP_PRODUCER = textwrap.dedent(
    """
    import sys
    from rocketmq.client import Message, Producer
    producer = Producer("cpp-producer")
    producer.set_namesrv_addr(sys.argv[1])
    producer.start()
    try:
        for i in range(int(sys.argv[2])):
            msg = Message("FromCpp")
            msg.set_keys("cpp-%d" % i)
            msg.set_tags("cpp")
            msg.set_property("n", str(i))
            msg.set_body(("hello %d " % i) * (1 if i % 5 else 600))
            producer.send_sync(msg)
    finally:
        producer.shutdown()
    """
)


@pytest.mark.interop
async def test_consumes_messages_produced_by_the_cpp_client(broker: EmbeddedBroker) -> None:
    pytest.importorskip("rocketmq.client")
    n = 20
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _CPP_PRODUCER,
        broker.address,
        str(n),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode(errors="replace")
    got: dict[str, rmq.ReceivedMessage] = {}
    consumer = rmq.PushConsumer(group="from-cpp", namesrv=broker.address, **FAST)
    consumer.subscribe("FromCpp", "cpp")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        for m in msgs:
            got[m.keys[0]] = m

    async with consumer:
        await wait_for(lambda: len(got) == n, what="C++ messages")
    for i in range(n):
        m = got[f"cpp-{i}"]
        assert m.body == (b"hello %d " % i) * (1 if i % 5 else 600)  # big ones were compressed
        assert m.tags == "cpp"
        assert m.properties["n"] == str(i)
        assert m.msg_id == m.properties["UNIQ_KEY"]
