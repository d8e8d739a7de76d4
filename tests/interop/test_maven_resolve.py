"""An Apache RocketMQ install by version: ``ROCKETMQ_VERSION`` resolved from Maven Central into
the cache (``tests/interop/apache/maven.py``), with a stand-in ``mvn`` so that these tests need
no network. The real resolution runs in every CI run (``.ci/run``, ``make interop``)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.interop.apache import install as inst
from tests.interop.apache import maven

ROOT = Path(__file__).resolve().parents[2]

#: what Maven 3.8 prints when 4.9.8's servers are asked for (they were never published)
MAVEN_4_9_8 = """\
[INFO] Scanning for projects...
[WARNING] The POM for org.apache.rocketmq:rocketmq-namesrv:jar:4.9.8 is missing, no dependency \
information available
[ERROR] Failed to execute goal on project apache-rocketmq-install: Could not resolve dependencies \
for project io.aiorocket.interop:apache-rocketmq-install:pom:1: The following artifacts could not \
be resolved: org.apache.rocketmq:rocketmq-namesrv:jar:4.9.8, \
org.apache.rocketmq:rocketmq-broker:jar:4.9.8: Could not find artifact \
org.apache.rocketmq:rocketmq-namesrv:jar:4.9.8 in central (https://repo.maven.apache.org/maven2) \
-> [Help 1]
[ERROR] Re-run Maven using the -X switch to enable full debug logging.
"""

#: a stand-in for ``mvn``: logs its argv, then copies "jars" for the version into the
#: output directory, or prints $FAKE_MVN_OUTPUT and fails when that is set
FAKE_MVN = """\
#!{python}
import os, sys, zipfile
from pathlib import Path
with open(os.environ["FAKE_MVN_LOG"], "a") as log:
    log.write(" ".join(sys.argv[1:]) + "\\n")
if os.environ.get("FAKE_MVN_OUTPUT"):
    print(Path(os.environ["FAKE_MVN_OUTPUT"]).read_text())
    sys.exit(1)
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("-D") and "=" in a)
out = Path(args["outputDirectory"])
out.mkdir(parents=True)
version = args["rocketmq.version"]
for name in ("common", "broker", "namesrv"):
    with zipfile.ZipFile(out / f"rocketmq-{{name}}-{{version}}.jar", "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\\n")
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with the stand-in ``mvn``, a ``java``/``javac``, a cache under
    ``tmp_path`` and neither ROCKETMQ variable."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mvn").write_text(FAKE_MVN.format(python=sys.executable))
    for name in ("java", "javac"):
        (bin_dir / name).write_text("#!/bin/sh\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    return {
        "PATH": str(bin_dir),
        "AIOROCKET_CACHE": str(tmp_path / "cache"),
        "FAKE_MVN_LOG": str(tmp_path / "mvn.log"),
    }


def mvn_calls(env: dict[str, str]) -> list[str]:
    log = Path(env["FAKE_MVN_LOG"])
    return log.read_text().splitlines() if log.exists() else []


def test_a_version_is_resolved_once_into_the_cache(env: dict[str, str]) -> None:
    found = inst.find_install({**env, "ROCKETMQ_VERSION": "5.5.0"})
    assert found is not None
    assert found.home == (Path(env["AIOROCKET_CACHE"]) / "rocketmq-5.5.0").resolve()
    assert (found.version, found.v5) == ("5.5.0", True)
    assert sorted(p.name for p in found.lib.glob("*.jar")) == [
        "rocketmq-broker-5.5.0.jar",
        "rocketmq-common-5.5.0.jar",
        "rocketmq-namesrv-5.5.0.jar",
    ]
    (call,) = mvn_calls(env)
    argv = call.split()
    assert argv[argv.index("-f") + 1] == str(maven.POM)
    assert argv[argv.index("-P") + 1] == "line5"
    assert "-Drocketmq.version=5.5.0" in argv
    assert "dependency:copy-dependencies" in argv
    # the second look finds it in the cache: Maven is not run again
    again = inst.find_install({**env, "ROCKETMQ_VERSION": "5.5.0"})
    assert again == found
    assert len(mvn_calls(env)) == 1
    # nothing half-built is left beside it
    assert [p.name for p in Path(env["AIOROCKET_CACHE"]).iterdir()] == ["rocketmq-5.5.0"]


def test_a_4x_version_takes_the_4x_modules(env: dict[str, str]) -> None:
    found = inst.find_install({**env, "ROCKETMQ_VERSION": "4.9.7"})
    assert found is not None
    assert found.version == "4.9.7"
    argv = mvn_calls(env)[0].split()
    assert argv[argv.index("-P") + 1] == "line4"


