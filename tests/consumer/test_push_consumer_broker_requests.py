"""Push consumer: the requests a broker forwards (running info, consume directly, reset offset)."""

from __future__ import annotations

import asyncio

import aiorocket as rmq
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
from tests._harness.send import fill_queue
from tests._harness.wait import wait_for

from .conftest import consume_directly, push_consumer


def _consumer_channel(broker: EmbeddedBroker, group: str) -> Connection:
    info = broker._groups.consumer_group(group)  # type: ignore[union-attr]
    assert info is not None
    (conn,) = [c for c in info.channels if isinstance(c, Connection)]
    return conn


async def test_answers_running_info_consume_directly_and_reset_offset(
    broker: EmbeddedBroker, producer: Producer
) -> None:
    queue = await fill_queue(producer, "Admin", [b"%d" % i for i in range(10)])
    got: list[bytes] = []
    consumer = push_consumer(broker, "admin", "Admin")

    @consumer.listener
    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
    ) -> rmq.ConsumeStatus | None:
        got.extend(m.body for m in msgs)
        return rmq.ConsumeStatus.RECONSUME_LATER if msgs[0].body == b"later" else None

    async with consumer:
        await wait_for(lambda: len(got) == 10, timeout=10.0, what="10 messages")
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
        await wait_for(lambda: len(got) == 5, timeout=10.0, what="redelivery after the reset")
    assert sorted(got) == [b"%d" % i for i in range(5, 10)]
