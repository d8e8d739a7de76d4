"""The executors' side of the ``rocketmq`` sink: one producer per Python worker process, kept
across the tasks that process runs (PySpark reuses its workers), the pipelined sends of a
task's messages (plain sends, or half messages in exactly-once mode), and what a task reports
to the driver ([SinkCommit][aiorocket.integrations.spark.sending.SinkCommit])."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from pyspark.sql.datasource import WriterCommitMessage

from aiorocket import PreparedMessage, Producer, TransactionProducer, TransactionState
from aiorocket.errors import ClientClosedError, RocketError
from aiorocket.integrations.spark.options import SinkOptions
from aiorocket.integrations.spark.outgoing import Outgoing
from aiorocket.integrations.spark.txlog import HalfSet

__all__ = [
    "SinkCommit",
    "SinkSendError",
    "producer_for",
    "prepare_all",
    "run",
    "send_all",
]

log = logging.getLogger("aiorocket.spark")

#: Seconds a worker process gives its producers to unregister when it exits.
_CLOSE_TIMEOUT: Final = 5.0
#: Seconds a failed task gives the rollback of the half messages it stored.
_ROLLBACK_TIMEOUT: Final = 10.0


class SinkSendError(RocketError):
    """A send of the task failed (after the producer's retries); the task fails and Spark
    retries it."""


@dataclass
class SinkCommit(WriterCommitMessage):
    """What a task reports to the driver: its partition and the messages it sent; in
    exactly-once mode also the write (``key``), the run and task attempt that sent them,
    and the half messages to commit."""

    partition: int
    messages: int
    key: str | None = None
    run: str | None = None
    attempt: int = 0
    halves: HalfSet | None = None


class _Host:
    """A started producer on an event loop that runs in the calling thread (the task's: a
    Python worker runs one task at a time)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.producer: Producer
        if opts.exactly_once:
            # Its half messages name the coordinator's group: no check ever comes here.
            self.producer = TransactionProducer(
                namesrv=opts.namesrv, group=opts.group, **opts.client
            )
        else:
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


def producer_for(opts: SinkOptions) -> Producer:
    """This process's started producer for ``opts`` (a
    [TransactionProducer][aiorocket.TransactionProducer] in exactly-once mode)."""
    return _host(opts).producer


def run(opts: SinkOptions, coro: Any) -> Any:
    """Run ``coro`` on the loop of ``opts``' producer, in this thread; a producer that
    stopped (a crashed background task) is dropped, so the next task starts another.

    Raises:
        Whatever ``coro`` raises.
    """
    host = _host(opts)
    try:
        return host.loop.run_until_complete(coro)
    except SinkSendError as exc:
        if isinstance(exc.__cause__, ClientClosedError):
            _drop(opts)
        raise


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


def _failed(item: Outgoing, exc: BaseException) -> SinkSendError:
    error = SinkSendError(
        f"rocketmq sink: sending row {item.row} to {item.message.topic} failed: {exc}"
    )
    error.__cause__ = exc
    return error


async def send_all(producer: Producer, out: Sequence[Outgoing], in_flight: int) -> None:
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
        raise _failed(*failure[0])


async def prepare_all(
    producer: TransactionProducer, out: Sequence[Outgoing], in_flight: int, group: str
) -> list[PreparedMessage]:
    """Store ``out`` as half messages of the transaction group ``group``, ``in_flight`` at a
    time; what identifies them, in row order. On a failure the halves stored so far are
    rolled back (best effort: the coordinator rolls back what is left when the broker checks
    them, since this task attempt is never chosen).

    Raises:
        SinkSendError: a send failed (naming its row).
    """
    prepared: list[PreparedMessage | None] = [None] * len(out)
    failure: list[tuple[Outgoing, BaseException]] = []
    it = iter(enumerate(out))

    async def worker() -> None:
        for i, item in it:
            if failure:
                return
            try:
                prepared[i] = await producer.prepare(item.message, group=group)
            except Exception as exc:
                failure.append((item, exc))
                return

    await asyncio.gather(*(worker() for _ in range(max(1, min(in_flight, len(out))))))
    stored = [p for p in prepared if p is not None]
    if failure:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(_roll_back(producer, stored, in_flight), _ROLLBACK_TIMEOUT)
        raise _failed(*failure[0])
    return stored


async def _roll_back(
    producer: TransactionProducer, prepared: Sequence[PreparedMessage], in_flight: int
) -> None:
    it = iter(prepared)

    async def worker() -> None:
        for p in it:
            with contextlib.suppress(RocketError):
                await producer.end(p, TransactionState.ROLLBACK)

    await asyncio.gather(*(worker() for _ in range(max(1, min(in_flight, len(prepared))))))
