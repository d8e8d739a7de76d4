"""CommitLog, FileCache and SyncJob on real files."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from aiorocket._protocol.message import encode_message
from aiorocket.embedded.commit_log import (
    MIN_RECORD_SIZE,
    TRAILER_SIZE,
    CommitLog,
    FileCache,
    SyncJob,
    check_entry,
    segment_name,
)
from aiorocket.errors import MessageTooLargeError
from tests.embedded.crash_writer import make_record


def record_at(log: CommitLog, body: bytes, queue_offset: int = 0) -> bytes:
    """A stored record whose commitLogOffset is the log's current end."""
    rec = make_record("T", 0, body)
    rec.queue_offset = queue_offset
    rec.commit_log_offset = log.end
    return encode_message(rec)


def open_log(directory: Path, segment_size: int = 4096, capacity: int = 8) -> CommitLog:
    log = CommitLog(directory, segment_size=segment_size, files=FileCache(capacity))
    log.load()
    return log


def fill(log: CommitLog, n: int, size: int = 100) -> list[tuple[int, bytes]]:
    out = []
    for i in range(n):
        data = record_at(log, bytes([i % 256]) * size, i)
        out.append((log.append(data, 1000 + i), data))
    return out


def test_segment_name() -> None:
    assert segment_name(0) == "00000000000000000000"
    assert segment_name(1 << 30) == "00000000001073741824"


def test_append_and_read(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    assert (log.min_offset, log.end) == (0, 0)
    written = fill(log, 5)
    offset = 0
    for clo, data in written:
        assert clo == offset
        offset += len(data) + TRAILER_SIZE
        assert log.read_record(clo) == data
    assert log.end == offset == log.total_bytes
    raw = (tmp_path / segment_name(0)).read_bytes()
    first = written[0][1]
    assert raw[: len(first)] == first
    assert int.from_bytes(raw[len(first) : len(first) + 4], "big") == zlib.crc32(first)
    assert log.read_span(0, len(raw)) == raw
    assert log.read_span(0, len(raw) + 1) is None
    assert log.read_record(written[1][0] + 3) is None
    assert log.read_record(log.end) is None
    log.close()


def test_roll_keeps_offsets_contiguous(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_size=1024)
    written = fill(log, 30, size=150)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len(names) > 3
    expected_base = 0
    for name in names:
        assert int(name) == expected_base
        size = (tmp_path / name).stat().st_size
        assert size <= 1024
        expected_base += size
    for clo, data in written:
        assert log.read_record(clo) == data
    # A span across a segment boundary is stitched together.
    boundary = int(names[1])
    span = log.read_span(boundary - 10, 20)
    assert span is not None
    assert len(span) == 20
    assert [s.base for s in log.segments()] == [int(n) for n in names]
    log.close()


def test_too_large(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_size=1024)
    with pytest.raises(MessageTooLargeError):
        log.append(record_at(log, b"x" * 1024), 0)
    assert log.end == 0
    # Exactly a segment is fine.
    data = record_at(log, b"")
    body = 1024 - TRAILER_SIZE - len(data)
    assert log.append(record_at(log, b"y" * body), 0) == 0
    assert log.end == 1024
    log.close()


def test_reload_and_scan(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_size=1024)
    written = fill(log, 20, size=150)
    log.close()
    log = open_log(tmp_path, segment_size=1024)
    assert log.end == written[-1][0] + len(written[-1][1]) + TRAILER_SIZE
    assert list(log.scan(0)) == written
    assert log.scan_error is None
    assert log.scan_end == log.end
    assert list(log.scan(written[7][0])) == written[7:]
    # New appends go on after the old end.
    clo = log.append(record_at(log, b"z"), 0)
    assert clo == written[-1][0] + len(written[-1][1]) + TRAILER_SIZE
    log.close()


def test_scan_stops_at_garbage_and_truncate_cuts(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_size=1 << 20)
    written = fill(log, 10)
    end = log.end
    log.close()
    with open(tmp_path / segment_name(0), "ab") as f:
        f.write(b"\x00\x00\x01\x00" + os.urandom(300))
    log = open_log(tmp_path, segment_size=1 << 20)
    assert list(log.scan(0)) == written
    assert log.scan_end == end
    assert log.scan_error is not None
    assert log.truncate(log.scan_end) == 304
    assert log.end == end
    assert (tmp_path / segment_name(0)).stat().st_size == end
    assert log.append(record_at(log, b"next"), 0) == end
    log.close()


def test_truncate_drops_later_segments(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_size=1024)
    written = fill(log, 30, size=150)
    cut_at = written[3][0]
    removed = log.truncate(cut_at)
    assert removed == sum(len(d) + TRAILER_SIZE for _, d in written[3:])
    assert log.end == cut_at
    assert len(list(tmp_path.iterdir())) == 1
    assert log.read_record(written[2][0]) == written[2][1]
    assert log.read_record(cut_at) is None
    assert log.append(record_at(log, b"again"), 0) == cut_at
    log.close()


def test_gap_between_segments_deletes_the_rest(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_size=1024)
    fill(log, 30, size=150)
    log.close()
    names = sorted(p.name for p in tmp_path.iterdir())
    (tmp_path / names[2]).unlink()
    log = CommitLog(tmp_path, segment_size=1024, files=FileCache(8))
    assert log.load() > 0
    assert len(list(tmp_path.iterdir())) == 2
    assert log.end == int(names[2])
    log.close()


def test_delete_expired(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_size=1024)
    fill(log, 30, size=150)
    count = len(log.segments())
    assert log.delete_expired(now_ms=1000, max_age_ms=10_000, max_bytes=None) == 0
    # By size: keep at most ~2 segments' worth.
    deleted = log.delete_expired(now_ms=1000, max_age_ms=10_000, max_bytes=2048)
    assert deleted == count - 2
    assert log.total_bytes <= 2048
    assert log.min_offset == log.segments()[0].base
    assert log.read_record(0) is None
    # By age: everything but the active segment.
    assert log.delete_expired(now_ms=10**9, max_age_ms=1, max_bytes=None) == 1
    assert len(log.segments()) == 1
    assert log.delete_expired(now_ms=10**9, max_age_ms=1, max_bytes=0) == 0
    log.close()


def test_check_entry(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = record_at(log, b"abc")
    entry = data + zlib.crc32(data).to_bytes(4, "big")
    assert check_entry(entry, 0, 0) == data
    assert check_entry(entry, 0, 8) is None  # stored offset differs
    assert check_entry(entry[:-1], 0, 0) is None
    assert check_entry(b"\x00" * MIN_RECORD_SIZE, 0, 0) is None
    bad = bytearray(entry)
    bad[-1] ^= 1
    assert check_entry(bytes(bad), 0, 0) is None
    log.close()


def test_file_cache_is_bounded(tmp_path: Path) -> None:
    cache = FileCache(3)
    paths = [str(tmp_path / f"f{i}") for i in range(6)]
    for p in paths:
        fd = cache.fd(p, create=True)
        assert fd is not None
        os.pwrite(fd, b"x", 0)
        cache.mark_dirty(p)
    assert len(cache) == 3
    assert cache.fd(str(tmp_path / "missing")) is None
    job = SyncJob()
    cache.take_dirty(job)
    assert not job.empty
    os.unlink(paths[0])  # deleted before the sync: skipped
    job.run()
    assert SyncJob().empty
    cache.close()
    assert len(cache) == 0


def test_sync_job_discard_closes(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    job = SyncJob()
    job.add_fd(fd)
    job.discard()
    os.close(fd)
    job.run()  # nothing left to do
