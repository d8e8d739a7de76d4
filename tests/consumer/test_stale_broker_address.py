"""A failover leaves a dead broker address in a consumer's cache: the lock renewal of an
orderly consumer and the send-back of a concurrent one find it dead, refresh the route and
succeed at the new address (``ClientInstance.call_broker``).

The failover: the broker stops and one with the same name, cluster and store directory starts
on another port; the name-server address the consumers were given is a ``ChaosProxy`` that
now forwards to the new one, as a name server learns a restarted master's new address.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from aiorocket.models import Message
from aiorocket.testing import ChaosProxy
from tests._harness.broker import FAST_DELAYS
from tests._harness.wait import wait_for
from tests.consumer.test_orderly import other_client_can_lock

#: Everything that would refresh the route on its own (the route poll, the rebalance, the
#: offset persistence, whose failure refreshes it too) is slow; only the lock renewal is quick.
QUIET: dict[str, Any] = {
    "consume_from": "first",
    "route_refresh_interval": 120.0,
    "rebalance_interval": 120.0,
    "offset_persist_interval": 120.0,
    "heartbeat_interval": 120.0,
    "pull_suspend_timeout": 0.3,
    "pull_timeout": 5.0,
    "shutdown_grace": 2.0,
}


def ordered_queue(consumer: rmq.PushConsumer) -> rmq.QueueStatistics | None:
    """The orderly consumer's queue of ``Ordered``, once it holds it."""
    stats = consumer.statistics().queues
    return next((q for q in stats.values() if q.queue.topic == "Ordered"), None)


async def test_lock_renewal_and_send_back_refresh_a_stale_master_address(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="aiorocket.client")
    # (creating topics on lookup: the retry topics are there at the consumers' first route
    # lookup, not looked up again later, which would refresh addresses too)
    config = BrokerConfig(default_queues=1, delay_levels=FAST_DELAYS, create_topics_on_lookup=True)
    data_dir = tmp_path / "broker"
    async with contextlib.AsyncExitStack() as stack:
        namesrv = await stack.enter_async_context(ChaosProxy())
        old = await stack.enter_async_context(EmbeddedBroker(data_dir=data_dir, config=config))
        new = EmbeddedBroker(data_dir=data_dir, config=config)
        stack.push_async_callback(new.close)  # (after the consumers: they unlock there)
        namesrv.upstream = old.listen_address
        async with rmq.Admin(namesrv=namesrv.address) as admin:
            await admin.create_topic("Ordered", queues=1)
            await admin.create_topic("Failing", queues=1)
        async with rmq.Producer(namesrv=namesrv.address, group="stale-p") as producer:
            await producer.send(Message("Failing", b"retry me"))

        orderly = rmq.PushConsumer(
            group="stale-ord",
            namesrv=namesrv.address,
            orderly=True,
            lock_renew_interval=0.3,
            **QUIET,
        )
        orderly.subscribe("Ordered")

        @orderly.listener
        async def ordered(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
            return None

        failing = rmq.PushConsumer(group="stale-conc", namesrv=namesrv.address, **QUIET)
        failing.subscribe("Failing")
        got, release = asyncio.Event(), asyncio.Event()

        @failing.listener
        async def fail_once(
            msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
        ) -> rmq.ConsumeStatus:
            if got.is_set():
                return rmq.ConsumeStatus.CONSUME_SUCCESS  # a local retry: the send-back failed
            got.set()
            await release.wait()  # until the broker has moved
            return rmq.ConsumeStatus.RECONSUME_LATER

        await stack.enter_async_context(orderly)
        await stack.enter_async_context(failing)
        await asyncio.wait_for(got.wait(), 10.0)
        # Each holds its topic's queue and its retry topic's.
        await wait_for(
            lambda: len(orderly.statistics().queues) == len(failing.statistics().queues) == 2,
            timeout=10.0,
            what="the queues and retry queues held",
        )
        await wait_for(
            lambda: (q := ordered_queue(orderly)) is not None and q.locked,
            timeout=10.0,
            what="the orderly queue locked",
        )
        # No pull may be out when the broker stops: a failed pull refreshes the route itself,
        # which would hide the requests under test. Once every held queue's pull is held,
        # pause: each comes back within pull_suspend_timeout, and no other is sent.
        await wait_for(lambda: old.held_pulls == 4, timeout=10.0, what="every pull held")
        orderly.pause()
        failing.pause()
        await wait_for(lambda: old.held_pulls == 0, timeout=5.0, what="no pull held")

        old_address = old.address
        await old.close()
        await new.start()
        assert new.address != old_address
        namesrv.upstream = new.listen_address
        moved_at = time.time()
        release.set()

        await wait_for(
            lambda: (q := ordered_queue(orderly)) is not None and q.last_lock_time > moved_at,
            timeout=10.0,
            what="a lock renewal granted by the new master",
        )
        q = ordered_queue(orderly)
        assert q is not None
        assert not await other_client_can_lock(new, "stale-ord", q.queue)
        # The send-back reached the new master: the message waits in the group's retry topic
        # there (after its delay level), and was not scheduled for a local retry.
        await wait_for(
            lambda: new.store.max_offset("%RETRY%stale-conc", 0) >= 1,
            timeout=10.0,
            what="the message sent back to the new master",
        )
        assert failing.statistics().send_back_failures == 0
        moved = [r.getMessage() for r in caplog.records if "moved from" in r.getMessage()]
        assert len(moved) == 2, moved  # one per consumer: each found the dead address itself
        assert all(old_address in m and new.address in m for m in moved), moved
