"""``aiorocket admin lag`` shows a group that only commits offsets (the Spark source's
``group`` option, a ``QueueReader.commit``): before, such a group had no ``%RETRY%`` route,
which consumer progress starts from, and the answer was "consumer group ... not found". The
committing client now registers the group as a Java consumer's heartbeat would (the broker
creates its subscription group and retry topic), then leaves it: it is not a live member."""

from __future__ import annotations

import asyncio

import pytest

import aiorocket as rmq
from aiorocket.cli import main
from aiorocket.embedded import EmbeddedBroker


async def test_admin_lag_shows_a_group_that_only_commits(
    broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    async with rmq.Admin(namesrv=broker.address) as admin:
        await admin.create_topic("ingest", queues=2)
    async with rmq.Producer(namesrv=broker.address, group="lagP") as p:
        for i in range(6):
            await p.send(
                rmq.Message("ingest", f"m{i}"), queue=rmq.MessageQueue("ingest", "broker-a", i % 2)
            )
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        queues = await reader.queues("ingest")
        await reader.commit_many("spark-ingest", {queues[0]: 2, queues[1]: 3})
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["admin", "lag", "spark-ingest", "-n", broker.address])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    rows = [line.split() for line in out.splitlines() if line.startswith("ingest")]
    assert len(rows) == 2, out
    # topic, broker, queue, broker offset, consumer offset, lag, ...
    assert sorted((r[2], r[3], r[4], r[5]) for r in rows) == [
        ("0", "3", "2", "1"),
        ("1", "3", "3", "0"),
    ], out
