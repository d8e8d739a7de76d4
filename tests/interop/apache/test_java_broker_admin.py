"""The operators' tool ``mqadmin`` and the real Java broker (4.9.x or 5.x), with aiorocket
consumers.

For some commands the broker turns to the consumers themselves: ``resetOffsetByTime`` makes it
send RESET_CONSUMER_CLIENT_OFFSET (220) to every member of the group, which must drop the
topic's queues and consume again from the offsets it is given; ``consumerStatus`` and
``consumerProgress -s true`` make it forward GET_CONSUMER_RUNNING_INFO (307), which we answer
with our properties, subscriptions, per-queue process-queue info and rates. The tests assert on
the lines ``mqadmin`` prints:

* ``consumerConnection`` / ``consumerStatus -g`` with an aiorocket consumer and the Java 4.9.8
  push consumer in one group: both listed alike (address, language, version, running info).
* ``consumerStatus -g -i <clientId>`` of a concurrent and an orderly consumer.
* ``consumerProgress -g -s true`` (broker and consumer offsets, diff, client IP per queue) and
  ``consumerProgress`` (every group: members, version, type, model, diff).
* ``resetOffsetByTime`` to a timestamp (forced or not, the messages since come again) and to
  ``now`` (forced: the backlog is skipped; ``-f false``: the broker only moves offsets back).

Client identity: aiorocket says ``"language": "PYTHON"`` in every request header. In the 4.9.8
jar (``rocketmq-4.9.8-all.jar``, its classes read with ``javap``; broker, name server, ACL,
store, remoting, tools) a request's language is read in three places only:
``ClientManageProcessor.heartBeat`` and ``unregisterClient`` store it in the channel's
``ClientChannelInfo``, and ``AdminBrokerProcessor.resetOffset`` switches on the *requester's*
language (the admin tool's, not the consumers') to encode the offsets for C++
(``ResetOffsetBodyForC``) when it is ``CPP`` (``mqadmin resetOffsetByTime -c``). The stored
language is only displayed: ``AdminBrokerProcessor.getConsumerConnectionList`` /
``getProducerConnectionList`` and ``ProducerManager.getProducerTable`` copy it into what
``mqadmin consumerConnection``, ``producerConnection`` and ``exportMetrics`` print. Whether the
broker forwards a reset or a running-info request to a client depends on its *version*
(``Broker2Client.resetOffset``: V3_0_7_SNAPSHOT or later; ``AdminBrokerProcessor.callConsumer``:
V3_1_8_SNAPSHOT or later), and we send 4.9.8's. So a PYTHON client is treated exactly like a
JAVA one; the first test shows the two side by side.

``mqadmin`` runs in a worker thread (``asyncio.to_thread``): it blocks for seconds, and the
event loop must keep serving the requests the broker forwards to our consumer meanwhile.

What 5.x does differently, asserted as such: the Java client reports its own version
(``V5_3_3``); ``consumerProgress -s true`` adds ``#Inflight`` and prints ``Consume Diff
Total``; ``resetOffsetByTime`` prints ``start reset consumer offset by specified, group[...]``
and turns ``now`` into the current time on the tool's side. And the broker resets offsets
itself (``useServerSideResetOffset``, on by default): ``AdminBrokerProcessor.resetOffsetInner``
stores the target offsets for the group's next pulls and ignores ``force``, so ``-f false`` to
``now`` skips the backlog too, and no RESET_CONSUMER_CLIENT_OFFSET reaches the consumers.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket import MessageQueue
from tests._harness.wait import wait_for
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import Install
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

#: consumer settings that keep the tests quick (``tests/consumer/conftest.py``'s ``FAST``)
FAST: dict[str, Any] = {
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 5.0,
}
#: seconds to wait for deliveries, commits and rebalances (two cores shared with other brokers)
TIMEOUT = 60.0
#: the queues of a topic our producer creates on first send (``default_topic_queue_nums``)
QUEUES = 4
BROKER = "broker-a"

Handler = Callable[[list[rmq.ReceivedMessage], rmq.ConcurrentContext], Any]


# -- helpers -----------------------------------------------------------------------------------


async def admin(cluster: JavaCluster, *args: str) -> str:
    """``mqadmin`` in a worker thread, so our consumer keeps answering the broker."""
    return await asyncio.to_thread(cluster.admin, *args)


async def send(cluster: JavaCluster, topic: str, bodies: Iterable[str]) -> list[rmq.SendResult]:
    """Send one message per body, in order (round-robin over the topic's queues)."""
    async with rmq.Producer(namesrv=cluster.namesrv, group=unique_name("AdmP")) as p:
        return [await p.send(rmq.Message(topic, body.encode())) for body in bodies]


def consumer(
    cluster: JavaCluster, topic: str, group: str, handler: Handler, **settings: Any
) -> rmq.PushConsumer:
    c = rmq.PushConsumer(
        group=group, namesrv=cluster.namesrv, consume_from="first", **{**FAST, **settings}
    )
    c.subscribe(topic)
    c.register_listener(handler)
    return c


def topic_queues(topic: str) -> list[MessageQueue]:
    return [MessageQueue(topic, BROKER, q) for q in range(QUEUES)]


@asynccontextmanager
async def reader(cluster: JavaCluster) -> AsyncIterator[rmq.QueueReader]:
    async with rmq.QueueReader(namesrv=cluster.namesrv) as r:
        yield r


async def wait_committed(
    cluster: JavaCluster, group: str, expected: dict[MessageQueue, int], what: str
) -> None:
    """Wait until the broker stores ``expected`` as ``group``'s offsets (the consumer commits
    every ``offset_persist_interval``)."""
    async with reader(cluster) as r:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TIMEOUT
        while True:
            stored = {mq: await r.committed_offset(group, mq) for mq in expected}
            if stored == expected:
                return
            if loop.time() > deadline:
                raise AssertionError(f"{what}: the broker stores {stored}, expected {expected}")
            await asyncio.sleep(0.1)


async def max_offsets(cluster: JavaCluster, topic: str) -> dict[MessageQueue, int]:
    async with reader(cluster) as r:
        return await r.max_offsets(topic_queues(topic))


def rows_after(output: str, header: str) -> list[list[str]]:
    """The whitespace-split lines under the line starting with ``header``, up to a blank one."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(header)]
    assert starts, f"no {header!r} line in:\n{output}"
    rows = []
    for line in lines[starts[0] + 1 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def section(info: str, title: str) -> str:
    """One ``#Consumer <title>#`` section of ``ConsumerRunningInfo.formatString()``."""
    parts = re.split(r"^(#Consumer [^#\n]+#)$", info, flags=re.M)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name == f"#Consumer {title}#":
            return body
    raise AssertionError(f"no #Consumer {title}# section in:\n{info}")


def parse_reset(output: str, topic: str) -> dict[MessageQueue, int]:
    """``resetOffsetByTime``'s table (``#brokerName #queueId #offset``), by queue."""
    return {
        MessageQueue(topic, r[0], int(r[1])): int(r[2]) for r in rows_after(output, "#brokerName")
    }


def local_address(c: rmq.PushConsumer, broker: str) -> str:
    """Our end of the consumer's connection to ``broker`` (private attributes: the public
    API has no reason to expose a socket's own address)."""
    pool = c._client._pool
    assert pool is not None
    transport = pool.connections()[broker]._transport
    assert transport is not None
    host, port = transport.get_extra_info("sockname")[:2]
    return f"{host}:{port}"


class Gate:
    """Holds the handler calls of messages whose body starts with ``prefix`` until opened."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.opened = asyncio.Event()
        #: handler calls waiting now
        self.waiting = 0

    async def pass_(self, msg: rmq.ReceivedMessage) -> None:
        if msg.body.decode().startswith(self.prefix):
            self.waiting += 1
            try:
                await self.opened.wait()
            finally:
                self.waiting -= 1


# -- consumerConnection / consumerStatus / consumerProgress ------------------------------------


async def test_consumer_connection_and_status_list_us_beside_a_java_consumer(
    java_cluster: JavaCluster, java_classes: Path, tmp_path: Path, rocketmq: Install
) -> None:
    topic, group = unique_name("AdmConn"), unique_name("AdmConnG")
    await send(java_cluster, topic, [f"c-{i}" for i in range(8)])

    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        return None

    c = consumer(java_cluster, topic, group, handle)
    async with c:
        java = await JavaClient.start(
            java_classes,
            "Peer",
            "consume",
            java_cluster.namesrv,
            topic,
            group,
            "1000000",
            "300",
            name="java-member",
            tmp=tmp_path,
        )
        try:
            # The Java member is in: the broker told us (NOTIFY_CONSUMER_IDS_CHANGED) and our
            # rebalance over both members' client ids left us half of the queues.
            await wait_for(
                lambda: len([q for q in c.held() if q.topic == topic]) == QUEUES // 2,
                timeout=TIMEOUT,
                what="the Java member to take its half of the queues",
                interval=0.05,
            )
            connection = await admin(java_cluster, "consumerConnection", "-g", group)
            status = await admin(java_cluster, "consumerStatus", "-g", group)
        finally:
            await java.stop()
        address = local_address(c, java_cluster.broker_addr(BROKER))

    # consumerConnection: ClientId, ClientAddr, Language, Version of each member's channel
    members = {r[0]: r[1:] for r in rows_after(connection, "#ClientId")}
    assert members.pop(c.client_id) == [address, "PYTHON", "V4_9_8"], connection
    assert [m[1:] for m in members.values()] == [["JAVA", rocketmq.version_name]], connection
    (java_id,) = members
    subscriptions = {r[0]: r[1] for r in rows_after(connection, "#Topic")}
    assert subscriptions == {topic: "*", f"%RETRY%{group}": "*"}, connection
    for line in (
        "ConsumeType: CONSUME_PASSIVELY",
        "MessageModel: CLUSTERING",
        "ConsumeFromWhere: CONSUME_FROM_FIRST_OFFSET",
    ):
        assert line in connection.splitlines(), connection

    # consumerStatus -g: the broker fetched both members' running info (GET_CONSUMER_RUNNING_INFO)
    # and the tool wrote each to <millis>/<clientId> under its working directory
    listed = {r[1]: r[2:] for r in rows_after(status, "#Index")}
    assert set(listed) == {c.client_id, java_id}, status
    assert sorted(r[0] for r in listed.values()) == sorted(["V4_9_8", rocketmq.version_name])
    assert "Same subscription in the same group of consumer" in status
    assert "Rebalance OK" in status
    for client_id in listed:
        info = (java_cluster.root / listed[client_id][1]).read_text()
        assert "PROP_CONSUME_TYPE" in section(info, "Properties"), info
        assert f"Topic: {topic} " in section(info, "Subscription"), info


@pytest.mark.parametrize("orderly", [False, True], ids=["concurrently", "orderly"])
async def test_consumer_status_shows_our_running_info(
    java_cluster: JavaCluster, orderly: bool
) -> None:
    topic, group = unique_name("AdmStatus"), unique_name("AdmStatusG")
    retry = MessageQueue(f"%RETRY%{group}", BROKER, 0)
    sent = await send(java_cluster, topic, [f"s-{i}" for i in range(2 * QUEUES)])
    ends = {r.queue: r.queue_offset + 1 for r in sent}
    got: list[bytes] = []

    async def handle(msgs: list[rmq.ReceivedMessage], ctx: Any) -> None:
        got.extend(m.body for m in msgs)

    started = int(time.time() * 1000)
    c = consumer(java_cluster, topic, group, handle, orderly=orderly)
    async with c:

        def consumed() -> dict[MessageQueue, int]:
            queues = c.statistics().queues.values()
            return {q.queue: q.committed_offset for q in queues if q.queue.topic == topic}

        # ... and the group's %RETRY% queue held: the broker creates that topic at the first
        # heartbeat, and the name server may list it only after the member's next route poll
        # (as for a Java member), which a loaded machine makes likelier.
        await wait_for(
            lambda: len(got) == len(sent) and consumed() == ends and retry in c.held(),
            timeout=TIMEOUT,
            what="every message, and the retry queue",
            interval=0.05,
        )
        summary = await admin(java_cluster, "consumerStatus", "-g", group)
        detail = await admin(java_cluster, "consumerStatus", "-g", group, "-i", c.client_id)

    # -g: one member, and ConsumerRunningInfo's analyses pass (analyzeProcessQueue prints
    # "can't lock for a while" for an unlocked orderly queue, "can't consume for a while"
    # for a blocked one)
    assert [r[1:3] for r in rows_after(summary, "#Index")] == [[c.client_id, "V4_9_8"]], summary
    assert "Same subscription in the same group of consumer" in summary
    assert "Rebalance OK" in summary
    assert "can't" not in summary

    # -i: ConsumerRunningInfo.formatString() of what we answered
    props = {}
    for line in section(detail, "Properties").splitlines():
        key, sep, value = line.partition(" : ")
        if sep:
            props[key.strip()] = value.strip()
    assert props["PROP_CONSUME_TYPE"] == "CONSUME_PASSIVELY"
    assert props["PROP_CONSUMEORDERLY"] == ("true" if orderly else "false")
    assert props["PROP_CLIENT_VERSION"] == "V4_9_8"
    assert props["PROP_NAMESERVER_ADDR"] == java_cluster.namesrv
    assert props["message_model"] == "clustering"
    assert started <= int(props["PROP_CONSUMER_START_TIMESTAMP"]) <= int(time.time() * 1000)

    # "001 Topic: T ClassFilter: false SubExpression: *"
    subscriptions = rows_after(detail, "#Consumer Subscription#")
    assert sorted((r[2], r[4], r[6]) for r in subscriptions) == sorted(
        [(topic, "false", "*"), (retry.topic, "false", "*")]
    ), detail

    # Topic, Broker Name, QID, Consumer Offset
    offsets = {
        MessageQueue(r[0], r[1], int(r[2])): int(r[3])
        for r in rows_after(section(detail, "Offset"), "#Topic")
    }
    assert {mq: o for mq, o in offsets.items() if mq != retry} == ends, detail

    # Topic, Broker Name, QID, ProcessQueueInfo [...]
    queues = {
        MessageQueue(r[0], r[1], int(r[2])): " ".join(r[3:])
        for r in rows_after(section(detail, "MQ Detail"), "#Topic")
    }
    assert set(queues) == {*ends, retry}, detail
    for mq, end in ends.items():
        pq = queues[mq]
        assert pq.startswith(f"ProcessQueueInfo [commitOffset={end}, "), pq
        assert "cachedMsgCount=0," in pq, pq
        assert "droped=false," in pq, pq
        # an orderly consumer holds its queues under the broker's lock
        assert f"locked={'true' if orderly else 'false'}," in pq, pq

    # Topic, Pull RT, Pull TPS, Consume RT, ConsumeOK TPS, ConsumeFailed TPS, failed in hour
    rates = {r[0]: r[1:] for r in rows_after(section(detail, "RT&TPS"), "#Topic")}
    assert set(rates) == {topic, retry.topic}, detail
    assert rates[topic][-1] == "0"  # no failed message


async def test_consumer_progress_shows_broker_and_consumer_offsets(
    java_cluster: JavaCluster, rocketmq: Install
) -> None:
    topic, group = unique_name("AdmProg"), unique_name("AdmProgG")
    first = await send(java_cluster, topic, [f"p-{i}" for i in range(2 * QUEUES)])
    committed = {r.queue: r.queue_offset + 1 for r in first}
    gate = Gate("late-")

    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        await gate.pass_(msgs[0])

    c = consumer(java_cluster, topic, group, handle)
    async with c:
        await wait_committed(java_cluster, group, committed, "the first messages")
        # One more message per queue, held by the handler: the broker's offsets move on, the
        # group's stay (a message in the handler is not committed).
        late = await send(java_cluster, topic, [f"late-{i}" for i in range(QUEUES)])
        assert {r.queue for r in late} == set(committed)
        await wait_for(
            lambda: gate.waiting == QUEUES, timeout=TIMEOUT, what="the held messages", interval=0.05
        )
        progress = await admin(java_cluster, "consumerProgress", "-g", group, "-s", "true")
        groups = await admin(java_cluster, "consumerProgress")
        gate.opened.set()

    # -g -s true: Topic, Broker Name, QID, Broker Offset, Consumer Offset, Client IP, Diff,
    # (5.x: Inflight,) LastTime; the tool finds each queue's client in the members' running info
    rows = {
        MessageQueue(r[0], r[1], int(r[2])): r[3:]
        for r in rows_after(progress, "#Topic")
        if r[0] == topic
    }
    assert set(rows) == set(committed), progress
    ip = c.client_id.split("@")[0]
    for mq, offset in committed.items():
        broker_offset, consumer_offset, client_ip, diff = rows[mq][:4]
        assert (int(broker_offset), int(consumer_offset), int(diff)) == (offset + 1, offset, 1)
        assert client_ip == ip, progress
        if rocketmq.v5:
            assert int(rows[mq][4]) == 1, progress  # in flight: the held message
    total = f"{'Consume ' if rocketmq.v5 else ''}Diff Total: {QUEUES}"
    assert total in progress.splitlines(), progress

    # all groups: Group, Count, Version, Type, Model, TPS, Diff Total
    (ours,) = [r for r in rows_after(groups, "#Group") if r[0] == group]
    assert ours[1:5] == ["1", "V4_9_8", "PUSH", "CLUSTERING"], groups
    assert ours[6] == str(QUEUES), groups


# -- resetOffsetByTime -------------------------------------------------------------------------


def reset_title(rocketmq: Install) -> str:
    """The start of ``resetOffsetByTime``'s first line in this version."""
    if rocketmq.v5:
        return "start reset consumer offset by specified, "
    return "rollback consumer offset by specified "


@pytest.mark.parametrize(
    "force",
    [pytest.param([], id="force-by-default"), pytest.param(["-f", "false"], id="no-force")],
)
async def test_reset_offset_by_timestamp_consumes_again_from_there(
    java_cluster: JavaCluster, force: list[str], rocketmq: Install
) -> None:
    """Back to a timestamp: forced or not (a reset that moves offsets back needs no force)."""
    topic, group = unique_name("AdmReset"), unique_name("AdmResetG")
    got: list[rmq.ReceivedMessage] = []

    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(msgs)

    old = await send(java_cluster, topic, [f"old-{i}" for i in range(2 * QUEUES)])
    c = consumer(java_cluster, topic, group, handle)
    async with c:
        await wait_for(
            lambda: len(got) == len(old), timeout=TIMEOUT, what="the old messages", interval=0.05
        )
        # The broker maps a timestamp to the stored message *nearest* to it in each queue,
        # before or after (ConsumeQueue.getOffsetInQueueByTime): a gap makes each queue's
        # first new message the nearest one to a timestamp just before the new messages.
        await asyncio.sleep(1.0)
        new = await send(java_cluster, topic, [f"new-{i}" for i in range(2 * QUEUES)])
        await wait_for(
            lambda: len(got) == len(old) + len(new),
            timeout=TIMEOUT,
            what="the new messages",
            interval=0.05,
        )
        ends = await max_offsets(java_cluster, topic)
        # the broker refuses to reset a group that has not committed every queue
        await wait_committed(java_cluster, group, ends, "everything consumed")

        since = min(m.store_timestamp for m in got if m.body.startswith(b"new-")) - 1
        before = len(got)
        output = await admin(
            java_cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", str(since), *force
        )
        # our client applied what the broker sent it: the new messages come again
        await wait_for(
            lambda: len(got) >= before + len(new),
            timeout=TIMEOUT,
            what="the new messages again",
            interval=0.05,
        )
        await wait_committed(java_cluster, group, ends, "everything consumed again")
        again = got[before:]

    assert output.splitlines()[0] == (
        f"{reset_title(rocketmq)}group[{group}], topic[{topic}], "
        f"force[{'false' if force else 'true'}], "
        f"timestamp(string)[{since}], timestamp(long)[{since}]"
    )
    first_new: dict[MessageQueue, int] = {}
    for r in new:
        first_new.setdefault(r.queue, r.queue_offset)
    assert parse_reset(output, topic) == first_new, output
    # each new message once more, no old one
    assert sorted(m.body for m in again) == sorted(f"new-{i}".encode() for i in range(len(new)))


@pytest.mark.parametrize(
    ("force", "skips"),
    [
        pytest.param([], True, id="force-by-default"),
        pytest.param(["-f", "false"], False, id="no-force"),
    ],
)
async def test_reset_offset_to_now(
    java_cluster: JavaCluster, force: list[str], skips: bool, rocketmq: Install
) -> None:
    """``-s now`` is timestamp -1: the end of each queue (``Broker2Client.resetOffset`` takes
    the max offset). Forced (mqadmin's default) the backlog is skipped; with ``-f false`` the
    broker keeps the group's offset wherever the new one is not lower, so nothing is. 5.x
    resets on the broker and ignores ``-f`` (see the module's docs): the backlog is skipped
    either way."""
    skips = skips or rocketmq.v5
    topic, group = unique_name("AdmNow"), unique_name("AdmNowG")
    gate = Gate("backlog-")
    got: list[bytes] = []

    async def handle(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        got.extend(m.body for m in msgs)
        await gate.pass_(msgs[0])

    warm = await send(java_cluster, topic, [f"warm-{i}" for i in range(QUEUES)])
    committed = {r.queue: r.queue_offset + 1 for r in warm}
    # one handler call at a time: the first backlog message is held, the others stay cached
    c = consumer(java_cluster, topic, group, handle, concurrency=1)
    async with c:
        # the broker refuses to reset a group that has not committed every queue
        await wait_committed(java_cluster, group, committed, "the warm-up messages")
        backlog = await send(java_cluster, topic, [f"backlog-{i}" for i in range(2 * QUEUES)])
        ends = await max_offsets(java_cluster, topic)
        await wait_for(
            lambda: (
                gate.waiting == 1
                and sum(q.cached_count for q in c.statistics().queues.values()) == len(backlog)
            ),
            timeout=TIMEOUT,
            what="one backlog message in the handler, the others cached",
            interval=0.05,
        )
        output = await admin(
            java_cluster, "resetOffsetByTime", "-g", group, "-t", topic, "-s", "now", *force
        )
        expected = ends if skips else committed
        # what the broker computed (and sent to us) ...
        assert parse_reset(output, topic) == expected, output
        # ... and what our client committed when it applied it
        await wait_committed(java_cluster, group, expected, "the reset offsets")
        gate.opened.set()
        after = [f"after-{i}".encode() for i in range(QUEUES)]
        await send(java_cluster, topic, [b.decode() for b in after])
        await wait_for(
            lambda: set(after) <= set(got),
            timeout=TIMEOUT,
            what="the messages sent after the reset",
            interval=0.05,
        )
        await wait_committed(
            java_cluster, group, await max_offsets(java_cluster, topic), "everything"
        )

    # 5.x's tool sends the current time for "now" (4.9.x: -1)
    now = r"\d{13}" if rocketmq.v5 else "-1"
    assert re.fullmatch(
        re.escape(f"{reset_title(rocketmq)}group[{group}], topic[{topic}], ")
        + re.escape(f"force[{'false' if force else 'true'}], timestamp(string)[now], ")
        + rf"timestamp\(long\)\[{now}\]",
        output.splitlines()[0],
    ), output
    delivered = [b for b in got if b.startswith(b"backlog-")]
    if rocketmq.v5:
        # the broker told the consumer nothing: what it had pulled before the reset is still
        # delivered, once, and its next pulls start at the reset offsets
        assert sorted(delivered) == sorted(f"backlog-{i}".encode() for i in range(len(backlog)))
    elif skips:
        # only the message that was in the handler when the reset came: the cached ones went
        # with their dropped process queues, and the queues start again at the end
        assert len(delivered) == 1, delivered
    else:
        # every backlog message (the held one twice: its offset was never committed)
        assert set(delivered) == {f"backlog-{i}".encode() for i in range(len(backlog))}
        assert len(delivered) == len(backlog) + 1, delivered
