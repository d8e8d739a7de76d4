"""Checks on the deliveries member processes recorded (their ``"k": "d"`` lines, see
:mod:`tests._harness.child`): nothing lost, which duplicates a hand-over explains, a clean
restart going on where its predecessor stopped."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests._harness.child import read_rows

__all__ = ["check_clean_restart", "check_none_lost", "stray_duplicates"]


def check_clean_restart(out_dir: Path, ids: Iterable[str], first: str, before_what: str) -> None:
    """After member ``first`` left cleanly mid-stream and another took over: each id was
    delivered exactly once, some by ``first``, and the successor went on queue by queue
    exactly where ``first`` stopped (``before_what`` words the printed summary)."""
    wanted = list(ids)
    rows = [r for r in read_rows(out_dir) if r["k"] == "d"]
    counts = Counter(r["id"] for r in rows)
    before = {r["id"] for r in rows if r["c"] == first}
    print(f"phase 2: {len(before)} {before_what}, {len(rows)} in all")
    assert 0 < len(before) < len(wanted)
    assert set(counts) == set(wanted)
    assert max(counts.values()) == 1  # duplicates = 0
    per_queue: dict[int, list[int]] = defaultdict(list)
    for r in rows:
        per_queue[r["q"]].append(r["o"])
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(min(offsets), min(offsets) + len(offsets)))


def check_none_lost(
    out_dir: Path, ids: Iterable[str]
) -> tuple[list[dict[str, Any]], Counter[str], dict[str, dict[str, Any]]]:
    """Assert every id was delivered (lost = 0); return the delivery rows, how many times each
    id was delivered, and each id's first delivery."""
    rows = [r for r in read_rows(out_dir) if r["k"] == "d"]
    counts = Counter(r["id"] for r in rows)
    assert set(counts) == set(ids)  # lost = 0
    first: dict[str, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: r["t"]):
        first.setdefault(r["id"], r)
    return rows, counts, first


def stray_duplicates(
    rows: list[dict[str, Any]],
    first: dict[str, dict[str, Any]],
    dups: Iterable[str],
    changes: list[float],
    window: float,
) -> tuple[list[str], dict[str, list[tuple[Any, ...]]]]:
    """The duplicated ids of ``dups`` first delivered neither within ``window`` + 1 seconds
    before a membership change nor 3 s after it, and the deliveries of the first five of them
    (``window``: the members' commit interval)."""
    stray = [
        i for i in dups if not any(t - window - 1.0 <= first[i]["t"] <= t + 3.0 for t in changes)
    ]
    detail = {
        i: sorted((r["t"], r["c"], r["q"], r["o"]) for r in rows if r["id"] == i) for i in stray[:5]
    }
    return stray, detail
