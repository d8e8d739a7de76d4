"""``TraceDispatcher``: Java ``AsyncTraceDispatcher`` on asyncio.

Hooks :meth:`~TraceDispatcher.append` records; a bounded queue (2048, as Java) takes them
without ever blocking or raising, and a full queue drops the record (counted, logged). One
task sends them in batches of up to ``batch_size`` records (Java: at most 20) once that many
wait or ``flush_interval`` passed; a batch's records are grouped per traced topic and packed
into trace messages of at most ``max_msg_size`` bytes (Java: 128000), each keyed by every
message id and key it traces so that QUERY_MESSAGE by key finds it (``mqadmin
queryMsgTraceById``). Sends go to the trace topic's queues on the brokers that hold the
traced topic when there are any (``tryGetMessageQueueBrokerSet``), else to any of its queues;
a failed send is logged and forgotten, as Java's callback does. :meth:`close` sends what is
left (bounded by ``send_timeout``).

It sends through the host client's connections (Java starts a separate trace producer with its
own client instance; the broker cannot tell the difference): the host producer or consumer
owns the task, started with :meth:`run` in its task group.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import random
import time
from collections import deque
from typing import Final

from aiorocket._client.instance import ClientInstance
from aiorocket._names import wrap_namespace
from aiorocket._protocol.codes import MessageSysFlag
from aiorocket._protocol.headers import SendMessageRequestHeader
from aiorocket._protocol.message import compress_body
from aiorocket._protocol.msgid import UniqKeyGenerator
from aiorocket._protocol.properties import KEYS, UNIQ_KEY, WAIT, encode_properties
from aiorocket._trace.data import (
    DEFAULT_TRACE_TOPIC,
    TraceContext,
    TransferBean,
    encode_trace,
    trace_group_name,
)
from aiorocket.errors import RocketError, TopicNotExistError
from aiorocket.models import MessageQueue

__all__ = ["TraceDispatcher"]

log = logging.getLogger("aiorocket.trace")

#: ``AsyncTraceDispatcher``: the record queue's capacity.
_QUEUE_SIZE: Final = 2048
#: ``AsyncTraceDispatcher``: records per batch, at most 20.
_BATCH_SIZE: Final = 10
#: ``AsyncTraceDispatcher.maxMsgSize``: a trace message's body stops growing past this.
_MAX_MSG_SIZE: Final = 128000
#: the trace producer's ``compressMsgBodyOverHowmuch`` (4 KiB, the producer default).
_COMPRESS_OVER: Final = 4096
#: the trace producer's send timeout (Java: 5 s).
_SEND_TIMEOUT: Final = 5.0
#: ``TopicValidator.AUTO_CREATE_TOPIC_KEY_TOPIC`` and the producer's default queue count:
#: a trace topic without a route is sent through TBW102 so that the broker creates it.
_TEMPLATE_TOPIC: Final = "TBW102"
_DEFAULT_QUEUES: Final = 4
_counter = itertools.count(1)


class TraceDispatcher:
    """Collects trace records and stores them in the trace topic, in the background.

    Args:
        client: the host's client instance (connections, routes, ACL, TLS).
        group: the host's group, without namespace (it names the trace producer's group).
        kind: ``"PRODUCE"`` or ``"CONSUME"`` (Java ``TraceDispatcher.Type``).
        trace_topic: the trace topic, ``RMQ_SYS_TRACE_TOPIC`` when ``None``.
        namespace: the host's namespace (a custom trace topic is wrapped in it; the system
            topic never is).
        flush_interval: seconds a record may wait for a batch to fill.
        batch_size: records per batch (at most 20, as Java).
        queue_size: records that may wait; more are dropped.
        max_msg_size: a trace message's body stops growing past this many characters.
    """

    def __init__(
        self,
        client: ClientInstance,
        *,
        group: str,
        kind: str,
        trace_topic: str | None = None,
        namespace: str | None = None,
        flush_interval: float = 1.0,
        batch_size: int = _BATCH_SIZE,
        queue_size: int = _QUEUE_SIZE,
        max_msg_size: int = _MAX_MSG_SIZE,
    ) -> None:
        self._client = client
        self.trace_topic = trace_topic or DEFAULT_TRACE_TOPIC
        self._wire_topic = wrap_namespace(namespace, self.trace_topic)
        self._group = trace_group_name(group, kind, next(_counter))
        self._flush_interval = flush_interval
        self._batch_size = max(1, min(batch_size, 20))
        self._queue: deque[TraceContext] = deque()
        self._queue_size = queue_size
        self._max_msg_size = max_msg_size
        self._wake = asyncio.Event()
        self._closed = False
        self._first_at: float | None = None
        self._next_queue = random.randrange(1 << 16)
        self._uniq = UniqKeyGenerator(client.ip, os.getpid(), random.getrandbits(31))
        #: records dropped because the queue was full
        self.dropped = 0
        #: trace messages stored, and those whose send failed
        self.sent = 0
        self.failed = 0

    @property
    def pending(self) -> int:
        """Records waiting to be sent."""
        return len(self._queue)

    def is_trace_topic(self, topic: str) -> bool:
        """Whether ``topic`` (wire or user name) is the trace topic: its messages are never
        traced (Java's hooks compare by prefix)."""
        return topic.startswith((self.trace_topic, self._wire_topic))

    def append(self, ctx: TraceContext) -> bool:
        """Queue a record; never blocks or raises. Returns ``False`` when it was dropped
        (the queue is full or the dispatcher closed)."""
        if self._closed or len(self._queue) >= self._queue_size:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("trace buffer full: %d record(s) dropped so far", self.dropped)
            return False
        self._queue.append(ctx)
        if self._first_at is None:
            self._first_at = time.monotonic()
        if len(self._queue) >= self._batch_size:
            self._wake.set()
        return True

    async def run(self) -> None:
        """Send batches until :meth:`close` (or cancelled; the owner's task group runs it)."""
        while not self._closed:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            if len(self._queue) < self._batch_size and self._first_at is not None:
                wait = self._first_at + self._flush_interval - time.monotonic()
                if wait > 0:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), wait)
                    continue
            await self._send_batch(self._take())

    async def close(self) -> None:
        """Send every queued record (each send bounded by the send timeout); later records are
        dropped. Call before the client closes."""
        self._closed = True
        self._wake.set()  # run() returns
        while self._queue:
            await self._send_batch(self._take())

    def _take(self) -> list[TraceContext]:
        batch: list[TraceContext] = []
        while self._queue and len(batch) < self._batch_size:
            batch.append(self._queue.popleft())
        self._first_at = time.monotonic() if self._queue else None
        return batch

    async def _send_batch(self, batch: list[TraceContext]) -> None:
        # AsyncDataSendTask.sendTraceData: records grouped per traced topic.
        by_topic: dict[str, list[TransferBean]] = {}
        for ctx in batch:
            if ctx.region_id is None or not ctx.beans:
                continue
            try:
                encoded = encode_trace(ctx)
            except Exception:
                log.warning("trace record %r not encodable", ctx, exc_info=True)
                continue
            by_topic.setdefault(ctx.beans[0].topic or "", []).append(encoded)
        for topic, beans in by_topic.items():
            # flushData: a message grows until it reaches max_msg_size.
            buf: list[str] = []
            size = 0
            keys: dict[str, None] = {}
            for bean in beans:
                keys.update(dict.fromkeys(bean.keys))
                buf.append(bean.data)
                size += len(bean.data)
                if size >= self._max_msg_size:
                    await self._send("".join(buf), list(keys), topic)
                    buf, size, keys = [], 0, {}
            if buf:
                await self._send("".join(buf), list(keys), topic)

    async def _send(self, data: str, keys: list[str], data_topic: str) -> None:
        try:
            await self._send_message(data, keys, data_topic)
            self.sent += 1
        except (RocketError, OSError) as exc:
            self.failed += 1
            log.warning("sending trace data to %s failed: %s", self._wire_topic, exc)
        except Exception:
            self.failed += 1
            log.exception("sending trace data to %s failed", self._wire_topic)

    async def _queues(self, data_topic: str) -> tuple[list[MessageQueue], bool]:
        client = self._client
        try:
            route = client.route(self._wire_topic) or await client.fetch_route(self._wire_topic)
            queues = route.publish_queues(self._wire_topic)
            via_template = False
        except TopicNotExistError:
            route = await client.fetch_route(_TEMPLATE_TOPIC)
            queues = [
                q for q in route.publish_queues(self._wire_topic) if q.queue_id < _DEFAULT_QUEUES
            ]
            via_template = True
        if not queues:
            raise TopicNotExistError(f"no writable route for trace topic {self._wire_topic}")
        # Prefer the brokers holding the traced topic (tryGetMessageQueueBrokerSet).
        data_route = client.route(data_topic) if data_topic else None
        if data_route is not None:
            holders = {q.broker_name for q in data_route.queue_datas}
            near = [q for q in queues if q.broker_name in holders]
            queues = near or queues
        return queues, via_template

    async def _send_message(self, data: str, keys: list[str], data_topic: str) -> None:
        queues, via_template = await self._queues(data_topic)
        self._next_queue = (self._next_queue + 1) % (1 << 31)
        mq = queues[self._next_queue % len(queues)]
        body = data.encode()
        sys_flag = 0
        if len(body) > _COMPRESS_OVER:
            body = compress_body(body)
            sys_flag |= MessageSysFlag.COMPRESSED
        uniq = self._uniq.next(int(time.time() * 1000))
        props = {KEYS: " ".join(keys), WAIT: "true", UNIQ_KEY: uniq}
        header = SendMessageRequestHeader(
            producer_group=self._group,
            topic=self._wire_topic,
            default_topic=_TEMPLATE_TOPIC,
            default_topic_queue_nums=_DEFAULT_QUEUES,
            queue_id=mq.queue_id,
            sys_flag=sys_flag,
            born_timestamp=int(time.time() * 1000),
            flag=0,
            properties=encode_properties(props),
            reconsume_times=0,
            unit_mode=False,
            batch=False,
            broker_name=mq.broker_name,
        )
        addr = await self._client.find_broker(mq.broker_name, self._wire_topic, master=True)
        await self._client.send_message(addr, header, body, timeout=_SEND_TIMEOUT)
        if via_template:
            # the broker created the topic: ask for its own route next time
            await self._client.refresh_route(self._wire_topic)
