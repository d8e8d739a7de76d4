"""Every fenced code block of README.md and docs/**/*.md, one test per ``file:line``.

The rules (tests/_harness/snippets.py, stated for authors in docs/contributing.md):
```python blocks run as programs against this test's embedded broker (``"127.0.0.1:9876"``
replaced by its address) and must exit 0; ```console/```bash/```sh blocks have their
``aiorocket``, ``make``, ``pip install`` and ``python examples/...`` lines checked (parsed,
not run: most start servers); ```text, unlabelled and other fences are exempt, so they are
not collected here.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.snippets import Snippet, collect, documented_files, run

#: seconds one program may take; they are written to finish in a few (Spark's JVM included)
TIMEOUT = 90.0

SNIPPETS = [s for path in documented_files() for s in collect(path)]


@pytest.fixture
def broker_config() -> BrokerConfig:
    """Retries come back fast, as with the ``embedded_broker`` fixture users get."""
    return BrokerConfig(delay_levels=FAST_DELAYS)


@pytest.mark.parametrize(
    "snippet", [s for s in SNIPPETS if s.kind == "program"], ids=lambda s: s.id
)
async def test_python_block_runs(snippet: Snippet, broker: EmbeddedBroker, tmp_path: Path) -> None:
    # The broker serves on this test's event loop: the blocking run goes to a thread.
    outcome = await asyncio.to_thread(
        run, snippet, python=sys.executable, namesrv=broker.address, cwd=tmp_path, timeout=TIMEOUT
    )
    if outcome.skipped:
        pytest.skip(outcome.skipped)
    assert outcome.ok, f"{snippet.id}: {outcome.detail}"


@pytest.mark.parametrize(
    "snippet", [s for s in SNIPPETS if s.kind == "commands"], ids=lambda s: s.id
)
def test_command_block_is_valid(snippet: Snippet, tmp_path: Path) -> None:
    outcome = run(snippet, python=sys.executable, namesrv="unused", cwd=tmp_path, timeout=TIMEOUT)
    assert outcome.ok, f"{snippet.id}: {outcome.detail}"
