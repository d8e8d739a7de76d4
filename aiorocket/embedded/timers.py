"""Timer messages: RocketMQ 5.x's ``TimerMessageStore`` (docs/protocol.md §12.4), at the
millisecond.

The send path parks a timer message in ``rmq_sys_wheel_timer`` queue 0 with its due time as its
consume-queue tags code (``writer.py``). This service keeps every pending one in memory, ordered
by when it must act (a ``SortedList`` of ``(action_ms, queue_offset)``), sleeps until the first,
and then re-stores each due message in its ``REAL_TOPIC``/``REAL_QID`` with ``TIMER_ENQUEUE_MS``
and ``TIMER_DEQUEUE_MS`` added, as ``TimerMessageStore.convertMessage`` does (the parked
properties, ``REAL_TOPIC`` and ``TIMER_OUT_MS`` included, stay as Java renders them).

Durability: once a parked message is handled its index entry's tags code is rewritten to
`TIMER_DONE`, right after its delivered copy is stored and with no await in between, so a
killed broker neither loses a pending timer nor delivers one twice (a crash between those two
writes, microseconds apart, would deliver it again, never lose it). At start the pending set is
rebuilt from the index: every entry from the persisted low-water offset (``timerProgress.json``,
written like ``delayOffset.json``: only once the deliveries it covers are durable) that is not
marked done. A recovery that rebuilds the whole index recomputes due times from
``TIMER_OUT_MS``, so it may deliver again, as a crashed 5.x broker may.

Also as in 5.x: a message waiting longer than ``timer_roll_window`` is parked again
(``TIMER_ROLL_TIMES`` + 1) so retention never removes it; a parked ``TIMER_DEL_UNIQKEY``
message (``<topic>+<UNIQ_KEY>``) cancels the message of that key due at the same time and is
itself never delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from sortedcontainers import SortedList, SortedSet

from aiorocket._protocol import properties as mp
from aiorocket._protocol.message import MessageRecord, decode_message
from aiorocket.embedded.clock import Clock
from aiorocket.embedded.config import BrokerConfig
from aiorocket.embedded.schedule import DueDelivery
from aiorocket.embedded.topics import TIMER_TOPIC, TopicTable, is_valid_name
from aiorocket.embedded.writer import MessageWriter, copy_record
from aiorocket.errors import (
    ClientClosedError,
    LocalProtocolError,
    MessageTooLargeError,
    RemoteProtocolError,
)

__all__ = ["TIMER_DONE", "TimerService"]

log = logging.getLogger("aiorocket.embedded")

#: the tags code of a parked entry that was delivered, rolled or cancelled (a due time is > 0)
TIMER_DONE: Final = -1
# Messages handled per step before yielding to the loop (a backlog after a restart must not
# stall it), and index entries read per call while rebuilding.
_BATCH: Final = 256
_SCAN: Final = 1024
#: ms before retrying a message whose re-store failed (a full disk, a closing store)
_RETRY_MS: Final = 1000
#: seconds the enqueue and dequeue rates are averaged over (runtime info)
_RATE_WINDOW: Final = 10


class _Rate:
    """Events per second over the last `_RATE_WINDOW` whole seconds of ``clock``."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._seconds: deque[list[int]] = deque()

    def add(self, n: int = 1) -> None:
        now = int(self._clock.monotonic())
        if self._seconds and self._seconds[-1][0] == now:
            self._seconds[-1][1] += n
        else:
            self._seconds.append([now, n])
            while self._seconds[0][0] <= now - _RATE_WINDOW - 1:
                self._seconds.popleft()

    def per_second(self) -> float:
        now = int(self._clock.monotonic())
        total = sum(n for s, n in self._seconds if now - _RATE_WINDOW <= s < now)
        return total / _RATE_WINDOW


