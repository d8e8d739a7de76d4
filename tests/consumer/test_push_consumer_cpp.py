"""Push consumer: consuming what the C++ client (rocketmq-client-python) produced."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

import aiorocket as rmq
from aiorocket.embedded.broker import EmbeddedBroker
from tests._harness.wait import wait_for

from .conftest import FAST

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
        await wait_for(lambda: len(got) == n, timeout=10.0, what="C++ messages")
    for i in range(n):
        m = got[f"cpp-{i}"]
        assert m.body == (b"hello %d " % i) * (1 if i % 5 else 600)  # big ones were compressed
        assert m.tags == "cpp"
        assert m.properties["n"] == str(i)
        assert m.msg_id == m.properties["UNIQ_KEY"]
