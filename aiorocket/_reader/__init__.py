"""Reading queues by offset, outside any consumer group: [`QueueReader`][aiorocket.QueueReader]
(asyncio) and [`SyncQueueReader`][aiorocket.SyncQueueReader] (blocking, for plain code such as Spark
executors)."""

from aiorocket._reader.inline import InlineReader
from aiorocket._reader.queue_reader import (
    DEFAULT_PULL_GROUP,
    QueueReader,
    RawChunk,
    ReadBatch,
    ReadStatus,
)
from aiorocket._reader.sync_reader import SyncQueueReader

__all__ = [
    "DEFAULT_PULL_GROUP",
    "InlineReader",
    "QueueReader",
    "RawChunk",
    "ReadBatch",
    "ReadStatus",
    "SyncQueueReader",
]
