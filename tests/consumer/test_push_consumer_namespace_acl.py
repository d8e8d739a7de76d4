"""Push consumer: the namespace and ACL credentials on the wire."""

from __future__ import annotations

import pytest

import aiorocket as rmq
from aiorocket._producer.producer import Producer
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.models import Message
from tests._harness.wait import wait_for

from .conftest import FAST


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
        await wait_for(lambda: len(seen) == 2, timeout=10.0, what="delivery and retry")
        wire = {mq.topic for mq in consumer.statistics().queues}
    assert seen == [("Spaced", 0), ("Spaced", 1)]
    assert wire == {"tenant%Spaced", "%RETRY%tenant%spaced"}


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
            await wait_for(lambda: got == [b"signed"], timeout=10.0, what="the signed message")


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
