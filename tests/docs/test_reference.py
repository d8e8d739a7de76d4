"""The API reference pages render every public name: each public module has a ``:::``
directive in docs/reference/ (mkdocstrings then renders its ``__all__``)."""

from __future__ import annotations

import importlib
import re

from tests._harness.snippets import ROOT

#: the public modules (tests/test_public_api.py keeps their ``__all__`` exact)
PUBLIC = [
    "aiorocket",
    "aiorocket.app",
    "aiorocket.testing",
    "aiorocket.testing.plugin",
    "aiorocket.embedded",
    "aiorocket.integrations.fastapi",
    "aiorocket.integrations.prometheus",
    "aiorocket.integrations.opentelemetry",
    "aiorocket.integrations.spark",
    "aiorocket.errors",
    "aiorocket.settings",
    "aiorocket.tls",
]


def _directives() -> dict[str, str]:
    """``::: module`` -> the options block that follows it, over every reference page."""
    found: dict[str, str] = {}
    for page in sorted((ROOT / "docs" / "reference").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"^::: ([\w.]+)\n((?:[ \t]+.*\n)*)", text, re.MULTILINE):
            found[m[1]] = m[2]
    return found


def test_every_public_module_has_a_reference_page() -> None:
    directives = _directives()
    missing = [name for name in PUBLIC if name not in directives]
    assert not missing, f"no ::: directive in docs/reference/ for {missing}"
    for name in PUBLIC:
        assert "members:" not in directives[name], f"{name} is rendered only in part"


def test_models_names_missing_from_the_top_level_are_rendered() -> None:
    # aiorocket.models is re-exported by aiorocket; what is not re-exported is listed
    # explicitly on the settings page.
    import aiorocket

    models = importlib.import_module("aiorocket.models")
    rest = sorted(set(models.__all__) - set(aiorocket.__all__))
    options = _directives()["aiorocket.models"]
    for name in rest:
        assert f'"{name}"' in options, f"aiorocket.models.{name} is not in the reference"
