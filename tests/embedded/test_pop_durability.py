"""POP state across restarts (docs/protocol.md §12.3): checkpoints, acks, changed invisible
times and ordered batches survive a clean restart and a SIGKILL; what was popped and not acked
comes back after its invisible time, what was acked never does."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from aiorocket._protocol.codes import ResponseCode
from aiorocket.embedded import EmbeddedBroker
from tests._harness.child import ROOT
from tests._harness.wait import wait_for
from tests.embedded import pop_kit as pk
from tests.embedded.pop_broker import crash_config
from tests.embedded.test_broker_kit import RawClient, fast_config, running_broker

RETRY = "%RETRY%G_T"


async def test_checkpoints_and_acks_survive_a_restart(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path, pop_revive_interval=0.02) as broker,
        RawClient(broker.address) as c,
    ):
        for i in range(4):
            await c.send("T", b"m%d" % i, queue_id=0)
        await c.send("O", b"o0", queue_id=0)
        _, msgs = await pk.pop(c, "G", "T", queue_id=0, invisible_ms=600)
        popped_at = time.monotonic()
        assert [m.record.body for m in msgs] == [b"m0", b"m1", b"m2", b"m3"]
        assert (await pk.ack(c, "G", msgs[0])).code == 0
        assert (await pk.batch_ack(c, "G", "T", [msgs[1]])).code == 0
        resp, _ = await pk.change_invisible(c, "G", msgs[2], 1200)
        assert resp.code == 0
        _, (o,) = await pk.pop(c, "G", "O", queue_id=0, order=True, invisible_ms=60_000)
    async with (
        running_broker(tmp_path, pop_revive_interval=0.02) as broker,
        RawClient(broker.address) as c,
    ):
        assert (await c.query_offset("G", "T", 0)).ext_fields["offset"] == "4"
        resp, _ = await pk.pop(c, "G", "O", queue_id=0, order=True)
        assert resp.code == ResponseCode.POLLING_TIMEOUT  # the ordered batch still blocks
        await wait_for(
            lambda: broker.store.max_offset(RETRY, 0) >= 1, timeout=3.0, what="m3 revived"
        )
        assert time.monotonic() - popped_at >= 0.55
        assert broker.store.max_offset(RETRY, 0) == 1  # m2's new time is not up yet
        await wait_for(
            lambda: broker.store.max_offset(RETRY, 0) >= 2, timeout=3.0, what="m2 revived"
        )
        assert time.monotonic() - popped_at >= 1.15
        _, msgs = await pk.pop(c, "G", "T")
        assert sorted(m.record.body for m in msgs) == [b"m2", b"m3"]
        for m in msgs:
            assert (await pk.ack(c, "G", m)).code == 0
        assert (await pk.ack(c, "G", o)).code == 0  # the batch of the earlier run
        assert (await c.query_offset("G", "O", 0)).ext_fields["offset"] == "1"


async def _start_child(data_dir: Path) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.embedded.pop_broker",
        str(data_dir),
        stdout=asyncio.subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 20)
    assert line.startswith(b"listening "), line
    return proc, line.split()[1].decode()


async def test_a_sigkilled_broker_revives_exactly_what_was_not_acked(tmp_path: Path) -> None:
    proc, address = await _start_child(tmp_path)
    try:
        async with RawClient(address) as c:
            for i in range(20):
                assert (await c.send("T", b"m%02d" % i, queue_id=i % 4)).code == 0
            _, msgs = await pk.pop(c, "G", "T", invisible_ms=1500)
            assert len(msgs) == 20
            single, batch, kept = msgs[:10], msgs[10:15], msgs[15:]
            for m in single:
                assert (await pk.ack(c, "G", m)).code == 0
            assert (await pk.batch_ack(c, "G", "T", batch)).code == 0
            _, other = await pk.pop(c, "G2", "T", invisible_ms=1500)
            assert (await pk.batch_ack(c, "G2", "T", other)).code == 0
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    offsets = tmp_path / "config" / "consumerOffset.json"
    assert not offsets.exists() or b"T@G" not in offsets.read_bytes()  # lost with the crash

    config = fast_config(**crash_config())
    async with (
        EmbeddedBroker(data_dir=tmp_path, config=config) as broker,
        RawClient(broker.address) as c,
    ):
        for q in range(4):  # restored from the revive log: nothing is popped twice
            assert (await c.query_offset("G", "T", q)).ext_fields["offset"] == "5"
            assert (await c.query_offset("G2", "T", q)).ext_fields["offset"] == "5"
        await wait_for(
            lambda: broker.store.max_offset(RETRY, 0) >= len(kept),
            timeout=5.0,
            what="the unacked revived",
        )
        await asyncio.sleep(0.2)
        assert broker.store.max_offset(RETRY, 0) == len(kept)
        assert broker.topics.get("%RETRY%G2_T") is None
        _, back = await pk.pop(c, "G", "T")
        assert sorted(m.record.body for m in back) == sorted(m.record.body for m in kept)
        assert {m.record.reconsume_times for m in back} == {1}


async def test_with_sync_flush_every_pop_state_change_is_answered(tmp_path: Path) -> None:
    async with (
        running_broker(tmp_path, flush="sync", pop_revive_interval=0.02) as broker,
        RawClient(broker.address) as c,
    ):
        for i in range(3):
            await c.send("T", b"m%d" % i, queue_id=0)
        _, msgs = await pk.pop(c, "G", "T", queue_id=0, max_msgs=2, invisible_ms=200)
        assert (await pk.ack(c, "G", msgs[0])).code == 0
        assert (await pk.batch_ack(c, "G", "T", msgs[1:])).code == 0
        _, (o,) = await pk.pop(c, "O", "T", queue_id=0, max_msgs=1, order=True)
        resp, _ = await pk.change_invisible(c, "O", o, 5000)
        assert resp.code == 0
        assert (await pk.ack(c, "O", o)).code == 0
        assert (await c.query_offset("O", "T", 0)).ext_fields["offset"] == "1"
        # the ordered ack is on disk when answered, like an offset update with sync flush
        stored = (tmp_path / "config" / "consumerOffset.json").read_text()
        assert '"T@O":{"0":1}' in stored
