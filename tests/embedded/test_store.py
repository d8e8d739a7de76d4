"""MessageStore: put/get, the pull status table, limits, recovery, durability and retention."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiorocket._protocol.message import MessageRecord, decode_messages
from aiorocket._protocol.tags import tags_code
from aiorocket.embedded import read_plan
from aiorocket.embedded.store import SCHEDULE_TOPIC, MessageStore, default_tags_code
from aiorocket.embedded.store_results import GetStatus
from aiorocket.errors import (
    ClientClosedError,
    ConfigurationError,
    InvalidNameError,
    LocalProtocolError,
    MessageTooLargeError,
)
from tests.embedded.crash_writer import make_record

T0 = 1_700_000_000_000
HOUR_MS = 3_600_000


class FakeClock:
    """A store clock the test moves by hand (ms)."""

    def __init__(self, now: int = T0, step: int = 0) -> None:
        self.now = now
        self.step = step

    def __call__(self) -> int:
        now = self.now
        self.now += self.step
        return now


StoreFactory = Callable[..., MessageStore]


@pytest.fixture(autouse=True, scope="module", params=["python", "compiled"])
def read_path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Every store test runs on the pure-Python read path and on the compiled helper (skipped
    when it is not built)."""
    compiled = request.param == "compiled"
    before = read_plan.collect
    try:
        read_plan.use_compiled(compiled)
    except RuntimeError as exc:
        pytest.skip(str(exc))
    try:
        yield request.param
    finally:
        read_plan.collect = before


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(step=10)


@pytest.fixture
def make_store(tmp_path: Path, clock: FakeClock) -> StoreFactory:
    def factory(**kwargs: object) -> MessageStore:
        options: dict[str, object] = {"clock": clock}
        options.update(kwargs)
        return MessageStore(tmp_path / "store", **options)  # type: ignore[arg-type]

    return factory


@pytest.fixture
async def store(make_store: StoreFactory) -> AsyncIterator[MessageStore]:
    s = make_store()
    async with s:
        yield s


def put_n(
    store: MessageStore,
    n: int,
    *,
    topic: str = "T",
    queue_id: int = 0,
    size: int = 128,
    tag: str | None = None,
    start: int = 0,
) -> list[int]:
    """Put ``n`` messages with uid properties ``m<start>``..; return their commit-log ends."""
    ends = []
    for i in range(start, start + n):
        props = {"UNIQ_KEY": f"m{i}"}
        if tag is not None:
            props["TAGS"] = tag
        body = (f"body-{i}-".encode() * size)[:size]
        result = store.put(make_record(topic, queue_id, body, props), tags_code=tags_code(tag))
        ends.append(result.commit_log_end)
    return ends


def read_all(store: MessageStore, topic: str = "T", queue_id: int = 0) -> list[MessageRecord]:
    """Every message of a queue from its min offset, decoded strictly."""
    out: list[MessageRecord] = []
    offset = store.min_offset(topic, queue_id)
    while True:
        result = store.get(topic, queue_id, offset, max_msgs=32)
        if result.status is GetStatus.FOUND:
            out.extend(decode_messages(b"".join(result.messages)))
        elif result.status is not GetStatus.MESSAGE_WAS_REMOVING:
            break
        offset = result.next_begin_offset
    return out


def uids(records: list[MessageRecord]) -> list[str]:
    return [r.properties["UNIQ_KEY"] for r in records]


def segments(store_dir: Path) -> list[Path]:
    return sorted((store_dir / "commitlog").iterdir())


# -- put / get -------------------------------------------------------------------------------


