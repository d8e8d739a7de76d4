"""The ``rocketmq`` sink's exactly-once mode against the real Apache RocketMQ broker (5.x and
4.9): the cluster scenario of ``tests/spark/_exactly_once.py`` (a streaming query on a Spark
standalone cluster loses an executor, then its driver and the sink's coordinator, and is
restarted from its checkpoint), then a push consumer receives every result exactly once. A
4.9 broker delivers a message again for every COMMIT it gets, so a half message committed
twice would show here as a duplicate.

``AIOROCKET_EO_MESSAGES`` sets the input (8,000 by default; the issue's full form is 50,000).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop.apache._groups import create_topic, wait_route
from tests.interop.apache.cluster import JavaCluster
from tests.spark._cluster import Cluster, two_workers
from tests.spark._exactly_once import run_scenario

pytestmark = [pytest.mark.slow, pytest.mark.spark]

N = int(os.environ.get("AIOROCKET_EO_MESSAGES", "8000"))
QUEUES = 4
#: seconds between the broker's checks; half messages are checked once 1 s old, 60 times
CHECK_INTERVAL = 3.0
JAVA_BROKER_CONF = {
    "transactionCheckInterval": str(int(CHECK_INTERVAL * 1000)),
    "transactionTimeOut": "1000",
    "transactionCheckMax": "60",
}
TX_TIMEOUT = 60.0


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[Cluster]:
    with two_workers(tmp_path / "cluster") as cluster:
        yield cluster


@pytest.mark.timeout(3600)
def test_exactly_once_with_kills_on_apache_rocketmq(
    java_cluster: JavaCluster, spark_cluster: Cluster, tmp_path: Path
) -> None:
    ns = java_cluster.namesrv
    prefix = f"EoJ{int(time.time()) % 100000}"

    async def topics() -> None:
        for topic in (f"{prefix}In", f"{prefix}Out"):
            await create_topic([java_cluster.broker_addr("broker-a")], topic, QUEUES)
            await wait_route(ns, topic, QUEUES)

    asyncio.run(topics())

    def settle(killed_at: float) -> None:
        # The killed run's half messages are answered once older than TX_TIMEOUT, at the
        # next check after that: past this point no check can commit or roll back anything.
        time.sleep(max(0.0, killed_at + TX_TIMEOUT + 3 * CHECK_INTERVAL - time.monotonic()))

    outcome = run_scenario(
        namesrv=ns,
        cluster=spark_cluster,
        work=tmp_path,
        n=N,
        per_trigger=max(500, N // 12),
        tx_timeout=TX_TIMEOUT,
        settle=settle,
        prefix=prefix,
    )
    print(
        f"exactly once on Apache RocketMQ, {N} messages: timings {outcome.timings}, output "
        f"stored at the executor kill {outcome.at_executor_kill}, at the driver kill "
        f"{outcome.at_driver_kill}"
    )
    outcome.check_exactly_once()
