"""A consumer group that only commits offsets (the Spark source's ``group`` option, a
``QueueReader.commit``) on an Apache broker: ``mqadmin consumerProgress`` and ``aiorocket admin
lag`` both show its progress.

Java's ``examineConsumeStats`` (what ``consumerProgress`` and ``admin lag`` run) starts from the
route of ``%RETRY%<group>``, which a broker creates with the group's subscription config when a
member's heartbeat arrives (``ClientManageProcessor.heartBeat``). A group that only committed
had neither, and both tools answered that the group does not exist; the committing reader now
registers the group with a heartbeat before its first commit to a broker, then leaves it.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from tests._harness.wait import wait_for
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.test_mqadmin_embedded import admin_batch, line_value, progress_rows

pytestmark = pytest.mark.slow

#: a JVM broker on a loaded machine answers slowly at first
SLOW: dict[str, Any] = {"request_timeout": 15.0}
TOPIC = "CommitOnlyT"
GROUP = "CommitOnlyG"


async def test_consumer_progress_shows_a_group_that_only_commits(
    java_cluster: JavaCluster, java_classes: Path, tmp_path: Path
) -> None:
    ns = java_cluster.namesrv
    async with rmq.Admin(namesrv=ns, **SLOW) as admin:
        await admin.create_topic(TOPIC, queues=2)
    async with rmq.Producer(namesrv=ns, group="CommitOnlyP", send_timeout=15.0, **SLOW) as producer:
        for i in range(6):
            await producer.send(
                rmq.Message(TOPIC, f"m{i}"), queue=rmq.MessageQueue(TOPIC, "broker-a", i % 2)
            )
    async with rmq.QueueReader(namesrv=ns, **SLOW) as reader:
        queues = {mq.queue_id: mq for mq in await reader.queues(TOPIC)}
        await reader.commit_many(GROUP, {queues[0]: 2, queues[1]: 3})

        async def retry_routed() -> bool:
            try:
                await reader.queues(f"%RETRY%{GROUP}")
            except rmq.errors.TopicNotExistError:
                return False
            return True

        # the broker registers the group's new retry topic with the name server on its own
        await wait_for(retry_routed, timeout=30, what="the retry topic's route", interval=0.5)

    (progress,) = await asyncio.to_thread(
        admin_batch, java_classes, ns, [["consumerProgress", "-g", GROUP]], tmp_path
    )
    rows = {k: v for k, v in progress_rows(progress).items() if k[0] == TOPIC}
    assert rows == {(TOPIC, 0): (3, 2, 1), (TOPIC, 1): (3, 3, 0)}, progress
    total = "Consume Diff Total:" if java_cluster.install.v5 else "Diff Total:"
    assert line_value(progress, total) == "1"

    lag = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "aiorocket", "admin", "lag", GROUP, "-n", ns, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert lag.returncode == 0, lag.stderr
    mine = {
        (q["topic"], q["queue"]): (q["broker_offset"], q["committed_offset"], q["lag"])
        for q in json.loads(lag.stdout)["queues"]
    }
    assert mine == rows
