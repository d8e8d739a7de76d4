"""``aiorocket admin dlq`` over the embedded broker: a handler failing past its retry limit
fills ``%DLQ%<group>``; the listing shows each dead letter with its original topic and reason,
``--resend`` delivers them to the original topic's consumers once, and a second resend sends
nothing (``aiorocket._admin.dlq``)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.wait import wait_for
from tests.cli.test_admin_cli import FAST, cli

pytestmark = pytest.mark.broker(delay_levels=FAST_DELAYS)


async def _dead_letters(addr: str, count: int) -> bool:
    async with rmq.Admin(namesrv=addr) as admin:
        return len(await admin.dead_letters("dlqG")) == count


def _stored(broker: EmbeddedBroker) -> dict[tuple[str, int], int]:
    """The end offset of every queue in the broker's store: what was sent so far."""
    store = broker.store
    return {(t, q): store.max_offset(t, q) for t, qs in store.queues().items() for q in qs}


async def test_dlq_lists_reasons_and_resends_each_once(
    broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    n = ("-n", broker.address)
    code, out, _ = await cli(capsys, "admin", "dlq", "dlqG", *n)
    assert (code, out.strip()) == (0, "no dead letters for dlqG")
    code, out, _ = await cli(capsys, "admin", "topics", *n)
    assert "%DLQ%dlqG" not in out.split()  # looking did not create it

    failing = True
    seen: Counter[bytes] = Counter()
    consumer = rmq.PushConsumer(group="dlqG", namesrv=broker.address, max_reconsume_times=2, **FAST)
    consumer.subscribe("dlqT")

    @consumer.listener
    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        for m in msgs:
            seen[m.body] += 1
            if failing and m.body.startswith(b"poison"):
                raise ValueError("poison")

    async with consumer:
        async with rmq.Producer(namesrv=broker.address, group="dlqP") as p:
            for body, key in ((b"poison-1", "k1"), (b"ok", "k2"), (b"poison-2", "k3")):
                await p.send(rmq.Message("dlqT", body, keys=[key], properties={"who": key}))
        await wait_for(
            lambda: _dead_letters(broker.address, 2),
            timeout=20.0,
            what="2 dead letters",
            interval=0.2,
        )
        code, out, _ = await cli(
            capsys, "admin", "dlq", "dlqG", "--max-reconsume-times", "2", "--json", *n
        )
        assert code == 0
        rows: list[dict[str, Any]] = json.loads(out)
        assert sorted(r["keys"][0] for r in rows) == ["k1", "k3"]
        for r in rows:
            assert r["origin_topic"] == "dlqT"
            assert r["reconsume_times"] == 3  # three deliveries: the first and two retries
            assert r["reason"] == "max reconsume times (2) reached"
            assert r["store_timestamp"] > 0
            assert r["resent"] is False
            assert r["origin_msg_id"]
        code, out, _ = await cli(capsys, "admin", "dlq", "dlqG", "--max-reconsume-times", "2", *n)
        assert code == 0
        assert out.count("max reconsume times (2) reached") == 2
        assert "dlqT" in out

        # a dry run lists what would go and sends nothing (the store took nothing new)
        stored = _stored(broker)
        code, out, _ = await cli(capsys, "admin", "dlq", "dlqG", "--resend", "--dry-run", *n)
        assert code == 0
        assert out.startswith("would resend 2:")
        assert _stored(broker) == stored
        failing = False
        before = Counter(seen)
        await asyncio.sleep(0.2)  # nothing arrives meanwhile either
        assert seen == before

        code, out, _ = await cli(capsys, "admin", "dlq", "dlqG", "--resend", "--json", *n)
        assert code == 0
        resent = json.loads(out)
        assert len(resent) == 2
        assert all(r["new_offset_msg_id"] and r["error"] is None for r in resent)
        await wait_for(
            lambda: (
                seen[b"poison-1"] == before[b"poison-1"] + 1
                and seen[b"poison-2"] == before[b"poison-2"] + 1
            ),
            timeout=10.0,
            what="the resent messages",
        )
        stored = _stored(broker)
        code, out, _ = await cli(capsys, "admin", "dlq", "dlqG", "--resend", *n)
        assert (code, out.strip()) == (0, "nothing to resend for dlqG")
        assert _stored(broker) == stored  # sent nothing
        await asyncio.sleep(0.2)
        assert seen[b"poison-1"] == before[b"poison-1"] + 1
        assert seen[b"poison-2"] == before[b"poison-2"] + 1
        assert seen[b"ok"] == 1
    code, out, _ = await cli(capsys, "admin", "dlq", "dlqG", "--json", *n)
    assert [r["resent"] for r in json.loads(out)] == [True, True]
    code, _, err = await cli(capsys, "admin", "dlq", "dlqG", "--dry-run", *n)
    assert code == 2
    assert "--dry-run goes with --resend" in err


async def test_resent_copy_is_a_fresh_message_of_the_original_topic(
    broker: EmbeddedBroker,
) -> None:
    # an App's dead letter carries the handler's error; the copy sent back drops the DLQ
    # bookkeeping and keeps the producer's properties
    async with rmq.Producer(namesrv=broker.address, group="dlqP2") as p:
        await p.send(
            rmq.Message.with_properties(  # (DLQ_ORIGIN_* are 5.x system properties)
                "%DLQ%appG",
                b"bad",
                keys=["kx"],
                properties={
                    "AIOROCKET_DLQ_REASON": "ValueError: nope",
                    "DLQ_ORIGIN_TOPIC": "appT",
                    "DLQ_ORIGIN_MESSAGE_ID": "ORIG1",
                    "user": "u1",
                },
            )
        )
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic("appT")  # the topic the message died in exists
        (entry,) = await admin.dead_letters("appG")
        assert (entry.origin_topic, entry.origin_msg_id) == ("appT", "ORIG1")
        assert entry.reason == "ValueError: nope"
        (outcome,) = await admin.resend_dead_letters("appG")
        assert outcome.error is None
        assert outcome.new_msg_id is not None
        copy = await admin.message(outcome.new_msg_id)
        assert await admin.resend_dead_letters("appG") == []
    assert copy.topic == "appT"
    assert copy.body == b"bad"
    assert copy.keys == ["kx"]
    assert copy.properties["user"] == "u1"
    assert copy.msg_id == entry.msg_id  # the client id is kept
    for gone in ("AIOROCKET_DLQ_REASON", "DLQ_ORIGIN_TOPIC", "DLQ_ORIGIN_MESSAGE_ID"):
        assert gone not in copy.properties
