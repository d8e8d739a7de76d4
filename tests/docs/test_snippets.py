"""Every fenced code block of README.md and docs/**/*.md, one test per ``file:line``.

The rules (tests/_harness/snippets.py, stated for authors in docs/contributing.md):
```python blocks run as programs against this test's embedded broker (``"127.0.0.1:9876"``
replaced by its address), in a virtualenv holding only what their page tells the reader to
``pip install`` (tests/_harness/page_env.py), and must exit 0; ```console/```bash/```sh blocks have their
``aiorocket``, ``make``, ``pip install`` and ``python examples/...`` lines checked (parsed,
not run: most start servers); ```text, unlabelled and other fences are exempt, so they are
not collected here.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from aiorocket.embedded import EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.page_env import page_python, page_requirements
from tests._harness.snippets import Snippet, collect, documented_files, run

#: seconds one program may take; they are written to finish in a few (Spark's JVM included)
TIMEOUT = 90.0

SNIPPETS = [s for path in documented_files() for s in collect(path)]


# Retries come back fast, as with the ``embedded_broker`` fixture users get.
pytestmark = pytest.mark.broker(delay_levels=FAST_DELAYS)


@pytest.fixture(scope="session")
def page_venvs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the pages' virtualenvs live: the pytest cache (kept between runs), else a
    temporary directory."""
    cache = getattr(request.config, "cache", None)
    if cache is not None:
        return Path(cache.mkdir("aiorocket-page-venvs"))
    return tmp_path_factory.mktemp("page-venvs")


@pytest.mark.parametrize(
    "snippet", [s for s in SNIPPETS if s.kind == "program"], ids=lambda s: s.id
)
async def test_python_block_runs(
    snippet: Snippet, broker: EmbeddedBroker, tmp_path: Path, page_venvs: Path
) -> None:
    # The page's virtualenv holds what the page says to install, nothing else. Creating it
    # and running the program block: both go to a thread, the broker serves on this loop.
    python = await asyncio.to_thread(page_python, page_requirements(snippet.path), page_venvs)
    outcome = await asyncio.to_thread(
        run,
        snippet,
        python=str(python),
        namesrv=broker.address,
        cwd=tmp_path,
        timeout=TIMEOUT,
        strict=True,
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
