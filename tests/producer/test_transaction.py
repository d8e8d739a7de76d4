"""Transactional messages against the embedded broker over loopback TCP: half messages,
END_TRANSACTION, the broker's check-back, discards, restarts and a killed producer."""

from __future__ import annotations

import asyncio
import dataclasses
import pickle
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import EndTransactionRequestHeader
from aiorocket._protocol.msgid import parse_offset_msg_id
from aiorocket._remoting import ConnectionPool
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from aiorocket.embedded.topics import CHECK_MAX_TOPIC, HALF_TOPIC, OP_TOPIC
from aiorocket.errors import BrokerError, ConfigurationError
from tests._harness.wait import wait_for
from tests.producer.test_producer import pull_all
from tests.producer.tx_proc import crash_in_transaction

S = rmq.TransactionState

#: check every 0.1 s; a half message is checked once 0.3 s old
FAST_TX: dict[str, Any] = {"transaction_check_interval": 0.1, "transaction_timeout": 0.3}
#: no check-back within a test unless the test runs a pass itself
NO_TIMER: dict[str, Any] = {"transaction_check_interval": 3600, "transaction_timeout": 0.3}
#: the ``broker`` of a test that ends its transactions itself
QUIET: pytest.MarkDecorator = pytest.mark.broker(**NO_TIMER)

CONSUMER: dict[str, Any] = {
    "consume_from": "first",
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 2.0,
}


pytestmark = pytest.mark.broker(**FAST_TX)


def fixed(state: S) -> Callable[..., Awaitable[S]]:
    async def answer(*_: object) -> S:
        return state

    return answer


def tx_producer(
    broker: EmbeddedBroker,
    group: str,
    local: S | Callable[..., Awaitable[S]],
    check: Callable[..., Awaitable[S]],
) -> rmq.TransactionProducer:
    """A transactional producer of ``group`` on ``broker`` whose local transaction ends in
    ``local`` (a state, or the callback deciding it)."""
    execute_local = fixed(local) if isinstance(local, S) else local
    return rmq.TransactionProducer(
        namesrv=broker.address, group=group, execute_local=execute_local, check=check
    )


class Checks:
    """A ``check`` callback recording the messages it was asked about."""

    def __init__(self, state: S) -> None:
        self.state = state
        self.seen: list[rmq.ReceivedMessage] = []
        self.changed = asyncio.Event()

    async def __call__(self, msg: rmq.ReceivedMessage) -> S:
        self.seen.append(msg)
        self.changed.set()
        return self.state

    async def wait(self, count: int, timeout: float = 5.0) -> None:
        async with asyncio.timeout(timeout):
            while len(self.seen) < count:
                self.changed.clear()
                await self.changed.wait()


async def send_unknown(broker: EmbeddedBroker, group: str, msg: rmq.Message) -> None:
    async with tx_producer(broker, group, S.UNKNOWN, fixed(S.UNKNOWN)) as producer:
        assert (await producer.send_in_transaction(msg)).state is S.UNKNOWN


async def delivered(broker: EmbeddedBroker, topic: str) -> list[bytes]:
    return [m.body for m in await pull_all(broker.address, topic)]


async def stored(broker: EmbeddedBroker, topic: str, queue_id: int, count: int) -> None:
    """Wait (5 s at most) until queue ``queue_id`` of ``topic`` holds ``count`` messages."""
    await wait_for(
        lambda: broker.store.max_offset(topic, queue_id) == count,
        timeout=5.0,
        what=f"broker.store.max_offset({topic!r}, {queue_id}) == {count}",
    )


@QUIET
async def test_commit_delivers_exactly_once(broker: EmbeddedBroker) -> None:
    checks = Checks(S.COMMIT)
    async with tx_producer(broker, "tx-commit", S.COMMIT, checks) as producer:
        result = await producer.send_in_transaction(rmq.Message("tx_commit", b"paid"), arg=1)
        assert result.state is S.COMMIT
        assert result.status is rmq.SendStatus.SEND_OK
        assert result.transaction_id == result.msg_id
        await stored(broker, OP_TOPIC, 0, 1)
        got = await pull_all(broker.address, "tx_commit")
        # Later passes find the op message: no check-back, no second copy.
        await asyncio.sleep(0.35)  # older than transaction_timeout
        for _ in range(3):
            assert broker.transactions.check() == 0
    assert [m.body for m in got] == [b"paid"]
    final = got[0]
    assert final.properties["UNIQ_KEY"] == result.msg_id
    assert final.properties["TRAN_MSG"] == "true"
    assert final.properties["PGROUP"] == "tx-commit"
    assert final.queue_id == result.queue.queue_id
    assert final.sys_flag & 0xC == 0x8  # commit type, not prepared (EndTransactionProcessor)
    half_offset = parse_offset_msg_id(result.offset_msg_id)[2]
    assert final.prepared_transaction_offset == half_offset
    assert await delivered(broker, "tx_commit") == [b"paid"]
    assert checks.seen == []


