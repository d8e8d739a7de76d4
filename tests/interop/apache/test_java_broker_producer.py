"""aiorocket's producer against the real Apache RocketMQ 4.9.8 broker.

Every message sent is read back and compared field by field (body, tags, keys, user
properties, queue and offset from the :class:`~aiorocket.SendResult`, message id) with
aiorocket's :class:`~aiorocket.QueueReader` or :class:`~aiorocket.PushConsumer`, and several
times with the Java 4.9.8 client too, so the Java side is shown to see our messages intact:
``java/Peer.java`` (a push consumer printing every property of what it consumes) and
``Probe``, a small Java program of this module (compiled from the source below) that produces
messages with non-ASCII properties and asks Java's ``SelectMessageQueueByHash`` which queue a
key maps to.

Sends covered: sync, oneway, batch, sharding key, delay level, compressed bodies, namespaces
and non-ASCII properties (both directions).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from aiorocket import (
    ConcurrentContext,
    Message,
    MessageQueue,
    Producer,
    PushConsumer,
    QueueReader,
    ReceivedMessage,
    SendResult,
    SendStatus,
)
from aiorocket._protocol import properties as wire_props
from aiorocket._protocol.codes import MessageSysFlag
from tests._harness.wait import wait_for
from tests.consumer.conftest import FAST
from tests.interop.apache._groups import visible
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.conftest import FAST_DELAY_LEVELS
from tests.interop.apache.install import compile_java
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

#: Level 2 is 3 s and every other level 1 s: a delayed message that arrives after 3 s proves
#: the broker applied *its* level 2, not some other level (ScheduleMessageService parses
#: ``messageDelayLevel`` into one delay per level).
JAVA_BROKER_CONF = {"messageDelayLevel": "1s 3s " + " ".join(FAST_DELAY_LEVELS.split()[2:])}
LEVEL_2_DELAY_MS = 3000
LEVEL_1_DELAY_MS = 1000

#: Non-ASCII property names and values (Latin-1, symbols, CJK, emoji outside the BMP, quotes
#: and a backslash for the JSON escaping of the Java side).
FANCY_PROPS: dict[str, str] = {
    "ü✓": "日本",
    "日本": 'ü✓ “quoted” "plain" \\ end',
    "emoji😀": "🚀✨ rocket",
    "plain": "a=b;c:d",
}
FANCY_TAG = "tag-ü✓"
FANCY_KEYS = ("key-日本", "k😀")

#: User properties put on the messages of most tests.
PROPS = {"order": "42", "region": "eu-west", "ü✓": "日本😀"}

#: The property names aiorocket and the Java client treat as system ones (MessageConst).
SYSTEM_PROPS = frozenset(
    value
    for name in wire_props.__all__
    if name.isupper()
    and isinstance(value := getattr(wire_props, name), str)
    and name not in ("NAME_VALUE_SEPARATOR", "PROPERTY_SEPARATOR")
)

#: Generous waits: Java clients boot in 2-5 s on an idle 2-core machine, much more under load.
JAVA_TIMEOUT = 90.0
WAIT = 60.0


def java_literal(text: str) -> str:
    """``text`` as a Java string literal that javac reads the same in any source encoding:
    printable ASCII as is, everything else as ``\\uXXXX`` UTF-16 code units (a quote or a
    backslash written as ``\\u0022``/``\\u005c`` would end the literal, so they get a plain
    backslash escape instead)."""
    out = []
    raw = text.encode("utf-16-be", "surrogatepass")
    for (unit,) in struct.iter_unpack(">H", raw):
        ch = chr(unit)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 0x20 <= unit < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\u{unit:04x}")
    return '"' + "".join(out) + '"'


#: Probe: Java 4.9.8 client commands for this module. Output is one JSON line per event,
#: written as UTF-8 with every non-ASCII UTF-16 unit escaped, so it reads the same whatever
#: the JVM's locale; string arguments come hex-encoded (UTF-8) for the same reason.
PROBE_SOURCE = (
    r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;
import org.apache.rocketmq.client.producer.*;
import org.apache.rocketmq.client.producer.selector.SelectMessageQueueByHash;
import org.apache.rocketmq.common.message.*;

public class Probe {
    static final PrintStream OUT =
        new PrintStream(new FileOutputStream(FileDescriptor.out), true, StandardCharsets.UTF_8);
    static final String[][] PROPS = {@PROPS@};
    static final String TAG = @TAG@;
    static final String KEYS = @KEYS@;

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20 || c > 0x7e) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String unhex(String h) {
        byte[] out = new byte[h.length() / 2];
        for (int i = 0; i < out.length; i++)
            out[i] = (byte) Integer.parseInt(h.substring(2 * i, 2 * i + 2), 16);
        return new String(out, StandardCharsets.UTF_8);
    }

    static void emit(String line) { synchronized (OUT) { OUT.println(line); } }

    public static void main(String[] a) throws Exception {
        String cmd = a[0], ns = a[1], topic = a[2];
        if (cmd.equals("select")) {
            // which queue Java's SelectMessageQueueByHash picks for each key
            DefaultMQProducer p = new DefaultMQProducer("ProbeSelect");
            p.setNamesrvAddr(ns);
            p.start();
            List<MessageQueue> mqs = p.fetchPublishMessageQueues(topic);
            SelectMessageQueueByHash sel = new SelectMessageQueueByHash();
            for (int i = 3; i < a.length; i++) {
                String key = unhex(a[i]);
                MessageQueue mq = sel.select(mqs, null, key);
                emit("{\"ev\":\"select\",\"key\":" + q(key) + ",\"queue\":" + mq.getQueueId()
                    + ",\"queues\":" + mqs.size() + "}");
            }
            p.shutdown();
        } else if (cmd.equals("produce")) {
            int n = Integer.parseInt(a[3]);
            DefaultMQProducer p = new DefaultMQProducer("ProbeProducer");
            p.setNamesrvAddr(ns);
            p.start();
            for (int i = 0; i < n; i++) {
                byte[] body = ("java-" + i + "-" + PROPS[0][0]).getBytes(StandardCharsets.UTF_8);
                Message m = new Message(topic, TAG, KEYS, body);
                for (String[] kv : PROPS) m.putUserProperty(kv[0], kv[1]);
                m.putUserProperty("idx", String.valueOf(i));
                SendResult r = p.send(m);
                emit("{\"ev\":\"sent\",\"idx\":" + i + ",\"msg_id\":" + q(r.getMsgId())
                    + ",\"broker\":" + q(r.getMessageQueue().getBrokerName())
                    + ",\"queue\":" + r.getMessageQueue().getQueueId()
                    + ",\"offset\":" + r.getQueueOffset() + "}");
            }
            p.shutdown();
        }
        System.exit(0);
    }
}
""".replace(
        "@PROPS@",
        ", ".join(f"{{{java_literal(k)}, {java_literal(v)}}}" for k, v in FANCY_PROPS.items()),
    )
    .replace("@TAG@", java_literal(FANCY_TAG))
    .replace("@KEYS@", java_literal(" ".join(FANCY_KEYS)))
)


