"""Hand consumer batches to Spark: [`SparkForwarder`][aiorocket.integrations.spark.SparkForwarder].

A push-consumer listener that gathers the messages of many handler calls into one batch (up
to ``max_rows`` rows or ``max_interval`` seconds), turns the batch into a Spark DataFrame with
the ``rocketmq`` source's columns, calls ``fn(df, batch_id)`` in a worker thread, and only
then lets the handler calls return. The consumer acknowledges a message when its handler call
returns, so the group's offsets move only past batches ``fn`` finished: after a crash, at
most the batch in progress (and what was acknowledged but not yet persisted, within the
consumer's ``offset_persist_interval``) is delivered again. At-least-once.

```python
forwarder = SparkForwarder(spark, write_batch, max_rows=5000, max_interval=2.0)
consumer = PushConsumer(group="ingest", namesrv="127.0.0.1:9876",
                        consume_batch_size=64, concurrency=256)
consumer.subscribe("orders")
consumer.register_listener(forwarder.listener)
async with forwarder, consumer:
    await consumer.wait_closed()
```

Backpressure: while ``fn`` runs, the next batch fills; once it is full too, handler calls
wait, the consumer's workers stay busy, its caches fill and pulling pauses (flow control).
So at most two batches are held. A batch can only grow as large as the consumer lets
messages be in flight: ``concurrency * consume_batch_size`` handler messages, and per queue
``pull_threshold_for_queue`` cached messages; below that, batches close by time.

When ``fn`` (or building the DataFrame) raises, the error is logged and every handler call
of the batch reports ``RECONSUME_LATER``: the consumer sends the messages back for a later
redelivery (``%RETRY%<group>``), as for any failed handler.

Batch ids count from ``first_batch_id`` in this process; they are not durable (the consumer
group's offsets are the durable state), so a sink that needs idempotence should key on
message ids (``msg_id``) or queue offsets.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from aiorocket import ConcurrentContext, ConsumeStatus, ReceivedMessage
from aiorocket._concurrency import AsyncResource, Service
from aiorocket.errors import ClientClosedError, ConfigurationError
from aiorocket.integrations.spark.rows import arrow_table

__all__ = ["ForwarderStatistics", "SparkForwarder"]

log = logging.getLogger("aiorocket.spark")

#: ``fn(df, batch_id)``, called in a worker thread.
BatchFunction = Callable[[Any, int], object]


@dataclass(frozen=True, slots=True)
class ForwarderStatistics:
    """Counters of a [`SparkForwarder`][aiorocket.integrations.spark.SparkForwarder].

    Attributes:
        batches: batches ``fn`` finished.
        rows: rows in those batches.
        failed_batches: batches whose ``fn`` (or DataFrame) failed.
        pending_rows: rows waiting in the batch being filled.
        running: whether ``fn`` is running now.
    """

    batches: int
    rows: int
    failed_batches: int
    pending_rows: int
    running: bool


@dataclass(eq=False)
class _Batch:
    id: int
    msgs: list[ReceivedMessage] = field(default_factory=list)
    done: asyncio.Future[bool] | None = None
    sealed: bool = False
    timer: asyncio.TimerHandle | None = None


class SparkForwarder(AsyncResource):
    """Gathers consumer messages into Spark DataFrames; acknowledges after ``fn`` ran.

    Args:
        spark: the ``SparkSession`` that builds the DataFrames.
        fn: ``fn(df, batch_id)``, run in a worker thread (the event loop keeps pulling and
            heartbeating meanwhile); raising fails the batch.
        max_rows: a batch closes when it holds this many rows (it may exceed it by less than
            one handler call's messages).
        max_interval: ... or this many seconds after its first row.
        first_batch_id: the id of the first batch.

    Register [`listener`][aiorocket.integrations.spark.SparkForwarder.listener] on a
    [`PushConsumer`][aiorocket.PushConsumer]; close the forwarder after the consumer (``async with
    forwarder, consumer:``), so the last batches finish.

    Raises:
        ConfigurationError: ``max_rows`` < 1 or ``max_interval`` <= 0.
    """

    def __init__(
        self,
        spark: Any,
        fn: BatchFunction,
        *,
        max_rows: int = 1000,
        max_interval: float = 1.0,
        first_batch_id: int = 0,
    ) -> None:
        if max_rows < 1:
            raise ConfigurationError("max_rows must be at least 1")
        if max_interval <= 0:
            raise ConfigurationError("max_interval must be positive")
        self._spark = spark
        self._fn = fn
        self._max_rows = max_rows
        self._max_interval = max_interval
        self._next_id = first_batch_id
        self._open: _Batch | None = None
        self._running: _Batch | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Event | None = None
        self._closed = False
        self._lifecycle = Service("spark forwarder", logger=log)
        self._batches = 0
        self._rows = 0
        self._failed = 0

    # -- the listener ---------------------------------------------------------------------------

    async def listener(self, msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> ConsumeStatus:
        """The consumer's handler: add ``msgs`` to the open batch and wait until the batch
        was processed; success only if ``fn`` succeeded.

        Raises:
            ClientClosedError: the forwarder is closed (the consumer then retries the
                messages later).
        """
        if self._closed:
            raise ClientClosedError("the Spark forwarder is closed")
        if not msgs:
            return ConsumeStatus.CONSUME_SUCCESS
        # Batches run in the forwarder's own task group (started here when not entered).
        await self._lifecycle.start()
        while True:
            batch = self._open
            if batch is None:
                batch = self._open = self._new_batch()
            if not batch.sealed:
                break
            # Both batches are taken (one running, one full): wait, which is the backpressure.
            await self._wait_changed()
        if not batch.msgs:
            loop = asyncio.get_running_loop()
            batch.timer = loop.call_later(self._max_interval, self._on_timer, batch)
        batch.msgs.extend(msgs)
        if len(batch.msgs) >= self._max_rows:
            self._seal(batch)
        assert batch.done is not None
        # Shielded: the batch goes on even if this call is cancelled (consumer shutdown).
        ok = await asyncio.shield(batch.done)
        return ConsumeStatus.CONSUME_SUCCESS if ok else ConsumeStatus.RECONSUME_LATER

    def _new_batch(self) -> _Batch:
        batch = _Batch(self._next_id, done=asyncio.get_running_loop().create_future())
        self._next_id += 1
        return batch

    async def _wait_changed(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Event()
        event = self._changed
        await event.wait()

    def _notify(self) -> None:
        event, self._changed = self._changed, None
        if event is not None:
            event.set()

    def _on_timer(self, batch: _Batch) -> None:
        if batch is self._open and not batch.sealed and batch.msgs:
            self._seal(batch)

    def _seal(self, batch: _Batch) -> None:
        batch.sealed = True
        if batch.timer is not None:
            batch.timer.cancel()
            batch.timer = None
        if self._running is None:
            self._start(batch)

    def _start(self, batch: _Batch) -> None:
        if self._open is batch:
            self._open = None
        self._running = batch
        self._task = self._lifecycle.spawn(self._run(batch), name=f"spark batch {batch.id}")
        self._notify()

    async def _run(self, batch: _Batch) -> None:
        ok = False
        try:
            # anyio's worker threads, not the loop's default executor (a handful of threads
            # on a small machine, shared with everything else that blocks); a cancellation
            # waits for fn to return instead of leaving it running unobserved.
            await anyio.to_thread.run_sync(self._call, batch)
            ok = True
        except Exception:
            self._failed += 1
            log.exception(
                "Spark batch %d (%d rows) failed; its messages will be redelivered",
                batch.id,
                len(batch.msgs),
            )
        finally:
            assert batch.done is not None
            if not batch.done.done():
                batch.done.set_result(ok)
            self._running = None
            self._task = None
            nxt = self._open
            if nxt is not None and nxt.sealed:
                self._start(nxt)
            else:
                self._notify()

    def _call(self, batch: _Batch) -> None:
        # In a worker thread: building the DataFrame and fn both block on the JVM.
        df = self._spark.createDataFrame(arrow_table(batch.msgs))
        self._fn(df, batch.id)
        self._batches += 1
        self._rows += len(batch.msgs)

    # -- lifecycle ------------------------------------------------------------------------------

    async def flush(self) -> None:
        """Close the open batch now and wait until every batch so far was processed."""
        batch = self._open
        if batch is not None and batch.msgs and not batch.sealed:
            self._seal(batch)
        while self._running is not None or (self._open is not None and self._open.msgs):
            task = self._task
            if task is not None:
                await asyncio.wait([task])
            else:
                await self._wait_changed()

    async def start(self) -> None:
        """Start the forwarder's task service (``async with`` does it; the first
        [`listener`][aiorocket.integrations.spark.SparkForwarder.listener] call too)."""
        await self._lifecycle.start()

    async def close(self) -> None:
        """Process what was gathered ([`flush`][aiorocket.integrations.spark.SparkForwarder.flush]),
        then refuse new messages."""
        if self._closed:
            return
        await self.flush()
        self._closed = True
        await self._lifecycle.close()

    def statistics(self) -> ForwarderStatistics:
        """The counters so far."""
        return ForwarderStatistics(
            batches=self._batches,
            rows=self._rows,
            failed_batches=self._failed,
            pending_rows=len(self._open.msgs) if self._open is not None else 0,
            running=self._running is not None,
        )
