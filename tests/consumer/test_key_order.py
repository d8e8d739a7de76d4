"""Per-key lanes of keyed orderly consumption without a broker: :class:`KeyLanes`
against a reference model, the key functions, and the producer's ``__SHARDINGKEY``."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aiorocket as rmq
from aiorocket._consumer.key_order import KeyLanes, key_function, safe_key
from aiorocket._producer.producer import Producer
from aiorocket._protocol.properties import SHARDING_KEY
from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.errors import ConfigurationError
from aiorocket.models import Message

# the broker's defaults, not those of tests/consumer (8 queues, fast retries)
pytestmark = pytest.mark.broker()


def msg(offset: int, key: str | None) -> rmq.ReceivedMessage:
    props = {SHARDING_KEY: key} if key else {}
    return rmq.ReceivedMessage.create(topic="T", body=b"x", queue_offset=offset, properties=props)


def shard_key(m: rmq.ReceivedMessage) -> str | None:
    fn = key_function("sharding_key")
    assert fn is not None
    return fn(m)


SHARD = shard_key


def offsets(taken: tuple[str | None, list[rmq.ReceivedMessage]] | None) -> tuple[object, ...]:
    assert taken is not None
    return taken[0], [m.queue_offset for m in taken[1]]


def test_take_serves_the_smallest_head_and_keeps_a_busy_key_back() -> None:
    lanes = KeyLanes()
    assert lanes.add([msg(0, "a"), msg(1, "b"), msg(2, "a"), msg(3, None), msg(4, "")], SHARD) == 5
    assert lanes.add([msg(4, "a"), msg(5, "c")], SHARD) == 1  # 4 again: a duplicate pull
    assert lanes.pending == 6
    assert offsets(lanes.take(2)) == ("a", [0, 2])
    assert offsets(lanes.take(2)) == ("b", [1])
    assert offsets(lanes.take(1)) == (None, [3])  # no key ("" neither): one lane, in order
    assert offsets(lanes.take(1)) == ("c", [5])  # the keyless lane is busy: 4 waits
    assert lanes.take(1) is None
    assert not lanes.ready
    assert lanes.busy == 4
    lanes.put_back(None, [msg(3, None)])  # the keyless call failed: 3 comes first again
    lanes.add([msg(6, "a"), msg(7, "d")], SHARD)
    assert offsets(lanes.take(5)) == ("d", [7])  # a is still busy
    lanes.release("a")
    lanes.release(None)
    assert offsets(lanes.take(5)) == (None, [3, 4])
    assert offsets(lanes.take(5)) == ("a", [6])
    assert lanes.pending == 0


def test_a_busy_key_hands_nothing_out_until_released() -> None:
    lanes = KeyLanes()
    lanes.add([msg(0, "a"), msg(1, "b"), msg(2, "a")], SHARD)
    assert lanes.take(1) is not None  # a: 0
    assert lanes.is_busy("a")
    taken = lanes.take(5)
    assert taken is not None
    assert taken[0] == "b"
    assert lanes.take(5) is None  # a's 2 waits for a
    lanes.put_back("a", [msg(0, "a")])  # a failed on 0
    assert lanes.take(5) is None  # suspended: still busy
    lanes.release("a")
    taken = lanes.take(5)
    assert taken is not None
    assert [m.queue_offset for m in taken[1]] == [0, 2]
    lanes.clear()
    assert (lanes.pending, lanes.busy, lanes.ready) == (0, 0, False)


@st.composite
def scripts(draw: st.DrawFn) -> list[tuple[str, int]]:
    return draw(
        st.lists(
            st.tuples(
                st.sampled_from(["add", "take", "done", "fail", "resume"]),
                st.integers(min_value=0, max_value=5),
            ),
            max_size=80,
        )
    )


@settings(max_examples=300, deadline=None)
@given(scripts(), st.integers(min_value=1, max_value=3))
def test_lanes_against_a_model(script: list[tuple[str, int]], batch: int) -> None:
    """Whatever the interleaving: per key, messages are handed out in offset order and only
    while the key is not busy, a failed batch comes again first, and take() serves the ready
    key with the smallest first offset."""
    keys = ["a", "b", "c", None]
    lanes = KeyLanes()
    model: dict[str | None, list[int]] = {k: [] for k in keys}
    busy: dict[str | None, list[int]] = {}  # key -> offsets handed out (running)
    suspended: set[str | None] = set()
    next_offset = 0
    done: dict[str | None, list[int]] = {k: [] for k in keys}
    for op, arg in script:
        if op == "add":
            added = []
            for i in range(arg):
                key = keys[(next_offset * 7 + i) % len(keys)]
                added.append(msg(next_offset, key))
                model[key].append(next_offset)
                next_offset += 1
            lanes.add(added, SHARD)
        elif op == "take":
            ready = [k for k in keys if model[k] and k not in busy and k not in suspended]
            taken = lanes.take(batch)
            if not ready:
                assert taken is None
                continue
            expected = min(ready, key=lambda k: model[k][0])
            assert taken is not None
            key, got = taken
            assert key == expected
            want, model[key] = model[key][:batch], model[key][batch:]
            assert [m.queue_offset for m in got] == want
            busy[key] = want
        elif op in ("done", "fail") and busy:
            key = sorted(busy, key=str)[arg % len(busy)]
            offsets = busy.pop(key)
            if op == "done":
                done[key].extend(offsets)
                lanes.release(key)
            else:
                lanes.put_back(key, [msg(o, key) for o in offsets])
                model[key] = offsets + model[key]
                suspended.add(key)
        elif op == "resume" and suspended:
            key = sorted(suspended, key=str)[arg % len(suspended)]
            suspended.discard(key)
            lanes.release(key)
        assert lanes.pending == sum(map(len, model.values()))
        assert lanes.busy == len(busy) + len(suspended)
    for seq in done.values():
        assert seq == sorted(seq)  # per key: done in offset order, never out of turn


def test_key_functions() -> None:
    assert key_function("queue") is None
    assert SHARD(msg(0, "k")) == "k"
    assert SHARD(msg(0, None)) is None

    def by_body(m: rmq.ReceivedMessage) -> str | None:
        return m.body.decode()

    assert key_function(by_body) is by_body
    with pytest.raises(TypeError):
        key_function("tenant")


def test_a_failing_key_function_is_logged_and_the_message_keyless(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def boom(m: rmq.ReceivedMessage) -> str | None:
        raise KeyError("tenant")

    def number(m: rmq.ReceivedMessage) -> str | None:
        return 7  # type: ignore[return-value]

    with caplog.at_level(logging.ERROR, logger="aiorocket.consumer"):
        assert safe_key(boom, msg(0, "k")) is None
        assert safe_key(number, msg(0, "k")) is None
        assert safe_key(lambda m: "", msg(0, "k")) is None
        assert safe_key(lambda m: "x", msg(0, "k")) == "x"
    assert "key function failed" in caplog.text
    assert "returned 7" in caplog.text


async def test_the_producer_records_the_sharding_key(broker: EmbeddedBroker) -> None:
    """A send (single, oneway or batch) with ``sharding_key`` carries it as ``__SHARDINGKEY``
    (RocketMQ 5.x's message group); sends without one, or with an empty one, do not."""
    async with Producer(namesrv=broker.address, group="pk") as producer:
        r1 = await producer.send(Message("Shard", b"1"), sharding_key="order-1")
        await producer.send_oneway(Message("Shard", b"2"), sharding_key="order-2")
        await producer.send_batch(
            [Message("Shard", b"3"), Message("Shard", b"4")], sharding_key="o3"
        )
        await producer.send(Message("Shard", b"5"))
        await producer.send(Message("Shard", b"6", properties={"x": "y"}), sharding_key="")
        await producer.send(
            Message.with_properties("Shard", b"7", {SHARDING_KEY: "mine"}), queue=r1.queue
        )
        with pytest.raises(ConfigurationError, match="sharding_key"):
            await producer.send(Message("Shard", b"bad"), sharding_key="a\x01b")
        with pytest.raises(ConfigurationError, match="sharding_key"):
            await producer.send_batch([Message("Shard", b"bad")], sharding_key="a\x02")
    got: dict[bytes, str | None] = {}
    async with rmq.QueueReader(namesrv=broker.address) as reader:
        for mq in await reader.queues("Shard"):
            async for m in reader.read_range(mq, 0, await reader.max_offset(mq)):
                got[m.body] = m.properties.get(SHARDING_KEY)
    assert got == {
        b"1": "order-1",
        b"2": "order-2",
        b"3": "o3",
        b"4": "o3",
        b"5": None,
        b"6": None,
        b"7": "mine",  # set by the application itself: kept
    }
