"""Fixtures of the Spark tests: one broker thread and one SparkSession per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aiorocket.embedded import BrokerConfig
from tests.spark._support import FAST_DELAYS, BrokerThread, spark_missing, spark_session


@pytest.fixture(scope="module")
def broker_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    data: Path = tmp_path_factory.mktemp("broker")
    bt = BrokerThread(data, BrokerConfig(default_queues=4, delay_levels=FAST_DELAYS))
    yield bt
    bt.close()


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    reason = spark_missing()
    if reason is not None:
        pytest.skip(reason)
    session = spark_session(request.module.__name__)
    yield session
    session.stop()
