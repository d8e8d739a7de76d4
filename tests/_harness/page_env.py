"""What a documentation page tells its reader to install, and a virtualenv holding only that.

A page's requirements are the ``pip install`` lines it shows (in a console block or inline in
its prose): ``aiorocketmq`` itself, the extras it names (``"aiorocketmq[fastapi]"``) and any
other package (``pytest pytest-asyncio``). A page that shows none needs the core alone. The
docs tests run each page's python blocks in a virtualenv holding exactly that, so a page that
imports what it never tells the reader to install fails instead of passing on the suite's
everything-installed interpreter.

Virtualenvs are cached per requirement set, keyed by pyproject.toml and setup.py (a changed
dependency list makes new ones), under the pytest cache when there is one: the first run
creates them (most of it pip unpacking from its own cache), later runs reuse them. aiorocket
itself is installed editable and pure-Python (``AIOROCKET_PURE_PYTHON=1``, no compiler run),
so the code under test is the checkout's, compiled modules built in place included.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tests._harness.snippets import ROOT

__all__ = ["PageRequirements", "page_python", "page_requirements"]

#: the build backend an editable install without build isolation needs in the virtualenv
_BUILD = ("setuptools>=77", "Cython>=3.0")
_PIP_INSTALL = re.compile(r"\bpip3? install ([^`\n]+)")
#: seconds creating one virtualenv may take (pyspark is a large download on a cold cache)
CREATE_TIMEOUT = 900.0


@dataclass(frozen=True)
class PageRequirements:
    """``aiorocketmq`` with ``extras``, plus ``packages`` (requirement strings)."""

    extras: tuple[str, ...] = ()
    packages: tuple[str, ...] = ()

    def describe(self) -> str:
        core = f"aiorocketmq[{','.join(self.extras)}]" if self.extras else "aiorocketmq"
        return " ".join((core, *self.packages))


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def _pinned(name: str) -> str:
    """``name`` with the version range the dev extra gives it, if it names it."""
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    for req in extras.get("dev", []):
        if re.split(r"[<>=!~;\[ ]", req, maxsplit=1)[0].lower() == name.lower():
            return str(req)
    return name


def page_requirements(path: Path) -> PageRequirements:
    """What the Markdown page ``path`` tells its reader to ``pip install``."""
    extras: set[str] = set()
    packages: set[str] = set()
    for line in _PIP_INSTALL.findall(path.read_text(encoding="utf-8")):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        for word in words:
            if word.startswith("-"):
                continue
            m = re.fullmatch(r"aiorocketmq(?:\[([^\]]*)\])?", word)
            if m:
                extras.update(e.strip() for e in (m[1] or "").split(",") if e.strip())
            elif re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._\-\[\],]*", word):
                packages.add(_pinned(word))
    return PageRequirements(tuple(sorted(extras)), tuple(sorted(packages)))


def _requirements(req: PageRequirements) -> list[str]:
    project = _project()
    extras = project["optional-dependencies"]
    deps = project["dependencies"]
    assert isinstance(extras, dict)
    assert isinstance(deps, list)
    return [*deps, *(r for e in req.extras for r in extras[e]), *req.packages]


def _key(req: PageRequirements) -> str:
    digest = hashlib.sha256()
    for name in ("pyproject.toml", "setup.py"):
        digest.update((ROOT / name).read_bytes())
    digest.update(repr((req, sys.version_info[:2])).encode())
    return digest.hexdigest()[:16]


def page_python(req: PageRequirements, cache: Path) -> Path:
    """The interpreter of a virtualenv under ``cache`` holding ``req`` and nothing else,
    created on first use (a ``.ready`` marker tells a complete one from an interrupted one).

    Raises:
        AssertionError: creating it failed (pip's output attached).
    """
    names = [*(req.extras or ("core",)), *(re.split(r"[<>=!~;\[ ]", p)[0] for p in req.packages)]
    prefix = "+".join(names)
    home = cache / f"{prefix}-{_key(req)}"
    python = home / "bin" / "python"
    if (home / ".ready").exists():
        return python
    # The same set's virtualenvs of an older pyproject.toml go (a Spark one is 700 MB).
    for old in cache.glob(f"{prefix}-*"):
        if old != home and old.name.rsplit("-", 1)[0] == prefix:
            shutil.rmtree(old, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", AIOROCKET_PURE_PYTHON="1")
    pip = [str(python), "-m", "pip", "install", "--quiet"]
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(home)],
        [*pip, *_requirements(req), *_BUILD],
        [*pip, "--no-deps", "--no-build-isolation", "--editable", str(ROOT)],
        # the build backend was only needed to install the checkout
        [str(python), "-m", "pip", "uninstall", "--quiet", "--yes", "Cython"],
    ]
    for step in steps:
        done = subprocess.run(
            step,
            cwd=cache,
            env=env,
            capture_output=True,
            text=True,
            timeout=CREATE_TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, f"{step} exited {done.returncode}:\n{done.stdout}{done.stderr}"
    (home / ".ready").touch()
    return python
