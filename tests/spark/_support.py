"""Helpers of the Spark tests: availability check, a broker on its own thread, a producer
helper and the shared SparkSession settings.

Spark calls block the calling thread (py4j), so the embedded broker runs on an event loop in
a thread of its own; executors (Python worker processes) reach it over TCP.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import threading
from collections.abc import Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

from aiorocket import Message, MessageQueue, Producer, ReceivedMessage, SyncQueueReader
from aiorocket.embedded import BrokerConfig, EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]


_T = TypeVar("_T")


@pytest.fixture(scope="module")
def spark(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A local SparkSession with the ``rocketmq`` source (skipped without pyspark)."""
    reason = spark_missing()
    if reason is not None:
        pytest.skip(reason)
    session = spark_session(request.module.__name__)
    yield session
    session.stop()


def spark_missing() -> str | None:
    """Why the Spark tests cannot run here, or ``None`` when they can."""
    try:
        import pyarrow  # noqa: F401
        import pyspark.sql.datasource  # noqa: F401
    except ImportError as exc:
        return f'pyspark >= 4.0 and pyarrow are needed ({exc}): pip install "aiorocketmq[spark]"'
    java_home = os.environ.get("JAVA_HOME")
    if shutil.which("java") is None and not (java_home and Path(java_home, "bin", "java").exists()):
        return "no Java runtime (java on PATH or JAVA_HOME) for Spark"
    return None


class BrokerThread:
    """An :class:`EmbeddedBroker` served by an event loop on a daemon thread."""

    def __init__(self, data_dir: Path, config: BrokerConfig) -> None:
        self._loop = asyncio.new_event_loop()
        self._broker = EmbeddedBroker(data_dir=data_dir, config=config)
        started = threading.Event()
        self._error: BaseException | None = None

        def run() -> None:
            asyncio.set_event_loop(self._loop)
            try:
                self._loop.run_until_complete(self._broker.start())
            except BaseException as exc:
                self._error = exc
                started.set()
                return
            started.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name="embedded-broker", daemon=True)
        self._thread.start()
        started.wait(30)
        if self._error is not None:
            raise self._error
        self.address = self._broker.address

    @property
    def broker(self) -> EmbeddedBroker:
        """The broker (touch it only from coroutines given to :meth:`run`)."""
        return self._broker

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float = 60) -> _T:
        """Run ``coro`` on the broker's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def close(self) -> None:
        """Stop the broker and its thread."""
        self.run(self._broker.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


async def aproduce(
    addr: str,
    topic: str,
    n: int,
    *,
    start: int = 0,
    tags: Sequence[str] = ("a", "b"),
    queue: MessageQueue | None = None,
    chunk: int = 500,
) -> list[str]:
    """Send messages ``start .. start+n-1`` (body ``"<topic>-<i>"``, tag ``tags[i % len]``,
    key ``k<i>``, property ``seq``) in batches; returns their message ids in order."""
    ids: list[str] = []
    async with Producer(namesrv=addr, group="spark-test-producer") as p:
        for lo in range(start, start + n, chunk):
            hi = min(lo + chunk, start + n)
            msgs = [
                Message(
                    topic,
                    f"{topic}-{i}".encode(),
                    tags=tags[i % len(tags)],
                    keys=[f"k{i}"],
                    properties={"seq": str(i)},
                )
                for i in range(lo, hi)
            ]
            for result in await p.send_batch(msgs, queue=queue):
                ids.extend(result.msg_id.split(","))
    return ids


def produce(addr: str, topic: str, n: int, **options: Any) -> list[str]:
    """:func:`aproduce` (with its keyword ``options``) on an event loop of its own (call it
    where no loop runs)."""
    return asyncio.run(aproduce(addr, topic, n, **options))


def read_all(addr: str, topic: str) -> list[ReceivedMessage]:
    """Every message of ``topic``, queue by queue, in queue order."""
    out: list[ReceivedMessage] = []
    with SyncQueueReader(namesrv=addr) as reader:
        for mq in reader.queues(topic):
            out.extend(reader.read_range(mq, 0, reader.max_offset(mq)))
    return out


def stored(addr: str, topic: str) -> int:
    """How many messages ``topic`` holds (0 when it does not exist yet)."""
    with SyncQueueReader(namesrv=addr) as reader:
        try:
            mqs = reader.queues(topic)
        except Exception:
            return 0
        return sum(reader.max_offsets(mqs).values())


def rocketmq_stream(spark: Any, addr: str, topic: str, **options: str) -> Any:
    """The streaming DataFrame of the ``rocketmq`` source on ``topic`` at ``addr``, with the
    source's ``options`` (``startingOffsets="earliest"``...)."""
    reader = spark.readStream.format("rocketmq").option("namesrv", addr).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def spark_session(app: str) -> Any:
    """A ``local[2]`` SparkSession for one test module, with the ``rocketmq`` source.

    Small shuffle partitions, no UI, loopback networking; Python workers run this
    interpreter and can import aiorocket from the source tree.
    """
    from pyspark.sql import SparkSession

    from aiorocket.integrations.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    path = os.environ.get("PYTHONPATH", "")
    if str(ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
