"""Soak with chaos (docs/reliability.md R13): steady traffic for a long time, a fault every 30 s.

One process runs an embedded broker behind an ``aiorocket.testing.ChaosProxy``, a producer
sending numbered messages at ``--rate`` msgs/s, and a push consumer recording every delivery.
Every ``--fault-every`` seconds the next fault of a cycle is injected: proxy stall (a black
hole of ``--fault-length`` s), connection reset (RST), a frame cut in half, 200 ms of latency
or 64 KiB/s of bandwidth for ``--fault-length`` s, SYSTEM_BUSY answers, a member joining or
leaving with a broker notification, a graceful consumer restart, a redelivery of 20 messages
(the harness is ``tests/reliability/soak.py``, which the suite's 40 s soak also runs).

Printed, and written to ``benchmarks/results/soak-<stamp>.json`` with the whole time series:

* lost (acknowledged but never delivered), duplicates (and how many the redelivery faults
  asked for), corrupt deliveries, failed sends;
* the RSS slope over the second half (MiB/min) and its drift over that half;
* file-descriptor and task counts: at the baseline (after the warm-up), at the end (after the
  drain), and the largest seen;
* recovery time per fault (fault end → first delivery of a message sent after it): p50, p99,
  max, and per kind.

A full garbage collection runs every ``--collect-every`` s (10; 0 leaves them to CPython): a
fault leaves reference cycles that only a full collection frees, and CPython runs one rarely in
a process with a large heap, so without it the RSS climbs with faults until one does.

Verdict (R13): lost 0; RSS drift over the second half within max(1 MiB, 2 % of the baseline);
fds and tasks back to (at most) their baseline; recovery p99 within 10 s.

    python benchmarks/soak.py                      # 30 minutes
    python benchmarks/soak.py --minutes 120
    python benchmarks/soak.py --quick              # 2 minutes, a fault every 10 s
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.reliability.soak import SoakReport, run_soak

RESULTS = Path(__file__).parent / "results"


def verdict(report: SoakReport) -> dict[str, Any]:
    half = report.seconds / 2 / 60
    drift = report.rss_slope_mib_per_min * half
    drift_limit = max(1.0, 0.02 * report.rss_baseline_mib)
    checks = {
        "lost 0": report.lost == 0,
        "nothing corrupt": report.corrupt == 0,
        f"RSS drift over the second half {drift:+.2f} MiB within ±{drift_limit:.1f} MiB": abs(drift)
        <= drift_limit,
        "fds back to baseline": report.fds_end <= report.fds_baseline,
        "tasks back to baseline": report.tasks_end <= report.tasks_baseline,
        f"recovery p99 {report.recovery_p99:.2f} s within 10 s": report.recovery_p99 <= 10.0,
    }
    return {"checks": checks, "met": all(checks.values())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0, help="run time (default 30)")
    p.add_argument("--fault-every", type=float, default=30.0, help="seconds between faults")
    p.add_argument("--fault-length", type=float, default=10.0, help="seconds a stall lasts")
    p.add_argument("--rate", type=float, default=200.0, help="messages per second")
    p.add_argument("--body", type=int, default=128, help="body bytes")
    p.add_argument(
        "--collect-every",
        type=float,
        default=10.0,
        help="seconds between full garbage collections; 0 leaves them to CPython (default 10)",
    )
    p.add_argument("--quick", action="store_true", help="2 minutes, a fault every 10 s")
    args = p.parse_args()
    if args.quick:
        args.minutes, args.fault_every, args.fault_length = 2.0, 10.0, 3.0

    started = time.time()
    print(
        f"soak: {args.minutes:g} min at {args.rate:g} msg/s, a fault every "
        f"{args.fault_every:g} s (stalls of {args.fault_length:g} s), "
        + (
            f"a full collection every {args.collect_every:g} s"
            if args.collect_every
            else "collections left to CPython"
        ),
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="aiorocket-soak-") as tmp:
        report = asyncio.run(
            run_soak(
                Path(tmp),
                seconds=args.minutes * 60,
                fault_every=args.fault_every,
                fault_length=args.fault_length,
                rate=args.rate,
                body_size=args.body,
                sample_every=5.0 if args.minutes >= 10 else 1.0,
                collect_every=args.collect_every or None,
                progress=lambda line: print(line, flush=True),
            )
        )
    summary = report.summary()
    result = verdict(report)
    print()
    for key in (
        "lost",
        "duplicates",
        "redelivered_by_fault",
        "corrupt",
        "send_failures",
        "pull_restarts",
        "acked",
    ):
        print(f"  {key:<22} {summary[key]}")
    print(f"  {'RSS MiB':<22} {summary['rss_baseline_mib']} -> {summary['rss_end_mib']}")
    print(f"  {'RSS slope':<22} {summary['rss_slope_mib_per_min']} MiB/min (second half)")
    for key in ("fds", "tasks"):
        base, end, top = summary[key]
        print(f"  {key:<22} baseline {base}, end {end}, max {top}")
    print(
        f"  {'recovery':<22} p50 {summary['recovery_p50_s']} s, p99 {summary['recovery_p99_s']} s,"
        f" max {summary['recovery_max_s']} s over {summary['faults']} faults"
    )
    for name, values in summary["recovery_by_fault_s"].items():
        shown = values if len(values) <= 8 else f"{len(values)} faults, max {max(values)}"
        print(f"    {name:<20} {shown}")
    for check, ok in result["checks"].items():
        print(f"  [{'met' if ok else 'MISSED'}] {check}")
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(started))
    out = RESULTS / f"soak-{stamp}.json"
    out.write_text(
        json.dumps(
            {
                "benchmark": "soak",
                "started_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(started)),
                "command": sys.argv,
                "python": platform.python_version(),
                "machine": platform.platform(),
                "summary": summary,
                "verdict": {"met": result["met"], "checks": result["checks"]},
                "faults": [vars(f) for f in report.faults],
                "samples": report.samples,
            },
            indent=1,
            default=str,
        )
    )
    print(f"\nwritten {out}")
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
