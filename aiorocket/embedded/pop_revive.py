"""Revive (Java ``PopReviveService``): a POP checkpoint whose visible-at time passed gets its
unacked messages re-put into the group's POP retry topic, and is then done.

One task, owned by a `Service` the broker starts and closes.
It sleeps until the earliest checkpoint is due (``InflightTable.next_due``), at most
``pop_revive_interval``, and is woken early when a checkpoint due sooner is added.

Each unacked message is read from the queue it was popped from and stored again
(``reviveRetry``): in ``%RETRY%<group>_<topic>``, queue 0, or in the same retry topic when it
was popped from one; body, flag, sysFlag, born time, tags and every property kept, the
reconsume count plus one, ``1ST_POP_TIME`` set to the pop time on its first revive, born and
store host this broker. The retry topic is created on first use (1 queue, perm 6) with the
group's offset of it at 0 (``addRetryTopicIfNotExist``). The checkpoint's revived offsets are
then acked in the revive log, so a restart does not revive them again (a crash between the two
revives them twice: at least once). A message no longer in the store is skipped, as Apache
skips it; a checkpoint of a topic that was deleted is dropped. The v2 retry topic
``%RETRY%<group>+<topic>`` (``enableRetryTopicV2``, off by default in Apache) breaks the
topic-name rule the store enforces, so it is not offered. Dead letters are not the broker's
business in 5.x: the client sends a message over its attempts to ``%DLQ%`` with
CONSUMER_SEND_MSG_BACK and acks it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from aiorocket._concurrency import Service, ServiceOwner
from aiorocket._names import RETRY_PREFIX, pop_retry_topic
from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import MessageSysFlag
from aiorocket._protocol.message import MessageRecord, decode_message
from aiorocket.embedded.config import BrokerConfig
from aiorocket.embedded.offsets import ConsumerOffsets
from aiorocket.embedded.pop_inflight import Checkpoint, InflightTable
from aiorocket.embedded.pop_log import ReviveLog
from aiorocket.embedded.store_results import GetStatus
from aiorocket.embedded.topics import TopicTable
from aiorocket.embedded.writer import MessageWriter
from aiorocket.errors import RemoteProtocolError

__all__ = ["ReviveService", "normal_topic", "retry_topic_of"]

log = logging.getLogger("aiorocket.embedded")

#: ``PopAckConstants.retryQueueNum``: queues of a POP retry topic
_RETRY_QUEUES: Final = 1
_HOSTS_V6: Final = int(MessageSysFlag.BORNHOST_V6 | MessageSysFlag.STOREHOST_V6)


def retry_topic_of(topic: str, group: str) -> str:
    """``KeyBuilder.buildPopRetryTopicV1``: where ``group``'s unacked messages of ``topic``
    are revived, and what its POPs of ``topic`` read too."""
    return pop_retry_topic(topic, group)


def normal_topic(popped: str, group: str) -> str:
    """``KeyBuilder.parseNormalTopic``: the topic a POP retry topic of ``group`` retries
    (``popped`` itself when it is not one)."""
    for sep in ("+", "_"):
        prefix = f"{RETRY_PREFIX}{group}{sep}"
        if popped.startswith(prefix):
            return popped[len(prefix) :]
    return popped


class ReviveService(ServiceOwner):
    """Re-puts the unacked messages of due checkpoints into their retry topics.

    Args:
        table: the checkpoints in flight.
        revive_log: where the revived offsets are acked.
        writer: stores the retried messages (waking held POPs of the retry topic).
        topics: where a retry topic is created.
        offsets: the group's offset of a new retry topic starts at 0 there.
        config: ``pop_revive_interval``.
        store_address: the broker's ``(ip, port)``, the born and store host of the copies.
    """

    def __init__(
        self,
        table: InflightTable,
        revive_log: ReviveLog,
        writer: MessageWriter,
        topics: TopicTable,
        offsets: ConsumerOffsets,
        config: BrokerConfig,
        store_address: Callable[[], tuple[str, int]],
    ) -> None:
        self._table = table
        self._log = revive_log
        self._writer = writer
        self._store = writer.store
        # The writer's clock: pop times and visible-at times count on it.
        self._clock = writer.clock
        self._topics = topics
        self._offsets = offsets
        self._config = config
        self._store_address = store_address
        self._event = asyncio.Event()
        self._planned = 0  # when the task wakes next (ms)
        self._lifecycle = Service("aiorocket-pop-revive", startup=self._startup, logger=log)
        #: messages re-put into retry topics since start
        self.revived = 0

    async def _startup(self) -> None:
        self._lifecycle.spawn(self._run(), name="aiorocket-pop-revive")

    def wake(self, due_ms: int) -> None:
        """A checkpoint due at ``due_ms`` was added: wake the task if it sleeps past it.
        Never raises."""
        if due_ms < self._planned:
            self._event.set()

    async def _run(self) -> None:
        interval = self._config.pop_revive_interval
        while True:
            for ck in self._table.due(self._clock.now_ms()):
                if self._table.get(ck.key) is ck:  # not acked meanwhile
                    self.revive(ck)
                    await asyncio.sleep(0)
            upcoming = self._table.next_due()
            now = self._clock.now_ms()
            delay = interval if upcoming is None else min(interval, max(upcoming - now, 0) / 1e3)
            self._planned = now + int(delay * 1000)
            self._event.clear()
            await self._clock.wait(self._event, delay)

    def revive(self, ck: Checkpoint) -> int:
        """Re-put ``ck``'s unacked messages and ack them in the log; returns how many were
        re-put. On a store failure the checkpoint is tried again one interval later. Never
        raises."""
        normal = normal_topic(ck.topic, ck.group)
        unacked = ck.unacked()
        done: list[int] = []
        put = 0
        try:
            if self._topics.get(normal) is None:
                log.warning("POP revive: topic %s is gone, checkpoint dropped", normal)
                done = unacked
            else:
                target = self._retry_topic(ck)
                for offset in unacked:
                    if self._put_retry(ck, offset, target):
                        put += 1
                    done.append(offset)
            if done:
                self._log.append_acks(ck, done)
                self._table.ack(ck, done)
        except Exception:
            log.exception("POP revive of %s failed; retried later", ck.key)
            if done:
                # what was put must not be put again: drop those offsets from memory at least
                self._table.ack(ck, done)
            if self._table.get(ck.key) is ck:
                self._table.reschedule(
                    ck, self._clock.now_ms() + int(self._config.pop_revive_interval * 1e3)
                )
        self.revived += put
        return put

    def _retry_topic(self, ck: Checkpoint) -> str:
        if ck.topic.startswith(RETRY_PREFIX):
            target = ck.topic
        else:
            target = retry_topic_of(ck.topic, ck.group)
        if self._topics.get(target) is None:
            self._topics.ensure(target, _RETRY_QUEUES)
        if self._offsets.query(ck.group, target, 0) is None:
            self._offsets.commit(ck.group, target, 0, 0)  # initPopRetryOffset
        return target

    def _put_retry(self, ck: Checkpoint, offset: int, target: str) -> bool:
        result = self._store.get(ck.topic, ck.queue_id, offset, max_msgs=1)
        if result.status is not GetStatus.FOUND or result.queue_offsets[0] != offset:
            log.info(
                "POP revive: %s queue %d offset %d is not in the store; skipped",
                ck.topic,
                ck.queue_id,
                offset,
            )
            return False
        try:
            orig, _ = decode_message(result.messages[0], decompress=False)
        except RemoteProtocolError:
            log.exception("POP revive: the record at %s:%d does not decode", ck.topic, offset)
            return False
        props = dict(orig.properties)
        props.pop(mp.POP_CK, None)
        if orig.reconsume_times == 0 or mp.FIRST_POP_TIME not in props:
            props[mp.FIRST_POP_TIME] = str(ck.pop_time)
        host, port = self._store_address()
        copy = MessageRecord(
            topic=target,
            body=orig.body,
            queue_id=0,
            flag=orig.flag,
            queue_offset=0,
            commit_log_offset=0,
            sys_flag=orig.sys_flag & ~_HOSTS_V6,
            born_timestamp=orig.born_timestamp,
            born_host=host,
            born_port=port,
            store_timestamp=0,
            store_host=host,
            store_port=port,
            reconsume_times=orig.reconsume_times + 1,
            prepared_transaction_offset=0,
            properties=props,
        )
        self._writer.store_message(copy)
        return True
