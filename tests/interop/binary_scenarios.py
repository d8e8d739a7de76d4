"""Client scenarios run with ``serialize_type="rocketmq"`` (the binary header dialect, docs/protocol.md
§1.5), against the embedded broker (``tests/remoting/test_binary_clients.py``) and against the
Java broker (``tests/interop/apache/test_java_binary_dialect.py``).

Every scenario checks what the client did (messages intact, order, offsets) and which dialect
each response came in, request code by request code (:func:`watch`); :class:`Answers` says
what the broker under test answers a binary request with:

* the embedded broker answers in the request's dialect: every response is binary;
* a 4.9.x Java broker too (``NettyRemotingAbstract`` copies the request's serialize type into
  the response), except a pull it held (long polling) and answers once a message arrives:
  ``PullMessageProcessor.executeRequestWhenWakeup`` does not copy it, so that one comes back in
  the broker's own dialect (JSON by default);
* a 5.x Java broker copies it nowhere: every response is in its own dialect, JSON, while the
  client's requests are binary (its connections say so).

The client reads either dialect on any frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import aiorocket as rmq
from aiorocket._client.instance import ClientInstance
from aiorocket._protocol.codes import RequestCode, SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import RequestTemplate
from aiorocket._remoting.connection import Connection, FrameTemplate
from tests._harness.wait import wait_for

__all__ = [
    "BINARY",
    "Answers",
    "admin_scenario",
    "assert_binary",
    "check_watched",
    "orderly_scenario",
    "producer_reader_scenario",
    "pull_consumer_scenario",
    "push_scenario",
    "watch",
]

#: the client setting under test
BINARY: dict[str, Any] = {"serialize_type": "rocketmq"}
#: consumer settings that keep the scenarios quick
FAST: dict[str, Any] = {
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 5.0,
    "consume_from": "first",
}
WAIT = 60.0

#: user properties of every message: non-ASCII, so the binary header's UTF-8 lengths count
PROPS = {"region": "eu-west", "ü✓": "日本😀"}


class Answers(enum.Enum):
    """What a broker answers a binary request with (see the module's docs)."""

    #: every response binary (the embedded broker)
    BINARY = "binary"
    #: binary, but held pulls in JSON (Java 4.9.x)
    HELD_PULLS_JSON = "held-pulls-json"
    #: every response JSON (Java 5.x)
    JSON = "json"

    @property
    def dialect(self) -> SerializeType:
        """The dialect of a response that is not a held pull."""
        return SerializeType.JSON if self is Answers.JSON else SerializeType.ROCKETMQ


def dialects(client: object) -> dict[SerializeType, int]:
    """The responses received on the live connections of ``client`` (a producer, consumer,
    reader or admin client), summed per header dialect."""
    instance = getattr(client, "_client", None)
    assert isinstance(instance, ClientInstance), f"{client!r} has no started client"
    total = dict.fromkeys(SerializeType, 0)
    for conn in instance.connections().values():
        for kind, n in conn.responses_received.items():
            total[kind] += n
    return total


def assert_binary(client: object, answers: Answers) -> None:
    """``client``'s connections send binary requests and received the responses ``answers``
    says (:func:`check_watched` checks that JSON ones of a 4.9.x broker were pull responses)."""
    instance = getattr(client, "_client", None)
    assert isinstance(instance, ClientInstance), f"{client!r} has no started client"
    sending = {dialects_of(c) for c in instance.connections().values()}
    assert sending == {SerializeType.ROCKETMQ}, sending
    seen = dialects(client)
    if answers is Answers.JSON:
        assert seen[SerializeType.JSON] > 0, seen
        assert seen[SerializeType.ROCKETMQ] == 0, seen
        return
    assert seen[SerializeType.ROCKETMQ] > 0, seen
    if answers is Answers.BINARY:
        assert seen[SerializeType.JSON] == 0, seen


#: (request code, dialect of its response) -> count
Watched = Counter[tuple[int, SerializeType]]
#: the "request code" :func:`watch` counts a JSON template sent on a binary connection under
JSON_TEMPLATE_ON_BINARY = -1


def dialects_of(conn: Connection) -> SerializeType | None:
    """The dialect ``conn`` sends its requests in (``None``: each command's own)."""
    return conn._stype


@contextlib.contextmanager
def watch() -> Iterator[Watched]:
    """Count the responses to every request made meanwhile (any client of this process), by
    request code and response dialect."""
    seen: Watched = Counter()
    request, request_template = Connection.request, Connection.request_template

    async def watched_request(
        self: Connection, cmd: RemotingCommand, *, timeout: float = 3.0
    ) -> RemotingCommand:
        resp = await request(self, cmd, timeout=timeout)
        seen[cmd.code, resp.serialize_type] += 1
        return resp

    async def watched_template(
        self: Connection, template: FrameTemplate, values: Sequence[int], *, timeout: float = 3.0
    ) -> RemotingCommand:
        resp = await request_template(self, template, values, timeout=timeout)
        seen[template.command(values).code, resp.serialize_type] += 1
        if isinstance(template, RequestTemplate) and dialects_of(self) is SerializeType.ROCKETMQ:
            # a JSON template on a binary connection: re-encoded per send, the slow path
            seen[JSON_TEMPLATE_ON_BINARY, SerializeType.JSON] += 1
        return resp

    Connection.request = watched_request  # type: ignore[method-assign]
    Connection.request_template = watched_template  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        Connection.request = request  # type: ignore[method-assign]
        Connection.request_template = request_template  # type: ignore[method-assign]


def check_watched(seen: Watched, answers: Answers) -> None:
    """Every response came in the dialect ``answers`` says, request code by request code."""
    assert seen, "no request was answered"
    other = SerializeType.ROCKETMQ if answers is Answers.JSON else SerializeType.JSON
    odd = {code: n for (code, kind), n in seen.items() if kind == other}
    if answers is Answers.HELD_PULLS_JSON and odd.pop(RequestCode.PULL_MESSAGE, 0):
        # only the held ones: the pulls answered at once came back binary
        assert seen[RequestCode.PULL_MESSAGE, SerializeType.ROCKETMQ] > 0, seen
    assert not odd, f"{other.name} responses to binary requests (code: count): {odd}"


def message(topic: str, i: int) -> rmq.Message:
    """Message ``i`` of a scenario."""
    return rmq.Message(
        topic,
        f"body-{i}-ü✓",
        tags=f"t{i % 3}",
        keys=[f"k{i}"],
        properties={**PROPS, "idx": str(i)},
    )


def check(m: rmq.ReceivedMessage, topic: str) -> int:
    """``m`` is an intact :func:`message`; its index."""
    i = int(m.properties["idx"])
    assert m.topic == topic
    assert m.body.decode() == f"body-{i}-ü✓"
    assert m.tags == f"t{i % 3}"
    assert list(m.keys) == [f"k{i}"]
    assert {k: m.properties[k] for k in PROPS} == PROPS
    return i


async def produce(namesrv: str, topic: str, n: int, **settings: Any) -> list[rmq.SendResult]:
    """Send ``n`` messages, message ``i`` by sharding key ``i % 4``; their results."""
    async with rmq.Producer(namesrv=namesrv, group=f"{topic}_p", **settings) as p:
        return [await p.send(message(topic, i), sharding_key=str(i % 4)) for i in range(n)]


async def _visible(reader: rmq.QueueReader, mq: rmq.MessageQueue, end: int) -> None:
    # A Java broker answers a send once the commit log has the message; the consume queue
    # that pulls read is built a moment later (ReputMessageService).
    deadline = time.monotonic() + WAIT
    while await reader.max_offset(mq) < end:
        assert time.monotonic() < deadline, f"{mq} never reached offset {end}"
        await asyncio.sleep(0.01)


async def producer_reader_scenario(namesrv: str, topic: str, answers: Answers) -> None:
    """Sync, oneway and batch sends of a binary producer, read back intact by a binary
    queue reader at the offsets the send results name."""
    with watch() as seen:
        async with rmq.Producer(namesrv=namesrv, group=f"{topic}_p", **BINARY) as p:
            results = [await p.send(message(topic, i)) for i in range(10)]
            for i in range(10, 13):
                await p.send_oneway(message(topic, i), queue=results[0].queue)
            batch = [message(topic, i) for i in range(13, 18)]
            (batch_result,) = await p.send_batch(batch, queue=results[0].queue)
            assert_binary(p, answers)
        assert all(r.status == rmq.SendStatus.SEND_OK for r in results)
        async with rmq.QueueReader(namesrv=namesrv, **BINARY) as reader:
            for i, r in enumerate(results):
                await _visible(reader, r.queue, r.queue_offset + 1)
                got = (await reader.read(r.queue, r.queue_offset, 1)).messages
                assert len(got) == 1
                assert check(got[0], topic) == i
                assert got[0].msg_id == r.msg_id
            mq = batch_result.queue
            first = batch_result.queue_offset
            await _visible(reader, mq, first + len(batch))
            # a 5.x broker's send threads run in parallel, so a oneway send may be stored after
            # the batch that followed it: read until all three are there
            deadline = time.monotonic() + WAIT
            while True:
                end = await reader.max_offset(mq)
                stored = {
                    m.queue_offset: check(m, topic) async for m in reader.read_range(mq, 0, end)
                }
                if set(range(10, 18)) <= set(stored.values()):
                    break
                assert time.monotonic() < deadline, f"oneway sends missing: {stored}"
                await asyncio.sleep(0.1)
            assert_binary(reader, answers)
    assert sorted(i for i in stored.values() if i >= 10) == list(range(10, 18))
    # the batch is stored in one piece where its result says
    assert [stored[first + k] for k in range(len(batch))] == list(range(13, 18))
    check_watched(seen, answers)
    assert seen[RequestCode.SEND_MESSAGE_V2, answers.dialect] == 10, seen
    assert seen[RequestCode.SEND_BATCH_MESSAGE, answers.dialect] == 1, seen


async def push_scenario(namesrv: str, topic: str, answers: Answers, n: int = 40) -> None:
    """A binary concurrent push consumer gets every message; one that fails once comes back
    through the retry topic (CONSUMER_SEND_MSG_BACK and the %RETRY% pulls, binary too)."""
    got: dict[int, list[int]] = defaultdict(list)
    with watch() as seen:
        await produce(namesrv, topic, n, **BINARY)
        consumer = rmq.PushConsumer(group=f"{topic}_c", namesrv=namesrv, **FAST, **BINARY)
        consumer.subscribe(topic)

        @consumer.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
            for m in msgs:
                i = check(m, topic)
                got[i].append(m.reconsume_times)
                if i == 7 and m.reconsume_times == 0:
                    raise RuntimeError("first delivery of 7 fails")

        async with consumer:
            await wait_for(
                lambda: len(got) == n and len(got[7]) == 2,
                timeout=WAIT,
                what=f"{n} messages and a retry",
            )
            assert_binary(consumer, answers)
    assert got[7] == [0, 1]
    assert all(len(v) == 1 for i, v in got.items() if i != 7), got
    check_watched(seen, answers)
    assert seen[RequestCode.CONSUMER_SEND_MSG_BACK, answers.dialect] == 1, seen


async def orderly_scenario(namesrv: str, topic: str, answers: Answers, n: int = 40) -> None:
    """A binary orderly push consumer (LOCK_BATCH_MQ binary) gets each sharding key's messages
    in send order."""
    by_key: dict[int, list[int]] = defaultdict(list)
    with watch() as seen:
        await produce(namesrv, topic, n, **BINARY)
        consumer = rmq.PushConsumer(
            group=f"{topic}_o", namesrv=namesrv, orderly=True, **FAST, **BINARY
        )
        consumer.subscribe(topic)

        @consumer.listener
        async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.OrderlyContext) -> None:
            for m in msgs:
                i = check(m, topic)
                by_key[i % 4].append(i)

        async with consumer:
            await wait_for(
                lambda: sum(map(len, by_key.values())) >= n,
                timeout=WAIT,
                what=f"{n} orderly messages",
            )
            assert_binary(consumer, answers)
    for key, seq in by_key.items():
        assert seq == list(range(key, n, 4)), (key, seq)
    check_watched(seen, answers)
    assert seen[RequestCode.LOCK_BATCH_MQ, answers.dialect] > 0, seen


