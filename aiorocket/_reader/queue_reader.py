"""Reading queues by offset: [`QueueReader`][aiorocket.QueueReader] (async; its blocking face is
[`SyncQueueReader`][aiorocket.SyncQueueReader]).

A consumer group decides *which* member reads a queue and *where* it starts; a queue reader
decides nothing. It reads exactly the offsets it is asked for, with one PULL_MESSAGE per call
and no long polling (the SUSPEND bit is never set, docs/protocol.md §6.4), so the same range always
gives the same messages. Offsets of a consumer group can be read and written explicitly.

This is what engines that keep their own checkpoints need (Spark's micro-batches, backfills,
audits). Nothing is registered on the brokers: no heartbeat, no subscription; every pull
carries its tag expression (sysFlag SUBSCRIPTION) so the broker needs none.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from aiorocket._client.owner import ClientOwner
from aiorocket._client.pull import PreparedPull, PullResponse, PullStatus, to_received
from aiorocket._client.time_search import first_offset_at
from aiorocket._names import wrap_namespace
from aiorocket._protocol.bodies import ConsumerData, HeartbeatData
from aiorocket._protocol.codes import PullSysFlag, ResponseCode
from aiorocket._protocol.headers import PullMessageRequestHeader
from aiorocket._protocol.message import decode_messages
from aiorocket._protocol.tags import TagFilter, parse_tag_expression
from aiorocket.errors import (
    ConfigurationError,
    TransportError,
    broker_error,
)
from aiorocket.models import MessageQueue, ReceivedMessage, validate_name
from aiorocket.settings import ClientSettings, build_settings

__all__ = [
    "DEFAULT_PULL_GROUP",
    "Chunk",
    "QueueReader",
    "RangeRead",
    "RawChunk",
    "ReadBatch",
    "ReadRange",
    "ReadStatus",
]

log = logging.getLogger("aiorocket.reader")

_T = TypeVar("_T")

#: The consumer group named in pull requests when none is given. Brokers require a group on
#: PULL_MESSAGE; a queue reader never commits or registers anything under it.
DEFAULT_PULL_GROUP: Final = "AIOROCKET_QUEUE_READER"

#: Messages asked for per pull; brokers serve at most 32 (``maxTransferCountOnMessageInMemory``).
_PULL_BATCH: Final = 32
_MAX_PULL_BATCH: Final = 1024

#: A reader's pulls: SUBSCRIPTION (the expression travels with each pull) and nothing else.
_SYS_FLAG: Final = int(PullSysFlag.SUBSCRIPTION)


class ReadStatus(enum.Enum):
    """The outcome of one read (the pull statuses of docs/protocol.md §3.3)."""

    #: messages were found from the offset on (after the tag re-check the list may still be
    #: empty when a tag hash collided).
    FOUND = "FOUND"
    #: the offset is the queue's end (or the queue is empty): nothing to read yet.
    NO_NEW = "NO_NEW"
    #: entries exist but none matched the tag expression (or their data was removed);
    #: ``next_offset`` skips them.
    NO_MATCHED = "NO_MATCHED"
    #: the offset is outside ``[min_offset, max_offset]``; ``next_offset`` is the nearest
    #: legal one (the queue's min when the offset was too small, its max when too large).
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_READ_STATUS: Final = {
    PullStatus.FOUND: ReadStatus.FOUND,
    PullStatus.NO_NEW_MSG: ReadStatus.NO_NEW,
    PullStatus.NO_MATCHED_MSG: ReadStatus.NO_MATCHED,
    PullStatus.OFFSET_ILLEGAL: ReadStatus.OFFSET_ILLEGAL,
}


@dataclass(frozen=True, slots=True)
class ReadBatch:
    """The answer to one [`QueueReader.read`][aiorocket.QueueReader.read].

    Attributes:
        status: see [`ReadStatus`][aiorocket.ReadStatus].
        messages: the messages read, in offset order, tag-checked by string.
        next_offset: where the next read of this queue continues.
        min_offset: the queue's smallest stored offset, as the broker reported it.
        max_offset: the queue's next offset to be written (one past the last message).
    """

    status: ReadStatus
    messages: list[ReceivedMessage]
    next_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class ReadRange:
    """What a range read reads: the arguments of
    [`QueueReader.read_range_batches`][aiorocket.QueueReader.read_range_batches], checked, as one
    value (every range read, async or blocking, passes this on).

    Raises:
        ConfigurationError: ``start`` < 0 or ``pipeline`` outside 1..64.
    """

    mq: MessageQueue
    start: int
    end: int
    expression: str = "*"
    tolerate_loss: bool = False
    pipeline: int = 8

    def __post_init__(self) -> None:
        if self.start < 0:
            raise ConfigurationError(f"offset {self.start} is negative")
        if not 1 <= self.pipeline <= 64:
            raise ConfigurationError("pipeline must be in 1..64")


class QueueReader(ClientOwner):
    """Reads queues by offset and reads/writes consumer-group offsets; asyncio.

    ```python
    async with QueueReader(namesrv="127.0.0.1:9876") as reader:
        for mq in await reader.queues("orders"):
            start = await reader.committed_offset("billing", mq) or 0
            async for msg in reader.read_range(mq, start, await reader.max_offset(mq)):
                ...
    ```

    Keyword arguments are the settings of [`ClientSettings`][aiorocket.settings.ClientSettings]
    (``namesrv`` required; ``request_timeout`` bounds every call). Topics and groups get the
    ``namespace`` prefix on the wire and lose it in what is returned.

    Args:
        pull_group: the consumer group named in pull requests (brokers require one; nothing
            is stored under it).

    Raises:
        ConfigurationError: invalid settings (at construction).
    """

    _what = "queue reader"

    def __init__(
        self,
        *,
        namesrv: str | Sequence[str],
        pull_group: str = DEFAULT_PULL_GROUP,
        **settings: Any,
    ) -> None:
        super().__init__(build_settings(ClientSettings, {"namesrv": namesrv, **settings}))
        self._ns = self.settings.namespace
        self._pull_group = self._wire(validate_name(pull_group, "consumer group"))
        validate_name(self._pull_group, "consumer group")
        self._filters: dict[str, TagFilter] = {}
        # Brokers whose last call failed on the transport: their route is fetched again
        # before the next call, in case the broker moved.
        self._stale: set[str] = set()
        self._prepared: dict[tuple[MessageQueue, int, str], PreparedPull] = {}
        #: (broker address, wire group) pairs this reader registered its commits' group with
        self._registered: set[tuple[str, str]] = set()

    # -- names --------------------------------------------------------------------------------

    def _wire(self, name: str) -> str:
        return wrap_namespace(self._ns, name)

    def _wire_mq(self, mq: MessageQueue) -> MessageQueue:
        return MessageQueue(self._wire(mq.topic), mq.broker_name, mq.queue_id) if self._ns else mq

    async def _address(self, mq: MessageQueue) -> str:
        client = self._require()
        name, topic = mq.broker_name, self._wire(mq.topic)
        if name in self._stale:
            # the last request could not reach it: the name server may name another
            self._stale.discard(name)
            await client.refresh_route(topic)
        addr = await client.find_broker(name, topic)
        return addr

    async def _call(
        self, mq: MessageQueue, rpc: Callable[[str, MessageQueue], Awaitable[_T]]
    ) -> _T:
        addr = await self._address(mq)
        try:
            return await rpc(addr, self._wire_mq(mq))
        except TransportError:
            self._stale.add(mq.broker_name)
            raise

    # -- queries ------------------------------------------------------------------------------

    async def queues(self, topic: str) -> list[MessageQueue]:
        """The readable queues of ``topic``, by broker name then queue id (asks the name
        server each time).

        Raises:
            InvalidNameError: a bad topic name.
            TopicNotExistError: the name server knows no route for it.
            BrokerError, TransportError: the name server failed or could not be reached.
            ClientClosedError: the reader is closed or not started.
        """
        validate_name(topic)
        wire = self._wire(topic)
        route = await self._require().fetch_route(wire)
        return [
            MessageQueue(topic, q.broker_name, q.queue_id) for q in route.subscribe_queues(wire)
        ]

    async def min_offset(self, mq: MessageQueue) -> int:
        """The smallest offset ``mq`` still stores (GET_MIN_OFFSET).

        Raises:
            BrokerError, TransportError, ClientClosedError: the broker refused, could not be
                reached, or the reader is closed.
        """
        return await self._call(mq, self._require().get_min_offset)

    async def max_offset(self, mq: MessageQueue) -> int:
        """One past the last message of ``mq``: the offset the next message gets
        (GET_MAX_OFFSET).

        Raises:
            BrokerError, TransportError, ClientClosedError: the broker refused, could not be
                reached, or the reader is closed.
        """
        return await self._call(mq, self._require().get_max_offset)

    async def min_offsets(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """[`min_offset`][aiorocket.QueueReader.min_offset] of several queues, asked concurrently.

        Raises:
            BrokerError, TransportError, ClientClosedError: the first failure.
        """
        mqs = list(mqs)
        values = await asyncio.gather(*(self.min_offset(mq) for mq in mqs))
        return dict(zip(mqs, values, strict=True))

    async def max_offsets(self, mqs: Iterable[MessageQueue]) -> dict[MessageQueue, int]:
        """[`max_offset`][aiorocket.QueueReader.max_offset] of several queues, asked concurrently.

        Raises:
            BrokerError, TransportError, ClientClosedError: the first failure.
        """
        mqs = list(mqs)
        values = await asyncio.gather(*(self.max_offset(mq) for mq in mqs))
        return dict(zip(mqs, values, strict=True))

    async def offset_for_timestamp(self, mq: MessageQueue, timestamp_ms: int) -> int:
        """The offset of the first message of ``mq`` stored at or after ``timestamp_ms``
        (epoch ms); [`max_offset`][aiorocket.QueueReader.max_offset] when every stored message is
        older.

        SEARCH_OFFSET_BY_TIMESTAMP's answer is refined by reading single messages around it
        (a few pulls; see `aiorocket._client.time_search`).

        Raises:
            BrokerError, TransportError, ClientClosedError: the broker refused, could not be
                reached, or the reader is closed.
        """
        client = self._require()
        lo = await self.min_offset(mq)
        hi = await self.max_offset(mq)
        if lo >= hi:
            return hi
        guess = await self._call(mq, lambda a, w: client.search_offset(a, w, timestamp_ms))
        return await first_offset_at(
            timestamp_ms, lo=lo, hi=hi, guess=guess, stored_at=lambda o: self._stored_at(mq, o)
        )

    async def _stored_at(self, mq: MessageQueue, offset: int) -> float:
        """The store time of the message at ``offset``; -inf / +inf when it is gone (below
        the queue's min / beyond its end)."""
        batch = await self.read(mq, offset, 1)
        if batch.messages and batch.messages[0].queue_offset == offset:
            return batch.messages[0].store_timestamp
        return float("-inf") if offset < batch.min_offset else float("inf")

    # -- reading ------------------------------------------------------------------------------

    def _filter(self, expression: str) -> TagFilter:
        f = self._filters.get(expression)
        if f is None:
            f = self._filters[expression] = parse_tag_expression(expression)
        return f

    async def read(
        self,
        mq: MessageQueue,
        offset: int,
        max_messages: int = _PULL_BATCH,
        *,
        expression: str = "*",
    ) -> ReadBatch:
        """One PULL_MESSAGE from ``offset`` without long polling.

        Brokers answer at most 32 messages (and 256 KiB) per pull whatever ``max_messages``
        asks. With a tag ``expression`` (``"A || B"``) the broker skips other messages by tag
        hash and the reader re-checks tag strings, so offsets of the result may have gaps.

        Raises:
            ConfigurationError: ``offset`` < 0 or ``max_messages`` outside 1..1024.
            RemoteProtocolError: the response body is malformed.
            BrokerError: any other error answer (e.g. TopicNotExistError, NoPermissionError).
            TransportError: the broker could not be reached or did not answer in time.
            ClientClosedError: the reader is closed or not started.
        """
        tag_filter = self._filter(expression)
        resp = await self._pull(mq, offset, max_messages, tag_filter)
        h = resp.header
        status = _READ_STATUS[resp.code]
        msgs: list[ReceivedMessage] = []
        if status is ReadStatus.FOUND:
            msgs = to_received(
                decode_messages(resp.body),
                broker_name=mq.broker_name,
                tag_filter=None if tag_filter.match_all else tag_filter,
                retry_queue=False,
                namespace=self._ns,
            )
        return ReadBatch(status, msgs, h.next_begin_offset, h.min_offset, h.max_offset)

    async def _pull(
        self, mq: MessageQueue, offset: int, max_messages: int, tag_filter: TagFilter
    ) -> PullResponse:
        """One PULL_MESSAGE, answered as it came (see [`read`][aiorocket.QueueReader.read] for the
        errors)."""
        if offset < 0:
            raise ConfigurationError(f"offset {offset} is negative")
        if not 1 <= max_messages <= _MAX_PULL_BATCH:
            raise ConfigurationError(f"max_messages must be in 1..{_MAX_PULL_BATCH}")
        client = self._require()
        key = (mq, max_messages, tag_filter.expression)
        prepared = self._prepared.get(key)
        if prepared is None:
            if len(self._prepared) >= 1024:
                self._prepared.clear()
            # Every field but the offset is fixed for a queue: the header is encoded once
            # (as a consumer's pull loop does). No SUSPEND (answer at once), no
            # COMMIT_OFFSET (a reader commits nothing).
            prepared = self._prepared[key] = PreparedPull(
                PullMessageRequestHeader(
                    consumer_group=self._pull_group,
                    topic=self._wire(mq.topic),
                    queue_id=mq.queue_id,
                    queue_offset=0,
                    max_msg_nums=max_messages,
                    sys_flag=_SYS_FLAG,
                    commit_offset=0,
                    suspend_timeout_millis=0,
                    subscription=tag_filter.expression,
                    sub_version=0,
                    expression_type="TAG",
                    broker_name=mq.broker_name,
                )
            )
        timeout = self.settings.request_timeout
        return await self._call(
            mq,
            lambda a, _w: client.pull_prepared(a, prepared, offset, _SYS_FLAG, 0, timeout=timeout),
        )

    async def read_range_batches(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        expression: str = "*",
        tolerate_loss: bool = False,
        pipeline: int = 8,
    ) -> AsyncIterator[list[ReceivedMessage]]:
        """The messages with ``start <= queue_offset < end``, in order, one list per 32
        offsets (a list may be empty when a tag expression skipped all of them).

        The range is read in chunks of 32 offsets (what a broker serves per pull), up to
        ``pipeline`` chunks at once: a pull's round trip, not the broker, is what limits one
        pull after another.

        Args:
            tolerate_loss: skip what is gone instead of raising: offsets below the queue's min
                (removed by retention) are jumped over, and the range stops early where the
                queue ends. Each kind of skip is logged once as a warning.
            pipeline: chunks read concurrently (1..64).

        Raises:
            PullOffsetMovedError: (without ``tolerate_loss``) part of the range is no longer
                stored (below the queue's min offset).
            PullNotFoundError: (without ``tolerate_loss``) the queue ends before ``end``.
            ConfigurationError: ``start`` < 0 or ``pipeline`` outside 1..64.
            BrokerError, TransportError, RemoteProtocolError, ClientClosedError: as
                [`read`][aiorocket.QueueReader.read].
        """
        rng = ReadRange(mq, start, end, expression, tolerate_loss, pipeline)
        async for chunk in self.open_range(rng).chunks():
            yield chunk.msgs

    async def read_range_raw(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        expression: str = "*",
        tolerate_loss: bool = False,
        pipeline: int = 8,
    ) -> AsyncIterator[RawChunk]:
        """[`read_range_batches`][aiorocket.QueueReader.read_range_batches] without decoding: for
        each chunk of 32 offsets, the pull bodies (stored records, docs/protocol.md §4.1) as the
        broker sent them, for callers that decode records in bulk themselves (the Spark source's
        Arrow columns).

        A body may hold records at or past the chunk's ``hi`` (a tag expression scans past the
        requested count) and, with a tag expression, records whose tag only collided by hash:
        the caller drops those (``RawChunk.hi``, ``RawChunk.tags``) as
        [`read_range_batches`][aiorocket.QueueReader.read_range_batches] does.

        Raises:
            RocketError: as [`read_range_batches`][aiorocket.QueueReader.read_range_batches]
                (malformed bodies are the caller's to find).
        """
        rng = ReadRange(mq, start, end, expression, tolerate_loss, pipeline)
        async for chunk in self.open_range(rng, raw=True).chunks():
            yield chunk.as_raw()

    def open_range(self, rng: ReadRange, *, raw: bool = False) -> RangeRead:
        """The chunk reads of ``rng`` before they start: what
        [`read_range_batches`][aiorocket.QueueReader.read_range_batches] (``raw``:
        [`read_range_raw`][aiorocket.QueueReader.read_range_raw]) iterates, for a caller that runs
        the event loop its own way (the blocking readers)."""
        return RangeRead(rng, lambda lo, hi: self._read_chunk(rng, lo, hi, raw))

    async def _read_chunk(self, rng: ReadRange, lo: int, hi: int, raw: bool) -> Chunk:
        """The messages of ``[lo, hi)`` of ``rng`` (or, ``raw``, the bodies that hold them);
        several pulls when the broker serves fewer (its byte cap) or a part is gone."""
        mq = rng.mq
        tag_filter = self._filter(rng.expression)
        offset = lo
        out: list[Any] = []
        removed: int | None = None
        while offset < hi:
            resp = await self._pull(mq, offset, min(_PULL_BATCH, hi - offset), tag_filter)
            h = resp.header
            status = _READ_STATUS[resp.code]
            if status is ReadStatus.FOUND or status is ReadStatus.NO_MATCHED:
                if status is not ReadStatus.FOUND:
                    pass
                elif raw:
                    out.append(resp.body)
                else:
                    msgs = to_received(
                        decode_messages(resp.body),
                        broker_name=mq.broker_name,
                        tag_filter=None if tag_filter.match_all else tag_filter,
                        retry_queue=False,
                        namespace=self._ns,
                    )
                    if msgs and msgs[-1].queue_offset >= hi:
                        # A tag filter scans past the requested count: keep the chunk exact.
                        msgs = [m for m in msgs if m.queue_offset < hi]
                    out.extend(msgs)
                if h.next_begin_offset <= offset:
                    raise broker_error(
                        ResponseCode.SYSTEM_ERROR,
                        f"{mq}: the broker did not advance past offset {offset}",
                    )
                offset = h.next_begin_offset
            elif status is ReadStatus.OFFSET_ILLEGAL and offset < h.min_offset:
                removed = h.min_offset
                offset = h.min_offset
            else:
                # NO_NEW, or OFFSET_ILLEGAL past the end: the queue ends before `hi`.
                return Chunk(out, removed, h.max_offset, hi, tag_filter)
        return Chunk(out, removed, None, hi, tag_filter)

    async def read_range(
        self,
        mq: MessageQueue,
        start: int,
        end: int,
        *,
        expression: str = "*",
        tolerate_loss: bool = False,
        pipeline: int = 8,
    ) -> AsyncIterator[ReceivedMessage]:
        """The messages with ``start <= queue_offset < end``, one by one (see
        [`read_range_batches`][aiorocket.QueueReader.read_range_batches]).

        Raises:
            RocketError: as [`read_range_batches`][aiorocket.QueueReader.read_range_batches].
        """
        rng = ReadRange(mq, start, end, expression, tolerate_loss, pipeline)
        async for chunk in self.open_range(rng).chunks():
            for m in chunk.msgs:
                yield m

    # -- consumer-group offsets ---------------------------------------------------------------

    async def committed_offset(self, group: str, mq: MessageQueue) -> int | None:
        """The offset ``group`` has committed for ``mq`` (the next one it would consume), or
        ``None`` when the broker has none.

        A young broker (docs/protocol.md §6.5) answers 0 for a group that never committed while
        the queue still starts at offset 0.

        Raises:
            InvalidNameError: a bad group name.
            TransportError, BrokerError, ClientClosedError: the broker could not be reached,
                refused, or the reader is closed.
        """
        validate_name(group, "consumer group")
        client = self._require()
        wire_group = self._wire(group)
        return await self._call(mq, lambda a, w: client.query_consumer_offset(a, wire_group, w))

    async def commit(self, group: str, mq: MessageQueue, offset: int) -> None:
        """Store ``offset`` as ``group``'s next offset for ``mq`` (UPDATE_CONSUMER_OFFSET,
        answered). The broker stores any value, backwards too, without checking it.

        Raises:
            InvalidNameError: a bad group name.
            ConfigurationError: a negative offset.
            BrokerError, TransportError, ClientClosedError: the broker refused, could not be
                reached, or the reader is closed.
        """
        validate_name(group, "consumer group")
        if offset < 0:
            raise ConfigurationError(f"offset {offset} is negative")
        client = self._require()
        wire_group = self._wire(group)

        async def commit(addr: str, wire_mq: MessageQueue) -> None:
            await self._register_group(addr, wire_group)
            await client.update_consumer_offset(addr, wire_group, wire_mq, offset, oneway=False)

        await self._call(mq, commit)

    async def _register_group(self, addr: str, wire_group: str) -> None:
        """Make the broker at ``addr`` know ``wire_group`` before its first commit there, as
        a Java consumer's first heartbeat does (``ClientManageProcessor.heartBeat`` creates
        the subscription group and its ``%RETRY%`` topic, which ``consumerProgress`` and
        ``admin lag`` start from), then leave it again: a reader that commits is not a live
        member, and an offline group's stats list every topic it has offsets for."""
        if (addr, wire_group) in self._registered:
            return
        client = self._require()
        member = ConsumerData(
            group_name=wire_group,
            consume_type="CONSUME_ACTIVELY",
            message_model="CLUSTERING",
            consume_from_where="CONSUME_FROM_LAST_OFFSET",
            subscriptions=(),
        )
        await client.heartbeat(addr, HeartbeatData(client_id=client.client_id, consumers=(member,)))
        await client.unregister_client(addr, consumer_group=wire_group)
        self._registered.add((addr, wire_group))

    async def commit_many(self, group: str, offsets: Mapping[MessageQueue, int]) -> None:
        """[`commit`][aiorocket.QueueReader.commit] for several queues, concurrently.

        Raises:
            RocketError: as [`commit`][aiorocket.QueueReader.commit] (the first failure; the other
                commits may have been stored).
        """
        await asyncio.gather(*(self.commit(group, mq, off) for mq, off in offsets.items()))


class RangeRead:
    """The chunks of a range being read: up to ``pipeline`` chunk reads under way, in offset
    order, and the checks a finished chunk passes before it is handed over. Made by
    [`QueueReader.open_range`][aiorocket.QueueReader.open_range]; iterated on the running loop
    with `chunks`, or driven with `fill`, `pending`, `accept` and `cancel` by a caller that runs
    the loop itself."""

    def __init__(
        self, rng: ReadRange, read_chunk: Callable[[int, int], Coroutine[Any, Any, Chunk]]
    ) -> None:
        self._rng = rng
        self._read_chunk = read_chunk
        self._starts = iter(range(rng.start, rng.end, _PULL_BATCH))
        self._warned_removed = False
        self.pending: collections.deque[asyncio.Future[Chunk]] = collections.deque()
        #: the range ended early (the queue ends before ``end``): no chunk follows
        self.done = False

    async def chunks(self) -> AsyncIterator[Chunk]:
        """The chunks handed over, in order, read on the running loop.

        Raises:
            RocketError: as
                [`QueueReader.read_range_batches`][aiorocket.QueueReader.read_range_batches].
        """
        loop = asyncio.get_running_loop()
        try:
            while True:
                self.fill(loop)
                if not self.pending:
                    return
                chunk = await self.pending.popleft()
                if self.accept(chunk):
                    yield chunk
                if self.done:
                    return
        finally:
            await self.cancel()

    def fill(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start chunk reads on ``loop`` until ``pipeline`` are under way."""
        pending = self.pending
        if self.done:
            return
        while len(pending) < self._rng.pipeline:
            lo = next(self._starts, None)
            if lo is None:
                break
            hi = min(lo + _PULL_BATCH, self._rng.end)
            pending.append(loop.create_task(self._read_chunk(lo, hi)))

    def accept(self, chunk: Chunk) -> bool:
        """Check a finished chunk (the next in order); whether it is handed over.

        Raises:
            PullOffsetMovedError, PullNotFoundError: (without ``tolerate_loss``) see
                [`QueueReader.read_range_batches`][aiorocket.QueueReader.read_range_batches].
        """
        rng = self._rng
        mq = rng.mq
        if chunk.removed_below is not None:
            what = f"{mq}: offsets below {chunk.removed_below} are no longer stored"
            if not rng.tolerate_loss:
                raise broker_error(
                    int(PullStatus.OFFSET_ILLEGAL), f"{what} (range {rng.start}..{rng.end})"
                )
            if not self._warned_removed:
                log.warning("%s; skipping them", what)
                self._warned_removed = True
        if chunk.ended_at is not None:
            what = f"{mq}: the queue ends at offset {chunk.ended_at}, before {rng.end}"
            if not rng.tolerate_loss:
                raise broker_error(int(PullStatus.NO_NEW_MSG), what)
            log.warning("%s; stopping there", what)
            self.done = True
            return bool(chunk.msgs)
        return True

    async def cancel(self) -> None:
        """Cancel the chunk reads still under way and wait for them to end."""
        pending = self.pending
        for fut in pending:
            fut.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Chunk:
    """What one chunk read of a `RangeRead` found: the messages, the queue's min offset if
    part of the chunk was below it, and the queue's end if it ends inside the chunk."""

    msgs: list[ReceivedMessage]  # (raw: the pull bodies)
    removed_below: int | None
    ended_at: int | None
    hi: int
    filter: TagFilter

    @property
    def tags(self) -> frozenset[str] | None:
        """The tag strings rows must have, ``None`` for all."""
        return None if self.filter.match_all else self.filter.tags

    def as_raw(self) -> RawChunk:
        """The chunk of a raw read (``msgs`` holds pull bodies) as
        [`QueueReader.read_range_raw`][aiorocket.QueueReader.read_range_raw] yields it."""
        return RawChunk(self.msgs, self.hi, self.tags)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class RawChunk:
    """What [`QueueReader.read_range_raw`][aiorocket.QueueReader.read_range_raw] yields for a chunk
    of offsets.

    Attributes:
        bodies: the pull bodies, in offset order.
        hi: records at or past this offset are not part of the chunk (the next chunk starts
            there).
        tags: with a tag expression, the tag strings a record must carry to be read (the
            broker filters by hash only); ``None`` for every record.
    """

    bodies: list[bytes]
    hi: int
    tags: frozenset[str] | None

    def messages(self, broker_name: str, namespace: str | None = None) -> list[ReceivedMessage]:
        """The chunk decoded as
        [`QueueReader.read_range_batches`][aiorocket.QueueReader.read_range_batches] yields it.

        Raises:
            RemoteProtocolError: a malformed body.
        """
        hi = self.hi
        tags = self.tags
        out: list[ReceivedMessage] = []
        for body in self.bodies:
            records = [r for r in decode_messages(body) if r.queue_offset < hi]
            if tags is not None:
                records = [r for r in records if r.properties.get("TAGS") in tags]
            out += to_received(
                records,
                broker_name=broker_name,
                tag_filter=None,
                retry_queue=False,
                namespace=namespace,
            )
        return out