@pytest.fixture(autouse=True)
def _java_stdout_utf8(monkeypatch: pytest.MonkeyPatch) -> None:
    # Java prints non-ASCII text with the JVM's default charset, which follows the
    # locale (ASCII under LANG=C): make it UTF-8 whatever the machine's locale is.
    monkeypatch.setenv("JAVA_TOOL_OPTIONS", "-Dfile.encoding=UTF-8 -Dsun.stdout.encoding=UTF-8")


@pytest.fixture(scope="module")
def probe_classes(java_classes: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """:data:`PROBE_SOURCE` compiled (the shared programs are ``java_classes``)."""
    src = tmp_path_factory.mktemp("probe-src") / "Probe.java"
    src.write_text(PROBE_SOURCE, encoding="utf-8")
    return compile_java(tmp_path_factory.mktemp("probe-classes"), [src])


# -- helpers -------------------------------------------------------------------------------------


def user_props(props: Mapping[str, str]) -> dict[str, str]:
    """The user properties among ``props`` (system ones left out)."""
    return {k: v for k, v in props.items() if k not in SYSTEM_PROPS}


def assert_same(got: ReceivedMessage, sent: Message, result: SendResult | None = None) -> None:
    """``got`` is ``sent`` field by field, stored where ``result`` says."""
    where = f"message {got!r}"
    assert got.topic == sent.topic, where
    assert got.body == sent.body, where
    assert got.tags == sent.tags, where
    assert got.keys == list(sent.keys), where
    assert user_props(got.properties) == dict(sent.properties), where
    if result is not None:
        assert got.msg_id == result.msg_id, where
        assert got.broker_name == result.queue.broker_name, where
        assert got.queue_id == result.queue.queue_id, where
        assert got.queue_offset == result.queue_offset, where
        assert got.offset_msg_id == result.offset_msg_id, where


def assert_java_saw(event: Mapping[str, Any], sent: Message, result: SendResult) -> None:
    """A message line of ``Peer consume`` shows
    ``sent`` stored where ``result`` says."""
    assert event["body"] == sent.body.decode("utf-8"), event
    assert event["tags"] == (sent.tags or ""), event
    assert event["keys"] == " ".join(sent.keys), event
    assert event["queue"] == result.queue.queue_id, event
    assert event["offset"] == result.queue_offset, event
    assert event["msg_id"] == result.msg_id, event


def make_message(topic: str, i: int, **extra: Any) -> Message:
    """Message ``i`` of a test: distinct body, tag, keys and an ``idx`` property."""
    return Message(
        topic,
        f"body-{i}-ü✓-{'x' * (i % 7)}",
        tags=f"tag{i % 3}",
        keys=[f"key{i}", f"order-{i // 2}"],
        properties={**PROPS, "idx": str(i)},
        **extra,
    )


@contextlib.asynccontextmanager
async def consuming(
    namesrv: str, topic: str, group: str, **settings: Any
) -> AsyncIterator[list[ReceivedMessage]]:
    """A started :class:`PushConsumer` of ``topic`` from its first offset; yields the list its
    handler appends every message to."""
    got: list[ReceivedMessage] = []
    consumer = PushConsumer(
        group=group, namesrv=namesrv, consume_from="first", **{**FAST, **settings}
    )
    consumer.subscribe(topic)

    @consumer.listener
    async def handle(msgs: list[ReceivedMessage], ctx: ConcurrentContext) -> None:
        got.extend(msgs)

    async with consumer:
        yield got


async def read_back(
    namesrv: str, results: Sequence[SendResult], **settings: Any
) -> list[ReceivedMessage]:
    """The message stored at each result's queue and offset, read with a QueueReader."""
    out = []
    async with QueueReader(namesrv=namesrv, **settings) as reader:
        for r in results:
            await visible(reader, r.queue, r.queue_offset + 1, WAIT)
            batch = await reader.read(r.queue, r.queue_offset, 1)
            assert batch.messages, f"nothing stored at {r.queue} offset {r.queue_offset}"
            out.append(batch.messages[0])
    return out


async def java_consume(
    classes: Path, main: str, namesrv: str, topic: str, n: int, tmp: Path
) -> list[dict[str, Any]]:
    """Run a Java push consumer (``Peer``) of ``topic`` in a new group until it
    saw ``n`` distinct messages; its message lines."""
    group = unique_name("java_reader")
    client = await JavaClient.start(
        classes, main, "consume", namesrv, topic, group, str(n), str(int(JAVA_TIMEOUT)), tmp=tmp
    )

    def lines(c: JavaClient) -> list[dict[str, Any]]:
        return [e for e in c.events if "msg_id" in e and "body" in e]

    try:
        await client.wait_until(
            lambda c: len({e["msg_id"] for e in lines(c)}) >= n, JAVA_TIMEOUT, f"{n} messages"
        )
        await asyncio.sleep(0.5)  # a duplicate or a stray message would show up by now
    finally:
        # killed rather than stopped: its graceful shutdown takes seconds and adds nothing
        await client.kill()
    msgs = lines(client)
    assert len({e["msg_id"] for e in msgs}) == n, client.diagnostics()
    return msgs


# -- tests ---------------------------------------------------------------------------------------


async def test_sync_send_read_back_by_queue_reader_and_java_peer(
    java_cluster: JavaCluster, java_classes: Path, tmp_path: Path
) -> None:
    """SEND_MESSAGE_V2 answered by the Java broker: the result names the queue, offset and ids
    the broker stored the message under; aiorocket's reader and the Java client both find it
    there, intact."""
    ns = java_cluster.namesrv
    topic = unique_name("SyncSend")
    sent = [make_message(topic, i) for i in range(12)]
    async with Producer(namesrv=ns, group=unique_name("pg")) as producer:
        results = [await producer.send(m) for m in sent]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    # round-robin over the 4 queues auto-created from TBW102 (defaultTopicQueueNums = 4)
    assert {r.queue.queue_id for r in results} == {0, 1, 2, 3}
    for r in results:
        assert r.queue.topic == topic
        assert r.queue.broker_name == "broker-a"
    per_queue: dict[int, list[int]] = {}
    for r in results:
        per_queue.setdefault(r.queue.queue_id, []).append(r.queue_offset)
    assert all(offs == list(range(len(offs))) for offs in per_queue.values()), per_queue

    for got, m, r in zip(await read_back(ns, results), sent, results, strict=True):
        assert_same(got, m, r)
        assert got.store_host == java_cluster.broker_addr("broker-a")
        assert got.born_timestamp <= got.store_timestamp

    events = await java_consume(java_classes, "Peer", ns, topic, len(sent), tmp_path)
    by_idx = {int(e["idx"]): e for e in events}
    assert sorted(by_idx) == list(range(len(sent)))
    for i, (m, r) in enumerate(zip(sent, results, strict=True)):
        assert_java_saw(by_idx[i], m, r)


async def test_oneway_send_arrives_intact(java_cluster: JavaCluster) -> None:
    """SEND_MESSAGE_V2 with the oneway flag: the Java broker stores the message without
    answering; a consumer finds every one, intact, each queue's offsets contiguous."""
    ns = java_cluster.namesrv
    topic = unique_name("Oneway")
    sent = [make_message(topic, i) for i in range(16)]
    async with Producer(namesrv=ns, group=unique_name("pg")) as producer:
        # the first send is synchronous: it auto-creates the topic (a oneway send that fails
        # to create it would be lost silently)
        first = await producer.send(sent[0])
        for m in sent[1:]:
            await producer.send_oneway(m)
    async with consuming(ns, topic, unique_name("cg")) as got:
        await wait_for(lambda: len(got) >= len(sent), timeout=WAIT, what="every oneway message")
        await asyncio.sleep(0.5)  # a duplicate would show up by now
    by_idx = {int(m.properties["idx"]): m for m in got}
    assert len(got) == len(sent)
    assert sorted(by_idx) == list(range(len(sent)))
    assert_same(by_idx[0], sent[0], first)
    for i, m in enumerate(sent):
        assert_same(by_idx[i], m)
    offsets: dict[int, list[int]] = {}
    for g in got:
        offsets.setdefault(g.queue_id, []).append(g.queue_offset)
    assert all(sorted(o) == list(range(len(o))) for o in offsets.values()), offsets
    assert len({g.msg_id for g in got}) == len(sent)


async def test_send_batch_one_call_all_arrive_in_order(
    java_cluster: JavaCluster, java_classes: Path, tmp_path: Path
) -> None:
    """SEND_BATCH_MESSAGE to a new topic (the Java broker creates it from TBW102): one call,
    one queue, contiguous offsets in the batch's order; the broker splits the batch body into
    messages with our properties and ids."""
    ns = java_cluster.namesrv
    topic = unique_name("Batch")
    sent = [make_message(topic, i) for i in range(25)]
    async with Producer(namesrv=ns, group=unique_name("pg")) as producer:
        results = await producer.send_batch(sent)
    # A batch goes as one request under the size cap: one result, its ids comma-joined.
    assert len(results) == 1
    result = results[0]
    assert result.status is SendStatus.SEND_OK
    ids = result.msg_id.split(",")
    assert len(ids) == len(sent) == len(set(ids))
    # The Java broker answers the first offset of the batch and the offset message ids of
    # all its messages (SendMessageProcessor / AppendMessageResult.getMsgId).
    offset_ids = result.offset_msg_id.split(",")
    assert len(offset_ids) == len(sent)
    start = result.queue_offset
    async with QueueReader(namesrv=ns) as reader:
        mq = MessageQueue(topic, result.queue.broker_name, result.queue.queue_id)
        await visible(reader, mq, start + len(sent), WAIT)
        assert await reader.max_offset(mq) == start + len(sent)
        got = [m async for m in reader.read_range(mq, start, start + len(sent))]
    assert [m.queue_offset for m in got] == list(range(start, start + len(sent)))
    for i, (g, m) in enumerate(zip(got, sent, strict=True)):
        assert_same(g, m)
        assert g.msg_id == ids[i]
        assert g.offset_msg_id == offset_ids[i]

    assert start == 0

    events = await java_consume(java_classes, "Peer", ns, topic, len(sent), tmp_path)
    in_batch = sorted(events, key=lambda e: e["offset"])
    assert {e["queue"] for e in in_batch} == {result.queue.queue_id}
    assert [int(e["idx"]) for e in in_batch] == list(range(len(sent)))
    assert [e["msg_id"] for e in in_batch] == ids
    for e, m in zip(in_batch, sent, strict=True):
        assert e["body"] == m.body.decode()
        assert e["tags"] == m.tags
        assert e["keys"] == " ".join(m.keys)


def _hex(text: str) -> str:
    return text.encode("utf-8").hex()


async def test_sharding_key_maps_to_the_queue_java_picks(
    java_cluster: JavaCluster, probe_classes: Path, tmp_path: Path
) -> None:
    """``sharding_key``: the same key always lands in the same queue, and that queue is the
    one Java's ``SelectMessageQueueByHash`` picks (``abs(key.hashCode() % queues)``, the hash
    over UTF-16 units, so keys outside the BMP and CJK keys are included)."""
    ns = java_cluster.namesrv
    topic = unique_name("Sharding")
    keys = ["order-1", "order-2", "customer-77", "日本", "k😀", "ü✓", "", "Aa", "BB"]
    sent: list[tuple[str, Message, SendResult]] = []
    async with Producer(namesrv=ns, group=unique_name("pg")) as producer:
        await producer.send(Message(topic, b"create the topic"))
        for rnd in range(3):
            for i, key in enumerate(keys):
                m = make_message(topic, rnd * len(keys) + i)
                sent.append((key, m, await producer.send(m, sharding_key=key)))
    queue_of: dict[str, set[int]] = {}
    for key, _, r in sent:
        queue_of.setdefault(key, set()).add(r.queue.queue_id)
    assert all(len(q) == 1 for q in queue_of.values()), queue_of
    # "Aa" and "BB" share a Java hash code (2112), so they must share a queue
    assert queue_of["Aa"] == queue_of["BB"]

    java = await JavaClient.run(
        probe_classes,
        "Probe",
        "select",
        ns,
        topic,
        *map(_hex, keys),
        tmp=tmp_path,
        timeout=JAVA_TIMEOUT,
    )
    picks = {e["key"]: e["queue"] for e in java.of("select")}
    assert len(picks) == len(keys), java.diagnostics()
    assert all(e["queues"] == 4 for e in java.of("select"))
    assert {k: q.pop() for k, q in queue_of.items()} == picks

    for got, (_, m, r) in zip(await read_back(ns, [r for _, _, r in sent]), sent, strict=True):
        assert_same(got, m, r)


async def test_delay_level_is_honoured(java_cluster: JavaCluster) -> None:
    """``delay_level``: the Java broker parks the message in ``SCHEDULE_TOPIC_XXXX`` and puts
    it back into its topic and queue once the level's delay passed (ScheduleMessageService):
    level 2 (3 s in this module's ``messageDelayLevel``) arrives no earlier than 3 s after it
    was sent, level 1 (1 s) before it."""
    ns = java_cluster.namesrv
    topic = unique_name("Delay")
    # both ways of asking: the send argument and the Message field
    slow = make_message(topic, 2)
    fast = make_message(topic, 1, delay_level=1)
    async with Producer(namesrv=ns, group=unique_name("pg")) as producer:
        await producer.send(make_message(topic, 0))  # creates the topic
        async with consuming(ns, topic, unique_name("cg")) as got:
            await wait_for(lambda: len(got) == 1, timeout=WAIT, what="the undelayed message")
            sent_at = time.monotonic()
            slow_result = await producer.send(slow, delay_level=2)
            fast_result = await producer.send(fast)
            arrived: dict[str, float] = {}

            def arrival(idx: str) -> bool:
                if any(m.properties["idx"] == idx for m in got):
                    arrived.setdefault(idx, time.monotonic())
                    return True
                return False

            await wait_for(lambda: arrival("1"), timeout=WAIT, what="the level-1 message")
            await wait_for(lambda: arrival("2"), timeout=WAIT, what="the level-2 message")
            await asyncio.sleep(0.5)  # a duplicate would show up by now
    assert len(got) == 3
    assert arrived["2"] - sent_at >= LEVEL_2_DELAY_MS / 1000
    assert arrived["1"] - sent_at >= LEVEL_1_DELAY_MS / 1000
    assert arrived["1"] < arrived["2"]
    for idx, m, r, delay_ms in (
        ("2", slow, slow_result, LEVEL_2_DELAY_MS),
        ("1", fast, fast_result, LEVEL_1_DELAY_MS),
    ):
        g = next(x for x in got if x.properties["idx"] == idx)
        assert_same(g, m)  # back in its own topic, user properties intact
        assert g.msg_id == r.msg_id
        # the queue the producer chose (REAL_QID); the result's offset is the one in the
        # schedule topic, so the offset is not comparable
        assert g.queue_id == r.queue.queue_id
        assert g.properties[wire_props.REAL_TOPIC] == topic
        # 4.9.8's messageTimeup serialises the properties *before* it clears DELAY and sets
        # WAIT=false on the copy, so the re-stored message still carries both as sent
        assert g.properties[wire_props.DELAY] == idx
        assert g.properties[wire_props.WAIT] == "true"
        # stored again (store time) only after the delay from when it was sent (born time);
        # one machine, one clock
        assert g.store_timestamp - g.born_timestamp >= delay_ms


async def test_compressed_body_arrives_decompressed(
    java_cluster: JavaCluster, java_classes: Path, tmp_path: Path
) -> None:
    """A body at or over ``compress_threshold`` (4 KiB) goes zlib-compressed with sysFlag
    COMPRESSED; the Java broker stores it as is and both aiorocket and the Java client inflate
    it to the exact bytes sent (Java reads compression type 0 as zlib)."""
    ns = java_cluster.namesrv
    topic = unique_name("Compressed")
    threshold = Producer(namesrv=ns).settings.compress_threshold
    # ~20 KB of text each; no newline (Peer prints bodies unescaped on one line) and well
    # under 64 KiB (the longest line JavaClient reads)
    bodies = [
        "".join(f"line {j} of message {i}: ü✓ 日本 😀 | " for j in range(500)) for i in range(3)
    ]
    sent = [
        Message(topic, body, tags="big", keys=[f"big{i}"], properties={**PROPS, "idx": str(i)})
        for i, body in enumerate(bodies)
    ]
    # ... and the edge: one at the threshold (compressed), one just below it (not)
    at = Message(topic, b"a" * threshold, tags="edge", keys=["at"], properties={"idx": "3"})
    below = Message(
        topic, b"b" * (threshold - 1), tags="edge", keys=["below"], properties={"idx": "4"}
    )
    sent += [at, below]
    async with Producer(namesrv=ns, group=unique_name("pg")) as producer:
        results = [await producer.send(m) for m in sent]
    got = await read_back(ns, results)
    for g, m, r in zip(got, sent, results, strict=True):
        assert_same(g, m, r)
    # The stored sysFlag: the broker never compresses, so the bit is our producer's, set
    # exactly from the threshold on.
    assert [bool(g.sys_flag & MessageSysFlag.COMPRESSED) for g in got] == [True] * 4 + [False]
    # ... and what it stored is the deflated body: messages 0 and 1 were written one after the
    # other, so the distance of their commit-log offsets is the size of record 0
    stored = got[1].commit_log_offset - got[0].commit_log_offset
    assert 0 < stored < len(sent[0].body) // 4, (stored, len(sent[0].body))

    events = await java_consume(java_classes, "Peer", ns, topic, len(sent), tmp_path)
    by_idx = {int(e["idx"]): e for e in events if e["idx"]}
    assert sorted(by_idx) == list(range(len(sent)))
    for i, (m, r) in enumerate(zip(sent, results, strict=True)):
        assert_java_saw(by_idx[i], m, r)


async def test_namespace_is_the_wire_prefix_and_shared_by_a_consumer(
    java_cluster: JavaCluster, java_classes: Path, tmp_path: Path
) -> None:
    """``namespace=``: the Java broker sees (and the name server routes) ``NS%topic``; a
    consumer and a reader in the same namespace see plain ``topic``; the Java client reads
    the wire topic, intact; results name the topic without the namespace (as Java's)."""
    ns = java_cluster.namesrv
    space = unique_name("tenant")
    topic = unique_name("Spaced")
    group = unique_name("cg")
    wire = f"{space}%{topic}"
    sent = [make_message(topic, i) for i in range(6)]
    async with Producer(namesrv=ns, group=unique_name("pg"), namespace=space) as producer:
        results = [await producer.send(m) for m in sent]
    assert all(r.queue.topic == topic for r in results)

    for got, m, r in zip(await read_back(ns, results, namespace=space), sent, results, strict=True):
        assert_same(got, m, r)
    async with consuming(ns, topic, group, namespace=space) as got_pushed:
        await wait_for(
            lambda: len(got_pushed) >= len(sent), timeout=WAIT, what="the namespaced messages"
        )
    by_idx = {int(m.properties["idx"]): m for m in got_pushed}
    assert len(got_pushed) == len(sent)
    assert sorted(by_idx) == list(range(len(sent)))
    for i, (m, r) in enumerate(zip(sent, results, strict=True)):
        assert_same(by_idx[i], m, r)

    # The broker's own view: the topic exists only under its wire name, and the consumer's
    # group too (the broker created its retry topic %RETRY%<NS>%<group> on the heartbeat).
    names = set(java_cluster.admin("topicList").split())
    assert wire in names
    assert topic not in names
    assert f"%RETRY%{space}%{group}" in names

    events = await java_consume(java_classes, "Peer", ns, wire, len(sent), tmp_path)
    by_java = {int(e["idx"]): e for e in events}
    assert sorted(by_java) == list(range(len(sent)))
    for i, (m, r) in enumerate(zip(sent, results, strict=True)):
        assert_java_saw(by_java[i], m, r)


def fancy(topic: str, body: str, i: int) -> Message:
    """Message ``i`` with the non-ASCII tag, keys and properties (and ``idx``, ``i``)."""
    return Message(
        topic, body, tags=FANCY_TAG, keys=FANCY_KEYS, properties={**FANCY_PROPS, "idx": str(i)}
    )


async def test_non_ascii_properties_survive_both_ways(
    java_cluster: JavaCluster, java_classes: Path, probe_classes: Path, tmp_path: Path
) -> None:
    """Non-ASCII property names and values, tags and keys (UTF-8 on the wire, lengths in
    bytes): what aiorocket sends, Java reads back exactly (every property), and what Java
    sends, aiorocket reads back exactly (reader and push consumer)."""
    ns = java_cluster.namesrv
    to_java = unique_name("UnicodeToJava")
    sent = [fancy(to_java, f"py-{i}-{FANCY_PROPS['日本']}", i) for i in range(4)]
    async with Producer(namesrv=ns, group=unique_name("pg")) as producer:
        results = [await producer.send(m) for m in sent]
        # a batch takes another encoding path (one body of records, properties inside)
        batched = [
            Message(to_java, f"py-b{i}", tags=FANCY_TAG, keys=FANCY_KEYS, properties=m.properties)
            for i, m in enumerate(sent)
        ]
        (batch_result,) = await producer.send_batch(batched)
    for got, m, r in zip(await read_back(ns, results), sent, results, strict=True):
        assert_same(got, m, r)
    start = batch_result.queue_offset
    async with QueueReader(namesrv=ns) as reader:
        await visible(reader, batch_result.queue, start + len(batched), WAIT)
        in_batch = [
            m async for m in reader.read_range(batch_result.queue, start, start + len(batched))
        ]
    for got, m, msg_id in zip(in_batch, batched, batch_result.msg_id.split(","), strict=True):
        assert_same(got, m)
        assert got.msg_id == msg_id

    events = await java_consume(java_classes, "Peer", ns, to_java, 2 * len(sent), tmp_path)
    seen = {e["msg_id"]: e for e in events}
    ids = [r.msg_id for r in results] + batch_result.msg_id.split(",")
    for msg_id, m in zip(ids, sent + batched, strict=True):
        e = seen[msg_id]
        assert e["topic"] == to_java
        assert e["body"] == m.body.decode()
        assert e["tags"] == FANCY_TAG
        assert e["keys"] == " ".join(FANCY_KEYS)
        assert user_props(e["props"]) == dict(m.properties)

    # Java -> aiorocket
    from_java = unique_name("UnicodeFromJava")
    producer_java = await JavaClient.run(
        probe_classes, "Probe", "produce", ns, from_java, "4", tmp=tmp_path, timeout=JAVA_TIMEOUT
    )
    java_sent = producer_java.of("sent")
    assert [e["idx"] for e in java_sent] == [0, 1, 2, 3], producer_java.diagnostics()
    first_name = next(iter(FANCY_PROPS))
    expected = [fancy(from_java, f"java-{i}-{first_name}", i) for i in range(4)]
    async with QueueReader(namesrv=ns) as reader:
        for e, m in zip(java_sent, expected, strict=True):
            mq = MessageQueue(from_java, e["broker"], e["queue"])
            await visible(reader, mq, e["offset"] + 1, WAIT)
            (got,) = (await reader.read(mq, e["offset"], 1)).messages
            assert_same(got, m)
            assert got.msg_id == e["msg_id"]
            assert got.queue_offset == e["offset"]
    async with consuming(ns, from_java, unique_name("cg")) as pushed:
        await wait_for(lambda: len(pushed) >= len(expected), timeout=WAIT, what="Java's messages")
    by_idx = {int(m.properties["idx"]): m for m in pushed}
    for i, m in enumerate(expected):
        assert_same(by_idx[i], m)