class TimerService(DueDelivery):
    """Delivers parked timer messages when due; see the module docstring.

    Args:
        config: ``timer_roll_window``.
        (the others: `DueDelivery`; ``path`` is
        ``timerProgress.json``, the low-water offset)
    """

    def __init__(
        self,
        writer: MessageWriter,
        topics: TopicTable,
        *,
        config: BrokerConfig,
        path: Path | None,
        durable: bool,
        store_address: Callable[[], tuple[str, int]],
    ) -> None:
        super().__init__(
            writer,
            topics,
            name="aiorocket-timer",
            path=path,
            durable=durable,
            store_address=store_address,
        )
        self._roll_ms = int(config.timer_roll_window * 1000)
        # (action_ms, queue_offset): the action is the delivery, or the roll when that comes
        # first; the offsets alone give the low-water mark.
        self._pending: Any = SortedList()
        self._offsets: Any = SortedSet()
        self._low = 0
        self._written = 0
        self._handled: set[int] = set()
        self._event = asyncio.Event()
        self._enqueued = _Rate(self._clock)
        self._dequeued = _Rate(self._clock)
        #: messages parked again (rolled) and cancelled, since start
        self.rolled = 0
        self.cancelled = 0

    def _decode(self, data: dict[str, Any]) -> None:
        self._low = self._written = int(data["offsetTable"].get("0", 0))

    @property
    def pending(self) -> int:
        """How many parked timer messages wait."""
        return len(self._pending)

    def rebuild(self) -> int:
        """Collect the pending messages from the index (after `load`, before the broker
        serves: parks from then on come through `parked`); returns how many.

        Raises:
            ClientClosedError: the store is not open.
            OSError: the index cannot be read.
        """
        store = self._store
        offset = max(self._low, store.min_offset(TIMER_TOPIC, 0))
        end = store.max_offset(TIMER_TOPIC, 0)
        while offset < end:
            entries = store.index_entries(TIMER_TOPIC, 0, offset, _SCAN)
            if not entries:
                break
            for qo, entry in entries:
                # A zero size is a hole recovery left; TIMER_DONE a handled message.
                if entry.size and entry.tags_code != TIMER_DONE:
                    self._add(qo, entry.tags_code, entry.store_timestamp)
            offset = entries[-1][0] + 1
        return len(self._pending)

    def parked(self, queue_offset: int, due_ms: int, stored_ms: int) -> None:
        """The write path parked a timer message (`TimerParked`).
        Never raises."""
        self._add(queue_offset, due_ms, stored_ms)
        self._enqueued.add()
        self._event.set()

    def _add(self, queue_offset: int, due_ms: int, stored_ms: int) -> None:
        if queue_offset in self._offsets:
            return
        self._pending.add((min(due_ms, stored_ms + self._roll_ms), queue_offset))
        self._offsets.add(queue_offset)

    def runtime_info(self) -> dict[str, str]:
        """The timer keys of a 5.x broker's GET_BROKER_RUNTIME_INFO (``AdminBrokerProcessor``):
        seconds the oldest overdue message waits, index entries not yet read (none: parking
        indexes at once), pending messages, and the park and delivery rates."""
        behind = 0
        if self._pending:
            head: int = self._pending[0][0]
            behind = max(self._clock.now_ms() - head, 0) // 1000
        return {
            "timerReadBehind": str(behind),
            "timerOffsetBehind": "0",
            "timerCongestNum": str(len(self._pending)),
            "timerEnqueueTps": str(self._enqueued.per_second()),
            "timerDequeueTps": str(self._dequeued.per_second()),
        }

    # -- lifecycle ----------------------------------------------------------------------------

    async def _startup(self) -> None:
        self._lifecycle.spawn(self._run(), name="aiorocket-timer-delivery")

    def _progress(self) -> dict[str, int] | None:
        low: int = self._offsets[0] if self._offsets else self._store.max_offset(TIMER_TOPIC, 0)
        return None if low == self._written else {"0": low}

    def _progress_written(self, table: dict[str, int]) -> None:
        self._written = table["0"]

    # -- delivery -----------------------------------------------------------------------------

    async def _run(self) -> None:
        event = self._event
        while True:
            if not self._pending:
                event.clear()
                await event.wait()
                continue
            head: int = self._pending[0][0]
            wait_ms = head - self._clock.now_ms()
            if wait_ms > 0:
                # Woken early by a park (it may be due sooner); re-checked against the
                # clock, so nothing is delivered before its time.
                event.clear()
                await self._clock.wait(event, wait_ms / 1000)
                continue
            try:
                self._step(self._clock.now_ms())
            except (OSError, ClientClosedError) as exc:
                log.error("timer delivery failed, retrying in %d ms: %s", _RETRY_MS, exc)
                await self._clock.sleep(_RETRY_MS / 1000)
            except Exception:
                # A bug must not end timer delivery for good: log it and try again later.
                log.exception("timer delivery failed, retrying in %d ms", _RETRY_MS)
                await self._clock.sleep(_RETRY_MS / 1000)
            await asyncio.sleep(0)

    def _step(self, now: int) -> None:
        """Handle the next batch of messages whose action time has come: synchronous."""
        pending = self._pending
        n = min(pending.bisect_right((now, float("inf"))), _BATCH)
        if n == 0:
            return
        # A cancellation and what it cancels are due together: never split equal times.
        last: int = pending[n - 1][0]
        n = pending.bisect_right((last, float("inf")))
        batch: list[tuple[int, int]] = list(pending[:n])
        del pending[:n]
        for _, qo in batch:
            self._offsets.discard(qo)
        self._handled = set()
        try:
            self._handle(batch, now)
        except BaseException:
            # Whatever was not handled goes back, due at once (after the retry pause).
            for action, qo in batch:
                if qo not in self._handled:
                    self._pending.add((action, qo))
                    self._offsets.add(qo)
            raise

    def _handle(self, batch: list[tuple[int, int]], now: int) -> None:
        store = self._store
        due_now: list[tuple[int, MessageRecord, int]] = []
        for _, qo in batch:
            found = store.index_entries(TIMER_TOPIC, 0, qo, 1)
            if not found:
                log.error("timer message at queue offset %d was removed by retention", qo)
                self._handled.add(qo)
                continue
            entry = found[0][1]
            if not entry.size or entry.tags_code == TIMER_DONE:
                self._handled.add(qo)
                continue
            rec = self._read(entry.commit_log_offset)
            if rec is None:
                self._done(qo)
                continue
            if entry.tags_code > now:
                self._roll(qo, rec, entry.tags_code, now)
            else:
                due_now.append((qo, rec, entry.tags_code))
        # TimerDequeueGetMessageService: the cancellations of a slot are read first.
        cancels = {
            (rec.properties[mp.TIMER_DEL_UNIQKEY], due)
            for _, rec, due in due_now
            if mp.TIMER_DEL_UNIQKEY in rec.properties
        }
        for qo, rec, due in due_now:
            props = rec.properties
            if mp.TIMER_DEL_UNIQKEY in props:
                continue
            key = f"{props.get(mp.REAL_TOPIC)}+{props.get(mp.UNIQ_KEY)}"
            if (key, due) in cancels:
                self.cancelled += 1
            else:
                self._deliver(rec)
            self._done(qo)
        # Cancellations are marked last: a crash before leaves them to cancel again.
        for qo, rec, _ in due_now:
            if mp.TIMER_DEL_UNIQKEY in rec.properties:
                self._done(qo)

    def _read(self, commit_log_offset: int) -> MessageRecord | None:
        raw = self._store.read_at(commit_log_offset)
        if raw is None:
            log.error("timer message at %d is unreadable, dropped", commit_log_offset)
            return None
        try:
            return decode_message(raw, decompress=False)[0]
        except RemoteProtocolError as exc:
            log.error("timer message at %d is unreadable, dropped: %s", commit_log_offset, exc)
            return None

    def _done(self, qo: int) -> None:
        # After the re-store, with no await in between: see the module docstring.
        self._handled.add(qo)
        if not self._store.set_tags_code(TIMER_TOPIC, 0, qo, TIMER_DONE):
            log.warning("timer message at queue offset %d is gone from the index", qo)

    def _roll(self, qo: int, rec: MessageRecord, due: int, now: int) -> None:
        # TimerMessageStore.convert(needRoll): parked again as is, TIMER_ROLL_TIMES + 1.
        props = dict(rec.properties)
        try:
            rolls = int(props.get(mp.TIMER_ROLL_TIMES, "0"))
        except ValueError:
            rolls = 0
        props[mp.TIMER_ROLL_TIMES] = str(rolls + 1)
        props[mp.TIMER_ENQUEUE_MS] = str(rec.store_timestamp)
        props[mp.TIMER_DEQUEUE_MS] = str(now)
        copy = copy_record(rec, TIMER_TOPIC, 0, self._store_address(), properties=props)
        try:
            self._last_put = self._writer.store_timer(copy, due)
        except (LocalProtocolError, MessageTooLargeError) as exc:
            log.error("timer message at %d cannot be parked again, dropped: %s", qo, exc)
        else:
            self.rolled += 1
        self._done(qo)

    def _deliver(self, rec: MessageRecord) -> None:
        # TimerMessageStore.convertMessage: the properties string is rendered before
        # REAL_TOPIC/REAL_QID are cleared from the map, so the stored copy keeps them.
        props = dict(rec.properties)
        real_topic = props.get(mp.REAL_TOPIC)
        try:
            real_qid = int(props.get(mp.REAL_QID, ""))
        except ValueError:
            real_qid = -1
        if real_topic is None or not is_valid_name(real_topic) or real_qid < 0:
            log.error("timer message at %d has no valid real topic, dropped", rec.commit_log_offset)
            return
        if self._topics.get(real_topic) is None:
            self._topics.ensure(real_topic, max(real_qid + 1, 1))
        props[mp.TIMER_ENQUEUE_MS] = str(rec.store_timestamp)
        props[mp.TIMER_DEQUEUE_MS] = str(self._clock.now_ms())
        out = copy_record(rec, real_topic, real_qid, self._store_address(), properties=props)
        try:
            self._last_put = self._writer.store_message(out)
        except (LocalProtocolError, MessageTooLargeError) as exc:
            # The copy cannot be stored (its properties grew past the limit): dropped and
            # logged, as ScheduleService does.
            log.error(
                "timer message at %d cannot be re-stored, dropped: %s", rec.commit_log_offset, exc
            )
            return
        self.delivered += 1
        self._dequeued.add()
