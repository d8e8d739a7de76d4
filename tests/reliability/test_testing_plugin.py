"""The pytest plugin of aiorocket.testing: its fixtures, as an application's tests use them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from aiorocket import ConcurrentContext, Message, Producer, PushConsumer, ReceivedMessage
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import TransportError
from aiorocket.testing import ChaosProxy


async def test_an_application_test_of_redelivery(embedded_broker: EmbeddedBroker) -> None:
    """The README's example: a handler must stay correct when the broker delivers again."""
    billed: dict[str, int] = {}
    seen: list[str] = []
    consumer = PushConsumer(group="billing", namesrv=embedded_broker.address, consume_from="first")
    consumer.subscribe("orders")

    @consumer.listener
    async def bill(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        for msg in msgs:
            seen.append(msg.keys[0])
            billed.setdefault(msg.keys[0], msg.queue_offset)  # idempotent: keyed by order id

    async with Producer(namesrv=embedded_broker.address, group="shop") as producer, consumer:
        sent = await producer.send(Message("orders", b"{}", keys=["42"]))
        while not seen:
            await asyncio.sleep(0.01)
        await embedded_broker.redeliver("orders", sent.queue.queue_id, sent.queue_offset)
        while len(seen) < 2:
            await asyncio.sleep(0.01)
    assert seen == ["42", "42"]
    assert billed == {"42": sent.queue_offset}


async def test_a_broker_behind_the_chaos_proxy(
    chaos_proxy: ChaosProxy, embedded_broker: EmbeddedBroker
) -> None:
    assert embedded_broker.address == chaos_proxy.address
    assert embedded_broker.listen_address != embedded_broker.address
    async with Producer(namesrv=embedded_broker.address, group="p", send_timeout=0.5) as p:
        await p.send(Message("Proxied", b"x"))
        assert chaos_proxy.connections >= 1  # name server and broker traffic pass through it
        chaos_proxy.stall()
        t0 = time.monotonic()
        with pytest.raises(TransportError):
            await p.send(Message("Proxied", b"y"))
        assert time.monotonic() - t0 < 1.5
        chaos_proxy.heal()
        await p.send(Message("Proxied", b"z"))


def test_the_fixtures_work_in_a_project_in_strict_mode(tmp_path: Path) -> None:
    """A project that installed aiorocket gets the fixtures from the entry point, with
    pytest-asyncio in its default (strict) mode, and a conftest fixture may replace one."""
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from aiorocket.embedded import BrokerConfig

            @pytest.fixture
            def embedded_broker_config():
                return BrokerConfig(broker_name="mine")
            """
        )
    )
    (tmp_path / "test_app.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from aiorocket import Message, Producer

            @pytest.mark.asyncio
            async def test_send(embedded_broker, chaos_proxy):
                assert embedded_broker.address == chaos_proxy.address
                async with Producer(namesrv=embedded_broker.address) as p:
                    result = await p.send(Message("T", b"x"))
                assert result.queue.broker_name == "mine"
            """
        )
    )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "asyncio_mode=strict",
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout
