"""The compiled column builder against the reference path (records → messages → columns):
equal tables, equal errors."""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pyspark.sql.datasource")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from aiorocket import Message, Producer  # noqa: E402
from aiorocket._protocol.codes import MessageSysFlag  # noqa: E402
from aiorocket._protocol.frame import NEED_DATA, FrameDecoder  # noqa: E402
from aiorocket._protocol.message import (  # noqa: E402
    MAGIC_V1,
    MAGIC_V2,
    MessageRecord,
    compress_body,
    encode_message,
)
from aiorocket._reader import InlineReader, RawChunk  # noqa: E402
from aiorocket.errors import ConnectionClosedError  # noqa: E402
from aiorocket.integrations.spark import columns  # noqa: E402
from aiorocket.integrations.spark.rows import record_batch as _record_batch  # noqa: E402
from aiorocket.integrations.spark.source import (  # noqa: E402
    ARROW_SCHEMA,
    SCHEMA,
    QueueRange,
    RocketMQDataSource,
)
from tests.spark._support import BrokerThread, produce  # noqa: E402

DATA = Path(__file__).parent.parent / "data"
needs_ext = pytest.mark.skipif(
    not columns.AVAILABLE, reason="the compiled column builder is not built"
)
PART = QueueRange("T", "broker-a", 3, 0, 1 << 40)


def _reference(chunks: list[RawChunk]) -> Any:
    msgs = [m for c in chunks for m in c.messages(PART.broker)]
    return pa.Table.from_batches([_record_batch(msgs, PART)], schema=ARROW_SCHEMA)


def _compiled(chunks: list[RawChunk]) -> Any:
    batches = list(columns.arrow_batches(chunks, PART.topic, PART.broker, 3, ARROW_SCHEMA))
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA)


def _outcome(fn: Any, chunks: list[RawChunk]) -> Any:
    try:
        table = fn(chunks)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    table.validate(full=True)
    return table.combine_chunks()


def _same(chunks: list[RawChunk]) -> Any:
    """Both outcomes (a table, or an error's type and text) must be equal; the rows."""
    ref = _outcome(_reference, chunks)
    got = _outcome(_compiled, chunks)
    if isinstance(ref, str) or isinstance(got, str):
        assert got == ref
        return ref
    assert got.schema == ref.schema
    diff = [name for name in ref.column_names if not got[name].equals(ref[name])]
    assert not diff, (diff, got.select(diff).to_pydict(), ref.select(diff).to_pydict())
    return _rows(ref)


def _rows(table: Any) -> list[dict[str, Any]]:
    try:
        return list(table.to_pylist())
    except OverflowError:  # timestamps beyond datetime (mutated records)
        return list(table.drop_columns(["born_timestamp", "store_timestamp"]).to_pylist())


def _record(i: int, props: dict[str, str], **kw: Any) -> MessageRecord:
    fields: dict[str, Any] = {
        "topic": "T",
        "body": f"body-{i}".encode(),
        "queue_id": 3,
        "flag": 0,
        "queue_offset": 100 + i,
        "commit_log_offset": 5000 + 97 * i,
        "sys_flag": 0,
        "born_timestamp": 1_700_000_000_000 + i,
        "born_host": "10.0.0.1",
        "born_port": 4321,
        "store_timestamp": 1_700_000_000_500 + i,
        "store_host": "192.168.7.9",
        "store_port": 10911,
        "reconsume_times": i % 3,
        "prepared_transaction_offset": 0,
        "properties": props,
    }
    fields.update(kw)
    return MessageRecord(**fields)


def _raw_props(rec: MessageRecord, raw: bytes) -> bytes:
    """``rec`` encoded with ``raw`` as its properties text (duplicates, empty items…)."""
    rec.properties = {}
    head = encode_message(rec)[:-2]
    out = bytearray(head + len(raw).to_bytes(2, "big") + raw)
    out[:4] = len(out).to_bytes(4, "big")
    return bytes(out)


@needs_ext
def test_unusual_records_give_equal_tables() -> None:
    """Compressed bodies, IPv6 hosts, v2 magic, records without UNIQ_KEY (offset ids),
    unusual property text and KEYS split on Unicode blanks: the same rows both ways."""
    recs = [
        _record(0, {"UNIQ_KEY": "ID0", "TAGS": "a", "KEYS": "k1 k2", "p": "v"}),
        _record(1, {"TAGS": "b", "KEYS": "  lead  trail  "}),  # no UNIQ_KEY: offset id
        _record(
            2,
            {"KEYS": "x\u00a0y\u2003z\tw", "é": "ü\U0001f600", "sp ace": "\x1c\x1f"},
            sys_flag=int(MessageSysFlag.COMPRESSED),
            body=compress_body(b"z" * 3000),
        ),
        _record(3, {}, sys_flag=0x30, born_host="::1", store_host="fe80::1:2"),
        _record(4, {"KEYS": "\x1ca\x1db\x1e", "TAGS": "日本"}, magic=MAGIC_V2),
        _record(5, {"KEYS": "solo"}, store_port=-1, commit_log_offset=1 << 40),
        _record(6, {"UNIQ_KEY": "U6"}, body=b""),
    ]
    body = b"".join(encode_message(r) for r in recs)
    rows = _same([RawChunk([body], 1 << 40, None)])
    assert len(rows) == len(recs)
    assert rows[2]["body"] == b"z" * 3000
    assert rows[2]["keys"] == ["x", "y", "z", "w"]
    assert rows[1]["keys"] == ["lead", "trail"]
    assert rows[1]["msg_id"] == "C0A80709" + "00002A9F" + f"{5000 + 97:016X}"
    assert rows[3]["tags"] is None
    assert rows[3]["keys"] == []


@needs_ext
def test_duplicate_and_empty_properties_as_a_dict_keeps_them() -> None:
    """A repeated key keeps its first place and takes the last value; empty keys or values
    and items without a separator are skipped (string2messageProperties)."""
    raw = "TAGS\x01t1\x02a\x01x\x02\x01novalue\x02nokey\x01\x02junk\x02a\x01y\x02TAGS\x01t2"
    body = _raw_props(_record(0, {}), raw.encode())
    rows = _same([RawChunk([body], 1 << 40, None)])
    assert rows[0]["properties"] == [("TAGS", "t2"), ("a", "y")]
    assert rows[0]["tags"] == "t2"


@needs_ext
def test_tag_filter_and_chunk_end_drop_rows() -> None:
    """Records at or past the chunk end and records whose tag is not wanted are not rows."""
    recs = [_record(i, {"TAGS": "ab"[i % 2]} if i != 4 else {}) for i in range(8)]
    body = b"".join(encode_message(r) for r in recs)
    rows = _same([RawChunk([body], 106, frozenset({"a"}))])
    assert [r["queue_offset"] for r in rows] == [100, 102]
    assert len(_same([RawChunk([body, body], 103, None)])) == 6


def _golden_pull_bodies() -> list[bytes]:
    frames = [
        bytes.fromhex(json.loads(line)["frame_hex"])
        for path in sorted((DATA / "captures").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    frames += [p.read_bytes() for p in sorted((DATA / "vectors").glob("*.bin"))]
    dec = FrameDecoder()
    dec.feed(b"".join(frames))
    bodies = []
    while (cmd := dec.next_command()) is not NEED_DATA:
        if cmd.code == 0 and cmd.body:
            bodies.append(cmd.body)
    return bodies


@needs_ext
def test_golden_captures_give_equal_tables() -> None:
    """The pull bodies of the golden captures and docs/protocol.md vectors."""
    bodies = _golden_pull_bodies()
    found = 0
    for body in bodies:
        out = _same([RawChunk([body], 1 << 62, None)])
        found += isinstance(out, list) and bool(out)
    assert found  # at least one body holds records


@needs_ext
def test_malformed_bodies_fail_the_same_way() -> None:
    """Truncated and byte-flipped bodies: the same error (or the same table) both ways, and
    a failed body leaves no rows behind in the builder."""
    recs = [_record(i, {"UNIQ_KEY": f"U{i}", "TAGS": "t", "KEYS": "a b"}) for i in range(4)]
    recs.append(
        _record(4, {"k": "v"}, sys_flag=int(MessageSysFlag.COMPRESSED), body=compress_body(b"q"))
    )
    body = b"".join(encode_message(r) for r in recs)
    rng = random.Random(7)
    errors = 0
    for _ in range(400):
        data = bytearray(body)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        else:
            for _ in range(rng.randint(1, 3)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        out = _same([RawChunk([bytes(data)], 1 << 62, None)])
        errors += isinstance(out, str)
    assert errors > 100
    builder = columns.new_builder()
    assert builder.add(body, 1 << 62, None) == 5
    with pytest.raises(Exception, match="malformed message record"):
        builder.add(body[:-1], 1 << 62, None)
    assert builder.rows == 5
    # Rows after the failed body start clean (no tag bit left from the rows dropped).
    untagged = encode_message(_record(9, {"p": "q"}))
    assert builder.add(untagged, 1 << 62, None) == 1
    table = columns.record_batch(builder.take(), "T", "broker-a", 3, ARROW_SCHEMA)
    assert table.num_rows == 6
    assert table["tags"][5].as_py() is None
    ref = _reference([RawChunk([body, untagged], 1 << 62, None)])
    assert table.to_pylist() == ref.to_pylist()


_text = st.text(st.characters(blacklist_characters="\x01\x02", codec="utf-8"), max_size=12)


@needs_ext
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.dictionaries(_text.filter(bool), _text.filter(bool), max_size=5),
            st.binary(max_size=64),
            st.booleans(),
            st.sampled_from([MAGIC_V1, MAGIC_V2]),
        ),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 7),
)
def test_any_records_give_equal_tables(items: list[Any], cut: int) -> None:
    """Random properties (any Unicode), bodies, compression and magic."""
    recs = [
        _record(
            i,
            props,
            body=compress_body(body) if zipped else body,
            sys_flag=int(MessageSysFlag.COMPRESSED) if zipped else 0,
            magic=magic,
        )
        for i, (props, body, zipped, magic) in enumerate(items)
    ]
    body = b"".join(encode_message(r) for r in recs)
    _same([RawChunk([body], 100 + cut, None)])


