"""R13 (docs/reliability.md), short: 40 s of steady traffic through a ChaosProxy with a fault every
4 s, each kind once (stall, reset, truncate, delay, SYSTEM_BUSY, rebalance, bandwidth, consumer
restart, redelivery). ``benchmarks/soak.py`` runs the same harness for 30 minutes and more.

Pass when: nothing acknowledged is lost, nothing corrupt is delivered, delivery resumes within
10 s of every fault, and the file-descriptor and task counts come back to their baseline."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from .soak import FAULTS, run_soak

pytestmark = pytest.mark.slow


async def test_short_soak_with_a_fault_every_few_seconds(tmp_path: Path) -> None:
    report = await run_soak(
        tmp_path / "broker", seconds=40.0, fault_every=4.0, fault_length=2.0, rate=100.0
    )
    summary = report.summary()
    print("soak:", summary)  # (shown with -s)
    assert report.lost == 0, summary
    assert report.corrupt == 0, summary
    assert report.acked > 2000, summary
    assert {f.name for f in report.faults} == set(FAULTS), summary
    assert all(not math.isnan(r) and r <= 10.0 for r in report.recoveries), summary
    assert report.fds_end <= report.fds_baseline, summary
    assert report.tasks_end <= report.tasks_baseline, summary
