"""The producer against the embedded broker over real loopback TCP."""

from __future__ import annotations

import asyncio
import socket
from collections import Counter
from pathlib import Path

import pytest

from aiorocket._client.instance import ClientInstance
from aiorocket._producer.producer import Producer
from aiorocket._protocol.message import MessageRecord, decode_messages
from aiorocket.embedded import EmbeddedBroker
from aiorocket.embedded.config import BrokerConfig
from aiorocket.errors import (
    ClientClosedError,
    ConfigurationError,
    ConnectError,
    InvalidNameError,
    MessageTooLargeError,
    RocketError,
)
from aiorocket.models import Message, MessageQueue, SendStatus
from aiorocket.settings import ClientSettings
from tests._harness.clock import advance
from tests._harness.protocol import pull_header
from tests._harness.wait import wait_for


async def pull_all(namesrv: str, topic: str, *, group: str = "reader") -> list[MessageRecord]:
    """Every message of ``topic`` on every queue, read with raw PULL_MESSAGE requests."""
    client = ClientInstance(ClientSettings(namesrv=(namesrv,)))
    out: list[MessageRecord] = []
    async with asyncio.TaskGroup() as tg:
        client.start(tg.create_task)
        try:
            route = await client.fetch_route(topic)
            for mq in route.subscribe_queues(topic):
                addr = await client.find_broker(mq.broker_name, topic, master=True)
                offset = 0
                while True:
                    header = pull_header(
                        consumer_group=group,
                        topic=topic,
                        queue_id=mq.queue_id,
                        queue_offset=offset,
                        sys_flag=0x4,
                        subscription="*",
                    )
                    resp = await client.pull_message(addr, header, timeout=5)
                    if resp.code != 0:
                        break
                    out.extend(decode_messages(resp.body))
                    offset = resp.header.next_begin_offset
        finally:
            await client.close()
    return out


async def test_send_and_read_back_intact(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="pg") as producer:
        msg = Message(
            "orders",
            b'{"id": 42}',
            tags="created",
            keys=["42", "o-42"],
            properties={"color": "red", "unicode": "\u00e9t\u00e9"},
        )
        result = await producer.send(msg)
        assert result.status == SendStatus.SEND_OK
        assert len(result.msg_id) == 32
        assert len(result.offset_msg_id) == 32
        assert result.queue.topic == "orders"
        big = Message("orders", b"z" * 10_000)  # compressed on the wire
        await producer.send(big)
    got = await pull_all(broker.address, "orders")
    assert len(got) == 2
    first = next(m for m in got if m.body == b'{"id": 42}')
    assert first.properties["TAGS"] == "created"
    assert first.properties["KEYS"] == "42 o-42"
    assert first.properties["color"] == "red"
    assert first.properties["unicode"] == "\u00e9t\u00e9"
    assert first.properties["UNIQ_KEY"] == result.msg_id
    assert first.queue_id == result.queue.queue_id
    assert first.queue_offset == result.queue_offset
    assert any(m.body == b"z" * 10_000 and m.sys_flag & 1 for m in got)


async def test_a_preset_uniq_key_is_kept(broker: EmbeddedBroker) -> None:
    # MessageClientIDSetter.setUniqID keeps an id the message carries (stable ids for senders
    # that may resend, e.g. the Spark sink); others get a fresh one.
    preset = "0A0000010000000000000000000000AB"
    async with Producer(namesrv=broker.address, group="pg") as producer:
        one = await producer.send(Message.with_properties("ids", b"a", {"UNIQ_KEY": preset}))
        batch = await producer.send_batch(
            [Message.with_properties("ids", b"b", {"UNIQ_KEY": preset + "C"}), Message("ids", b"c")]
        )
    assert one.msg_id == preset
    ids = batch[0].msg_id.split(",") if len(batch) == 1 else [r.msg_id for r in batch]
    assert ids[0] == preset + "C"
    assert ids[1] not in (preset, preset + "C")
    got = {m.body: m.properties["UNIQ_KEY"] for m in await pull_all(broker.address, "ids")}
    assert got[b"a"] == preset
    assert got[b"b"] == preset + "C"