# -- executors against a broker -------------------------------------------------------------


def _read_table(reader: Any, parts: list[QueueRange], compiled: bool) -> Any:
    columns.use(compiled)
    try:
        batches = [b for part in parts for b in reader.read(part)]
    finally:
        columns.use(columns.AVAILABLE)
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA).combine_chunks()


@needs_ext
def test_executor_reads_equal_tables_both_ways(broker_thread: BrokerThread) -> None:
    """Whole partitions read from a broker (batches and single sends, zlib-compressed large
    bodies, a tag filter, partitions cut inside pulls): the same table both ways."""
    addr = broker_thread.address
    topic = "SparkColumns"
    produce(addr, topic, 1_500)

    async def big() -> None:
        async with Producer(namesrv=addr, group="spark-columns-big") as p:
            for i in range(20):
                body = bytes(range(256)) * (20 + i)  # over the 4 KiB compression threshold
                await p.send(Message(topic, body, tags="a", keys=[f"big{i}", "x"]))

    asyncio.run(big())
    source = RocketMQDataSource({"namesrv": addr, "topic": topic, "maxOffsetsPerPartition": "37"})
    reader = source.reader(SCHEMA)
    parts = reader.partitions()
    ref = _read_table(reader, parts, compiled=False)
    got = _read_table(reader, parts, compiled=True)
    assert got.num_rows == 1_520
    assert got.equals(ref)
    assert sorted(got["queue_offset"].to_pylist()) == sorted(
        o for p in parts for o in range(p.start, p.end)
    )
    assert any(len(b) > 4096 for b in got["body"].to_pylist())

    tagged = RocketMQDataSource(
        {"namesrv": addr, "topic": topic, "tags": "a", "maxOffsetsPerPartition": "37"}
    ).reader(SCHEMA)
    ref = _read_table(tagged, parts, compiled=False)
    got = _read_table(tagged, parts, compiled=True)
    assert got.equals(ref)
    assert set(got["tags"].to_pylist()) == {"a"}
    assert 760 <= got.num_rows < 1_520


@pytest.mark.parametrize("compiled", [True, False])
def test_executor_read_resumes_after_transport_errors(
    broker_thread: BrokerThread, monkeypatch: pytest.MonkeyPatch, compiled: bool
) -> None:
    """A connection lost in the middle of a range: the read starts again after the last
    chunk handed over, and every offset of the range is read exactly once."""
    if compiled and not columns.AVAILABLE:
        pytest.skip("the compiled column builder is not built")
    addr = broker_thread.address
    topic = "SparkResume"
    produce(addr, topic, 800)
    real = InlineReader.read_range_raw
    failures = iter([3, 0, 5])  # chunks handed over before each failure

    def flaky(self: InlineReader, *args: Any, **kwargs: Any) -> Any:
        n = next(failures, None)
        for i, chunk in enumerate(real(self, *args, **kwargs)):
            if i == n:
                raise ConnectionClosedError("connection lost (test)")
            yield chunk

    monkeypatch.setattr(InlineReader, "read_range_raw", flaky)
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    reader = RocketMQDataSource({"namesrv": addr, "topic": topic}).reader(SCHEMA)
    part = next(p for p in reader.partitions() if p.end - p.start > 150)
    columns.use(compiled)
    try:
        table = pa.Table.from_batches(list(reader.read(part)), schema=ARROW_SCHEMA)
    finally:
        columns.use(columns.AVAILABLE)
    assert table["queue_offset"].to_pylist() == list(range(part.start, part.end))
