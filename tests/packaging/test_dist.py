"""The distribution as a user gets it, and what ``make`` installs.

The sdist and wheel are built once per session as ``make dist`` builds them (``python -m
build``: the sdist, then the wheel from it) and checked as PyPI renders them; the wheel is
installed into a fresh virtualenv with ``CC=false`` (any compile fails, so it proves the wheel
carries the compiled modules and nothing needs a compiler), and that interpreter imports
aiorocket, runs ``aiorocket --help`` and the README's snippets against a test broker. The
Makefile tests read ``make -n`` (a dry run) against an empty or stamped virtualenv directory.
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from aiorocket.embedded import BrokerConfig, EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.snippets import Snippet, collect, run

ROOT = Path(__file__).resolve().parents[2]
#: seconds one README program may take
SNIPPET_TIMEOUT = 90.0
#: seconds building or installing may take (the isolated build envs come from PyPI)
BUILD_TIMEOUT = 600.0
#: the compiled modules setup.py builds, as dotted names
COMPILED = (
    "aiorocket._protocol._speedups",
    "aiorocket.embedded._store_speedups",
    "aiorocket.integrations.spark._columns",
)
README_SNIPPETS = [s for s in collect(ROOT / "README.md") if s.kind != "exempt"]


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


def _user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH pointing into this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(extra)
    return env


def _check(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False
    )
    assert done.returncode == 0, f"{cmd} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@dataclass(frozen=True)
class Dist:
    """What ``python -m build`` produced."""

    sdist: Path
    wheel: Path


@dataclass(frozen=True)
class Installed:
    """A fresh virtualenv with the wheel installed; ``cwd`` is a directory outside the
    checkout, so that ``import aiorocket`` finds the installed package."""

    python: Path
    scripts: Path
    cwd: Path

    def run(self, *args: str) -> str:
        """Run the venv's interpreter with ``args``; its stdout (it must exit 0)."""
        return _check([str(self.python), *args], cwd=self.cwd, env=_user_env())


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and the wheel, built as ``make dist`` builds them."""
    if importlib.util.find_spec("build") is None:
        pytest.skip('needs the build package: pip install "aiorocketmq[release]"')
    out = tmp_path_factory.mktemp("dist")
    _check([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=ROOT)
    (sdist,) = out.glob("*.tar.gz")
    (wheel,) = out.glob("*.whl")
    return Dist(sdist, wheel)


@pytest.fixture(scope="session")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The wheel in a fresh virtualenv, installed with ``CC=false``."""
    root = tmp_path_factory.mktemp("wheelenv")
    venv = root / "venv"
    _check([sys.executable, "-m", "venv", str(venv)], cwd=root)
    scripts = venv / ("Scripts" if os.name == "nt" else "bin")
    python = scripts / "python"
    # CC/CXX=false: a dependency or the wheel itself needing a compiler fails the install.
    env = _user_env(CC="false", CXX="false", PIP_DISABLE_PIP_VERSION_CHECK="1")
    _check([str(python), "-m", "pip", "install", "--quiet", str(dist.wheel)], cwd=root, env=env)
    cwd = root / "work"
    cwd.mkdir()
    return Installed(python, scripts, cwd)


# -- the artefacts -----------------------------------------------------------------------------


@pytest.mark.slow
def test_twine_check_passes_strict(dist: Dist) -> None:
    if importlib.util.find_spec("twine") is None:
        pytest.skip('needs twine: pip install "aiorocketmq[release]"')
    out = _check(
        [sys.executable, "-m", "twine", "check", "--strict", str(dist.sdist), str(dist.wheel)],
        cwd=ROOT,
    )
    assert out.count("PASSED") == 2, out


@pytest.mark.slow
def test_wheel_carries_the_compiled_modules_for_this_platform(dist: Dist) -> None:
    names = zipfile.ZipFile(dist.wheel).namelist()
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    for module in COMPILED:
        stem = module.replace(".", "/")
        assert any(n.startswith(stem + ".") and n.endswith(tuple(suffixes)) for n in names), (
            f"{module} missing from {dist.wheel.name}"
        )
    assert not [n for n in names if n.endswith(".c")]
    assert "aiorocket/py.typed" in names


@pytest.mark.slow
def test_sdist_carries_the_sources_not_generated_code(dist: Dist) -> None:
    with tarfile.open(dist.sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    sources = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("aiorocket/**/*.px[dy]")}
    assert sources, "no .pyx/.pxd found in the checkout"
    assert sources <= names, sources - names
    assert {"setup.py", "pyproject.toml", "README.md", "CHANGELOG.md"} <= names
    # C generated by Cython and built modules stay out: the sdist builds them itself.
    assert not [n for n in names if n.endswith((".c", ".so", ".pyd"))]


# -- the installed wheel -----------------------------------------------------------------------


