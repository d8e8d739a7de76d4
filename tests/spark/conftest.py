"""Fixtures of the Spark tests: one broker thread and one SparkSession per module, and a
standalone cluster for tests whose drivers run in processes of their own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aiorocket.embedded import BrokerConfig
from tests._harness.broker import FAST_DELAYS
from tests.spark._cluster import Cluster, two_workers
from tests.spark._support import (
    BrokerThread,
    spark,  # noqa: F401  (the fixture, shared with interop tests)
)


@pytest.fixture(scope="module")
def broker_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    data: Path = tmp_path_factory.mktemp("broker")
    bt = BrokerThread(data, BrokerConfig(default_queues=4, delay_levels=FAST_DELAYS))
    yield bt
    bt.close()


@pytest.fixture
def spark_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A standalone cluster: a master and two one-core workers on loopback."""
    with two_workers(tmp_path / "cluster") as cluster:
        yield cluster
