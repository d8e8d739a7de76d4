"""The blocking face of [`QueueReader`][aiorocket.QueueReader] for any thread:
[`SyncQueueReader`][aiorocket.SyncQueueReader] runs the async reader on an event loop in a daemon
thread behind an anyio blocking portal, for plain code such as Spark's driver."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from anyio.from_thread import BlockingPortal

from aiorocket._reader.blocking import BlockingReader
from aiorocket._reader.queue_reader import DEFAULT_PULL_GROUP, QueueReader
from aiorocket._reader.runners import PortalRunner

__all__ = ["SyncQueueReader"]


class SyncQueueReader(BlockingReader):
    """A [`QueueReader`][aiorocket.QueueReader] for plain (blocking) code: the async reader runs on
    an event loop in a daemon thread behind an anyio blocking portal, and each method waits for its
    result.

    ```python
    with SyncQueueReader(namesrv="127.0.0.1:9876") as reader:
        mq = reader.queues("orders")[0]
        for msgs in reader.read_range_batches(mq, 0, reader.max_offset(mq)):
            ...
    ```

    Methods are those of [`QueueReader`][aiorocket.QueueReader], blocking, with the same errors;
    they may be called from any thread except the reader's own. Arguments are those of
    [`QueueReader`][aiorocket.QueueReader], plus:

    Args:
        prefetch: lists [`read_range_batches`][aiorocket.SyncQueueReader.read_range_batches] keeps
            ready ahead of its caller, so the network overlaps with the caller's work.

    Raises:
        ConfigurationError: invalid settings (at construction).
    """

    def __init__(
        self,
        *,
        namesrv: str | Sequence[str],
        pull_group: str = DEFAULT_PULL_GROUP,
        prefetch: int = 8,
        **settings: Any,
    ) -> None:
        reader = QueueReader(namesrv=namesrv, pull_group=pull_group, **settings)
        self._portal_runner = PortalRunner(prefetch)
        super().__init__(reader, self._portal_runner)

    @property
    def _portal(self) -> BlockingPortal | None:
        # The loop thread's portal, for tests that call from that thread.
        return self._portal_runner.portal