async def test_put_get_round_trip(store: MessageStore, clock: FakeClock) -> None:
    results = []
    for i in range(5):
        record = make_record("T", 2, f"hello {i}".encode(), {"TAGS": "a", "KEYS": f"k{i}"})
        results.append(store.put(record, tags_code=tags_code("a")))
        assert record.queue_offset == i
        assert record.commit_log_offset == results[-1].commit_log_offset
        assert record.store_size == results[-1].store_size
    assert [r.queue_offset for r in results] == list(range(5))
    clos = [r.commit_log_offset for r in results]
    assert clos == sorted(set(clos))
    # Entries are back to back: record + 4-byte trailer.
    for a, b in itertools.pairwise(results):
        assert b.commit_log_offset == a.commit_log_offset + a.store_size + 4
        assert a.commit_log_end == b.commit_log_offset

    got = store.get("T", 2, 0, max_msgs=32)
    assert got.status is GetStatus.FOUND
    assert got.next_begin_offset == 5
    assert got.scanned == 5
    assert (got.min_offset, got.max_offset) == (0, 5)
    assert got.queue_offsets == [0, 1, 2, 3, 4]
    assert got.tags_codes == [tags_code("a")] * 5
    assert got.total_bytes == sum(r.store_size for r in results)
    decoded = decode_messages(b"".join(got.messages))
    for i, (rec, res) in enumerate(zip(decoded, results, strict=True)):
        assert rec.body == f"hello {i}".encode()
        assert rec.topic == "T"
        assert rec.queue_id == 2
        assert rec.queue_offset == i
        assert rec.commit_log_offset == res.commit_log_offset
        assert rec.store_timestamp == res.store_timestamp
        assert rec.store_size == res.store_size
        assert rec.properties == {"TAGS": "a", "KEYS": f"k{i}"}
        assert rec.born_host == "10.0.0.7"
        assert rec.store_port == 10911
    assert store.max_offset("T", 2) == 5
    assert store.min_offset("T", 2) == 0
    assert store.queues() == {"T": [2]}


async def test_get_reads_from_the_middle(store: MessageStore) -> None:
    put_n(store, 10)
    got = store.get("T", 0, 7, max_msgs=32)
    assert got.status is GetStatus.FOUND
    assert got.queue_offsets == [7, 8, 9]
    assert got.next_begin_offset == 10
    assert uids(decode_messages(b"".join(got.messages))) == ["m7", "m8", "m9"]


async def test_interleaved_queues_are_read_correctly(store: MessageStore) -> None:
    # Round-robin production: a queue's records are a few entries apart in the log, which
    # the store reads with one pread per run; every record must still be the right one.
    for i in range(200):
        store.put(make_record("T", i % 7, f"{i}".encode(), {"UNIQ_KEY": str(i)}), tags_code=0)
    for q in range(7):
        records = read_all(store, "T", q)
        assert [int(u) for u in uids(records)] == list(range(q, 200, 7))
        assert [r.queue_offset for r in records] == list(range(len(records)))


# -- the pull status table (docs/protocol.md §3.3) --------------------------------------------------


async def test_unknown_queue(store: MessageStore) -> None:
    for offset in (0, 5):
        got = store.get("Nope", 0, offset, max_msgs=32)
        assert got.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        assert got.next_begin_offset == 0
        assert got.messages == []
    assert store.max_offset("Nope", 0) == 0
    assert store.min_offset("Nope", 0) == 0
    assert store.search_offset_by_timestamp("Nope", 0, T0) == 0
    assert store.earliest_store_time("Nope", 0) == -1
    # Invalid names are just unknown queues for readers (nothing touches the disk).
    assert store.get("../etc", 0, 0, max_msgs=1).status is GetStatus.NO_MATCHED_LOGIC_QUEUE


async def test_queue_that_never_had_a_message(make_store: StoreFactory, tmp_path: Path) -> None:
    (tmp_path / "store" / "consumequeue" / "Empty" / "3").mkdir(parents=True)
    async with make_store() as store:
        assert store.queues() == {"Empty": [3]}
        for offset in (0, 7):
            got = store.get("Empty", 3, offset, max_msgs=32)
            assert got.status is GetStatus.NO_MESSAGE_IN_QUEUE
            assert got.next_begin_offset == 0


async def test_offset_overflow(store: MessageStore) -> None:
    put_n(store, 3)
    one = store.get("T", 0, 3, max_msgs=32)
    assert one.status is GetStatus.OFFSET_OVERFLOW_ONE
    assert one.next_begin_offset == 3
    badly = store.get("T", 0, 10, max_msgs=32)
    assert badly.status is GetStatus.OFFSET_OVERFLOW_BADLY
    assert badly.next_begin_offset == 3
    assert (badly.min_offset, badly.max_offset) == (0, 3)


async def test_offset_too_small_after_retention(make_store: StoreFactory, clock: FakeClock) -> None:
    async with make_store(segment_size=4096, cq_entries_per_segment=4) as store:
        put_n(store, 40, size=200)
        clock.now += 100 * HOUR_MS
        put_n(store, 5, size=200, start=40)
        assert store.clean_expired() > 0
        mn = store.min_offset("T", 0)
        assert 0 < mn <= 40
        for offset in (0, mn - 1, -3):
            got = store.get("T", 0, offset, max_msgs=32)
            assert got.status is GetStatus.OFFSET_TOO_SMALL
            assert got.next_begin_offset == mn
        got = store.get("T", 0, mn, max_msgs=32)
        assert got.status is GetStatus.FOUND
        assert got.queue_offsets[0] == mn


async def test_tag_filter_no_match(store: MessageStore) -> None:
    put_n(store, 10, tag="a")
    wanted = tags_code("b")
    got = store.get("T", 0, 2, max_msgs=4, matches=lambda code: code == wanted)
    assert got.status is GetStatus.NO_MATCHED_MESSAGE
    assert got.scanned == 8
    assert got.next_begin_offset == 2 + got.scanned == 10
    assert got.messages == []


async def test_tag_filter_partial_match(store: MessageStore) -> None:
    put_n(store, 3, tag="a")
    put_n(store, 2, tag="b", start=3)
    put_n(store, 3, tag="a", start=5)
    wanted = tags_code("b")
    got = store.get("T", 0, 0, max_msgs=32, matches=lambda code: code == wanted)
    assert got.status is GetStatus.FOUND
    assert got.queue_offsets == [3, 4]
    assert got.scanned == 8
    assert got.next_begin_offset == 8
    assert uids(decode_messages(b"".join(got.messages))) == ["m3", "m4"]
    # Untagged messages have code 0 and never match a tag subscription.
    store.put(make_record("T", 1, b"x"), tags_code=0)
    miss = store.get("T", 1, 0, max_msgs=32, matches=lambda code: code == wanted)
    assert miss.status is GetStatus.NO_MATCHED_MESSAGE


async def test_filter_scan_is_bounded(store: MessageStore) -> None:
    put_n(store, 1000, size=8, tag="a")
    got = store.get("T", 0, 0, max_msgs=32, matches=lambda code: False)
    assert got.status is GetStatus.NO_MATCHED_MESSAGE
    assert got.scanned == 800
    assert got.next_begin_offset == 800