@pytest.mark.slow
def test_installed_wheel_imports_from_the_virtualenv(installed: Installed) -> None:
    out = installed.run(
        "-c",
        "import aiorocket, importlib.metadata as m; "
        "print(aiorocket.__file__); print(m.version('aiorocketmq'))",
    )
    location, version = out.split()
    assert Path(location).is_relative_to(installed.python.parent.parent)
    assert version == _project()["version"]


@pytest.mark.slow
def test_installed_wheel_uses_the_compiled_codec(installed: Installed) -> None:
    out = installed.run("-c", "from aiorocket._protocol import accel; print(accel.describe())")
    assert out.strip() == "aiorocket: compiled codec in use"
    # The Spark columns module cannot be imported without the spark extra (its package checks
    # for pyspark): its file is checked among the installed ones.
    files = installed.run(
        "-c",
        "import importlib.metadata as m; print('\\n'.join(str(f) for f in m.files('aiorocketmq')))",
    ).split()
    for module in COMPILED:
        stem = module.replace(".", "/") + "."
        assert any(f.startswith(stem) and not f.endswith((".pyx", ".pyi")) for f in files), module


@pytest.mark.slow
def test_installed_command_line_runs(installed: Installed) -> None:
    done = subprocess.run(
        [str(installed.scripts / "aiorocket"), "--help"],
        cwd=installed.cwd,
        env=_user_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: aiorocket")
    for command in ("broker", "run", "demo", "admin"):
        assert command in done.stdout


@pytest.fixture
def broker_config() -> BrokerConfig:
    """Retries come back fast, as in the docs' snippet tests."""
    return BrokerConfig(delay_levels=FAST_DELAYS)


@pytest.mark.slow
@pytest.mark.parametrize("snippet", README_SNIPPETS, ids=lambda s: s.id)
async def test_readme_snippet_with_the_installed_wheel(
    snippet: Snippet, installed: Installed, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    # The broker serves on this test's event loop: the blocking run goes to a thread.
    outcome = await asyncio.to_thread(
        run,
        snippet,
        python=str(installed.python),
        namesrv=broker.address,
        cwd=tmp_path,
        timeout=SNIPPET_TIMEOUT,
    )
    if outcome.skipped:
        pytest.skip(outcome.skipped)
    assert outcome.ok, f"{snippet.id}: {outcome.detail}"


# -- what make installs --------------------------------------------------------------------


@pytest.fixture
def make() -> str:
    """The make program (these tests read ``make -n``; nothing is installed)."""
    found = shutil.which("make")
    if found is None:
        pytest.skip("make is not installed")
    return found


#: the line of a dry run that installs aiorocketmq itself (editable)
_INSTALLS_PROJECT = re.compile(r"pip .*install .*-e \.(\s|$)", re.MULTILINE)


def _dry_run(make: str, target: str, venv: Path) -> str:
    # Run as a top-level make even under `make test`: a sub-make inherits MAKEFLAGS/MAKELEVEL
    # and prints "Entering directory" lines around its output.
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    return _check([make, "--no-print-directory", "-n", target, f"VENV={venv}"], cwd=ROOT, env=env)


def _stamps(dry_run: str) -> list[str]:
    """The install stamps a dry run would create, in order."""
    return re.findall(r"^touch (\S*/\.(?:created|installed-\S+))$", dry_run, re.MULTILINE)


def _stamp_all(make: str, target: str, venv: Path) -> None:
    """Create what ``make target`` would install as if it had run (the stamps only)."""
    venv.mkdir(exist_ok=True)
    for stamp in _stamps(_dry_run(make, target, venv)):
        Path(stamp).touch()


def test_make_demo_installs_aiorocketmq_without_extras(make: str, tmp_path: Path) -> None:
    out = _dry_run(make, "demo", tmp_path / "venv")
    assert _INSTALLS_PROJECT.search(out), out
    assert "-with-" not in out, f"make demo installs extras:\n{out}"
    for extra in ("spark", "fastapi"):
        assert extra not in out, f"make demo names the {extra} extra:\n{out}"
    assert out.rstrip().endswith("-m aiorocket demo")


def test_make_test_installs_every_extra_then_checks_docs_before_unit(
    make: str, tmp_path: Path
) -> None:
    out = _dry_run(make, "test", tmp_path / "venv")
    extras = _project()["optional-dependencies"]
    assert isinstance(extras, dict)
    for extra in extras.keys() - {"bench"}:
        assert re.search(rf"\b{extra}\b", out), f"make test does not install the {extra} extra"
    assert out.index("mkdocs build --strict") < out.index("bin/pytest")


def test_make_test_after_demo_adds_only_the_extras(make: str, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _stamp_all(make, "demo", venv)
    out = _dry_run(make, "test", venv)
    assert not _INSTALLS_PROJECT.search(out), f"make test reinstalls aiorocketmq:\n{out}"
    assert "-m venv" not in out
    assert re.search(r"\bspark\b", out)
    assert "bin/pytest" in out


def test_make_demo_after_test_installs_nothing(make: str, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    _stamp_all(make, "test", venv)
    assert _dry_run(make, "demo", venv).strip() == f"{venv}/bin/python -m aiorocket demo"