@pytest.mark.broker(default_queues=8)
async def test_sharding_key_is_stable_across_restarts_and_keyless_spread(
    broker: EmbeddedBroker,
) -> None:
    await _sharding_and_spread(broker)


async def _sharding_and_spread(broker: EmbeddedBroker) -> None:
    placements: dict[str, set[int]] = {}
    for _ in range(2):  # a second producer instance: a restart
        async with Producer(
            namesrv=broker.address, group="pg", default_topic_queue_nums=8
        ) as producer:
            for i in range(40):
                key = f"order-{i}"
                r = await producer.send(Message("sharded", f"{i}".encode()), sharding_key=key)
                placements.setdefault(key, set()).add(r.queue.queue_id)
    assert all(len(q) == 1 for q in placements.values())
    assert len({next(iter(q)) for q in placements.values()}) > 1

    async with Producer(namesrv=broker.address, group="pg", default_topic_queue_nums=8) as producer:
        window = asyncio.Semaphore(256)

        async def one(i: int) -> int:
            async with window:
                return (await producer.send(Message("spread", b"x" * 16))).queue.queue_id

        # The first send creates the topic through TBW102; the rest go to its real route.
        await producer.send(Message("spread", b"first"))
        counts = Counter(await asyncio.gather(*(one(i) for i in range(10_000))))
    assert sorted(counts) == list(range(8))
    for n in counts.values():
        assert abs(n - 1250) <= 125, counts


async def test_many_concurrent_sends_pipeline_over_one_connection(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="pg") as producer:
        results = await asyncio.gather(
            *(producer.send(Message("pipe", str(i))) for i in range(2000))
        )
        conns = producer._client._pool.connections() if producer._client._pool else {}
        assert len(conns) == 1  # name server and broker share one port here
    assert len({r.msg_id for r in results}) == 2000


async def test_batch_split_under_the_size_cap(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="pg", max_message_size=64 * 1024) as producer:
        msgs = [
            Message("batched", bytes([i % 256]) * 1000, tags="b", keys=[f"k{i}"])
            for i in range(200)
        ]
        results = await producer.send_batch(msgs)
    assert len(results) >= 3  # 200 KB in 64 KiB chunks
    ids = [i for r in results for i in r.msg_id.split(",")]
    assert len(ids) == 200 == len(set(ids))
    got = await pull_all(broker.address, "batched")
    assert sorted(m.properties["UNIQ_KEY"] for m in got) == sorted(ids)
    assert all(m.properties["TAGS"] == "b" for m in got)


@pytest.mark.broker(delay_levels=(0.2, 0.4, 0.6))
@pytest.mark.manual_clock
async def test_delay_level_is_sent_as_the_delay_property(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="pg") as producer:
        await producer.send(Message("later", b"soon"), delay_level=1)
        assert await pull_all(broker.address, "later") == []
        await advance(broker, 1.0)
    got = await pull_all(broker.address, "later")
    assert [m.body for m in got] == [b"soon"]


