"""`aiorocket demo`, shortened: the same code path `make demo` runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_demo_runs_end_to_end_with_no_order_violation() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "aiorocket", "demo", "--messages", "600", "--duration", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert any(line.startswith("[") and "produced" in line for line in lines)  # progress
    summary = {
        line.split(None, 1)[0]: line.split(None, 1)[1]
        for line in lines[lines.index("summary") + 1 :]
        if line.strip()
    }
    assert summary["produced"] == "600"
    assert summary["order"].startswith("violations   0")
    assert summary["dead-lettered"].startswith("1 ")
    assert summary["result"].strip() == "OK"
    # the poison order is the demo's expected failure: one line, no traceback
    assert "Traceback" not in out.stderr, out.stderr
    poison = [line for line in out.stderr.splitlines() if "order 13" in line]
    assert len(poison) == 1, out.stderr
    assert "sent to %DLQ%billing" in poison[0]