def test_rocketmq_home_wins_over_the_version(env: dict[str, str], tmp_path: Path) -> None:
    home = inst.find_install({**env, "ROCKETMQ_VERSION": "5.3.3"})
    assert home is not None
    found = inst.find_install({**env, "ROCKETMQ_HOME": str(home.home), "ROCKETMQ_VERSION": "4.9.7"})
    assert found is not None
    assert found.version == "5.3.3"
    assert len(mvn_calls(env)) == 1


def test_an_unpublished_release_fails_in_one_line_naming_coordinates(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "out.txt").write_text(MAVEN_4_9_8)
    env["FAKE_MVN_OUTPUT"] = str(tmp_path / "out.txt")
    with pytest.raises(inst.InstallError) as info:
        inst.find_install({**env, "ROCKETMQ_VERSION": "4.9.8"})
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "Apache RocketMQ 4.9.8: not on Maven Central: org.apache.rocketmq:rocketmq-namesrv:4.9.8, "
        "org.apache.rocketmq:rocketmq-broker:4.9.8"
    ), message
    assert not any(Path(env["AIOROCKET_CACHE"]).iterdir())


@pytest.mark.parametrize(
    ("output", "says"),
    [
        (
            "[ERROR] Failed to execute goal on project x: Could not resolve dependencies for "
            "project x:x:pom:1: Could not transfer artifact org.apache.rocketmq:rocketmq-broker:"
            "jar:5.5.0 from/to central (https://repo.maven.apache.org/maven2): "
            "repo.maven.apache.org: Name or service not known -> [Help 1]",
            "cannot download org.apache.rocketmq:rocketmq-broker:5.5.0: "
            "repo.maven.apache.org: Name or service not known",
        ),
        ("[ERROR] The goal you specified requires a project", "Maven failed: The goal you"),
    ],
)
def test_other_maven_failures_are_one_line(output: str, says: str) -> None:
    message = maven._failure("5.5.0", output)
    assert "\n" not in message
    assert says in message, message


def test_a_malformed_version_or_no_maven_says_so(env: dict[str, str]) -> None:
    with pytest.raises(inst.InstallError, match=r"ROCKETMQ_VERSION='5\.5': expected"):
        inst.find_install({**env, "ROCKETMQ_VERSION": "5.5"})
    with pytest.raises(inst.InstallError, match=r"Maven \(mvn\) is not on PATH"):
        inst.find_install({**env, "PATH": "/nonexistent", "ROCKETMQ_VERSION": "5.5.0"})


def test_the_pom_names_coordinates_only() -> None:
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    root = ET.parse(maven.POM).getroot()
    tag = "{http://maven.apache.org/POM/4.0.0}"
    allowed = {
        "modelVersion",
        "groupId",
        "artifactId",
        "version",
        "packaging",
        "properties",
        "dependencies",
        "profiles",
        "build",
    }
    assert {child.tag.removeprefix(tag) for child in root} <= allowed
    deps = root.findall(".//m:dependency", ns)
    assert len(deps) >= 5
    for dep in deps:
        assert {c.tag.removeprefix(tag) for c in dep} == {"groupId", "artifactId", "version"}
        assert dep.findtext("m:groupId", namespaces=ns) == "org.apache.rocketmq"
        assert dep.findtext("m:version", namespaces=ns) == "${rocketmq.version}"
    # no repository of its own: Maven Central, as any project
    assert root.find(".//m:repositories", ns) is None
    assert root.find(".//m:pluginRepositories", ns) is None
    assert root.find("m:build/m:plugins", ns) is None


def test_make_rocketmq_needs_a_version() -> None:
    env = {k: v for k, v in os.environ.items() if k != "ROCKETMQ_VERSION"}
    proc = subprocess.run(
        ["make", "--no-print-directory", "-s", "rocketmq"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "make rocketmq: set ROCKETMQ_VERSION" in proc.stdout + proc.stderr


def test_no_jar_class_file_or_fetched_source_is_committed() -> None:
    proc = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=60
    )
    if proc.returncode != 0:
        pytest.skip(f"not a git checkout: {proc.stderr.strip()}")
    files = proc.stdout.splitlines()
    assert not [f for f in files if f.endswith((".jar", ".class", ".war", ".zip"))]
    # the Java sources committed are the tests' own programs, none from org.apache.rocketmq
    for source in (ROOT / f for f in files if f.endswith(".java")):
        assert "package org.apache.rocketmq" not in source.read_text(), source