@QUIET
async def test_rollback_never_delivers(broker: EmbeddedBroker) -> None:
    checks = Checks(S.COMMIT)
    async with tx_producer(broker, "tx-rb", S.ROLLBACK, checks) as producer:
        result = await producer.send_in_transaction(rmq.Message("tx_rb", b"cancelled"))
        assert result.state is S.ROLLBACK
        await stored(broker, OP_TOPIC, 0, 1)
        await asyncio.sleep(0.35)
        for _ in range(3):
            assert broker.transactions.check() == 0  # resolved: never asked about
    assert checks.seen == []
    assert await delivered(broker, "tx_rb") == []
    assert broker.store.max_offset(HALF_TOPIC, 0) == 1  # only the original half, no copy


async def test_unknown_is_checked_back_then_committed(broker: EmbeddedBroker) -> None:
    checks = Checks(S.COMMIT)
    async with tx_producer(broker, "tx-unk", S.UNKNOWN, checks) as producer:
        msg = rmq.Message("tx_unk", b"maybe", tags="t", keys=["k1"], properties={"a": "b"})
        result = await producer.send_in_transaction(msg)
        assert result.state is S.UNKNOWN
        assert await delivered(broker, "tx_unk") == []
        await checks.wait(1)  # the broker's periodic check
        await stored(broker, "tx_unk", result.queue.queue_id, 1)
        seen = checks.seen[0]
        assert seen.topic == "tx_unk"
        assert seen.body == b"maybe"
        assert seen.tags == "t"
        assert list(seen.keys) == ["k1"]
        assert seen.properties["a"] == "b"
        assert seen.msg_id == result.msg_id
        assert seen.queue_id == result.queue.queue_id
        await asyncio.sleep(0.5)  # several more check intervals
    assert {m.body for m in checks.seen} == {b"maybe"}
    assert await delivered(broker, "tx_unk") == [b"maybe"]


async def test_exception_in_execute_local_counts_as_unknown(broker: EmbeddedBroker) -> None:
    async def boom(msg: rmq.Message, arg: object) -> S:
        raise RuntimeError(f"database down for {arg}")

    checks = Checks(S.COMMIT)
    async with tx_producer(broker, "tx-exc", boom, checks) as producer:
        result = await producer.send_in_transaction(rmq.Message("tx_exc", b"x"), arg="order-1")
        assert result.state is S.UNKNOWN
        await checks.wait(1)
        await stored(broker, "tx_exc", result.queue.queue_id, 1)
    assert await delivered(broker, "tx_exc") == [b"x"]


@pytest.mark.broker(
    transaction_check_interval=0.05, transaction_timeout=0.1, transaction_check_max=3
)
async def test_check_max_counts_every_check_back(broker: EmbeddedBroker) -> None:
    checks = Checks(S.UNKNOWN)
    async with tx_producer(broker, "tx-cm", S.UNKNOWN, checks) as producer:
        await producer.send_in_transaction(rmq.Message("tx_cm", b"never"))
        await wait_for(
            lambda: broker.transactions.discarded == 1,
            timeout=5.0,
            what="broker.transactions.discarded == 1",
        )
        await asyncio.sleep(0.3)
    assert [m.body for m in checks.seen] == [b"never"] * 3  # transactionCheckMax checks
    assert broker.transactions.discarded == 1
    discarded = await pull_all(broker.address, CHECK_MAX_TOPIC)
    assert [m.body for m in discarded] == [b"never"]
    assert discarded[0].properties["TRANSACTION_CHECK_TIMES"] == "3"
    assert await delivered(broker, "tx_cm") == []


