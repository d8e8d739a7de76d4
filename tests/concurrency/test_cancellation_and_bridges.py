"""Closing under cancellation and the blocking bridge: a Producer closed by a cancelled anyio
scope still unregisters (bounded) and closes its connections; the SyncQueueReader's blocking
portal refuses calls from its own thread and stops with reads left unfinished."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import anyio
import pytest

from aiorocket import Message, MessageQueue, Producer, SyncQueueReader
from aiorocket.embedded import BrokerConfig
from aiorocket.errors import ClientClosedError
from tests.reliability.helpers import broker_behind_proxy
from tests.spark._support import BrokerThread, produce

#: what Producer.close gives the brokers to unregister it
UNREGISTER_TIMEOUT = 3.0


@pytest.fixture
def broker_thread(tmp_path: Path) -> Iterator[BrokerThread]:
    bt = BrokerThread(tmp_path / "broker", BrokerConfig(default_queues=2))
    yield bt
    bt.close()


async def test_a_producer_closed_by_a_cancelled_scope_still_unregisters_and_disconnects(
    tmp_path: Path,
) -> None:
    """The scope's cancellation is level-triggered: every await in close() would be
    cancelled again. The unregister runs shielded and bounded, even with the broker
    black-holed, and the connections are closed before the cancellation goes on."""
    async with broker_behind_proxy(tmp_path, BrokerConfig(default_queues=2)) as (broker, proxy):
        producer = Producer(namesrv=broker.address, group="cancelled", request_timeout=20.0)
        with anyio.CancelScope() as scope:
            async with producer:
                await producer.send(Message("Cancelled", b"x"))
                pool = producer._client._pool
                assert pool is not None
                conns = list(pool._conns.values())
                assert conns
                proxy.stall()  # the unregister cannot get an answer
                scope.cancel()
                t0 = time.monotonic()
                await anyio.sleep_forever()
        elapsed = time.monotonic() - t0
        proxy.heal()
    assert scope.cancelled_caught
    assert UNREGISTER_TIMEOUT - 0.5 < elapsed < UNREGISTER_TIMEOUT + 1.5
    assert all(conn.is_closed for conn in conns)


def test_the_sync_reader_refuses_calls_from_its_own_thread(broker_thread: BrokerThread) -> None:
    mq = MessageQueue("Portal", "broker-a", 0)
    produce(broker_thread.address, "Portal", 3, queue=mq)
    with SyncQueueReader(namesrv=broker_thread.address) as reader:
        portal = reader._portal
        assert portal is not None
        # From the portal's loop thread a blocking call would wait for itself forever.
        with pytest.raises(RuntimeError):
            portal.call(reader.max_offset, mq)
        assert reader.max_offset(mq) == 3  # still usable from other threads


def test_closing_the_sync_reader_cancels_reads_left_unfinished(
    broker_thread: BrokerThread,
) -> None:
    mq = MessageQueue("Unfinished", "broker-a", 1)
    produce(broker_thread.address, "Unfinished", 400, queue=mq)
    reader = SyncQueueReader(namesrv=broker_thread.address, prefetch=1)
    reader.start()
    # Taken one list, then left neither exhausted nor closed: its read-ahead waits for room.
    batches = reader.read_range_batches(mq, 0, 400)
    assert isinstance(batches, Generator)
    assert next(batches)
    closer = threading.Thread(target=reader.close)
    closer.start()
    closer.join(10)
    assert not closer.is_alive(), "close() waited for the unfinished read"
    with pytest.raises(ClientClosedError):
        reader.max_offset(mq)
    batches.close()
