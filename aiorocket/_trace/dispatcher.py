"""``TraceDispatcher``: Java ``AsyncTraceDispatcher`` on asyncio.

Hooks `append` records (a consume hook ` append_consume` whole handler calls, encoded only when
sent: that keeps the per-message path cheap); a bounded queue (2048, as Java) takes them without
    ever blocking or raising, and
a full queue drops the record (counted, logged). One task sends them in batches of up to
``batch_size`` records (Java: at most 20) once that many wait or ``flush_interval`` passed;
when more wait than that, one batch takes up to ``_PACK`` of them (Java sends its 20-record
batches from a pool of threads instead; one task here keeps up with a consumer handing over
~200,000 messages a second only by sending fewer, bigger trace messages). A batch's records
are grouped per traced topic and packed into trace messages of at most ``max_msg_size`` bytes
(Java: 128000) and ``_MAX_KEYS`` characters of keys (a broker refuses properties over 32 KiB),
each keyed by every message id and key it traces so that QUERY_MESSAGE by key finds it
(``mqadmin queryMsgTraceById``); a batch's messages are sent concurrently. Sends go to the
trace topic's queues on the brokers that hold the traced topic when there are any
(``tryGetMessageQueueBrokerSet``), else to any of its queues; a failed send is logged and
forgotten, as Java's callback does. `close` sends what is
left (bounded by ``send_timeout``).

It sends through the host client's connections (Java starts a separate trace producer with its
own client instance; the broker cannot tell the difference): the host producer or consumer
owns the task, started with `run` in its task group.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import time
from collections import deque
from typing import Final

from aiorocket._client.instance import ClientInstance
from aiorocket._names import CREATE_TOPIC_KEY, without_namespace, wrap_namespace
from aiorocket._protocol.codes import MessageSysFlag
from aiorocket._protocol.headers import SendMessageRequestHeader
from aiorocket._protocol.message import compress_body
from aiorocket._protocol.msgid import UniqKeyGenerator
from aiorocket._protocol.properties import KEYS, UNIQ_KEY, WAIT, encode_properties
from aiorocket._trace.data import (
    DEFAULT_TRACE_TOPIC,
    ConsumeCall,
    TraceContext,
    TransferBean,
    encode_consume,
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
#: a trace message's KEYS property stops growing past this many characters (a broker refuses
#: properties over ``Short.MAX_VALUE`` bytes; Java's 20-record batches never get near it).
_MAX_KEYS: Final = 16000
#: records one batch takes when more than ``batch_size`` wait.
_PACK: Final = 1024
#: body bytes of traced handler calls the queue may hold on to before it drops calls.
_RETAINED_BYTES: Final = 64 << 20
#: the trace producer's ``compressMsgBodyOverHowmuch`` (4 KiB, the producer default).
_COMPRESS_OVER: Final = 4096
#: the trace producer's send timeout (Java: 5 s).
_SEND_TIMEOUT: Final = 5.0
#: the producer's default queue count: a trace topic without a route is sent through
#: `CREATE_TOPIC_KEY` so that the broker creates it with that many queues.
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
        self._host_group = group
        self._namespace = namespace
        self.trace_topic = trace_topic or DEFAULT_TRACE_TOPIC
        self._wire_topic = wrap_namespace(namespace, self.trace_topic)
        self._group = trace_group_name(group, kind, next(_counter))
        self._flush_interval = flush_interval
        self._batch_size = max(1, min(batch_size, 20))
        self._queue: deque[TraceContext | ConsumeCall] = deque()
        self._retained = 0
        self._queue_size = queue_size
        self._max_msg_size = max_msg_size
        self._wake = asyncio.Event()
        # set while run() has no batch in flight: close() waits for it rather than leave a
        # batch half sent (its owner cancels the task once close() returns)
        self._idle = asyncio.Event()
        self._idle.set()
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
            return self._drop()
        self._queue.append(ctx)
        if self._first_at is None:
            self._start_interval()  # the first record starts the flush interval's clock
        elif len(self._queue) >= self._batch_size:
            self._wake.set()
        return True

    def append_consume(self, call: ConsumeCall) -> bool:
        """Queue a handler call's SubBefore and SubAfter records (encoded when sent, with
        the host's group and a fresh request id); as `append`. The call's messages are
        held until then, at most ``_RETAINED_BYTES`` of bodies."""
        msgs = call[0]
        size = len(msgs[0].body) if len(msgs) == 1 else sum(len(m.body) for m in msgs)
        if self._retained + size > _RETAINED_BYTES and self._queue:
            return self._drop()
        if not self.append(call):  # type: ignore[arg-type]
            return False
        self._retained += size
        return True

    def _drop(self) -> bool:
        self.dropped += 1
        if self.dropped == 1 or self.dropped % 1000 == 0:
            log.warning("trace buffer full: %d record(s) dropped so far", self.dropped)
        return False

    async def run(self) -> None:
        """Send batches until `close` (or cancelled; the owner's task group runs it)."""
        while not self._closed:
            if len(self._queue) < self._batch_size and not self._due():
                # woken by a full batch, the interval's timer or close()
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._take()
            self._idle.clear()
            try:
                await self._send_batch(batch)
            finally:
                self._idle.set()

    def _due(self) -> bool:
        first = self._first_at
        return first is not None and time.monotonic() >= first + self._flush_interval

    def _start_interval(self) -> None:
        # One timer per batch rather than a wait_for per wake-up: the hooks call append() on
        # every handler call, so this path must stay cheap.
        self._first_at = time.monotonic()
        asyncio.get_running_loop().call_later(self._flush_interval, self._wake.set)

    async def close(self) -> None:
        """Send every queued record (each send bounded by the send timeout), after the batch
        `run` has in flight; later records are dropped. Call before the client closes and
        before `run`'s task is cancelled."""
        self._closed = True
        self._wake.set()  # run() returns once its batch in flight is sent
        await self._idle.wait()
        while self._queue:
            await self._send_batch(self._take())

    def _take(self) -> list[TraceContext | ConsumeCall]:
        queue = self._queue
        n = min(len(queue), self._batch_size if len(queue) <= self._batch_size else _PACK)
        batch = [queue.popleft() for _ in range(n)]
        if queue:
            self._start_interval()
        else:
            self._first_at = None
        return batch

    def _encode(self, record: TraceContext | ConsumeCall) -> tuple[str, TransferBean] | None:
        """The traced topic (without namespace) and the encoded record, or ``None``."""
        if isinstance(record, TraceContext):
            if record.region_id is None or not record.beans:
                return None
            return record.beans[0].topic or "", encode_trace(record)
        msgs = record[0]
        self._retained -= sum(len(m.body) for m in msgs)
        # Java ConsumeMessageTraceHookImpl: a client message id ties SubBefore to SubAfter.
        bean = encode_consume(record, self._host_group, self._uniq.next(record[1]))
        if bean is None:
            return None
        return without_namespace(self._namespace, msgs[0].topic), bean

    async def _send_batch(self, batch: list[TraceContext | ConsumeCall]) -> None:
        # AsyncDataSendTask.sendTraceData: records grouped per traced topic.
        by_topic: dict[str, list[TransferBean]] = {}
        for record in batch:
            try:
                encoded = self._encode(record)
            except Exception:
                log.warning("trace record %r not encodable", record, exc_info=True)
                continue
            if encoded is not None:
                by_topic.setdefault(encoded[0], []).append(encoded[1])
        sends = []
        for topic, beans in by_topic.items():
            # flushData: a message grows until it reaches max_msg_size.
            buf: list[str] = []
            size = key_chars = 0
            keys: dict[str, None] = {}
            for bean in beans:
                for k in bean.keys:
                    if k not in keys:
                        keys[k] = None
                        key_chars += len(k) + 1
                buf.append(bean.data)
                size += len(bean.data)
                if size >= self._max_msg_size or key_chars >= _MAX_KEYS:
                    sends.append(self._send("".join(buf), list(keys), topic))
                    buf, size, key_chars, keys = [], 0, 0, {}
            if buf:
                sends.append(self._send("".join(buf), list(keys), topic))
        if len(sends) == 1:
            await sends[0]
        elif sends:
            await asyncio.gather(*sends)

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
            route = await client.fetch_route(CREATE_TOPIC_KEY)
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
            default_topic=CREATE_TOPIC_KEY,
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