@QUIET
async def test_half_message_is_invisible_to_consumers_until_commit(
    broker: EmbeddedBroker,
) -> None:
    got: list[bytes] = []
    arrived = asyncio.Event()
    consumer = rmq.PushConsumer(group="tx-reader", namesrv=broker.address, **CONSUMER)
    consumer.subscribe("tx_vis")

    @consumer.listener
    async def on(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)
        arrived.set()

    running = asyncio.Event()
    go = asyncio.Event()

    async def execute_local(msg: rmq.Message, arg: object) -> S:
        running.set()
        await go.wait()
        return S.COMMIT

    async with tx_producer(broker, "tx-vis", execute_local, fixed(S.COMMIT)) as producer:
        # the topic exists and the consumer is pulling before the half message arrives
        await producer.send(rmq.Message("tx_vis", b"plain"))
        async with consumer:
            await asyncio.wait_for(arrived.wait(), 10)
            assert got == [b"plain"]
            arrived.clear()
            task = asyncio.create_task(
                producer.send_in_transaction(rmq.Message("tx_vis", b"pending"))
            )
            await running.wait()
            assert await delivered(broker, "tx_vis") == [b"plain"]  # the half is elsewhere
            assert broker.store.max_offset(HALF_TOPIC, 0) == 1
            assert got == [b"plain"]
            go.set()
            assert (await task).state is S.COMMIT
            await asyncio.wait_for(arrived.wait(), 10)
    assert got == [b"plain", b"pending"]


@QUIET
async def test_check_immunity_property_postpones_the_check(broker: EmbeddedBroker) -> None:
    checks = Checks(S.COMMIT)
    async with tx_producer(broker, "tx-imm", S.UNKNOWN, checks) as producer:
        immune = rmq.Message(
            "tx_imm", b"later", properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "60"}
        )
        await producer.send_in_transaction(immune)
        await producer.send_in_transaction(rmq.Message("tx_imm", b"now"))
        await asyncio.sleep(0.35)  # both older than transaction_timeout
        assert broker.transactions.check() == 1  # the immune one is put back, not checked
        await checks.wait(1)
        await stored(broker, OP_TOPIC, 0, 1)
        assert broker.transactions.check() == 0
    assert [m.body for m in checks.seen] == [b"now"]
    assert await delivered(broker, "tx_imm") == [b"now"]


@QUIET
async def test_end_transaction_of_another_group_is_refused(broker: EmbeddedBroker) -> None:
    async with tx_producer(broker, "tx-own", S.UNKNOWN, fixed(S.COMMIT)) as producer:
        result = await producer.send_in_transaction(rmq.Message("tx_own", b"mine"))
    header = EndTransactionRequestHeader(
        producer_group="someone-else",
        tran_state_table_offset=result.queue_offset,
        commit_log_offset=parse_offset_msg_id(result.offset_msg_id)[2],
        commit_or_rollback=8,
        msg_id=result.msg_id,
    )
    pool = ConnectionPool()
    try:
        conn = await pool.get(broker.address)
        resp = await conn.request(
            RemotingCommand.request(RequestCode.END_TRANSACTION, header.to_ext())
        )
        assert resp.code == ResponseCode.SYSTEM_ERROR
        assert resp.remark == "The producer group wrong"
        wrong_offset = EndTransactionRequestHeader(
            producer_group="tx-own",
            tran_state_table_offset=result.queue_offset + 5,
            commit_log_offset=header.commit_log_offset,
            commit_or_rollback=8,
            msg_id=result.msg_id,
        )
        resp = await conn.request(
            RemotingCommand.request(RequestCode.END_TRANSACTION, wrong_offset.to_ext())
        )
        assert resp.remark == "The transaction state table offset wrong"
    finally:
        await pool.close()
    assert await delivered(broker, "tx_own") == []


async def test_pending_half_message_is_checked_after_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with EmbeddedBroker(data_dir=data, config=BrokerConfig(**NO_TIMER)) as broker:
        await send_unknown(broker, "tx-restart", rmq.Message("tx_restart", b"survives"))
    checks = Checks(S.COMMIT)
    async with EmbeddedBroker(data_dir=data, config=BrokerConfig(**FAST_TX)) as broker:
        async with tx_producer(broker, "tx-restart", S.COMMIT, checks):
            await checks.wait(1)
            await stored(broker, OP_TOPIC, 0, 1)
            await asyncio.sleep(0.3)
        assert await delivered(broker, "tx_restart") == [b"survives"]
    assert {m.body for m in checks.seen} == {b"survives"}
    # the resolution itself survives a restart too: no further check, still one copy
    async with EmbeddedBroker(data_dir=data, config=BrokerConfig(**NO_TIMER)) as broker:
        assert broker.transactions.check() == 0
        assert await delivered(broker, "tx_restart") == [b"survives"]


