"""``aiorocket broker`` as a subprocess: start-up, clean SIGTERM shutdown, and crash
consistency under SIGKILL with sync flush (docs/reliability.md R16)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import random
import signal
import zlib
from pathlib import Path

import pytest

from aiorocket._protocol import properties as mp
from aiorocket._protocol.message import MessageRecord
from aiorocket.errors import RocketError
from tests._harness.child import broker_cli, started_broker_cli
from tests.embedded.test_broker_kit import RawClient, running_broker


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
async def test_cli_serves_and_exits_0_on_sigterm_with_data_flushed(
    tmp_path: Path, loop: str
) -> None:
    if loop == "uvloop" and importlib.util.find_spec("uvloop") is None:
        pytest.skip("uvloop is not installed")
    proc, address = await started_broker_cli(
        tmp_path,
        "--flush",
        "async",
        "--default-queues",
        "2",
        "--create-topics-on-lookup",
        "--loop",
        loop,
    )
    try:
        async with RawClient(address) as c:
            _, route = await c.route("Cli")
            assert route is not None
            assert route.broker_datas[0].broker_addrs[0] == address
            assert route.queue_datas[0].write_queue_nums == 2
            for i in range(20):
                assert (await c.send("Cli", b"%d" % i, queue_id=i % 2)).code == 0
            assert (await c.update_offset("G", "Cli", 1, 4)).code == 0
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 10)
        assert proc.returncode == 0, err
        assert b"stopped" in out
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    async with running_broker(tmp_path) as broker, RawClient(broker.address) as c:
        bodies = [r.body for q in (0, 1) for r in await c.pull_all("G", "Cli", q)]
        assert sorted(bodies) == sorted(b"%d" % i for i in range(20))
        assert (await c.query_offset("G", "Cli", 1)).ext_fields["offset"] == "4"


async def test_cli_refuses_a_data_dir_in_use(tmp_path: Path) -> None:
    async with running_broker(tmp_path):
        proc = await broker_cli(tmp_path)
        _, err = await asyncio.wait_for(proc.communicate(), 20)
        assert proc.returncode == 1
        assert b"in use" in err


QUEUES = 4
TOPIC = "Crash"


async def _writer(
    c: RawClient, acked: dict[str, tuple[int, int]], seq: list[int], first: asyncio.Event
) -> None:
    """Send until the broker dies; record every acknowledged (queue, offset, UNIQ_KEY)."""
    while True:
        seq[0] += 1
        n = seq[0]
        queue = n % QUEUES
        if n % 5 == 0:
            keys = [f"U{n:07d}-{k}" for k in range(3)]
            items = [(b"b%d" % n, {mp.UNIQ_KEY: k}) for k in keys]
            try:
                resp = await c.send_batch(TOPIC, items, queue_id=queue)
            except RocketError:
                return
            if resp.code == 0:
                first_offset = int(resp.ext_fields["queueOffset"])
                for i, k in enumerate(keys):
                    acked[k] = (queue, first_offset + i)
                first.set()
        else:
            key = f"U{n:07d}"
            try:
                resp = await c.send(TOPIC, b"s" * (n % 300), uniq_key=key, queue_id=queue)
            except RocketError:
                return
            if resp.code == 0:
                acked[key] = (queue, int(resp.ext_fields["queueOffset"]))
                first.set()
        assert resp.code == 0, resp.remark


async def _committer(c: RawClient, allowed: dict[int, set[int]], seq: list[int]) -> None:
    """Commit offsets one at a time. ``allowed[q]`` is what the broker may hold afterwards:
    the last acknowledged value, or one sent after it whose answer the kill swallowed."""
    while True:
        queue = seq[0] % QUEUES
        value = seq[0]
        allowed.setdefault(queue, {0}).add(value)  # 0: nothing committed yet
        try:
            resp = await c.update_offset("CG", TOPIC, queue, value)
        except RocketError:
            return
        assert resp.code == 0
        allowed[queue] = {value}
        await asyncio.sleep(0.01)


def _check_record(rec: MessageRecord) -> None:
    assert rec.body_crc == zlib.crc32(rec.body) & 0x7FFFFFFF
    assert rec.topic == TOPIC


@pytest.mark.slow
async def test_sigkill_during_sync_writes_keeps_every_acknowledged_message(
    tmp_path: Path,
) -> None:
    rng = random.Random(20261121)
    acked: dict[str, tuple[int, int]] = {}
    committed: dict[int, set[int]] = {}
    seq = [0]
    rounds = 10
    for _ in range(rounds):
        proc, address = await started_broker_cli(
            tmp_path, "--flush", "sync", "--default-queues", "4"
        )
        c = RawClient(address)
        try:
            await c.__aenter__()
            first = asyncio.Event()
            tasks = [asyncio.create_task(_writer(c, acked, seq, first)) for _ in range(4)]
            tasks.append(asyncio.create_task(_committer(c, committed, seq)))
            await asyncio.wait_for(first.wait(), 10)  # at least one acknowledgement per round
            await asyncio.sleep(rng.uniform(0.0, 0.25))
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            done, _ = await asyncio.wait(tasks, timeout=10)
            assert len(done) == len(tasks)
            for t in done:
                t.result()
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            with contextlib.suppress(RocketError):
                await c.close()

    proc, address = await started_broker_cli(tmp_path, "--flush", "sync")
    try:
        async with RawClient(address) as c:
            seen: dict[str, tuple[int, int]] = {}
            for q in range(QUEUES):
                records = await c.pull_all("check", TOPIC, q)
                assert [r.queue_offset for r in records] == list(range(len(records)))
                for rec in records:
                    _check_record(rec)
                    key = rec.properties[mp.UNIQ_KEY]
                    assert key not in seen, f"{key} stored twice"
                    seen[key] = (q, rec.queue_offset)
            missing = [k for k in acked if k not in seen]
            assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
            moved = [k for k, where in acked.items() if seen[k] != where]
            assert not moved, f"acknowledged messages at other offsets: {moved[:3]}"
            for q, values in committed.items():
                resp = await c.query_offset("CG", TOPIC, q)
                assert int(resp.ext_fields["offset"]) in values
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 10)
    assert len(acked) > rounds
