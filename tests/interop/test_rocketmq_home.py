"""How the interop suite finds Apache RocketMQ: ``ROCKETMQ_HOME``, the version, the JDK, and
what a run does without an install or with a broken one."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.interop.apache import cluster
from tests.interop.apache import install as inst

ROOT = Path(__file__).resolve().parents[2]
APACHE = ROOT / "tests" / "interop" / "apache"


def fake_install(root: Path, jars: dict[str, dict[str, str]] | None = None) -> Path:
    """A directory laid out like an Apache binary install; ``jars`` maps file names in
    ``lib/`` to the members each jar holds."""
    lib = root / "lib"
    lib.mkdir(parents=True)
    for name, members in (jars or {"rocketmq-common-4.9.8.jar": {}}).items():
        with zipfile.ZipFile(lib / name, "w") as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
            for member, text in members.items():
                z.writestr(member, text)
    return root


@pytest.fixture
def jdk_env(tmp_path: Path) -> dict[str, str]:
    """An environment whose JAVA_HOME holds a ``java`` and a ``javac``."""
    bin_dir = tmp_path / "jdk" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("java", "javac"):
        (bin_dir / tool).write_text("#!/bin/sh\n")
        (bin_dir / tool).chmod(0o755)
    return {"JAVA_HOME": str(tmp_path / "jdk"), "PATH": ""}


def test_unset_means_no_install() -> None:
    assert inst.find_install({}) is None
    assert inst.find_install({"ROCKETMQ_HOME": "  "}) is None


def test_version_and_tools_from_the_install(tmp_path: Path, jdk_env: dict[str, str]) -> None:
    home = fake_install(tmp_path / "rmq", {"rocketmq-client-5.3.3.jar": {}, "netty-all.jar": {}})
    found = inst.find_install({**jdk_env, "ROCKETMQ_HOME": str(home)})
    assert found is not None
    assert (found.version, found.v5, found.version_name) == ("5.3.3", True, "V5_3_3")
    assert found.ordinal == 479  # MQVersion.Version.V5_3_3
    assert found.java == str(tmp_path / "jdk" / "bin" / "java")
    assert found.javac == str(tmp_path / "jdk" / "bin" / "javac")
    argv = found.java_argv("Main", "a", classpath=[tmp_path / "classes"], jvm_options=["-Dx=1"])
    assert argv[0] == found.java
    assert argv[-2:] == ["Main", "a"]
    assert argv[argv.index("-cp") + 1] == f"{tmp_path / 'classes'}:{home.resolve() / 'lib'}/*"
    assert "-Dx=1" in argv
    assert "--add-opens=java.base/java.nio=ALL-UNNAMED" in argv


def test_version_from_maven_metadata_of_a_renamed_jar(
    tmp_path: Path, jdk_env: dict[str, str]
) -> None:
    meta = "META-INF/maven/org.apache.rocketmq/rocketmq-common/pom.properties"
    home = fake_install(tmp_path / "rmq", {"rocketmq-common.jar": {meta: "version=4.9.8\n"}})
    found = inst.find_install({**jdk_env, "ROCKETMQ_HOME": str(home)})
    assert found is not None
    assert (found.version, found.v5) == ("4.9.8", False)


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ("missing", "is not a directory"),
        ("empty", "has no lib/*.jar"),
        ("no-rocketmq", "no rocketmq-*.jar"),
        ("no-version", "cannot tell the RocketMQ version"),
    ],
)
def test_unusable_install_says_why_in_one_line(
    tmp_path: Path, jdk_env: dict[str, str], layout: str, says: str
) -> None:
    home = tmp_path / "rmq"
    if layout == "empty":
        home.mkdir()
    elif layout == "no-rocketmq":
        fake_install(home, {"netty-all-4.1.65.jar": {}})
    elif layout == "no-version":
        fake_install(home, {"rocketmq-common.jar": {}})
    with pytest.raises(inst.InstallError, match=re.escape(says)) as info:
        inst.find_install({**jdk_env, "ROCKETMQ_HOME": str(home)})
    assert "\n" not in str(info.value)


def test_no_jdk_is_unusable(tmp_path: Path) -> None:
    home = fake_install(tmp_path / "rmq")
    with pytest.raises(inst.InstallError, match="no JDK"):
        inst.find_install({"ROCKETMQ_HOME": str(home), "PATH": str(tmp_path / "empty")})


def run_collection(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """pytest over the Apache interop modules in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-ra", "-p", "no:cacheprovider", str(APACHE), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=120,
        check=False,
    )


def test_without_an_install_each_module_skips_with_one_line() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("ROCKETMQ_HOME", "ROCKETMQ_VERSION")}
    env["CI"] = "true"
    proc = run_collection(env)
    assert proc.returncode == 0, proc.stdout[-3000:]
    modules = sorted(p.name for p in APACHE.glob("test_*.py"))
    skips = [ln for ln in proc.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert len(skips) == len(modules), proc.stdout[-3000:]
    for name in modules:
        (line,) = [ln for ln in skips if f"/{name}" in ln]
        assert line.startswith("SKIPPED [1] "), line
        assert "neither ROCKETMQ_HOME nor ROCKETMQ_VERSION is set" in line, line
    assert re.search(rf"\b{len(modules)} skipped\b", proc.stdout), proc.stdout[-500:]


def test_a_broken_install_stops_the_run_with_one_message(tmp_path: Path) -> None:
    (tmp_path / "rmq").mkdir()
    env = {**os.environ, "ROCKETMQ_HOME": str(tmp_path / "rmq")}
    proc = run_collection(env)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-3000:]
    assert f"interop: ROCKETMQ_HOME={tmp_path / 'rmq'} has no lib/*.jar" in proc.stdout
    assert "no tests ran" in proc.stdout, proc.stdout[-3000:]


def test_free_port_leaves_room_for_a_broker() -> None:
    port = cluster.free_port((-2, -1, 0, 1))
    for d in (-2, -1, 0, 1):
        with socket.socket() as s:
            s.bind(("0.0.0.0", port + d))
