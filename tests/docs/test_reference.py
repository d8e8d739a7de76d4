"""The API reference: every public name is rendered, on the page of the entry point a user
meets it with, and the rendered site shows no raw reST (a ``:class:`` role, a bare ``::``
literal-block marker): docstrings are Markdown with mkdocstrings cross-references.

The site is built once per run (``mkdocs build --strict`` into a temporary directory, about
15 s), the way ``make docs`` builds it."""

from __future__ import annotations

import html
import importlib
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from tests._harness.snippets import ROOT

pytest.importorskip("mkdocs", reason="the docs extra is not installed")

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
    "aiorocket.models",
]

#: a reST role as it shows when rendered as Markdown (``:class:`X``` -> ``:class:<code>X``)
_ROLE = re.compile(r":(?:class|meth|func|attr|data|exc|mod|obj|const|py:\w+):(?:`|<code>)")
#: a reST literal-block marker left at the end of a paragraph or line of text
_MARKER = re.compile(r"::\s*(?:</p>|</li>|</td>|$)", re.MULTILINE)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    return out


def _prose(page: str) -> str:
    """A page's HTML without its code blocks and inline code (where ``::`` is code)."""
    page = re.sub(r"<pre\b.*?</pre>", "", page, flags=re.DOTALL)
    return re.sub(r"<code\b[^>]*>.*?</code>", "<code></code>", page, flags=re.DOTALL)


def raw_rest(page: str) -> list[str]:
    """The raw reST roles and bare ``::`` markers in a rendered page, each with context."""
    found = [page[max(0, m.start() - 60) : m.end() + 20] for m in _ROLE.finditer(page)]
    prose = _prose(page)
    found += [prose[max(0, m.start() - 60) : m.end()] for m in _MARKER.finditer(prose)]
    return found


def test_the_detector_finds_raw_rest() -> None:
    assert raw_rest("<p>see :class:<code>Producer</code> and</p>")
    assert raw_rest("<p>Layout of the data directory::</p>")
    assert not raw_rest("<p>binds <code>[::1]:9876</code> and <code>a::</code></p>")
    assert not raw_rest("<pre><code>x = 1  # Layout::</code></pre>")


def test_the_site_has_no_raw_rest(site: Path) -> None:
    bad = {
        str(p.relative_to(site)): hits
        for p in sorted(site.rglob("*.html"))
        if (hits := raw_rest(p.read_text(encoding="utf-8")))
    }
    assert not bad, "\n".join(f"{page}: {hits[:3]}" for page, hits in bad.items())


def _inventory(site: Path) -> set[str]:
    """The identifiers mkdocstrings rendered (Sphinx's objects.inv, version 2)."""
    data = (site / "objects.inv").read_bytes()
    body = zlib.decompress(data.split(b"\n", 4)[4]).decode()
    return {line.split(" ", 1)[0] for line in body.splitlines()}


def _rendered_as(module: str, name: str, rendered: set[str]) -> bool:
    """Whether ``module.name`` is rendered, under that path or under a public module's path
    that exports the same object (``aiorocket.App`` is rendered as ``aiorocket.app.App``)."""
    if f"{module}.{name}" in rendered:
        return True
    obj = getattr(importlib.import_module(module), name)
    for other in PUBLIC:
        mod = importlib.import_module(other)
        exported = name in getattr(mod, "__all__", ()) and getattr(mod, name) is obj
        if exported and f"{other}.{name}" in rendered:
            return True
    return False


def test_every_public_name_is_rendered(site: Path) -> None:
    rendered = _inventory(site)
    missing = [
        f"{module}.{name}"
        for module in PUBLIC
        for name in importlib.import_module(module).__all__
        if name != "__version__" and not _rendered_as(module, name, rendered)
    ]
    assert not missing, f"not in the API reference: {missing}"


@pytest.mark.parametrize(
    ("page", "first"),
    [
        ("producer", "aiorocket.Producer"),
        ("push-consumer", "aiorocket.PushConsumer"),
        ("pull-consumer", "aiorocket.PullConsumer"),
        ("simple-consumer", "aiorocket.SimpleConsumer"),
        ("app", "aiorocket.app.App"),
        ("admin", "aiorocket.Admin"),
        ("embedded", "aiorocket.embedded.EmbeddedBroker"),
        ("messages", "aiorocket.Message"),
    ],
)
def test_each_entry_point_opens_its_own_page_with_its_signature(
    site: Path, page: str, first: str
) -> None:
    text = (site / "reference" / page / "index.html").read_text(encoding="utf-8")
    headings = re.findall(r'<h2 id="([\w.]+)"', text)
    assert headings, page
    assert headings[0] == first, headings[:3]
    # the signature, formatted on its own lines right under the heading
    after = text[text.index(f'id="{first}"') :]
    signature = re.search(r'<div class="doc-signature[^"]*">(.*?)</div>', after, re.DOTALL)
    assert signature is not None, f"no separate signature for {first}"
    code = html.unescape(re.sub(r"<[^>]+>", "", signature[1]))
    lines = [line for line in code.splitlines() if line.strip()]
    assert all(len(line) <= 80 for line in lines), lines
    # formatted: one parameter a line when it does not fit on one (a short one stays whole)
    assert len(lines) > 1 or len(lines[0]) <= 80, code
    if page == "push-consumer":
        assert lines[0] == "PushConsumer(", lines
        assert lines[-1] == ")", lines


def test_the_api_pages_are_split(site: Path) -> None:
    # one alphabetical page of every class was 456 KB; no page is half that now
    sizes = {p.parent.name: p.stat().st_size for p in (site / "reference").glob("*/index.html")}
    assert max(sizes.values()) < 300_000, sizes
