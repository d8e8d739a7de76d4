"""An Apache RocketMQ install by version, resolved from Maven Central.

Apache publishes each release's modules to Maven Central; their dependency closure is what the
binary distribution's ``lib/`` holds. ``pom.xml`` beside this file names the modules (the
version a property, a profile per release line); :func:`resolve` has Maven copy the closure into
``<cache>/rocketmq-<version>/lib`` — the layout ``ROCKETMQ_HOME`` accepts — where ``<cache>`` is
``$AIOROCKET_CACHE`` or ``$XDG_CACHE_HOME/aiorocket`` (``~/.cache/aiorocket``). An install is
resolved once: the directory appears whole (built beside it, then renamed) or not at all.

Standard library only, so that ``make rocketmq`` runs it before any virtualenv exists::

    python3 -m tests.interop.apache.maven 5.5.0     # prints the install's directory

Not every release is whole on Maven Central: 4.9.6 and 4.9.8 published their client-side
modules only (no ``rocketmq-namesrv``, ``-broker`` or ``-filter``). Such a version fails with one
line naming the coordinates Maven could not find; 4.9.7 is the newest whole 4.9.x.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["POM", "ResolveError", "cache_root", "install_dir", "resolve"]

#: the pom naming the artifacts (coordinates only)
POM = Path(__file__).with_name("pom.xml")

#: written last into a resolved install: the version and the jars Maven copied
MARKER = ".resolved"

#: seconds Maven may take (a first resolution of 5.x downloads ~150 jars, 10-40 s here)
TIMEOUT = 900.0

_PARTIAL_4_9 = " (4.9.6 and 4.9.8 published their client modules only; 4.9.7 is whole)"
_VERSION = re.compile(r"^\d+\.\d+\.\d+$")
# Maven's summary of what it could not get, e.g. "The following artifacts could not be resolved:
# org.apache.rocketmq:rocketmq-namesrv:jar:4.9.8, ...: Could not find artifact ..." (3.8), or
# "Could not find artifact org.apache.rocketmq:rocketmq-broker:jar:4.9.8 in central (...)".
_UNRESOLVED_LIST = re.compile(
    r"following artifacts could not be resolved: ((?:[\w.\-]+:[\w.\-]+:\w+:[\w.\-]*\w(?:, )?)+)"
)
_COORDINATE = re.compile(r"([\w.\-]+):([\w.\-]+):(?:[\w\-]+:)?(?:[\w\-]+:)?(\d[\w.\-]*)")
_NOT_FOUND = re.compile(r"Could not find artifact (\S+)")
_TRANSFER = re.compile(r"Could not transfer artifact (\S+) from/to \S+ \(\S+\): (.*?)(?: ->|$)")


class ResolveError(RuntimeError):
    """An install could not be resolved; the message is one line saying what is missing."""


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """Where resolved installs live: ``$AIOROCKET_CACHE``, else ``$XDG_CACHE_HOME/aiorocket``,
    else ``~/.cache/aiorocket``."""
    env = os.environ if env is None else env
    if env.get("AIOROCKET_CACHE"):
        return Path(env["AIOROCKET_CACHE"]).expanduser()
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "aiorocket"


def install_dir(version: str, env: Mapping[str, str] | None = None) -> Path:
    """The directory of the install of ``version`` (resolved or not)."""
    return cache_root(env) / f"rocketmq-{version}"


def _coordinate(raw: str) -> str:
    """``group:artifact:version`` of Maven's ``group:artifact:jar:version`` (or ``:pom:``)."""
    m = _COORDINATE.fullmatch(raw.strip().rstrip(",."))
    return f"{m.group(1)}:{m.group(2)}:{m.group(3)}" if m else raw.strip()


def _failure(version: str, output: str) -> str:
    """One line saying why Maven failed, naming coordinates where it names them."""
    text = " ".join(output.split())
    listed = _UNRESOLVED_LIST.search(text)
    if listed:
        missing = [_coordinate(c) for c in listed.group(1).split(", ")]
    else:
        missing = [_coordinate(c) for c in _NOT_FOUND.findall(text)]
    missing = list(dict.fromkeys(missing))
    if missing:
        return f"Apache RocketMQ {version}: not on Maven Central: {', '.join(missing)}" + (
            _PARTIAL_4_9 if version.startswith("4.9.") else ""
        )
    transfer = _TRANSFER.search(text)
    if transfer:
        return (
            f"Apache RocketMQ {version}: cannot download {_coordinate(transfer.group(1))}: "
            f"{transfer.group(2)}"
        )
    errors = [line for line in output.splitlines() if "[ERROR]" in line]
    first = errors[0].replace("[ERROR]", "").strip() if errors else output.strip()[-300:]
    return f"Apache RocketMQ {version}: Maven failed: {first}"


def _maven_argv(mvn: str, version: str, out: Path) -> list[str]:
    line = "line4" if version.startswith("4.") else "line5"
    return [
        mvn,
        "--batch-mode",
        "--no-transfer-progress",
        # a failed look-up is cached in ~/.m2 for a day: look again (this runs only when the
        # install is not resolved yet)
        "--update-snapshots",
        "-f",
        str(POM),
        f"-Drocketmq.version={version}",
        "-P",
        line,
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out}",
    ]


def resolve(version: str, env: Mapping[str, str] | None = None, *, mvn: str | None = None) -> Path:
    """The install of ``version``, resolved with Maven the first time; its directory (with
    ``lib/*.jar``).

    Raises:
        ResolveError: the version is malformed, Maven is missing, or an artifact cannot be
            resolved (the message names its coordinates).
    """
    env = os.environ if env is None else env
    if not _VERSION.match(version):
        raise ResolveError(f"ROCKETMQ_VERSION={version!r}: expected a release such as 5.5.0")
    target = install_dir(version, env)
    if (target / MARKER).is_file():
        return target
    mvn = mvn or shutil.which("mvn", path=env.get("PATH"))
    if mvn is None:
        raise ResolveError(
            f"Apache RocketMQ {version}: Maven (mvn) is not on PATH; install it, "
            "or set ROCKETMQ_HOME to an install"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    building = target.with_name(f"{target.name}.partial-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    try:
        proc = subprocess.run(
            _maven_argv(mvn, version, building / "lib"),
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
            env=dict(env),
            cwd=POM.parent,
        )
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(building, ignore_errors=True)
        raise ResolveError(f"Apache RocketMQ {version}: Maven ran over {TIMEOUT:.0f} s") from exc
    jars = sorted(p.name for p in (building / "lib").glob("*.jar"))
    if proc.returncode != 0 or not jars:
        shutil.rmtree(building, ignore_errors=True)
        raise ResolveError(_failure(version, proc.stdout + proc.stderr))
    (building / MARKER).write_text(f"version={version}\n" + "".join(f"{j}\n" for j in jars))
    # another resolver may have finished first: theirs is as good as ours
    if (target / MARKER).is_file():
        shutil.rmtree(building, ignore_errors=True)
        return target
    shutil.rmtree(target, ignore_errors=True)
    with contextlib.suppress(OSError):
        building.rename(target)
    shutil.rmtree(building, ignore_errors=True)
    if not (target / MARKER).is_file():
        raise ResolveError(f"Apache RocketMQ {version}: could not move the install into {target}")
    return target


def main(argv: Sequence[str]) -> int:
    """``python -m tests.interop.apache.maven VERSION``: resolve, print the directory."""
    if len(argv) != 1:
        print("usage: python -m tests.interop.apache.maven VERSION", file=sys.stderr)
        return 2
    try:
        print(resolve(argv[0]))
    except ResolveError as exc:
        print(f"make rocketmq: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
