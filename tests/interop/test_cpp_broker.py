"""The embedded broker and name server, driven by the Apache C++ client.

The C++ producer sends in its three modes (sync, orderly by key, oneway); its PushConsumer,
concurrent and orderly, must receive every message intact; a second consumer in the same group
must take half of the queues without losing anything; messages it refuses come back through the
group's retry topic. Each C++ client runs in its own process (``cpp_peer.py``); the broker runs
in the test's event loop.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections import defaultdict
from pathlib import Path

import pytest

from aiorocket.embedded import EmbeddedBroker, parse_delay_levels
from tests.interop.harness import (
    Event,
    PeerProcess,
    cli_broker,
    cpp_consume_args,
    create_topics,
    delivery_mismatches,
    require_cpp_client,
    run_peer,
    unique_name,
)

pytestmark = pytest.mark.interop

#: messages per producer run (at least 1,000, enough to cross many pulls and queues)
COUNT = 1000
#: order keys of a run: message i belongs to key i % KEYS
KEYS = 20
#: queues of auto-created topics (the C++ producer asks for min(4, TBW102 queues))
QUEUES = 4


@pytest.fixture(autouse=True)
def _cpp_client() -> None:
    require_cpp_client()


def produce_args(namesrv: str, topic: str, mode: str, run_id: str, *extra: str) -> list[str]:
    """The peer command line of a producer run of ``COUNT`` messages over ``KEYS`` keys."""
    return [
        "produce",
        "--namesrv",
        namesrv,
        "--topic",
        topic,
        "--count",
        str(COUNT),
        "--mode",
        mode,
        "--run-id",
        run_id,
        "--key-count",
        str(KEYS),
        *extra,
    ]


def sent_by_id(producer: PeerProcess) -> dict[str, Event]:
    """The producer's ``sent`` events by message id, after checking they are complete."""
    sent = {e["id"]: e for e in producer.of("sent")}
    summary = producer.summary
    assert summary is not None, producer.diagnostics()
    assert summary["failed"] == 0, producer.diagnostics()
    assert len(sent) == len(producer.of("sent")), "a message id was sent twice"
    return sent


def check_deliveries(sent: dict[str, Event], deliveries: list[Event]) -> None:
    """Every sent message was delivered, only those, and each delivery is intact."""
    got_ids = {d["id"] for d in deliveries}
    missing = sorted(set(sent) - got_ids)
    assert not missing, f"{len(missing)} of {len(sent)} never delivered, e.g. {missing[:5]}"
    unexpected = sorted(got_ids - set(sent))
    assert not unexpected, f"delivered but never sent: {unexpected[:5]}"
    bad = {}
    for d in deliveries:
        problems = delivery_mismatches(sent[d["id"]], d)
        if problems:
            bad[d["id"]] = problems
    assert not bad, f"{len(bad)} deliveries differ from what was sent, e.g. {list(bad.items())[:3]}"


def check_send_results(sent: dict[str, Event], mode: str) -> None:
    """What the C++ ``SendResult`` reports is consistent: ok status, id, distinct offsets."""
    if mode == "oneway":
        return
    assert all(e["status"] == 0 for e in sent.values()), "a send was not SEND_OK"
    assert all(e["msg_id"] for e in sent.values()), "a send result has no message id"
    assert len({e["msg_id"] for e in sent.values()}) == len(sent), "message ids repeat"
    assert all(e["offset"] >= 0 for e in sent.values())
    if mode == "orderly":
        by_key: dict[str, set[int]] = defaultdict(set)
        for e in sent.values():
            by_key[e["key"]].add(e["queue"])
        assert all(len(q) == 1 for q in by_key.values()), "one key went to several queues"
        # Sends are sequential, so each queue's offsets grow in send order (dicts keep it).
        per_queue: dict[int, list[int]] = defaultdict(list)
        for e in sent.values():
            per_queue[e["queue"]].append(e["offset"])
        for queue, offsets in per_queue.items():
            assert offsets == sorted(set(offsets)), f"queue {queue}: offsets not increasing"


