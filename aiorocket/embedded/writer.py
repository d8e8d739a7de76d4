"""The write path: the one place messages enter the store.

`MessageWriter` stores a message as is, parks a delayed one in ``SCHEDULE_TOPIC_XXXX``
(queue = level - 1, with ``REAL_TOPIC``/``REAL_QID``, its tags code the delivery time), parks a
timer message in ``rmq_sys_wheel_timer`` (queue 0, likewise, plus ``TIMER_OUT_MS``), or stores
a transactional one as a half message in ``RMQ_SYS_TRANS_HALF_TOPIC``; then it wakes the held
pulls of the queue (or the schedule task of the level, or the timer service) synchronously, so a
waiting consumer is answered within the same loop iteration. The send path, the schedule and
timer services and the transaction service all write through it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiorocket._names import SCHEDULE_TOPIC, now_ms
from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import MessageSysFlag
from aiorocket._protocol.message import MessageRecord
from aiorocket._protocol.tags import tags_code
from aiorocket.embedded.clock import Clock
from aiorocket.embedded.config import BrokerConfig
from aiorocket.embedded.delays import (
    TimerRefusal,
    deliver_at,
    is_timer_message,
    requested_level,
    timer_due,
    timer_not_enabled,
)
from aiorocket.embedded.long_polling import PullWaiters
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.store_results import PutResult
from aiorocket.embedded.topics import HALF_TOPIC, TIMER_TOPIC

__all__ = [
    "MessageWriter",
    "TimerRefused",
    "TimerParked",
    "broker_record",
    "copy_record",
    "reset_transaction_value",
    "to_half",
]

#: ``parked(queue_offset, due_ms, stored_ms)``: a timer message was parked at that offset of
#: ``rmq_sys_wheel_timer`` queue 0, due at ``due_ms``, stored at ``stored_ms``.
TimerParked = Callable[[int, int, int], None]


class TimerRefused(Exception):
    """A timer message the broker does not take (`TimerRefusal`
    says with which code and remark to answer); nothing was stored."""

    def __init__(self, refusal: TimerRefusal) -> None:
        super().__init__(refusal.remark)
        self.refusal = refusal


_TYPE_MASK = int(MessageSysFlag.TRANSACTION_ROLLBACK)  # 0xC: both transaction bits


def reset_transaction_value(sys_flag: int, tran_type: int) -> int:
    """``MessageSysFlag.resetTransactionValue``: replace the two transaction bits."""
    return (sys_flag & ~_TYPE_MASK) | tran_type


def broker_record(
    topic: str,
    body: bytes,
    store_address: tuple[str, int],
    *,
    properties: dict[str, str],
    queue_id: int = 0,
) -> MessageRecord:
    """A message the broker writes itself (transaction op records, the POP revive log): born
    and stored at ``store_address``, now; the store fills in offsets and the store time."""
    host, port = store_address
    return MessageRecord(
        topic=topic,
        body=body,
        queue_id=queue_id,
        flag=0,
        queue_offset=0,
        commit_log_offset=0,
        sys_flag=0,
        born_timestamp=now_ms(),
        born_host=host,
        born_port=port,
        store_timestamp=0,
        store_host=host,
        store_port=port,
        reconsume_times=0,
        prepared_transaction_offset=0,
        properties=properties,
    )


def copy_record(
    orig: MessageRecord,
    topic: str,
    queue_id: int,
    store_address: tuple[str, int],
    *,
    properties: dict[str, str],
    reconsume_times: int | None = None,
    prepared_transaction_offset: int = 0,
) -> MessageRecord:
    """A new record of a stored one, to be stored again in ``topic``/``queue_id`` by this
    broker: ``orig``'s body, flag, sysFlag, born time and host and reconsume times (unless
    given), with ``properties``.

    ``store_address`` is the broker's current address, not the original's: a restarted
    broker may listen on another port, and clients locate a message by the host in its id.
    """
    host, port = store_address
    return MessageRecord(
        topic=topic,
        body=orig.body,
        queue_id=queue_id,
        flag=orig.flag,
        queue_offset=0,
        commit_log_offset=0,
        sys_flag=orig.sys_flag,
        born_timestamp=orig.born_timestamp,
        born_host=orig.born_host,
        born_port=orig.born_port,
        store_timestamp=0,
        store_host=host,
        store_port=port,
        reconsume_times=orig.reconsume_times if reconsume_times is None else reconsume_times,
        prepared_transaction_offset=prepared_transaction_offset,
        properties=properties,
    )


def to_half(rec: MessageRecord) -> None:
    """Turn a received transactional message into its half message, in place
    (``TransactionalMessageBridge.parseHalfMessageInner``)."""
    rec.properties[mp.REAL_TOPIC] = rec.topic
    rec.properties[mp.REAL_QID] = str(rec.queue_id)
    # Not-type: the store indexes it (a prepared message would not be) in the half topic.
    rec.sys_flag = reset_transaction_value(rec.sys_flag, 0)
    rec.topic = HALF_TOPIC
    rec.queue_id = 0


class MessageWriter:
    """Stores messages and wakes whoever waits for them.

    Args:
        store: the open message store.
        waiters: held pulls, woken per (topic, queue) after each store.
        config: the delay table and flush mode.
        schedule_wake: called with the ``SCHEDULE_TOPIC_XXXX`` queue id a delayed message
            was parked in.
        timer_parked: told of each timer message parked (`TimerParked`).
        clock: the broker's clock, the time delays and timers count from (``None``: the
            real one).
    """

    def __init__(
        self,
        store: MessageStore,
        waiters: PullWaiters,
        config: BrokerConfig,
        schedule_wake: Callable[[int], None],
        timer_parked: TimerParked | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._store = store
        self._clock = clock if clock is not None else Clock()
        self._waiters = waiters
        self._config = config
        self._levels = config.delay_levels
        self._schedule_wake = schedule_wake
        self._timer_parked = timer_parked
        self._timers = config.timers_enabled
        self._max_delay_ms = int(config.timer_max_delay * 1000)
        self._precision = config.timer_precision_ms

    @property
    def clock(self) -> Clock:
        """The broker's clock (the services re-storing parked messages read it too)."""
        return self._clock

    @property
    def store(self) -> MessageStore:
        """The message store written to."""
        return self._store

    def delay_level(self, props: dict[str, str]) -> int:
        """The message's ``DELAY`` level clamped to the table (0: not delayed).

        ``ScheduleMessageService``: a level above the table's length means the last level;
        a malformed or non-positive level means no delay.
        """
        return requested_level(props, len(self._levels))

    def store_message(self, rec: MessageRecord) -> PutResult:
        """Store ``rec`` as is (tags code from its ``TAGS``) and wake held pulls, those of the
        lite topics' queues it is dispatched to too; synchronous.

        Raises:
            the errors of `MessageStore.put`.
        """
        code = tags_code(rec.properties.get(mp.TAGS))
        result = self._store.put(rec, tags_code=code)
        self._waiters.notify(rec.topic, rec.queue_id, result.queue_offset, code)
        for lmq, offset in result.dispatched:
            self._waiters.notify(lmq, 0, offset, code)  # a lite topic's queue (§12.8)
        return result

    def store_half(self, rec: MessageRecord) -> PutResult:
        """Store a received transactional message as its half message (`to_half`),
        never parked (``TransactionalMessageBridge.putHalfMessage``); synchronous.

        Raises:
            the errors of `MessageStore.put`.
        """
        to_half(rec)
        return self.store_message(rec)

    def store_or_park(self, rec: MessageRecord, *, wait: str | None = None) -> PutResult:
        """Store ``rec``; if it carries a ``DELAY`` level, park it in ``SCHEDULE_TOPIC_XXXX``
        instead (``CommitLog.putMessage``), if it is a timer message due in the future, in
        ``rmq_sys_wheel_timer`` (``HookUtils.handleScheduleMessage``), to be re-stored when due.

        ``wait`` is the ``WAIT`` property the message had in the broker's map although it is
        left out of a stored record: ``CommitLog.putMessage`` re-renders a parked message's
        properties from that map, so the parked copy (and the one delivered later) has it.

        Raises:
            TimerRefused: a timer message the broker refuses (nothing stored).
            the errors of `MessageStore.put`.
        """
        props = rec.properties
        level = self.delay_level(props)
        if self._timers and rec.topic not in (SCHEDULE_TOPIC, TIMER_TOPIC):
            if level:
                # checkIfTimerMessage: a delay level wins; the timer properties are dropped.
                for key in mp.TIMER_KEYS:
                    props.pop(key, None)
            elif is_timer_message(props):
                if not self._config.timer_wheel_enable:
                    raise TimerRefused(timer_not_enabled())
                due = timer_due(
                    props,
                    self._clock.now_ms(),
                    max_delay_ms=self._max_delay_ms,
                    precision_ms=self._precision,
                )
                if isinstance(due, TimerRefusal):
                    raise TimerRefused(due)
                if due is not None:
                    return self._park_timer(rec, due, wait)
        if level == 0 or rec.topic == SCHEDULE_TOPIC:
            return self.store_message(rec)
        if wait is not None:
            props[mp.WAIT] = wait
        props[mp.REAL_TOPIC] = rec.topic
        props[mp.REAL_QID] = str(rec.queue_id)
        props[mp.DELAY] = str(level)
        rec.topic = SCHEDULE_TOPIC
        rec.queue_id = level - 1
        # The consume-queue tags code of a parked message is its delivery time.
        result = self._store.put(
            rec, tags_code=deliver_at(self._clock.now_ms(), level, self._levels)
        )
        self._schedule_wake(level - 1)
        return result

    def _park_timer(self, rec: MessageRecord, due: int, wait: str | None) -> PutResult:
        # transformTimerMessage: TIMER_OUT_MS is the wheel slot (one step before the due
        # time), REAL_TOPIC/REAL_QID the destination; the parked copy goes to queue 0.
        props = rec.properties
        if wait is not None:
            props[mp.WAIT] = wait
        props[mp.TIMER_OUT_MS] = str(due - self._precision)
        props[mp.REAL_TOPIC] = rec.topic
        props[mp.REAL_QID] = str(rec.queue_id)
        rec.topic = TIMER_TOPIC
        rec.queue_id = 0
        return self.store_timer(rec, due)

    def store_timer(self, rec: MessageRecord, due: int) -> PutResult:
        """Store ``rec`` (already in ``rmq_sys_wheel_timer``) with ``due`` as its tags code and
        tell the timer service; synchronous.

        Raises:
            the errors of `MessageStore.put`.
        """
        result = self._store.put(rec, tags_code=due)
        if self._timer_parked is not None:
            self._timer_parked(result.queue_offset, due, result.store_timestamp)
        return result

    async def wait_durable(self, result: PutResult) -> bool:
        """With sync flush, wait until ``result`` is fsynced; False after the sync-flush
        timeout (FLUSH_DISK_TIMEOUT). Returns True at once with async flush.

        Raises:
            OSError: the fsync failed.
        """
        if self._config.flush != "sync":
            return True
        try:
            await asyncio.wait_for(
                self._store.wait_durable(result.commit_log_end), self._config.sync_flush_timeout
            )
        except TimeoutError:
            return False
        return True
