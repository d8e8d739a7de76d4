"""The compiled store helper (``_store_speedups.collect``) against its pure-Python reference
(``read_plan.collect_py``): same records, codes, offsets, faults, scan counts and outcomes, on a
log with interleaved queues, corrupt records, removed entries, filters and byte limits."""

from __future__ import annotations

import itertools
import random
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aiorocket._protocol.message import decode_messages
from aiorocket._protocol.tags import tags_code
from aiorocket.embedded import read_plan
from aiorocket.embedded.commit_log import RECORD_HEAD
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.store_results import GetStatus
from tests.embedded.crash_writer import make_record

try:
    from aiorocket.embedded import _store_speedups
except ImportError:  # pragma: no cover - the extension is optional
    _store_speedups = None  # type: ignore[assignment]

needs_extension = pytest.mark.skipif(
    _store_speedups is None, reason="compiled store helpers not built"
)

QUEUES = 3
PER_QUEUE = 60
TAGS = ("a", "b", None)


@pytest.fixture(params=["python", "compiled"])
def impl(request: pytest.FixtureRequest) -> Iterator[str]:
    """Run a test with the store's pure-Python or compiled read path."""
    compiled = request.param == "compiled"
    if compiled and _store_speedups is None:
        pytest.skip("compiled store helpers not built")
    before = read_plan.collect
    read_plan.use_compiled(compiled)
    try:
        yield request.param
    finally:
        read_plan.collect = before


@pytest.fixture
async def filled(tmp_path: Path) -> AsyncIterator[tuple[MessageStore, dict[int, list[int]]]]:
    """A store whose queues were written round-robin with mixed sizes and tags; three
    records are corrupted in the log (CRC, stored queue offset, magic). Yields the store and,
    per queue, the commit-log offsets of its records."""
    rng = random.Random(7)
    async with MessageStore(tmp_path / "s", cq_entries_per_segment=50) as s:
        clos: dict[int, list[int]] = {q: [] for q in range(QUEUES)}
        for i in range(PER_QUEUE):
            for q in range(QUEUES):
                tag = TAGS[(i + q) % len(TAGS)]
                props = {"UNIQ_KEY": f"q{q}m{i}"} | ({"TAGS": tag} if tag else {})
                body = bytes(rng.randrange(256) for _ in range(rng.choice((10, 200, 3000))))
                r = s.put(make_record("T", q, body, props), tags_code=tags_code(tag))
                clos[q].append(r.commit_log_offset)
    path = next((tmp_path / "s" / "commitlog").iterdir())
    raw = bytearray(path.read_bytes())
    raw[clos[0][5] + RECORD_HEAD.size + 40] ^= 0x01  # CRC mismatch
    # A stored queue offset that differs from the index, an unknown magic, a stored size that
    # differs from the index's: each with a correct trailer, so only that check catches it.
    for clo, at, flip in ((clos[1][7], 27, 0x01), (clos[2][9], 4, 0x10), (clos[1][11], 3, 0x04)):
        size = int.from_bytes(raw[clo : clo + 4], "big")
        raw[clo + at] ^= flip
        raw[clo + size : clo + size + 4] = zlib.crc32(raw[clo : clo + size]).to_bytes(4, "big")
    path.write_bytes(bytes(raw))
    async with MessageStore(tmp_path / "s", cq_entries_per_segment=50) as s:
        yield s, clos


def _run(
    fn: Callable[..., tuple[int, int]],
    s: MessageStore,
    q: int,
    offset: int,
    max_msgs: int,
    max_bytes: int,
    log_min: int,
    matches: Callable[[int], bool] | None,
    read_span: Callable[[int, int], bytes | None],
) -> tuple[Any, ...]:
    queue = s._queues[("T", q)]
    raw = queue.read(offset, max_msgs if matches is None else max(max_msgs, 800))
    assert raw
    out: tuple[list[bytes], list[int], list[int], list[tuple[int, int, int]]] = ([], [], [], [])
    scanned, outcome = fn(raw, offset, max_msgs, max_bytes, log_min, matches, q, read_span, *out)
    return (scanned, outcome, *out)


@needs_extension
async def test_compiled_collect_matches_the_reference(
    filled: tuple[MessageStore, dict[int, list[int]]],
) -> None:
    s, clos = filled
    assert _store_speedups is not None
    read_span = s._log.read_span
    holes = {clos[0][20], clos[1][30]}

    def flaky_span(start: int, length: int) -> bytes | None:
        # A span starting at a "hole" is unreadable, as if its segment had vanished.
        return None if start in holes else read_span(start, length)

    filters: list[Callable[[int], bool] | None] = [
        None,
        {tags_code("a")}.__contains__,
        {tags_code("nothing")}.__contains__,
    ]
    cases = 0
    for q, offset, max_msgs, max_bytes, log_min_at, matches, span in itertools.product(
        range(QUEUES),
        (0, 3, 19, 49, 55),
        (1, 4, 32),
        (1, 5000, 256 * 1024),
        (None, 10),
        filters,
        (read_span, flaky_span),
    ):
        log_min = 0 if log_min_at is None else clos[q][log_min_at]
        args = (s, q, offset, max_msgs, max_bytes, log_min, matches, span)
        expected = _run(read_plan.collect_py, *args)
        assert _run(_store_speedups.collect, *args) == expected, args
        cases += 1
    assert cases == 3 * 5 * 3 * 3 * 2 * 3 * 2


async def test_get_skips_invalid_records_and_reports_removed_ones(
    impl: str, filled: tuple[MessageStore, dict[int, list[int]]], caplog: pytest.LogCaptureFixture
) -> None:
    s, _ = filled
    got = s.get("T", 0, 0, max_msgs=32, max_bytes=10**9)
    assert got.status is GetStatus.FOUND
    assert got.queue_offsets == [i for i in range(32) if i != 5]
    assert [r.properties["UNIQ_KEY"] for r in decode_messages(b"".join(got.messages))] == [
        f"q0m{i}" for i in range(32) if i != 5
    ]
    assert "fails validation" in caplog.text
    for q, bad in ((1, 7), (2, 9), (1, 11)):
        alone = s.get("T", q, bad, max_msgs=1)
        assert (alone.status, alone.next_begin_offset, alone.messages) == (
            GetStatus.MESSAGE_WAS_REMOVING,
            bad + 1,
            [],
        )
    a_only = s.get("T", 2, 0, max_msgs=32, matches={tags_code("a")}.__contains__)
    assert a_only.status is GetStatus.FOUND
    assert set(a_only.tags_codes) == {tags_code("a")}
    none = s.get("T", 2, 0, max_msgs=32, matches={tags_code("zzz")}.__contains__)
    assert (none.status, none.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 50)


@needs_extension
def test_compiled_crc32_is_zlibs() -> None:
    assert _store_speedups is not None
    rng = random.Random(3)
    for n in [*range(40), 63, 64, 65, 220, 4095, 100_003]:
        data = rng.randbytes(n)
        assert _store_speedups.crc32(data) == zlib.crc32(data), n