async def test_clear_typed_errors(broker: EmbeddedBroker) -> None:
    async with Producer(namesrv=broker.address, group="pg") as producer:
        with pytest.raises(MessageTooLargeError):
            await producer.send(Message("t", b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(InvalidNameError):
            await producer.send(Message("bad topic!", b"x"))
        with pytest.raises(ConfigurationError):
            await producer.send_batch([Message("a", b"1"), Message("b", b"2")])
        with pytest.raises(ConfigurationError):
            await producer.send(Message("t", b"x"), delay_level=99)
    with pytest.raises(ClientClosedError):
        await producer.send(Message("t", b"x"))
    with pytest.raises(ConfigurationError):
        Producer(namesrv="not-an-address", group="pg")
    with pytest.raises(ConfigurationError):
        Producer(namesrv="127.0.0.1:9876", group="pg", no_such_setting=1)


async def test_unknown_name_server_is_a_connect_error() -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    producer = Producer(namesrv=f"127.0.0.1:{port}", group="pg", connect_timeout=1, send_timeout=1)
    # the start fails, naming the address; before, the first send did
    with pytest.raises(ConnectError, match=f"127.0.0.1:{port}"):
        await producer.start()
    await producer.close()


@pytest.mark.slow
async def test_broker_restart_during_a_stream_of_sends(tmp_path: Path) -> None:
    """R12: each call returns or raises; every acknowledged message survives (sync flush);
    duplicates, if any, carry the same UNIQ_KEY."""
    data = tmp_path / "data"
    config = BrokerConfig(flush="sync")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    acked: dict[str, int] = {}
    failed = 0
    async with EmbeddedBroker(port=port, data_dir=data, config=config) as broker:
        namesrv = broker.address
        async with Producer(namesrv=namesrv, group="pg", send_timeout=1, retries=2) as producer:
            await producer.send(Message("restart", b"warm-up"))
            stop = asyncio.Event()

            async def stream() -> None:
                nonlocal failed
                i = 0
                while not stop.is_set():
                    try:
                        r = await producer.send(Message("restart", f"m{i}".encode()))
                        acked[r.msg_id] = i
                    except RocketError:
                        failed += 1
                        await asyncio.sleep(0.05)
                    i += 1

            tasks = [asyncio.create_task(stream()) for _ in range(8)]
            await asyncio.sleep(0.5)
            await broker.close()
            await asyncio.sleep(0.5)
            async with EmbeddedBroker(port=port, data_dir=data, config=config):
                # The streams go on against the restarted broker until it took a few sends.
                restarted = len(acked)
                await wait_for(
                    lambda: len(acked) >= restarted + 50, timeout=15, what="sends after restart"
                )
                stop.set()
                await asyncio.gather(*tasks)
                got = await pull_all(namesrv, "restart")
    by_key = Counter(m.properties["UNIQ_KEY"] for m in got)
    assert set(acked) <= set(by_key), "an acknowledged message was lost"
    bodies: dict[str, set[bytes]] = {}
    for m in got:
        bodies.setdefault(m.properties["UNIQ_KEY"], set()).add(m.body)
    assert all(len(b) == 1 for b in bodies.values())  # copies are copies of one message
    assert len(acked) > 50
    assert failed > 0  # the restart really interrupted the stream


def test_message_validation() -> None:
    with pytest.raises(ConfigurationError):
        Message("t", b"x", keys=["has space"])
    with pytest.raises(ConfigurationError):
        Message("t", b"x", tags="a || b")
    assert Message("t", "text").body == b"text"
    assert MessageQueue("t", "b", 1) < MessageQueue("t", "b", 2)


async def test_send_timeout_is_the_budget_of_the_whole_call(tmp_path: Path) -> None:
    """Java's sendMsgTimeout bounds the whole send, retries included: against a frozen broker
    (SIGSTOP) a send with ``send_timeout=1`` and two retries fails after about 1 s, not 3."""
    import os
    import re
    import signal
    import sys
    import time

    from aiorocket.errors import TransportError

    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *("-m", "aiorocket", "broker", "--port", "0", "--data-dir", str(tmp_path / "d")),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    try:
        address = ""
        while not address:
            line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
            assert line, "the broker exited before listening"
            if found := re.search(r"listening on (\S+:\d+)", line):
                address = found.group(1)
        async with Producer(namesrv=address, group="pg", send_timeout=1.0, retries=2) as p:
            await p.send(Message("frozen", b"warm-up"))
            os.killpg(proc.pid, signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                with pytest.raises(TransportError):
                    await p.send(Message("frozen", b"x"))
                took = time.monotonic() - t0
            finally:
                os.killpg(proc.pid, signal.SIGCONT)
        assert 0.9 <= took <= 1.5, f"the send took {took:.2f} s for a 1 s budget"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


async def test_send_result_names_the_topic_without_namespace(broker: EmbeddedBroker) -> None:
    # Java's processSendResponse strips the client namespace from the result's queue; the
    # broker stores the message under the wire topic.
    async with Producer(namesrv=broker.address, group="pg", namespace="tenant") as producer:
        result = await producer.send(Message("orders", b"x"))
        batch = await producer.send_batch([Message("orders", b"y"), Message("orders", b"z")])
    assert result.queue.topic == "orders"
    assert [r.queue.topic for r in batch] == ["orders"]
    assert len(await pull_all(broker.address, "tenant%orders")) == 3
