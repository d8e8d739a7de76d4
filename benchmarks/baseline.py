"""This revision beside a baseline revision, in one run: pulls served and the Spark executor read.

Checks the baseline revision (``--rev``; default: the last one before the compiled hot path
and the broker's serving rework, 2026-11-25) out into a temporary git worktree and alternates,
``--rounds`` times, this revision and the baseline on:

* **pulls served**: ``broker.py`` (this revision's client) against an ``aiorocket broker``
  process started from each revision's code; msgs/s and the broker's CPU µs per message;
* **Spark executor read**: each revision's own ``spark_source.py``: one queue read through the
  source's ``read()`` into Arrow, pulls and decoding included; rows/s and CPU µs per row;
* **drains** (``--drains``): this revision's ``consumer.py --drains-only`` importing each
  revision's code: the push consumer's batch (32) and per-message drains, msgs/s.

A baseline whose tree has a ``setup.py`` gets its compiled extensions built in place first,
so both sides run the same kind of code (compiled, or pure Python under
``AIOROCKET_NO_EXTENSIONS=1``).

Ratios are medians of this revision over medians of the baseline. Needs the repository's
history (a clone, not an exported tree); without it, prints why and exits 2. Writes
``benchmarks/results/baseline-<timestamp>.json``.

    python benchmarks/baseline.py [--rev REV] [--rounds 2] [--quick] [--drains]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
#: the last revision before the compiled codec, the broker's serving rework and the Arrow read
BASELINE_REV = "381cfacc6a0e119af34cb2b68bd15fd885e3cc0e"
_WROTE = re.compile(r"(?:wrote|written to) (\S+\.json)")


def _git(*args: str) -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "git")
    return out.stdout.strip()


def _run(script: Path, pythonpath: Path, args: list[str], cwd: Path) -> dict[str, Any]:
    """Run a benchmark script; the JSON document it wrote."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    proc = subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,  # never a checkout: "python -m aiorocket" must import the PYTHONPATH's code
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    found = _WROTE.findall(proc.stdout)
    if proc.returncode != 0 or not found:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-3:]
        raise RuntimeError(f"{script.name} failed ({proc.returncode}): {' | '.join(tail)}")
    path = Path(found[-1])
    doc: dict[str, Any] = json.loads(path.read_text())
    path.unlink()  # (the per-side documents live on inside this benchmark's own)
    return doc


def _build_extensions(tree: Path, out: Path) -> None:
    """Build ``tree``'s wheel (pip's isolated build, which fetches Cython) and unpack its
    compiled modules into ``tree``, as an editable install would have put them."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(tree)],
        capture_output=True,
        timeout=900,
        check=True,
    )
    for wheel in out.glob("*.whl"):
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.endswith(".so"):
                    (tree / name).write_bytes(zf.read(name))
    print(f"baseline: compiled modules built in {tree}", flush=True)


def _median(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> int:
    """Run both revisions alternately, print the figures, write the JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--rev",
        default=BASELINE_REV,
        help="the baseline (default: 2026-11-25, before the compiled paths)",
    )
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="one round, short runs")
    ap.add_argument("--drains", action="store_true", help="also the push consumer's drains")
    args = ap.parse_args()
    if args.quick:
        args.rounds = 1
    try:
        rev = _git("rev-parse", "--verify", f"{args.rev}^{{commit}}")
        head = _git("rev-parse", "HEAD")
    except (RuntimeError, OSError) as exc:
        print(f"baseline: not run: no git history with {args.rev} here ({exc})", flush=True)
        return 2
    broker_args = ["--pull-seconds", "4", "--fill-seconds", "30"] if args.quick else []
    spark_args = ["--quick"] if args.quick else []
    figures: dict[str, dict[str, list[dict[str, float]]]] = {
        "pulls_served": {"this": [], "baseline": []},
        "spark_executor_read": {"this": [], "baseline": []},
    }
    if args.drains:
        figures["batch_drain"] = {"this": [], "baseline": []}
        figures["per_message_drain"] = {"this": [], "baseline": []}
    drain_args = ["--drains-only", "--repeat", "1", "--messages"]
    drain_args.append("100000" if args.quick else "300000")
    with tempfile.TemporaryDirectory(prefix="aiorocket-baseline-") as tmp:
        base = Path(tmp) / "tree"
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        _git("worktree", "add", "--detach", str(base), rev)
        try:
            if (base / "setup.py").exists():
                _build_extensions(base, Path(tmp) / "wheel")
            for rnd in range(args.rounds):
                for side, tree in (("this", ROOT), ("baseline", base)):
                    doc = _run(ROOT / "benchmarks" / "broker.py", tree, broker_args, cwd)
                    pull = doc["pull"]
                    figures["pulls_served"][side].append(
                        {"per_s": pull["msgs_per_s"], "cpu_us": pull["broker_cpu_us_per_msg"]}
                    )
                    print(
                        f"[{rnd + 1}] pulls served, {side}: {pull['msgs_per_s']:,.0f} msg/s, "
                        f"broker {pull['broker_cpu_us_per_msg']:.2f} us/msg",
                        flush=True,
                    )
                    doc = _run(tree / "benchmarks" / "spark_source.py", tree, spark_args, cwd)
                    read = doc["executor_read"]["arrow"]
                    figures["spark_executor_read"][side].append(
                        {"per_s": read["rows_per_s"], "cpu_us": read.get("cpu_us_per_row", 0.0)}
                    )
                    print(
                        f"[{rnd + 1}] Spark executor read, {side}: "
                        f"{read['rows_per_s']:,.0f} rows/s",
                        flush=True,
                    )
                    if not args.drains:
                        continue
                    doc = _run(ROOT / "benchmarks" / "consumer.py", tree, drain_args, cwd)
                    for key, name in (
                        ("batch_handler", "batch_drain"),
                        ("per_message_handler", "per_message_drain"),
                    ):
                        row = doc[key]
                        figures[name][side].append(
                            {"per_s": row["msgs_per_s"], "cpu_us": row["cpu_us_per_msg"]}
                        )
                        print(
                            f"[{rnd + 1}] {name}, {side}: {row['msgs_per_s']:,.0f} msg/s",
                            flush=True,
                        )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                capture_output=True,
                timeout=120,
            )
    res: dict[str, Any] = {
        "benchmark": "baseline",
        "baseline_rev": rev,
        "this_rev": head,
        "rounds": args.rounds,
        "quick": args.quick,
        "python": sys.version,
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
    }
    print()
    for name, sides in figures.items():
        this = _median([f["per_s"] for f in sides["this"]])
        before = _median([f["per_s"] for f in sides["baseline"]])
        res[name] = {
            "this": sides["this"],
            "baseline": sides["baseline"],
            "this_per_s": this,
            "baseline_per_s": before,
            "ratio": this / before,
        }
        print(f"{name}: {this:,.0f}/s vs baseline {before:,.0f}/s = {this / before:.2f}x")
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"baseline-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(res, indent=2))
    print(f"written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