@pytest.mark.slow
async def test_cpp_producer_modes_to_concurrent_consumer(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Sync, orderly and oneway sends of 1,000 messages each all reach a concurrent consumer
    with body, tags, keys and properties intact; a tag-filtered group gets exactly its tags."""
    addr = broker.address
    modes = ("sync", "orderly", "oneway")
    topics = {mode: unique_name(f"cpp_{mode}") for mode in modes}
    group = unique_name("cpp_concurrent")
    filtered_group = unique_name("cpp_filtered")
    await create_topics(addr, *topics.values())
    async with contextlib.AsyncExitStack() as stack:
        # The consumers start first, so messages are delivered while they are being produced.
        consumer = await stack.enter_async_context(
            run_peer(
                "consumer",
                [
                    "consume",
                    "--namesrv",
                    addr,
                    "--group",
                    group,
                    *(arg for t in topics.values() for arg in ("--topic", t)),
                    "--expect",
                    str(COUNT * len(modes)),
                    "--timeout",
                    "80",
                ],
                home=tmp_path / "consumer",
            )
        )
        # Tag0 and Tag1 are half of the sync topic; the broker must filter by the tag string
        # (the C++ heartbeat carries wrong tag codes, docs/protocol.md §11.1).
        filtered = await stack.enter_async_context(
            run_peer(
                "filtered",
                cpp_consume_args(
                    addr,
                    topics["sync"],
                    filtered_group,
                    *("--expression", "Tag0 || Tag1"),
                    *("--expect", str(COUNT // 2), "--timeout", "80"),
                ),
                home=tmp_path / "filtered",
            )
        )
        producers = {
            mode: await stack.enter_async_context(
                run_peer(
                    f"producer-{mode}",
                    produce_args(addr, topics[mode], mode, f"{mode}-run"),
                    home=tmp_path / f"producer-{mode}",
                )
            )
            for mode in modes
        }
        for producer in producers.values():
            await producer.wait_exit(60)
        sent = {mode: sent_by_id(p) for mode, p in producers.items()}
        for mode in modes:
            assert len(sent[mode]) == COUNT, f"{mode}: {len(sent[mode])} acknowledged"
            check_send_results(sent[mode], mode)

        await consumer.wait_exit(60)
        await filtered.wait_exit(60)

    all_sent = {mid: e for by_mode in sent.values() for mid, e in by_mode.items()}
    check_deliveries(all_sent, consumer.of("msg"))
    for d in consumer.of("msg"):
        if sent["orderly"].get(d["id"]) is not None:
            assert d["queue"] == sent["orderly"][d["id"]]["queue"], "orderly message moved queue"
        if d["id"] in sent["sync"]:
            # The id the C++ producer was given back is the one its consumer sees.
            assert d["msg_id"] == sent["sync"][d["id"]]["msg_id"]
            assert d["offset"] == sent["sync"][d["id"]]["offset"]

    wanted = {mid: e for mid, e in sent["sync"].items() if e["tags"] in ("Tag0", "Tag1")}
    check_deliveries(wanted, filtered.of("msg"))


async def test_cpp_orderly_consumer_keeps_per_key_order(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Messages sent orderly by key reach an orderly C++ consumer in per-key send order."""
    addr = broker.address
    topic = unique_name("cpp_orderly")
    group = unique_name("cpp_orderly_group")
    await create_topics(addr, topic)
    async with contextlib.AsyncExitStack() as stack:
        consumer = await stack.enter_async_context(
            run_peer(
                "orderly-consumer",
                cpp_consume_args(
                    addr, topic, group, "--orderly", "--expect", str(COUNT), "--timeout", "80"
                ),
                home=tmp_path / "consumer",
            )
        )
        producer = await stack.enter_async_context(
            run_peer(
                "orderly-producer",
                produce_args(addr, topic, "orderly", "ord"),
                home=tmp_path / "producer",
            )
        )
        await producer.wait_exit(60)
        sent = sent_by_id(producer)
        assert len(sent) == COUNT
        check_send_results(sent, "orderly")
        await consumer.wait_exit(60)

    deliveries = consumer.of("msg")
    check_deliveries(sent, deliveries)
    firsts: dict[str, list[int]] = defaultdict(list)
    for d in deliveries:
        if d["first"]:
            firsts[sent[d["id"]]["key"]].append(sent[d["id"]]["kseq"])
    for key, seqs in firsts.items():
        out_of_order = [(a, b) for a, b in itertools.pairwise(seqs) if b <= a]
        assert not out_of_order, f"key {key}: first deliveries out of order at {out_of_order[:5]}"
    assert sorted(len(s) for s in firsts.values()) == [COUNT // KEYS] * KEYS


def _queues(deliveries: list[Event]) -> set[int]:
    return {d["queue"] for d in deliveries}


def _span(deliveries: list[Event]) -> float:
    times = [d["delivered_at"] for d in deliveries]
    return max(times) - min(times) if times else 0.0


@pytest.mark.slow
async def test_second_cpp_consumer_takes_half_the_queues(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """A second C++ consumer joining the group gets half of the queues, and gives them back
    when it is killed; nothing is lost at either change."""
    addr = broker.address
    topic = unique_name("cpp_rebalance")
    group = unique_name("cpp_rebalance_group")
    consume = cpp_consume_args(addr, topic, group, "--timeout", "85")
    produce = ["produce", "--namesrv", addr, "--topic", topic, "--key-count", str(KEYS)]
    await create_topics(addr, topic)

    async with contextlib.AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            run_peer("consumer-1", consume, home=tmp_path / "consumer-1")
        )
        # Phase 1: one member consumes every queue.
        warmup = await stack.enter_async_context(
            run_peer(
                "producer-1",
                [*produce, "--count", "200", "--run-id", "one"],
                home=tmp_path / "producer-1",
            )
        )
        await warmup.wait_exit(60)
        sent = sent_by_id(warmup)
        await first.wait_until(
            lambda p: set(sent) <= {e["id"] for e in p.of("msg")}, 40, "phase 1 delivered"
        )
        assert _queues(first.of("msg")) == set(range(QUEUES))

        # Phase 2: a second member joins while a stream of messages keeps arriving.
        second = await stack.enter_async_context(
            run_peer("consumer-2", consume, home=tmp_path / "consumer-2")
        )
        await second.wait_event("started", 30)
        stream = await stack.enter_async_context(
            run_peer(
                "producer-2",
                [*produce, "--count", "20000", "--run-id", "two", "--rate", "300"],
                home=tmp_path / "producer-2",
            )
        )
        # Let the stream run until the newcomer has been consuming its share for a while.
        await second.wait_until(lambda p: _span(p.of("msg")) >= 3.0, 45, "3 s of deliveries")
        await stream.stop()
        assert stream.returncode == 0, stream.diagnostics()
        sent |= sent_by_id(stream)

        def delivered() -> set[str]:
            return {e["id"] for e in [*first.of("msg"), *second.of("msg")]}

        await first.wait_until(lambda _p: set(sent) <= delivered(), 40, "every id delivered")
        joined_at = min(e["delivered_at"] for e in second.of("msg"))
        second_queues = _queues(second.of("msg"))
        first_later = [e for e in first.of("msg") if e["delivered_at"] > joined_at + 1.5]

        # Phase 3: the newcomer dies without saying goodbye; its closed connection must hand
        # its queues back to the first member, which then receives everything again.
        await second.kill()
        left_at = time.time()
        tail = await stack.enter_async_context(
            run_peer(
                "producer-3",
                [*produce, "--count", "300", "--run-id", "three"],
                home=tmp_path / "producer-3",
            )
        )
        await tail.wait_exit(60)
        sent |= sent_by_id(tail)
        await first.wait_until(lambda _p: set(sent) <= delivered(), 40, "every id delivered")
        await first.stop()

    check_deliveries(sent, [*first.of("msg"), *second.of("msg")])
    assert len(second_queues) == QUEUES // 2, f"the second consumer took {second_queues}"
    # Once the newcomer consumes, the first member keeps only the other half (allowing a
    # moment for its own rebalance to drop the queues it gave away).
    assert first_later, "the first consumer stopped consuming after the second joined"
    assert _queues(first_later) == set(range(QUEUES)) - second_queues
    after_leave = [e for e in first.of("msg") if e["delivered_at"] > left_at]
    assert _queues(after_leave) == set(range(QUEUES))


#: the delay levels of the retry test: level 3 is the first retry's delay (the client asks for
#: level 0); the table shortened
RETRY_LEVELS = parse_delay_levels("100ms 200ms 300ms 400ms 500ms 600ms")


@pytest.mark.broker(delay_levels=RETRY_LEVELS)
async def test_cpp_consumer_refusals_come_back_through_retry_topic(
    broker: EmbeddedBroker, tmp_path: Path
) -> None:
    """Messages the C++ consumer refuses are sent back (CONSUMER_SEND_MSG_BACK), stored in
    the group's retry topic, and redelivered intact after the retry delay with a higher
    reconsumeTimes, until every message has been accepted."""
    count, every = 200, 10
    addr = broker.address
    topic = unique_name("cpp_retry")
    group = unique_name("cpp_retry_group")
    await create_topics(addr, topic)
    async with contextlib.AsyncExitStack() as stack:
        consumer = await stack.enter_async_context(
            run_peer(
                "consumer",
                cpp_consume_args(
                    addr,
                    topic,
                    group,
                    *("--reject-every", str(every), "--expect", str(count)),
                    *("--timeout", "60"),
                ),
                home=tmp_path / "consumer",
            )
        )
        producer = await stack.enter_async_context(
            run_peer(
                "producer",
                [
                    *("produce", "--namesrv", addr, "--topic", topic, "--count", str(count)),
                    *("--run-id", "retry", "--key-count", str(KEYS)),
                ],
                home=tmp_path / "producer",
            )
        )
        await producer.wait_exit(60)
        sent = sent_by_id(producer)
        await consumer.wait_exit(60)

    deliveries = consumer.of("msg")
    check_deliveries(sent, deliveries)
    by_id: dict[str, list[Event]] = defaultdict(list)
    for d in deliveries:
        by_id[d["id"]].append(d)
    # The C API answers for a whole pulled batch: one refusal sends back every message of the
    # batch, including ones already accepted and ones never shown. So other messages may come
    # back too; what the broker must guarantee is checked per message.
    for mid, got in by_id.items():
        assert got[-1]["accepted"], f"{mid}: never accepted"
        times = [d["reconsume_times"] for d in got]
        # Without a rebalance, a message comes back only through the retry topic, each time
        # with reconsumeTimes raised by one. A redelivery the C API sent back without showing
        # it to the callback is not observed, so observed counts rise strictly, maybe by more.
        assert times == sorted(set(times)), f"{mid}: {times}"
        for earlier, later in itertools.pairwise(got):
            # The C++ client restores the original topic from RETRY_TOPIC.
            assert later["properties"].get("RETRY_TOPIC") == topic, f"{mid}: {later}"
            # The k-th retry waits delay level 3 + k - 1 (shortened); allow timer slack.
            delay = RETRY_LEVELS[min(2 + later["reconsume_times"] - 1, len(RETRY_LEVELS) - 1)]
            waited = later["delivered_at"] - earlier["delivered_at"]
            assert waited >= delay - 0.05, f"{mid}: back after {waited:.3f} s, not {delay} s"
    for mid, e in sent.items():
        if e["index"] % every == 0:
            got = by_id[mid]
            assert not got[0]["accepted"], f"{mid}: first delivery not refused"
            assert len(got) >= 2, f"{mid}: refused but never redelivered"


@pytest.mark.slow
async def test_cli_broker_serves_cpp_clients(tmp_path: Path) -> None:
    """``aiorocket broker`` as users start it (default event loop, sync flush) serves the C++
    producer and orderly consumer, and stops cleanly on SIGTERM."""
    topic = unique_name("cpp_cli")
    group = unique_name("cpp_cli_group")
    async with cli_broker(tmp_path / "data", "--flush", "sync") as addr:
        async with run_peer(
            "producer",
            # A broker that cannot serve should fail the run at the first send.
            produce_args(addr, topic, "orderly", "cli", "--max-failures", "1"),
            home=tmp_path / "producer",
        ) as producer:
            await producer.wait_exit(60)
        sent = sent_by_id(producer)
        assert len(sent) == COUNT
        check_send_results(sent, "orderly")
        async with run_peer(
            "consumer",
            cpp_consume_args(
                addr, topic, group, "--orderly", "--expect", str(COUNT), "--timeout", "60"
            ),
            home=tmp_path / "consumer",
        ) as consumer:
            await consumer.wait_exit(60)
    check_deliveries(sent, consumer.of("msg"))
