"""A queue reader driven from the calling thread: `InlineReader`.

[`SyncQueueReader`][aiorocket.SyncQueueReader] runs its event loop in a thread of its own, so every
list of messages crosses threads (a wake-up of the loop, a queue, a condition variable) and both
threads take turns holding the GIL. A Spark executor reading one range needs none of that:
here the loop belongs to the caller's thread and runs only while the caller waits for the
next chunk. Pulls stay pipelined all the same: the ones in flight are answered into the
socket buffer while the caller decodes, and are picked up when the loop runs again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiorocket._reader.blocking import BlockingReader
from aiorocket._reader.queue_reader import DEFAULT_PULL_GROUP, QueueReader
from aiorocket._reader.runners import CallerLoopRunner

__all__ = ["InlineReader"]


class InlineReader(BlockingReader):
    """A [`QueueReader`][aiorocket.QueueReader] on a private event loop that runs in the caller's
    thread.

    ```python
    with InlineReader(namesrv="127.0.0.1:9876") as reader:
        for chunk in reader.read_range_raw(mq, 0, 1000):
            ...
    ```

    Not for use from a thread that runs an event loop already (the loop could not run).
    Methods are those of [`SyncQueueReader`][aiorocket.SyncQueueReader]; arguments are those of
    [`QueueReader`][aiorocket.QueueReader].

    Raises:
        ConfigurationError: invalid settings (at construction).
    """

    def __init__(
        self, *, namesrv: str | Sequence[str], pull_group: str = DEFAULT_PULL_GROUP, **settings: Any
    ) -> None:
        reader = QueueReader(namesrv=namesrv, pull_group=pull_group, **settings)
        super().__init__(reader, CallerLoopRunner())