async def test_max_msgs_and_max_bytes(store: MessageStore) -> None:
    put_n(store, 50, size=100)
    got = store.get("T", 0, 0, max_msgs=8)
    assert len(got.messages) == 8
    assert got.next_begin_offset == 8
    size = len(got.messages[0])
    # The first message always fits, even over the byte budget.
    one = store.get("T", 0, 0, max_msgs=32, max_bytes=10)
    assert len(one.messages) == 1
    assert one.next_begin_offset == 1
    two = store.get("T", 0, 5, max_msgs=32, max_bytes=size * 2 + size // 2)
    assert len(two.messages) == 2
    assert two.scanned == 2
    assert two.next_begin_offset == 7
    exact = store.get("T", 0, 5, max_msgs=32, max_bytes=size * 3)
    assert len(exact.messages) == 3
    zero = store.get("T", 0, 5, max_msgs=0)
    assert len(zero.messages) == 1


async def test_get_does_not_cross_an_index_file(make_store: StoreFactory) -> None:
    async with make_store(cq_entries_per_segment=10) as store:
        put_n(store, 25)
        got = store.get("T", 0, 7, max_msgs=32)
        assert got.queue_offsets == [7, 8, 9]
        assert got.next_begin_offset == 10
        assert uids(read_all(store)) == [f"m{i}" for i in range(25)]


async def test_offset_found_null(make_store: StoreFactory, tmp_path: Path) -> None:
    async with make_store(cq_entries_per_segment=10) as store:
        put_n(store, 25)
        path = tmp_path / "store" / "consumequeue" / "T" / "0" / f"{10:020d}"
        store._files.forget(str(path))  # drop the cached descriptor, as eviction would
        path.unlink()
        got = store.get("T", 0, 13, max_msgs=32)
        assert got.status is GetStatus.OFFSET_FOUND_NULL
        assert got.next_begin_offset == 20


# -- segments --------------------------------------------------------------------------------


async def test_segment_roll_and_reads_across_segments(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    async with make_store(segment_size=4096) as store:
        ends = put_n(store, 100, size=300, queue_id=1)
        files = segments(tmp_path / "store")
        assert len(files) > 5
        base = 0
        for f in files:
            assert f.name == f"{base:020d}"
            assert 0 < f.stat().st_size <= 4096
            base += f.stat().st_size
        assert base == ends[-1] == store.statistics().commit_log_max_offset
        records = read_all(store, "T", 1)
        assert uids(records) == [f"m{i}" for i in range(100)]
        # A pull whose records straddle a segment boundary comes back whole.
        got = store.get("T", 1, 10, max_msgs=32)
        assert len(got.messages) == 32
        stats = store.statistics()
        assert stats.commit_log_segments == len(files)
        assert stats.commit_log_bytes == base


async def test_record_larger_than_a_segment_is_refused(make_store: StoreFactory) -> None:
    async with make_store(segment_size=4096) as store:
        with pytest.raises(MessageTooLargeError):
            store.put(make_record("T", 0, b"x" * 4096), tags_code=0)
        assert store.max_offset("T", 0) == 0
        assert store.queues() == {}
        put_n(store, 2)
        assert len(read_all(store)) == 2


async def test_put_validation(store: MessageStore) -> None:
    with pytest.raises(InvalidNameError):
        store.put(make_record("bad/topic", 0, b"x"), tags_code=0)
    with pytest.raises(InvalidNameError):
        store.put(make_record("x" * 128, 0, b"x"), tags_code=0)
    with pytest.raises(ConfigurationError):
        store.put(make_record("T", -1, b"x"), tags_code=0)
    bad_host = make_record("T", 0, b"x")
    bad_host.born_host = "not-an-ip"
    with pytest.raises(LocalProtocolError):
        store.put(bad_host, tags_code=0)
    assert store.queues() == {}
    assert store.statistics().commit_log_max_offset == 0


async def test_closed_store_refuses(make_store: StoreFactory) -> None:
    store = make_store()
    with pytest.raises(ClientClosedError):
        store.put(make_record("T", 0, b"x"), tags_code=0)
    async with store:
        put_n(store, 1)
    with pytest.raises(ClientClosedError):
        store.get("T", 0, 0, max_msgs=1)
    with pytest.raises(ClientClosedError):
        await store.wait_durable(1)
    with pytest.raises(ConfigurationError):
        await store.open()
    await store.close()  # idempotent


async def test_directory_lock(make_store: StoreFactory) -> None:
    async with make_store():
        with pytest.raises(ConfigurationError):
            await make_store().open()


def test_bad_options(tmp_path: Path) -> None:
    bad: list[dict[str, Any]] = [
        {"flush": "never"},
        {"flush_interval": 0},
        {"flush_interval": 2.0},
        {"segment_size": 100},
        {"cq_entries_per_segment": 0},
        {"retention_hours": 0},
        {"retention_bytes": -1},
    ]
    for kwargs in bad:
        with pytest.raises(ConfigurationError):
            MessageStore(tmp_path, **kwargs)


# -- lookups ---------------------------------------------------------------------------------


async def test_search_by_timestamp(store: MessageStore, clock: FakeClock) -> None:
    assert store.search_offset_by_timestamp("T", 0, T0) == 0
    clock.step = 0
    times = [T0 + 100, T0 + 200, T0 + 200, T0 + 300, T0 + 500]
    for i, t in enumerate(times):
        clock.now = t
        put_n(store, 1, start=i)

    def search(ts: int) -> int:
        return store.search_offset_by_timestamp("T", 0, ts)

    assert search(T0) == 0  # before the first: the first offset
    assert search(T0 + 100) == 0  # exact
    assert search(T0 + 200) == 1  # exact, first of equal times
    assert search(T0 + 240) == 1  # closer to 200 than 300: the first message at 200
    assert search(T0 + 250) == 1  # a tie goes to the earlier time
    assert search(T0 + 260) == 3
    assert search(T0 + 500) == 4
    assert search(T0 + 10_000) == 4  # after the last: the last message, not max
    assert store.earliest_store_time("T", 0) == T0 + 100


async def test_read_at(store: MessageStore) -> None:
    put_n(store, 3)
    got = store.get("T", 0, 0, max_msgs=32)
    clos = [r.commit_log_offset for r in decode_messages(b"".join(got.messages))]
    for clo, raw in zip(clos, got.messages, strict=True):
        assert store.read_at(clo) == raw
    assert store.read_at(clos[1] + 1) is None  # not a record start
    assert store.read_at(-1) is None
    assert store.read_at(10**12) is None


async def test_default_tags_code() -> None:
    record = make_record("T", 0, b"", {"TAGS": "TagA"})
    assert default_tags_code(record) == tags_code("TagA")
    assert default_tags_code(make_record("T", 0, b"")) == 0
    delayed = make_record(SCHEDULE_TOPIC, 2, b"", {"DELAY": "3", "REAL_TOPIC": "T"})
    delayed.store_timestamp = T0
    assert default_tags_code(delayed) == T0 + 10_000
    delayed.properties["DELAY"] = "99"
    assert default_tags_code(delayed) == T0 + 7_200_000


# -- reopen and recovery ---------------------------------------------------------------------


async def test_reopen_keeps_everything(make_store: StoreFactory) -> None:
    async with make_store(segment_size=8192, cq_entries_per_segment=16) as store:
        put_n(store, 60, size=200)
        put_n(store, 7, topic="Other", queue_id=5, start=100)
        end = store.statistics().commit_log_max_offset
    async with make_store(segment_size=8192, cq_entries_per_segment=16) as store:
        assert store.queues() == {"Other": [5], "T": [0]}
        assert store.max_offset("T", 0) == 60
        assert uids(read_all(store)) == [f"m{i}" for i in range(60)]
        assert uids(read_all(store, "Other", 5)) == [f"m{i}" for i in range(100, 107)]
        stats = store.statistics()
        assert stats.recovered_truncated_bytes == 0
        assert stats.recovered_reindexed == 0
        assert stats.commit_log_max_offset == end
        result = store.put(make_record("T", 0, b"next"), tags_code=0)
        assert result.queue_offset == 60
        assert result.commit_log_offset == end


async def _two_phase(make_store: StoreFactory, store_dir: Path, **kwargs: object) -> bytes:
    """20 messages, close; 10 more, close; then roll the checkpoint back to after the 20
    (as if the process died before writing a newer one). Returns the log's last segment."""
    async with make_store(**kwargs) as store:
        put_n(store, 20)
    saved = (store_dir / "checkpoint").read_bytes()
    async with make_store(**kwargs) as store:
        put_n(store, 10, start=20)
    (store_dir / "checkpoint").write_bytes(saved)
    return segments(store_dir)[-1].read_bytes()


def _last_entry_start(segment: bytes) -> int:
    pos = 0
    while True:
        size = int.from_bytes(segment[pos : pos + 4], "big") + 4
        if pos + size >= len(segment):
            return pos
        pos += size


@pytest.mark.parametrize(
    ("damage", "survivors"),
    [
        ("garbage", 30),
        ("half_record", 30),
        ("zero_fill", 30),
        ("zero_last", 29),
        ("flip_last", 29),
        ("flip_trailer", 29),
        ("cut_last", 29),
    ],
)
async def test_torn_tail_is_truncated(
    make_store: StoreFactory, tmp_path: Path, damage: str, survivors: int
) -> None:
    store_dir = tmp_path / "store"
    data = await _two_phase(make_store, store_dir)
    original_end = len(data)
    path = segments(store_dir)[-1]
    last = _last_entry_start(data)
    if damage == "garbage":
        data += os.urandom(777)
    elif damage == "half_record":
        data += data[last : last + (len(data) - last) // 2]
    elif damage == "zero_fill":
        data += bytes(4096)
    elif damage == "zero_last":
        data = data[:last] + bytes(len(data) - last)
    elif damage == "flip_last":
        flipped = bytearray(data)
        flipped[last + 100] ^= 0x40  # inside the body
        data = bytes(flipped)
    elif damage == "flip_trailer":
        flipped = bytearray(data)
        flipped[-1] ^= 0x01
        data = bytes(flipped)
    elif damage == "cut_last":
        data = data[: len(data) - 9]
    path.write_bytes(data)

    async with make_store() as store:
        stats = store.statistics()
        assert stats.recovered_truncated_bytes > 0
        expected_end = original_end if survivors == 30 else last
        assert stats.commit_log_max_offset == expected_end
        assert store.max_offset("T", 0) == survivors
        assert uids(read_all(store)) == [f"m{i}" for i in range(survivors)]
        result = store.put(make_record("T", 0, b"after"), tags_code=0)
        assert result.queue_offset == survivors
        assert result.commit_log_offset == expected_end
        assert read_all(store)[-1].body == b"after"
    # And it stays consistent across another restart.
    async with make_store() as store:
        assert store.max_offset("T", 0) == survivors + 1
        assert len(read_all(store)) == survivors + 1
        assert store.statistics().recovered_truncated_bytes == 0


async def test_index_entries_past_the_log_are_dropped(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store_dir = tmp_path / "store"
    data = await _two_phase(make_store, store_dir)
    # The log loses its last 4 records (a power loss), the index kept their entries.
    pos = 0
    starts = []
    while pos < len(data):
        starts.append(pos)
        pos += int.from_bytes(data[pos : pos + 4], "big") + 4
    segments(store_dir)[-1].write_bytes(data[: starts[-4]])
    async with make_store() as store:
        assert store.max_offset("T", 0) == 26
        assert uids(read_all(store)) == [f"m{i}" for i in range(26)]
        assert store.put(make_record("T", 0, b"x"), tags_code=0).queue_offset == 26


async def test_index_of_an_unwritten_queue_is_trimmed(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    # Queue U got entries after the checkpoint whose records were then lost from the log.
    store_dir = tmp_path / "store"
    async with make_store() as store:
        put_n(store, 5)
        put_n(store, 3, topic="U")
    saved = (store_dir / "checkpoint").read_bytes()
    size_before = segments(store_dir)[-1].stat().st_size
    async with make_store() as store:
        put_n(store, 4, topic="U", start=3)
    (store_dir / "checkpoint").write_bytes(saved)
    os.truncate(segments(store_dir)[-1], size_before)
    async with make_store() as store:
        assert store.max_offset("U", 0) == 3
        assert store.max_offset("T", 0) == 5
        assert len(read_all(store, "U")) == 3


async def test_corrupt_record_before_the_checkpoint_is_never_served(
    make_store: StoreFactory, tmp_path: Path
) -> None:
    store_dir = tmp_path / "store"
    async with make_store() as store:
        put_n(store, 5)
        target = store.get("T", 0, 2, max_msgs=1)
        clo = decode_messages(target.messages[0])[0].commit_log_offset
    path = segments(store_dir)[0]
    raw = bytearray(path.read_bytes())
    raw[clo + 95] ^= 0xFF  # bit rot inside a checkpointed record
    path.write_bytes(bytes(raw))
    async with make_store() as store:
        assert store.read_at(clo) is None
        got = store.get("T", 0, 2, max_msgs=1)
        assert got.status is GetStatus.MESSAGE_WAS_REMOVING
        assert got.next_begin_offset == 3
        assert uids(read_all(store)) == ["m0", "m1", "m3", "m4"]


@pytest.mark.parametrize("how", ["delete_topic", "delete_file", "truncate", "no_checkpoint"])
async def test_lost_index_is_rebuilt(make_store: StoreFactory, tmp_path: Path, how: str) -> None:
    store_dir = tmp_path / "store"
    opts = {"cq_entries_per_segment": 8}
    async with make_store(**opts) as store:
        put_n(store, 30)
        put_n(store, 4, topic="Keep", tag="k")
    cq = store_dir / "consumequeue" / "T" / "0"
    if how == "delete_topic":
        shutil.rmtree(store_dir / "consumequeue" / "T")
    elif how == "delete_file":
        (cq / f"{8:020d}").unlink()
    elif how == "truncate":
        os.truncate(cq / f"{24:020d}", 28 * 2 + 5)
    else:
        shutil.rmtree(cq)
        (store_dir / "checkpoint").unlink()
    async with make_store(**opts) as store:
        assert store.max_offset("T", 0) == 30
        assert uids(read_all(store)) == [f"m{i}" for i in range(30)]
        assert uids(read_all(store, "Keep")) == [f"m{i}" for i in range(4)]
        got = store.get("Keep", 0, 0, max_msgs=32)
        assert got.tags_codes == [tags_code("k")] * 4  # recomputed from TAGS when rebuilt
        assert store.put(make_record("T", 0, b"x"), tags_code=0).queue_offset == 30
    async with make_store(**opts) as store:
        assert store.statistics().recovered_rebuilt_queues == 0
        assert store.max_offset("T", 0) == 31


async def test_empty_store_reopens(make_store: StoreFactory) -> None:
    async with make_store():
        pass
    async with make_store() as store:
        assert store.queues() == {}
        put_n(store, 1)
        assert len(read_all(store)) == 1


# -- durability ------------------------------------------------------------------------------


async def test_sync_flush_wait_durable(make_store: StoreFactory) -> None:
    async with make_store(flush="sync") as store:
        assert store.flush_mode == "sync"
        ends = put_n(store, 3)
        assert store.durable_offset < ends[-1]
        await store.wait_durable(ends[-1])
        assert store.durable_offset >= ends[-1]
        await store.wait_durable(0)  # already durable: returns at once
        await store.wait_durable(10**15)  # clamped to the end

        rounds = store.statistics().flushes

        async def put_and_wait(i: int) -> None:
            end = put_n(store, 1, start=100 + i)[0]
            await store.wait_durable(end)

        await asyncio.gather(*(put_and_wait(i) for i in range(50)))
        # Group commit: 50 concurrent waiters shared a handful of fsync rounds.
        assert store.statistics().flushes - rounds <= 5


async def test_cancelled_waiter_does_not_cancel_the_flush(make_store: StoreFactory) -> None:
    async with make_store(flush="sync") as store:
        end = put_n(store, 1)[0]
        waiter = asyncio.ensure_future(store.wait_durable(end))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await store.wait_durable(end)
        assert store.durable_offset >= end


async def test_async_flush_in_background(make_store: StoreFactory) -> None:
    async with make_store(flush="async", flush_interval=0.05) as store:
        end = put_n(store, 5)[-1]
        for _ in range(100):
            if store.durable_offset >= end:
                break
            await asyncio.sleep(0.02)
        assert store.durable_offset >= end


# -- retention -------------------------------------------------------------------------------


async def test_retention_by_age(make_store: StoreFactory, clock: FakeClock, tmp_path: Path) -> None:
    opts = {"segment_size": 4096, "cq_entries_per_segment": 4, "retention_hours": 72.0}
    store_dir = tmp_path / "store"
    async with make_store(**opts) as store:
        put_n(store, 10, topic="Other", size=50)
        put_n(store, 40, size=200)
        before = len(segments(store_dir))
        assert store.clean_expired(clock.now + 71 * HOUR_MS) == 0
        clock.now += 73 * HOUR_MS
        put_n(store, 3, size=200, start=40)  # the active segment is young
        deleted = store.clean_expired()
        assert deleted > 0
        assert len(segments(store_dir)) == before - deleted
        log_min = store.statistics().commit_log_min_offset
        assert log_min == int(segments(store_dir)[0].name)
        mn = store.min_offset("T", 0)
        first = store.get("T", 0, mn, max_msgs=1)
        assert first.status is GetStatus.FOUND
        assert decode_messages(first.messages[0])[0].commit_log_offset >= log_min
        # Index files wholly below the minimum are gone.
        names = sorted(p.name for p in (store_dir / "consumequeue" / "T" / "0").iterdir())
        assert int(names[0]) == mn - mn % 4
        assert (
            store.earliest_store_time("T", 0)
            == decode_messages(first.messages[0])[0].store_timestamp
        )
        assert store.search_offset_by_timestamp("T", 0, T0) == mn
        # "Other" was written before the cut: all of it expired, its offsets stay.
        assert store.min_offset("Other", 0) == store.max_offset("Other", 0) == 10
        assert store.get("Other", 0, 0, max_msgs=1).status is GetStatus.OFFSET_TOO_SMALL
        assert store.statistics().segments_deleted == deleted
    async with make_store(**opts) as store:
        assert store.min_offset("T", 0) == mn
        assert store.max_offset("Other", 0) == 10
        assert store.min_offset("Other", 0) == 10
        assert uids(read_all(store))[-3:] == ["m40", "m41", "m42"]


async def test_retention_by_bytes(make_store: StoreFactory, tmp_path: Path) -> None:
    async with make_store(segment_size=4096, retention_bytes=3 * 4096) as store:
        put_n(store, 100, size=300)
        assert store.clean_expired() > 0
        stats = store.statistics()
        assert stats.commit_log_bytes <= 3 * 4096
        assert stats.commit_log_segments >= 1
        records = read_all(store)
        assert uids(records) == [f"m{i}" for i in range(100 - len(records), 100)]
        assert all(r.commit_log_offset >= stats.commit_log_min_offset for r in records)


async def test_retention_never_deletes_the_active_segment(make_store: StoreFactory) -> None:
    async with make_store(segment_size=4096, retention_bytes=0) as store:
        put_n(store, 3)
        store.clean_expired(T0 + 1000 * HOUR_MS)
        assert len(read_all(store)) == 3


async def test_rebuilt_queue_with_expired_history_keeps_its_offsets(
    make_store: StoreFactory, clock: FakeClock, tmp_path: Path
) -> None:
    opts = {"segment_size": 4096, "cq_entries_per_segment": 4}
    async with make_store(**opts) as store:
        put_n(store, 10, topic="Old", size=200)
        put_n(store, 40, size=200)
        clock.now += 100 * HOUR_MS
        put_n(store, 1, start=40)
        store.clean_expired()
        assert store.min_offset("Old", 0) == store.max_offset("Old", 0) == 10
    shutil.rmtree(tmp_path / "store" / "consumequeue" / "Old")
    for rebuilt in (1, 0):
        async with make_store(**opts) as store:
            assert store.statistics().recovered_rebuilt_queues == rebuilt
            assert store.min_offset("Old", 0) == store.max_offset("Old", 0) == 10
            assert store.get("Old", 0, 3, max_msgs=1).status is GetStatus.OFFSET_TOO_SMALL
    async with make_store(**opts) as store:
        assert store.put(make_record("Old", 0, b"new"), tags_code=0).queue_offset == 10
        assert [r.body for r in read_all(store, "Old")] == [b"new"]
