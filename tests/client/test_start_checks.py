"""No silent waits at start: a client pointed at a dead name server fails its start naming
every address it tried (a producer used to start fine and fail only at its first send), and
a client that is created but never started warns when it is collected, as asyncio warns of a
coroutine never awaited."""

from __future__ import annotations

import gc
import socket
import warnings
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ConnectError, NeverStartedWarning


def dead_address() -> str:
    """A loopback address nothing listens on (a port bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def on(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None: ...


def push(namesrv: Any) -> rmq.PushConsumer:
    c = rmq.PushConsumer(group="deadG", namesrv=namesrv, connect_timeout=0.5)
    c.subscribe("T")
    c.listener(on)
    return c


@pytest.mark.parametrize(
    "make",
    [
        lambda ns: rmq.Producer(namesrv=ns, group="deadP", connect_timeout=0.5),
        push,
        lambda ns: rmq.SimpleConsumer(group="deadS", namesrv=ns, connect_timeout=0.5),
    ],
    ids=["producer", "push-consumer", "simple-consumer"],
)
async def test_a_dead_name_server_fails_the_start_naming_the_addresses(make: Any) -> None:
    dead = [dead_address(), dead_address()]
    client = make(dead)
    if isinstance(client, rmq.SimpleConsumer):
        client.subscribe("T")
    with pytest.raises(ConnectError, match=r"no name server reachable within 0\.5 s") as info:
        async with client:
            pytest.fail("started against a dead name server")
    assert all(addr in str(info.value) for addr in dead), info.value
    assert "check namesrv=" in str(info.value)


async def test_a_live_name_server_after_a_dead_one_is_used(
    broker: EmbeddedBroker,
) -> None:
    async with rmq.Producer(namesrv=[dead_address(), broker.address], group="p") as p:
        await p.send(rmq.Message("T", b"x"))


def test_a_client_never_started_warns_when_collected() -> None:
    def forget_consumer() -> None:
        rmq.PushConsumer(group="neverG", namesrv="127.0.0.1:9876").subscribe("T")
        gc.collect()

    def forget_producer() -> None:
        rmq.Producer(namesrv="127.0.0.1:9876", group="neverP")
        gc.collect()

    with pytest.warns(NeverStartedWarning, match=r"PushConsumer of group 'neverG'.*never started"):
        forget_consumer()
    with pytest.warns(NeverStartedWarning, match="Producer of group 'neverP'"):
        forget_producer()


async def test_started_or_closed_clients_do_not_warn(broker: EmbeddedBroker) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", NeverStartedWarning)
        async with rmq.Producer(namesrv=broker.address, group="p") as p:
            pass
        closed = rmq.PushConsumer(group="g", namesrv=broker.address)
        await closed.close()
        del p, closed
        gc.collect()
