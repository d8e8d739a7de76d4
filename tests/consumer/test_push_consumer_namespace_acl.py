"""Push consumer: the namespace and ACL credentials on the wire."""

from __future__ import annotations

import pytest

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.errors import AccessDeniedError
from aiorocket.models import Message
from tests._harness.wait import wait_for

from .conftest import push_consumer

#: a broker enforcing ACL: access key "ak", secret "sk-secret"
ACL: pytest.MarkDecorator = pytest.mark.broker(access_key="ak", secret_key="sk-secret")


@pytest.fixture
async def secured(broker: EmbeddedBroker) -> EmbeddedBroker:
    """The ``broker`` of an :data:`ACL` test, holding one message, ``b"signed"`` of topic
    Secured."""
    assert broker.config.access_key == "ak", "a test on secured is marked ACL"
    async with Producer(
        namesrv=broker.address, group="p", access_key="ak", secret_key="sk-secret"
    ) as producer:
        await producer.send(Message("Secured", b"signed"))
    return broker


async def test_namespace_is_applied_on_the_wire_and_hidden_from_handlers(
    broker: EmbeddedBroker,
) -> None:
    async with Producer(namesrv=broker.address, group="p", namespace="tenant") as producer:
        await producer.send(Message("Spaced", b"hello"))
    seen: list[tuple[str, int]] = []
    consumer = push_consumer(broker, "spaced", "Spaced", namespace="tenant")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        seen.append((msgs[0].topic, msgs[0].reconsume_times))
        if msgs[0].reconsume_times == 0:
            raise RuntimeError("retry me")

    async with consumer:
        await wait_for(lambda: len(seen) == 2, timeout=10.0, what="delivery and retry")
        wire = {mq.topic for mq in consumer.statistics().queues}
    assert seen == [("Spaced", 0), ("Spaced", 1)]
    assert wire == {"tenant%Spaced", "%RETRY%tenant%spaced"}


@ACL
async def test_acl_credentials_sign_every_request(secured: EmbeddedBroker) -> None:
    got: list[bytes] = []
    consumer = push_consumer(secured, "acl", "Secured", access_key="ak", secret_key="sk-secret")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)

    async with consumer:
        await wait_for(lambda: got == [b"signed"], timeout=10.0, what="the signed message")


@ACL
async def test_wrong_acl_credentials_raise_access_denied(secured: EmbeddedBroker) -> None:
    async with Producer(
        namesrv=secured.address, group="p", access_key="ak", secret_key="wrong"
    ) as producer:
        # typed, one line with the broker's reason, and not retried
        with pytest.raises(AccessDeniedError, match="Check signature failed") as info:
            await producer.send(Message("Secured", b"refused"))
    assert not info.value.retriable
    # only the signed message was stored (four queues: the producer's default)
    assert sum(secured.store.max_offset("Secured", q) for q in range(4)) == 1
    consumer = push_consumer(secured, "acl", "Secured", access_key="who", secret_key="x")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        raise AssertionError("refused")

    with pytest.raises(AccessDeniedError, match="No acl config for who"):
        await consumer.start()
    await consumer.close()
