"""ConsumeQueue on real files: appends, segments, loading, truncation, minima, time search."""

from __future__ import annotations

import os
from pathlib import Path

from aiorocket.embedded.commit_log import FileCache
from aiorocket.embedded.consume_queue import ENTRY, ENTRY_SIZE, ConsumeQueue, QueueEntry


def make_queue(root: Path, eps: int = 4, files: FileCache | None = None) -> ConsumeQueue:
    return ConsumeQueue(
        "T", 0, root / "T" / "0", entries_per_segment=eps, files=files or FileCache(16)
    )


def fill(q: ConsumeQueue, n: int, *, start_clo: int = 0, t0: int = 1000) -> None:
    for i in range(n):
        q.append(start_clo + i * 100, 96, i % 3, t0 + i * 10)


def test_append_read_and_files(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    assert (q.min_offset, q.max_offset, q.segment_count) == (0, 0, 0)
    fill(q, 10)
    assert q.max_offset == 10
    names = sorted(p.name for p in (tmp_path / "T" / "0").iterdir())
    assert names == [f"{b:020d}" for b in (0, 4, 8)]
    assert (tmp_path / "T" / "0" / names[0]).stat().st_size == 4 * ENTRY_SIZE
    assert q.segment_count == 3
    assert q.entry(5) == QueueEntry(500, 96, 2, 1050)
    assert q.entry(10) is None
    raw = q.read(2, 10)
    assert raw is not None
    assert len(raw) == 2 * ENTRY_SIZE  # stops at the end of the file
    assert [e[0] for e in ENTRY.iter_unpack(raw)] == [200, 300]
    assert q.read(10, 1) == b""
    assert q.next_segment_start(5) == 8


def test_load(tmp_path: Path) -> None:
    fill(make_queue(tmp_path), 10)
    q = make_queue(tmp_path)
    assert q.load()
    assert (q.min_offset, q.max_offset) == (0, 10)
    q.append(1000, 96, 0, 0)
    assert q.entry(10) == QueueEntry(1000, 96, 0, 0)


def test_load_cuts_a_partial_entry(tmp_path: Path) -> None:
    fill(make_queue(tmp_path), 6)
    last = tmp_path / "T" / "0" / f"{4:020d}"
    with open(last, "ab") as f:
        f.write(b"\x01\x02\x03")
    q = make_queue(tmp_path)
    assert q.load()
    assert q.max_offset == 6
    assert last.stat().st_size == 2 * ENTRY_SIZE


def test_load_detects_inconsistent_files(tmp_path: Path) -> None:
    fill(make_queue(tmp_path), 10)
    (tmp_path / "T" / "0" / f"{4:020d}").unlink()
    assert not make_queue(tmp_path).load()
    fill(make_queue(tmp_path / "b"), 10)
    os.truncate(tmp_path / "b" / "T" / "0" / f"{0:020d}", ENTRY_SIZE)
    assert not make_queue(tmp_path / "b").load()
    # Other entries-per-segment than the files were written with: rebuild.
    assert not make_queue(tmp_path / "b", eps=5).load()
    assert make_queue(tmp_path / "missing").load()


def test_truncate(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    fill(q, 10)
    assert q.truncate(12) == 0
    assert q.truncate(5) == 5
    assert q.max_offset == 5
    assert sorted(p.name for p in (tmp_path / "T" / "0").iterdir()) == [
        f"{0:020d}",
        f"{4:020d}",
    ]
    q.append(7777, 1, 0, 0)
    assert q.entry(5) == QueueEntry(7777, 1, 0, 0)
    q2 = make_queue(tmp_path)
    assert q2.load()
    assert q2.max_offset == 6
    assert q.truncate(4) == 2
    assert make_queue(tmp_path).load()
    assert q.truncate(0) == 4
    assert list((tmp_path / "T" / "0").iterdir()) == []


def test_trim_tail(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    fill(q, 10)  # commit-log offsets 0, 100, ..., 900
    assert q.trim_tail(cutoff=10_000) == 0
    assert q.trim_tail(cutoff=650) == 3
    assert q.max_offset == 7
    q.write_at(9, 0, 0, 0, 0)  # a hole and a zero entry at the end
    assert q.max_offset == 10
    assert q.trim_tail(cutoff=10_000) == 3
    assert q.max_offset == 7
    # Nothing below the floor (entries the checkpoint knows were durable) is dropped.
    assert q.trim_tail(cutoff=0, floor=5) == 2
    assert q.max_offset == 5


def test_write_at_and_destroy(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    q.write_at(6, 600, 96, 1, 2)
    assert q.max_offset == 7
    assert q.entry(6) == QueueEntry(600, 96, 1, 2)
    assert q.entry(5) == QueueEntry(0, 0, 0, 0)
    q.destroy()
    assert (q.min_offset, q.max_offset) == (0, 0)
    assert list((tmp_path / "T" / "0").iterdir()) == []


def test_advance_min_deletes_expired_files(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    fill(q, 10)
    assert q.advance_min(0) == 0
    assert q.advance_min(450) == 5
    assert sorted(p.name for p in (tmp_path / "T" / "0").iterdir()) == [
        f"{4:020d}",
        f"{8:020d}",
    ]
    assert q.advance_min(450) == 5
    # Everything expired: the newest file stays so the max offset survives.
    assert q.advance_min(10**9) == 10
    assert q.max_offset == 10
    assert [p.name for p in (tmp_path / "T" / "0").iterdir()] == [f"{8:020d}"]
    q2 = make_queue(tmp_path)
    assert q2.load()
    assert q2.max_offset == 10
    assert q2.advance_min(10**9) == 10


def test_advance_min_skips_holes(tmp_path: Path) -> None:
    # A queue rebuilt after retention: entries start at 9, nothing on disk below file 8.
    q = make_queue(tmp_path)
    for i in range(9, 14):
        q.write_at(i, 10_000 + i * 100, 96, 0, 0)
    assert q.advance_min(10_000) == 9
    assert q.entry(9) is not None


def test_fd_bound(tmp_path: Path) -> None:
    files = FileCache(3)
    queues = [
        ConsumeQueue("T", i, tmp_path / "T" / str(i), entries_per_segment=4, files=files)
        for i in range(10)
    ]
    for round_ in range(3):
        for q in queues:
            q.append(round_, 1, 0, 0)
    assert len(files) <= 3
    for q in queues:
        assert [q.entry(i) for i in range(3)] == [QueueEntry(r, 1, 0, 0) for r in range(3)]


def test_search_by_timestamp(tmp_path: Path) -> None:
    q = make_queue(tmp_path)
    assert q.search_by_timestamp(5) == 0
    for i, t in enumerate([100, 200, 200, 300, 500, 500, 900]):
        q.append(i * 100, 96, 0, t)
    cases = {
        0: 0,
        100: 0,
        149: 0,
        150: 0,  # tie: earlier
        151: 1,
        200: 1,
        260: 3,
        500: 4,
        700: 4,  # tie between 500 and 900: the first message at 500
        701: 6,
        900: 6,
        10_000: 6,
    }
    for ts, expected in cases.items():
        assert q.search_by_timestamp(ts) == expected, ts
    q.advance_min(250)  # min = 3
    assert q.search_by_timestamp(0) == 3