async def test_killed_producer_is_answered_for_by_another_of_its_group(
    broker: EmbeddedBroker,
) -> None:
    checks = Checks(S.COMMIT)
    async with tx_producer(broker, "tx-crash", S.COMMIT, checks):
        await crash_in_transaction(broker.address, "tx_crash", "tx-crash", timeout=20)
        await checks.wait(1)
        await stored(broker, OP_TOPIC, 0, 1)
        await asyncio.sleep(0.5)
    assert {m.body for m in checks.seen} == {b"crash"}
    assert await delivered(broker, "tx_crash") == [b"crash"]


@QUIET
async def test_two_answered_check_backs_commit_once(broker: EmbeddedBroker) -> None:
    checks = Checks(S.COMMIT)
    async with tx_producer(broker, "tx-twice", S.UNKNOWN, checks) as producer:
        await producer.send_in_transaction(rmq.Message("tx_twice", b"once"))
        await asyncio.sleep(0.35)
        # two passes before the producer can answer: two copies, two check-backs, two commits
        assert broker.transactions.check() == 1
        assert broker.transactions.check() == 1
        await checks.wait(2)
        await stored(broker, OP_TOPIC, 0, 2)
        assert broker.transactions.check() == 0
    assert await delivered(broker, "tx_twice") == [b"once"]


@QUIET
async def test_prepared_message_is_ended_by_another_process_once(
    broker: EmbeddedBroker,
) -> None:
    """prepare() stores an invisible half message; a producer that never saw it commits it
    from its PreparedMessage (pickled, as it travels between processes) and learns the
    broker applied it; a second prepared message is rolled back the same way."""
    async with rmq.TransactionProducer(namesrv=broker.address, group="tx-prep") as sender:
        keep = await sender.prepare(rmq.Message("tx_prep", b"keep"))
        drop = await sender.prepare(rmq.Message("tx_prep", b"drop"))
    assert (keep.topic, keep.group) == ("tx_prep", "tx-prep")
    assert keep.msg_id != drop.msg_id
    assert await delivered(broker, "tx_prep") == []
    async with rmq.TransactionProducer(namesrv=broker.address, group="tx-other") as decider:
        await decider.end(pickle.loads(pickle.dumps(keep)), S.COMMIT)
        await decider.end(drop, S.ROLLBACK)
        with pytest.raises(ConfigurationError):
            await decider.end(keep, S.UNKNOWN)
        moved = dataclasses.replace(keep, queue_offset=keep.queue_offset + 7)
        with pytest.raises(BrokerError, match="state table offset wrong"):
            await decider.end(moved, S.COMMIT)
    got = await pull_all(broker.address, "tx_prep")
    assert [m.body for m in got] == [b"keep"]
    assert got[0].properties["UNIQ_KEY"] == keep.msg_id
    assert broker.transactions.check() == 0  # both resolved: nothing left to check


async def test_checks_of_prepared_messages_go_to_their_group(broker: EmbeddedBroker) -> None:
    """Halves prepared for another group are checked by a producer of that group (which
    knows their brokers through checks_from before sending anything), never by the sender;
    check_after keeps one of them from being checked at all meanwhile."""
    checks = Checks(S.COMMIT)
    async with (
        rmq.TransactionProducer(
            namesrv=broker.address, group="tx-decides", check=checks
        ) as decider,
        rmq.TransactionProducer(namesrv=broker.address, group="tx-sends") as sender,
    ):
        await sender.send(rmq.Message("tx_group", b"route"))  # the topic exists
        await decider.checks_from("tx_group")
        await sender.prepare(rmq.Message("tx_group", b"checked"), group="tx-decides")
        await sender.prepare(
            rmq.Message("tx_group", b"immune"), group="tx-decides", check_after=3600
        )
        await checks.wait(1)
        await wait_for(
            lambda: broker.store.max_offset(OP_TOPIC, 0) == 1, timeout=5.0, what="the op"
        )
    assert [m.body for m in checks.seen] == [b"checked"]
    assert checks.seen[0].properties["PGROUP"] == "tx-decides"
    assert sorted(await delivered(broker, "tx_group")) == [b"checked", b"route"]
