"""The distribution as a user gets it, and what ``make`` installs.

The sdist and both wheels are built once per session as ``make dist`` builds them
(tests/packaging/wheels.py: ``python -m build``, ``auditwheel repair`` for the manylinux
wheel, ``AIOROCKET_PURE_PYTHON=1`` for the pure one) and checked as PyPI renders them; each
wheel is installed into a fresh virtualenv with ``CC=false`` (any compile fails, so it proves
nothing needs a compiler), and that interpreter imports aiorocket, runs ``aiorocket --help``
and the README's snippets against a test broker. The Makefile tests read ``make -n`` (a dry
run) against an empty or stamped virtualenv directory.
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
from pathlib import Path

import pytest

from aiorocket.embedded import EmbeddedBroker
from tests._harness.broker import FAST_DELAYS
from tests._harness.snippets import Snippet, run
from tests.packaging.wheels import (
    Dist,
    Installed,
    build,
    checked,
    install,
    readme_snippets,
    user_env,
)

# Retries come back fast, as in the docs' snippet tests.
pytestmark = pytest.mark.broker(delay_levels=FAST_DELAYS)

ROOT = Path(__file__).resolve().parents[2]
#: seconds one README program may take
SNIPPET_TIMEOUT = 90.0
#: the compiled modules setup.py builds, as dotted names
COMPILED = (
    "aiorocket._protocol._speedups",
    "aiorocket.embedded._store_speedups",
    "aiorocket.integrations.spark._columns",
)
README_SNIPPETS = readme_snippets()


def _project() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as f:
        project: dict[str, object] = tomllib.load(f)["project"]
    return project


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Dist:
    """The sdist and both wheels, built as ``make dist`` builds them."""
    for module, extra in (("build", "release"), ("auditwheel", "release")):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f'needs {module}: pip install "aiorocketmq[{extra}]"')
    return build(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def installed(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The manylinux wheel in a fresh virtualenv, installed with ``CC=false``."""
    return install(dist.wheel, tmp_path_factory.mktemp("wheelenv"))


@pytest.fixture(scope="session")
def installed_pure(dist: Dist, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """The pure-Python wheel in a fresh virtualenv, installed with ``CC=false``."""
    return install(dist.pure, tmp_path_factory.mktemp("pureenv"))


# -- the artefacts -----------------------------------------------------------------------------


@pytest.mark.slow
def test_twine_check_passes_strict(dist: Dist) -> None:
    if importlib.util.find_spec("twine") is None:
        pytest.skip('needs twine: pip install "aiorocketmq[release]"')
    out = checked(
        [
            sys.executable,
            "-m",
            "twine",
            "check",
            "--strict",
            str(dist.sdist),
            str(dist.wheel),
            str(dist.pure),
        ],
        cwd=ROOT,
    )
    assert out.count("PASSED") == 3, out


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
def test_the_compiled_wheel_is_tagged_manylinux(dist: Dist) -> None:
    # A package index refuses a linux_x86_64 wheel; auditwheel checked its symbols and libraries
    tags = dist.wheel.name.removesuffix(".whl").split("-")[-1].split(".")
    assert all(t.startswith("manylinux") for t in tags), dist.wheel.name
    assert not list(dist.wheel.parent.glob("*-linux_*.whl"))


@pytest.mark.slow
def test_the_pure_wheel_is_for_any_platform(dist: Dist) -> None:
    assert dist.pure.name.endswith("-py3-none-any.whl"), dist.pure.name
    names = zipfile.ZipFile(dist.pure).namelist()
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    assert not [n for n in names if n.endswith(suffixes) or n.endswith(".c")]
    assert "aiorocket/_protocol/frame.py" in names
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
def test_installed_pure_wheel_uses_the_pure_codec(installed_pure: Installed) -> None:
    out = installed_pure.run("-c", "from aiorocket._protocol import accel; print(accel.describe())")
    assert out.startswith("aiorocket: pure-Python codec"), out


@pytest.mark.slow
def test_installed_command_line_runs(installed: Installed) -> None:
    done = subprocess.run(
        [str(installed.scripts / "aiorocket"), "--help"],
        cwd=installed.cwd,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: aiorocket")
    for command in ("broker", "run", "demo", "admin"):
        assert command in done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("wheel", ["manylinux", "pure"])
@pytest.mark.parametrize("snippet", README_SNIPPETS, ids=lambda s: s.id)
async def test_readme_snippet_with_the_installed_wheel(
    snippet: Snippet,
    wheel: str,
    request: pytest.FixtureRequest,
    broker: EmbeddedBroker,
    tmp_path: Path,
) -> None:
    env: Installed = request.getfixturevalue(
        "installed" if wheel == "manylinux" else "installed_pure"
    )
    # The broker serves on this test's event loop: the blocking run goes to a thread.
    outcome = await asyncio.to_thread(
        run,
        snippet,
        python=str(env.python),
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
    return checked([make, "--no-print-directory", "-n", target, f"VENV={venv}"], cwd=ROOT, env=env)


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
