"""The records of orderly member processes (``tests/consumer/orderly_proc.py``) and the checks
on them: per-key order, and no two members running calls of one queue at once.

Each member writes JSON lines: ``"k": "s"`` / ``"k": "e"`` at the start and end of a handler
call (member ``c``, queue ``q``, time ``t``, lock time ``lk``, bodies ``ids`` of the form
``"<key>:<n>"``), ``"k": "a"`` snapshots of its held queues.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Records", "check_key_order", "check_no_overlap", "check_sequence", "handler_calls"]


@dataclass
class Records:
    """Every JSON line the members wrote, read incrementally (a line cut by SIGKILL is left;
    re-reading whole files while waiting would stall a broker sharing the loop)."""

    out_dir: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    _pos: dict[Path, int] = field(default_factory=dict)

    def refresh(self) -> list[dict[str, Any]]:
        """Read what was appended since the last call; every row so far."""
        for path in sorted(self.out_dir.glob("*.jsonl")):
            with path.open("rb") as f:
                f.seek(self._pos.get(path, 0))
                data = f.read()
            end = data.rfind(b"\n") + 1  # a line cut by SIGKILL stays unread
            self._pos[path] = self._pos.get(path, 0) + end
            for line in data[:end].splitlines():
                try:
                    self.rows.append(json.loads(line))
                except json.JSONDecodeError:
                    continue  # torn by SIGKILL mid-write
        return self.rows

    def delivered(self) -> set[str]:
        """The bodies of every handler call started so far."""
        return {i for r in self.rows if r["k"] == "s" for i in r["ids"]}

    def delivered_now(self) -> set[str]:
        """:meth:`delivered` after a :meth:`refresh`: what a wait polls."""
        self.refresh()
        return self.delivered()

    def latest(self, kind: str, names: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The newest row of ``kind`` of each named member."""
        wanted = set(names)
        out: dict[str, dict[str, Any]] = {}
        for r in self.rows:
            if r["k"] == kind and r["c"] in wanted:
                prev = out.get(r["c"])
                if prev is None or r["t"] >= prev["t"]:
                    out[r["c"]] = r
        return out


def handler_calls(rows: Iterable[dict[str, Any]], ends: dict[str, float]) -> list[dict[str, Any]]:
    """Handler calls as ``{c, q, s, e, lk, ids}``; a call cut short by SIGKILL ends at the
    kill (``ends``: member -> kill time)."""
    open_: dict[tuple[str, int], dict[str, Any]] = {}
    out = []
    for r in sorted((r for r in rows if r["k"] in ("s", "e")), key=lambda r: r["t"]):
        key = (r["c"], r["q"])
        if r["k"] == "s":
            assert key not in open_, f"{key}: two calls at once in one member"
            open_[key] = {"c": r["c"], "q": r["q"], "s": r["t"], "lk": r["lk"], "ids": r["ids"]}
        else:
            call = open_.pop(key)
            call["e"] = r["t"]
            out.append(call)
    for (c, _), call in open_.items():
        call["e"] = ends.get(c, float("inf"))
        out.append(call)
    return out


def check_sequence(key: str, seq: Sequence[int]) -> tuple[int, int]:
    """One key's numbers in delivery order start at 0, never skip, and go back only to replay
    a suffix. Returns how many deliveries were replays, and the highest number."""
    assert seq[0] == 0, (key, seq[:5])
    top = 0
    replays = 0
    for prev, n in itertools.pairwise(seq):
        assert n <= top + 1, f"key {key} skipped from {top} to {n}"
        assert n == prev + 1 or n <= prev, f"key {key}: {prev} then {n}"
        replays += n <= top
        top = max(top, n)
    return replays, top


def check_key_order(
    calls: Sequence[dict[str, Any]], keys: int, per_key: int, *, firsts_in_order: bool = False
) -> int:
    """Per key (bodies ``"<key>:<n>"``), in delivery order: :func:`check_sequence`, and the
    numbers reach ``per_key - 1`` (with ``firsts_in_order``, first deliveries come in order
    too). Returns how many deliveries were replays (a hand-over re-delivering uncommitted
    work)."""
    seqs: dict[str, list[int]] = {}
    for call in sorted(calls, key=lambda c: c["s"]):
        for body in call["ids"]:
            k, n = body.split(":")
            seqs.setdefault(k, []).append(int(n))
    assert len(seqs) == keys, sorted(seqs)
    replays = 0
    for k, seq in seqs.items():
        key_replays, top = check_sequence(k, seq)
        replays += key_replays
        assert top == per_key - 1, (k, top)
        if firsts_in_order:
            firsts = list(dict.fromkeys(seq))
            assert firsts == list(range(per_key)), f"key {k}: first deliveries out of order"
    return replays


def check_no_overlap(calls: Sequence[dict[str, Any]]) -> None:
    """Handler calls of different members on one queue never overlap in time."""
    by_queue: dict[int, list[dict[str, Any]]] = {}
    for call in calls:
        by_queue.setdefault(call["q"], []).append(call)
    for q, cs in by_queue.items():
        cs.sort(key=lambda c: c["s"])
        latest: dict[str, float] = {}  # per member, the latest end so far
        for c in cs:
            others = [end for name, end in latest.items() if name != c["c"]]
            assert not others or max(others) <= c["s"], (
                f"queue {q}: {c['c']} started at {c['s']} while another member ran until "
                f"{max(others)}"
            )
            latest[c["c"]] = max(latest.get(c["c"], 0.0), c["e"])
