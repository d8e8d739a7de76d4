"""The ``rocketmq`` Spark sink: ``df.write.format("rocketmq")`` and
``df.writeStream.format("rocketmq")`` (PySpark Python Data Source API, pyspark >= 4.0).

Each task turns its partition's rows into messages (the columns are in
`outgoing`), checking every row before it sends any, then
sends them with pipelined asynchronous sends (``maxInFlight`` at a time; messages of one
sharding key one after another, so their order holds) through one producer per Python worker
process, kept across the tasks that process runs (PySpark reuses its workers). The task returns
only when every send was acknowledged; a failed send fails the task and Spark retries it.

Delivery is at least once: a retried task, or a micro-batch replayed after a restart, sends its
rows again. With ``idempotentKeys`` every message's ``UNIQ_KEY`` (its ``msg_id``) and one of
its keys is derived from the write (a batch write's id, or a streaming query's id and
micro-batch id), the partition and the row's position, so a duplicate carries the same id as
its original and consumers can drop it. That holds when a partition's rows come back in the
same order on a retry (a replayable source such as ``rocketmq`` or Kafka, no nondeterministic
shuffle before the write).

Options (names are case-insensitive):

``namesrv``
    name server address(es). Required.
``topic``
    the topic of rows without a ``topic`` column (or whose ``topic`` is null).
``group``
    producer group (default ``SPARK_ROCKETMQ_SINK``).
``idempotentKeys``
    ``true``: deterministic ``UNIQ_KEY`` and key per row (see above). Default ``false``.
``maxInFlight``
    sends a task keeps in flight (default 256).
``sendTimeout``, ``retries``, ``maxMessageSize``
    the producer's settings: seconds per send, retries included (3); further attempts of a
    failed send (2); the largest body in bytes (4 MiB).
``namespace``, ``accessKey``, ``secretKey``, ``requestTimeout``, ``tls``, ``tlsCa``, ``tlsVerify``
    client settings, as the source takes them.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from aiorocket import Producer
from aiorocket.errors import ClientClosedError, ConfigurationError, RocketError
from aiorocket.integrations.spark.options import client_settings, flag, positive
from aiorocket.integrations.spark.outgoing import Layout, Outgoing, messages
from aiorocket.models import validate_name
from aiorocket.settings import ProducerSettings, build_settings

try:  # pyspark >= 4.1: streaming writers get Arrow record batches
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamBase
except ImportError:  # pragma: no cover - depends on the installed pyspark
    _StreamBase = DataSourceStreamWriter  # type: ignore[assignment,misc]

__all__ = [
    "RocketMQBatchWriter",
    "RocketMQStreamWriter",
    "SinkCommit",
    "SinkOptions",
    "SinkSendError",
    "write_partition",
]

log = logging.getLogger("aiorocket.spark")

#: The producer group of sinks that name none.
DEFAULT_GROUP: Final = "SPARK_ROCKETMQ_SINK"
_DEFAULT_IN_FLIGHT: Final = 256
#: Seconds a worker process gives its producers to unregister when it exits.
_CLOSE_TIMEOUT: Final = 5.0


class SinkSendError(RocketError):
    """A send of the task failed (after the producer's retries); the task fails and Spark
    retries it."""


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options; plain values, so writers stay picklable."""

    namesrv: str
    topic: str | None
    group: str
    idempotent_keys: bool
    max_in_flight: int
    client: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Validate the sink options (case-insensitive names).

        Raises:
            ConfigurationError: a missing or invalid option.
        """
        opts = {k.lower(): v for k, v in options.items()}
        namesrv = opts.get("namesrv", "").strip()
        if not namesrv:
            raise ConfigurationError('the rocketmq sink needs option("namesrv", "host:port")')
        topic = opts.get("topic", "").strip() or None
        if topic is not None:
            validate_name(topic)
        group = opts.get("group", "").strip() or DEFAULT_GROUP
        client = client_settings(opts)
        if "sendtimeout" in opts:
            try:
                client["send_timeout"] = float(opts["sendtimeout"])
            except ValueError:
                raise ConfigurationError("option sendTimeout must be a number") from None
        if "retries" in opts:
            try:
                client["retries"] = int(opts["retries"])
            except ValueError:
                raise ConfigurationError("option retries must be an integer") from None
        size = positive(opts.get("maxmessagesize"), "maxMessageSize")
        if size is not None:
            client["max_message_size"] = size
        parsed = cls(
            namesrv=namesrv,
            topic=topic,
            group=group,
            idempotent_keys=flag(opts.get("idempotentkeys"), "idempotentKeys", False),
            max_in_flight=positive(opts.get("maxinflight"), "maxInFlight") or _DEFAULT_IN_FLIGHT,
            client=client,
        )
        # Settings and names are checked here, on the driver, before any task runs.
        parsed.settings()
        return parsed

    def settings(self) -> ProducerSettings:
        """The producer's settings.

        Raises:
            ConfigurationError: invalid settings.
        """
        settings = build_settings(
            ProducerSettings, {"namesrv": self.namesrv, "group": self.group, **self.client}
        )
        validate_name(self.group, "producer group")
        return settings

    def key(self) -> tuple[Any, ...]:
        """What tells one producer's settings from another's (the per-process cache key)."""
        return (self.namesrv, self.group, tuple(sorted(self.client.items())))


# -- one producer per worker process ---------------------------------------------------------


class _Host:
    """A started producer on an event loop that runs in the calling thread (the task's: a
    Python worker runs one task at a time), kept for the tasks this process runs next."""

    def __init__(self, opts: SinkOptions) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.producer = Producer(namesrv=opts.namesrv, group=opts.group, **opts.client)
        try:
            self.loop.run_until_complete(self.producer.start())
        except BaseException:
            self.loop.close()
            raise

    def close(self) -> None:
        try:
            self.loop.run_until_complete(
                asyncio.wait_for(self.producer.close(), timeout=_CLOSE_TIMEOUT)
            )
        except Exception as exc:  # exiting anyway: the broker forgets the producer later
            log.debug("closing the sink's producer: %s", exc)
        finally:
            self.loop.close()


_HOSTS: dict[tuple[Any, ...], _Host] = {}


def _host(opts: SinkOptions) -> _Host:
    key = opts.key()
    host = _HOSTS.get(key)
    if host is not None and host.pid != os.getpid():
        # A forked child inherited the parent's producer: never use (or close) it here.
        _HOSTS.clear()
        host = None
    if host is None:
        host = _HOSTS[key] = _Host(opts)
    return host


def _drop(opts: SinkOptions) -> None:
    host = _HOSTS.pop(opts.key(), None)
    if host is not None and host.pid == os.getpid():
        host.close()


@atexit.register
def _close_all() -> None:
    for host in list(_HOSTS.values()):
        if host.pid == os.getpid():
            host.close()
    _HOSTS.clear()


# -- sending -----------------------------------------------------------------------------------


async def _send_all(producer: Producer, out: Sequence[Outgoing], in_flight: int) -> None:
    """Send ``out`` with ``in_flight`` sends at a time; a message with a sharding key waits
    for the previous one of its key to be acknowledged (pipelining them could store them out
    of order: a retried send lands after a later one). Stops at the first failure.

    Raises:
        SinkSendError: a send failed (naming its row), after the sends in flight ended.
    """
    loop = asyncio.get_running_loop()
    last_of_key: dict[str, asyncio.Future[None]] = {}
    failure: list[tuple[Outgoing, BaseException]] = []
    it = iter(out)

    async def worker() -> None:
        for item in it:
            if failure:
                return
            msg = item.message
            key = msg.message_group
            mine: asyncio.Future[None] | None = None
            if key is not None:
                before = last_of_key.get(key)
                mine = last_of_key[key] = loop.create_future()
                if before is not None:
                    await before
                    if failure:
                        mine.set_result(None)
                        return
            try:
                await producer.send(msg, deliver_at=item.deliver_at)
            except Exception as exc:
                failure.append((item, exc))
                return
            finally:
                if mine is not None:
                    mine.set_result(None)

    workers = max(1, min(in_flight, len(out)))
    await asyncio.gather(*(worker() for _ in range(workers)))
    if failure:
        item, exc = failure[0]
        raise SinkSendError(
            f"rocketmq sink: sending row {item.row} to {item.message.topic} failed: {exc}"
        ) from exc


@dataclass
class SinkCommit(WriterCommitMessage):
    """What a task reports to the driver: its partition and the messages it sent."""

    partition: int
    messages: int


def _partition() -> tuple[int, Any]:
    from pyspark import TaskContext

    tc = TaskContext.get()
    return (tc.partitionId() if tc is not None else 0), tc


def write_partition(
    opts: SinkOptions, layout: Layout, items: Iterable[Any], scope: str | None
) -> SinkCommit:
    """Check every row of the task's partition, then send them all and wait for every
    acknowledgement (the work of both writers' ``write``).

    Raises:
        SinkInputError: a row that cannot be sent (nothing was sent).
        SinkSendError: a send failed.
        ConfigurationError: invalid settings.
    """
    partition, _ = _partition()
    max_size = opts.settings().max_message_size
    out = messages(items, layout, partition=partition, max_size=max_size, scope=scope)
    if not out:
        return SinkCommit(partition, 0)
    host = _host(opts)
    try:
        host.loop.run_until_complete(_send_all(host.producer, out, opts.max_in_flight))
    except SinkSendError as exc:
        if isinstance(exc.__cause__, ClientClosedError):
            _drop(opts)  # its producer stopped (a crashed background task): start another
        raise
    return SinkCommit(partition, len(out))


def _total(messages: Sequence[WriterCommitMessage | None]) -> int:
    return sum(m.messages for m in messages if isinstance(m, SinkCommit))


class RocketMQBatchWriter(DataSourceArrowWriter):
    """``df.write.format("rocketmq")``: each task sends its partition (see the module
    documentation); ``idempotentKeys`` ids are scoped by a write id made on the driver."""

    def __init__(self, opts: SinkOptions, layout: Layout) -> None:
        self._opts = opts
        self._layout = layout
        self._write_id = uuid.uuid4().hex

    def write(self, iterator: Iterable[Any]) -> SinkCommit:
        """Send one partition.

        Raises:
            SinkInputError, SinkSendError: as `write_partition`.
        """
        scope = f"write:{self._write_id}" if self._opts.idempotent_keys else None
        return write_partition(self._opts, self._layout, iterator, scope)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task succeeded: log the count."""
        log.info("rocketmq sink: write %s sent %d messages", self._write_id, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """A task failed for good: what the others sent stays stored (at least once)."""
        log.warning(
            "rocketmq sink: write %s aborted; %d messages of finished tasks stay stored",
            self._write_id,
            _total(messages),
        )


class RocketMQStreamWriter(_StreamBase):
    """``df.writeStream.format("rocketmq")``: each micro-batch's tasks send their partitions;
    ``idempotentKeys`` ids are scoped by the query's id (kept in its checkpoint, so a batch
    replayed after a restart gets the same ids) and the micro-batch id."""

    def __init__(self, opts: SinkOptions, layout: Layout) -> None:
        self._opts = opts
        self._layout = layout

    def write(self, iterator: Iterable[Any]) -> SinkCommit:
        """Send one partition of a micro-batch.

        Raises:
            SinkInputError, SinkSendError: as `write_partition`.
            RuntimeError: ``idempotentKeys`` outside a streaming query's task.
        """
        scope = None
        if self._opts.idempotent_keys:
            _, tc = _partition()
            # Spark's MicroBatchExecution sets both as local properties of every task.
            query = tc.getLocalProperty("sql.streaming.queryId") if tc is not None else None
            batch = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
            if query is None or batch is None:
                raise RuntimeError(
                    "rocketmq sink: idempotentKeys needs the streaming query and batch id "
                    "of the task, which Spark did not give"
                )
            scope = f"query:{query}:{batch}"
        return write_partition(self._opts, self._layout, iterator, scope)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Every task of the micro-batch succeeded: log the count."""
        log.info("rocketmq sink: micro-batch %d sent %d messages", batchId, _total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """A task failed for good: what the others sent stays stored (at least once)."""
        log.warning(
            "rocketmq sink: micro-batch %d aborted; %d messages of finished tasks stay stored",
            batchId,
            _total(messages),
        )


def writer_for(options: Mapping[str, str], schema: StructType, *, streaming: bool) -> Any:
    """The batch or streaming writer of ``format("rocketmq")`` (options and columns checked
    here, on the driver).

    Raises:
        ConfigurationError: invalid options or columns.
    """
    opts = SinkOptions.parse(options)
    layout = Layout.of(schema, opts.topic)
    if streaming:
        return RocketMQStreamWriter(opts, layout)
    return RocketMQBatchWriter(opts, layout)
