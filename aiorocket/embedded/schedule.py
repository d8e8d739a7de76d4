"""Delayed delivery: ``ScheduleMessageService`` (docs/protocol.md §6.6).

Delayed messages (a ``DELAY`` property, and every send-back) wait in ``SCHEDULE_TOPIC_XXXX``,
queue ``level - 1``, with their consume-queue tags code set to the delivery time. One task per
level reads its queue in order from a persisted progress offset; a message whose time has come
is re-stored in its ``REAL_TOPIC``/``REAL_QID`` (``DELAY`` still among its properties, as a
4.9.8 broker leaves it). Within a level the delivery times only grow, so the task sleeps until
the head is due, and waits on an event (set by the send path) while the queue is drained.

The progress table (``delayOffset.json``) is written only after the re-stored messages it
covers are on disk, so a crash may deliver a message twice but never loses one; a restart
resumes every pending schedule.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiorocket._concurrency import Service, ServiceOwner
from aiorocket._protocol import properties as mp
from aiorocket._protocol.message import decode_message
from aiorocket.embedded.files import PersistedTable, write_json_atomically
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.store_results import GetStatus, PutResult
from aiorocket.embedded.topics import SCHEDULE_TOPIC, TopicTable, is_valid_name
from aiorocket.embedded.writer import MessageWriter, copy_record
from aiorocket.errors import LocalProtocolError, RemoteProtocolError

__all__ = ["DueDelivery", "ScheduleService"]

log = logging.getLogger("aiorocket.embedded")

_BATCH = 64


class DueDelivery(PersistedTable, ServiceOwner):
    """What the delay-level and timer services share: parked messages re-stored in their real
    topics when due, by tasks of one `Service`, and a progress table persisted only
    once the re-stores it covers are durable (Java's ``ScheduleMessageService`` and
    ``TimerMessageStore`` both persist their progress after their puts).

    ``start``/``close``/``wait_closed`` are the service's (`ServiceOwner`): closing stops the
    tasks and keeps the progress (`flush` writes it). Subclasses give `_startup` (the
    tasks), `_progress` (the table to write, or ``None`` when it did not move) and
    `_progress_written`.

    Args:
        writer: stores the due messages in their real topics.
        topics: to create a real topic that is missing (a retry topic, say).
        path: the progress file; ``None`` keeps progress in memory only.
        durable: wait for the store's fsync before writing progress (sync flush mode).
        store_address: the broker's current ``(ip, port)``, the store host of re-stored
            messages.
    """

    _table_key = "offsetTable"

    def __init__(
        self,
        writer: MessageWriter,
        topics: TopicTable,
        *,
        name: str,
        path: Path | None,
        durable: bool,
        store_address: Callable[[], tuple[str, int]],
    ) -> None:
        self._writer = writer
        self._store: MessageStore = writer.store
        # The writer's clock: the due times it computed count on it, so waiting does too.
        self._clock = writer.clock
        self._topics = topics
        self._path = path
        self._durable = durable
        self._store_address = store_address
        self._last_put: PutResult | None = None
        self._flush_lock = asyncio.Lock()
        self._lifecycle = Service(name, startup=self._startup, logger=log)
        #: messages re-stored in their real topics since start
        self.delivered = 0

    async def _startup(self) -> None:
        raise NotImplementedError

    def _progress(self) -> dict[str, int] | None:
        raise NotImplementedError

    def _progress_written(self, table: dict[str, int]) -> None:
        raise NotImplementedError

    async def flush(self) -> None:
        """Persist the progress if it moved, after the re-stores it covers are durable.

        Shielded like `ConsumerOffsets.flush`: a cancelled caller never leaves a
        half-finished write behind.

        Raises:
            OSError: the store's fsync or the progress file write failed.
        """
        await asyncio.shield(self._flush())

    async def _flush(self) -> None:
        async with self._flush_lock:
            table = self._progress()
            if table is None:
                return
            last = self._last_put
            if self._durable and last is not None:
                await self._store.wait_durable(last.commit_log_end)
            if self._path is not None:
                data = {"offsetTable": table}
                await asyncio.to_thread(write_json_atomically, self._path, data)
            self._progress_written(table)


class ScheduleService(DueDelivery):
    """Re-stores delayed messages when they are due (one task per delay level).

    Args:
        levels: the delay of each level in seconds; level ``n`` uses queue ``n - 1``.
        (the others: `DueDelivery`; ``path`` is ``delayOffset.json``)
    """

    def __init__(
        self,
        writer: MessageWriter,
        topics: TopicTable,
        *,
        levels: tuple[float, ...],
        path: Path | None,
        durable: bool,
        store_address: Callable[[], tuple[str, int]],
    ) -> None:
        super().__init__(
            writer,
            topics,
            name="aiorocket-delay",
            path=path,
            durable=durable,
            store_address=store_address,
        )
        self._levels = levels
        self._done: dict[int, int] = {}
        self._written: dict[int, int] = {}
        self._events: dict[int, asyncio.Event] = {}

    def _decode(self, data: dict[str, Any]) -> None:
        self._done = {int(k): int(v) for k, v in data["offsetTable"].items()}
        self._written = dict(self._done)

    def progress(self, level_queue: int) -> int:
        """The next schedule-queue offset the level's task will look at."""
        return self._done.get(level_queue, 0)

    def wake(self, level_queue: int) -> None:
        """A message was parked in ``level_queue``: let its task look. Never raises."""
        event = self._events.get(level_queue)
        if event is not None:
            event.set()

    async def _startup(self) -> None:
        queues = set(range(len(self._levels)))
        queues.update(self._store.queues().get(SCHEDULE_TOPIC, []))
        for q in sorted(queues):
            self._events[q] = asyncio.Event()
            self._lifecycle.spawn(self._run_level(q), name=f"aiorocket-delay-{q + 1}")

    def _progress(self) -> dict[str, int] | None:
        if self._done == self._written:
            return None
        return {str(k): v for k, v in sorted(self._done.items())}

    def _progress_written(self, table: dict[str, int]) -> None:
        self._written = {int(k): v for k, v in table.items()}

    async def _run_level(self, q: int) -> None:
        event = self._events[q]
        while True:
            try:
                due_in = self._deliver_due(q)
            except asyncio.CancelledError:
                raise
            except Exception:
                # A store failure must not end delayed delivery for good: retry later.
                log.exception("delay level %d: delivery failed", q + 1)
                due_in = 1.0
            if due_in is None:
                event.clear()
                # Re-check after clearing: a message parked since the last read is not missed.
                if self._store.max_offset(SCHEDULE_TOPIC, q) > self.progress(q):
                    continue
                await event.wait()
            else:
                await self._clock.sleep(due_in)

    def _deliver_due(self, q: int) -> float | None:
        """Re-store the due messages of one batch of level queue ``q``; returns the seconds
        until the next look (0 after a full batch), or ``None`` when the queue is drained."""
        store = self._store
        while True:
            offset = self.progress(q)
            result = store.get(SCHEDULE_TOPIC, q, offset, max_msgs=_BATCH, max_bytes=4 << 20)
            status = result.status
            if status is GetStatus.FOUND:
                now = self._clock.now_ms()
                for raw, deliver_at, qo in zip(
                    result.messages, result.tags_codes, result.queue_offsets, strict=True
                ):
                    if deliver_at > now:
                        self._done[q] = qo
                        return (deliver_at - now) / 1000.0
                    self._deliver(raw)
                    self._done[q] = qo + 1
                self._done[q] = max(self._done.get(q, 0), result.next_begin_offset)
                # Yield between batches: a backlog (after a restart) must not stall the loop.
                return 0.0
            if (
                status
                in (
                    GetStatus.OFFSET_TOO_SMALL,
                    GetStatus.OFFSET_OVERFLOW_BADLY,
                    GetStatus.MESSAGE_WAS_REMOVING,
                    GetStatus.NO_MATCHED_MESSAGE,
                    GetStatus.OFFSET_FOUND_NULL,
                )
                and result.next_begin_offset != offset
            ):
                # Removed by retention, or the store lost a tail in a crash: skip ahead.
                self._done[q] = result.next_begin_offset
                continue
            return None

    def _deliver(self, raw: bytes) -> None:
        # ScheduleMessageService.messageTimeup: back to the real topic and queue with body,
        # flag, born host, reconsume times and the parked copy's properties string (rendered
        # before it clears DELAY and sets WAIT false on the map: DELAY and WAIT stay as parked).
        try:
            rec, _ = decode_message(raw, decompress=False)
        except RemoteProtocolError as exc:
            log.error("delayed message is unreadable, dropped: %s", exc)
            return
        props = rec.properties
        real_topic = props.get(mp.REAL_TOPIC)
        try:
            real_qid = int(props.get(mp.REAL_QID, ""))
        except ValueError:
            real_qid = -1
        if real_topic is None or not is_valid_name(real_topic) or real_qid < 0:
            log.error(
                "delayed message at %d has no valid real topic, dropped", rec.commit_log_offset
            )
            return
        cfg = self._topics.get(real_topic)
        if cfg is None:
            cfg = self._topics.ensure(real_topic, max(real_qid + 1, 1))
        out = copy_record(
            rec,
            real_topic,
            real_qid,
            self._store_address(),
            properties=props,
            prepared_transaction_offset=rec.prepared_transaction_offset,
        )
        try:
            self._last_put = self._writer.store_message(out)
        except LocalProtocolError as exc:
            log.error(
                "delayed message at %d cannot be re-stored, dropped: %s", rec.commit_log_offset, exc
            )
            return
        self.delivered += 1