async def pull_consumer_scenario(namesrv: str, topic: str, answers: Answers, n: int = 40) -> str:
    """A binary pull consumer polls every message and commits; a JSON queue reader sees the
    committed offsets (UPDATE_CONSUMER_OFFSET sent in binary reached the broker). Returns the
    group, fully committed."""
    results = await produce(namesrv, topic, n)
    group = f"{topic}_pull"
    seen_ids: set[int] = set()
    with watch() as seen:
        consumer = rmq.PullConsumer(
            group=group, namesrv=namesrv, rebalance_interval=1.0, consume_from="first", **BINARY
        )
        consumer.subscribe(topic)
        async with consumer:
            deadline = time.monotonic() + WAIT
            while len(seen_ids) < n:
                assert time.monotonic() < deadline, f"polled {len(seen_ids)} of {n}"
                seen_ids.update(check(m, topic) for m in await consumer.poll(timeout=1.0))
            await consumer.commit()
            assert_binary(consumer, answers)
    assert seen_ids == set(range(n))
    check_watched(seen, answers)
    ends: dict[rmq.MessageQueue, int] = {}
    for r in results:
        ends[r.queue] = max(ends.get(r.queue, 0), r.queue_offset + 1)
    async with rmq.QueueReader(namesrv=namesrv) as reader:
        for mq, end in ends.items():
            assert await reader.committed_offset(group, mq) == end, mq
    return group


async def admin_scenario(
    namesrv: str, topic: str, group: str, answers: Answers, masters: int = 1
) -> None:
    """A binary admin client creates a topic, finds it in the topic list and its route, and
    reads the lag of ``group`` (fully committed: none)."""
    with watch() as seen:
        async with rmq.Admin(namesrv=namesrv, **BINARY) as admin:
            created = await admin.create_topic(topic, queues=3)
            assert len(created) == masters, created
            deadline = time.monotonic() + WAIT
            while topic not in await admin.topics():
                assert time.monotonic() < deadline, "the new topic never appeared"
                await asyncio.sleep(0.2)
            route = await admin.route(topic)
            assert [q[:2] for q in route.queues.values()] == [(3, 3)] * masters, route
            lag = await admin.lag(group)
            assert lag.queues, lag
            assert lag.total == 0, lag
            assert_binary(admin, answers)
    check_watched(seen, answers)
    assert seen[RequestCode.UPDATE_AND_CREATE_TOPIC, answers.dialect] == masters, seen
