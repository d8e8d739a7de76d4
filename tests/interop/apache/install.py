"""An Apache RocketMQ install: where it is, which version, how its programs run here.

RocketMQ users have Apache RocketMQ as a binary distribution whose ``lib/`` holds every jar;
``ROCKETMQ_HOME`` (Apache's own variable) names it. Nothing else of the install is used: each
process runs as ``java -cp "$ROCKETMQ_HOME/lib/*" <main class>`` on the machine's JDK, and the
harness writes its own configuration and logging files, so the same code drives 4.9.x and 5.x
(the version is read off the install's jars). Servers: ``cluster.py``; Java client programs:
``java_client.py``.

* ``ROCKETMQ_HOME`` wins. Without it, ``ROCKETMQ_VERSION=5.5.0`` resolves that release from
  Maven Central into a cache outside the repository (``maven.py``) and uses it.
* Neither: the interop modules are skipped, one line each (``conftest.py``).
* Set but unusable (no jars, no JDK, unknown version, not resolvable): the run stops at
  collection with one message saying what is wrong.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import subprocess
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.interop.apache import maven

__all__ = [
    "ADMIN_MAIN",
    "BROKER_MAIN",
    "CLIENT_HEAP",
    "ENV",
    "JAVA55_SOURCES",
    "JAVA5_SOURCES",
    "JAVA_SOURCES",
    "NO_INSTALL",
    "NAMESRV_MAIN",
    "PROXY_MAIN",
    "SERVER_HEAP",
    "VERSION_ENV",
    "Install",
    "InstallError",
    "compile_java",
    "find_install",
    "home_options",
    "install",
    "require_install",
    "run_admin",
    "run_java",
    "tail_of",
    "tools_options",
    "write_home",
]

#: Apache RocketMQ's own variable naming an install
ENV = "ROCKETMQ_HOME"
#: a release to resolve from Maven Central (``maven.py``) when ``ROCKETMQ_HOME`` is not set
VERSION_ENV = "ROCKETMQ_VERSION"
#: why an interop test is skipped when neither variable names an install
NO_INSTALL = (
    f"neither {ENV} nor {VERSION_ENV} is set: no Apache RocketMQ install to test against "
    "(make interop ROCKETMQ_VERSION=5.5.0)"
)
#: the Java client programs the tests compile (ours, written for these tests)
JAVA_SOURCES = Path(__file__).with_name("java")
#: the programs that need a 5.x install (``java5/``); they print with ``java/JsonOut.java``
JAVA5_SOURCES = (
    *sorted(Path(__file__).with_name("java5").glob("*.java")),
    JAVA_SOURCES / "JsonOut.java",
)
#: the programs that need a 5.5 install (``java55/``: priorities, recall)
JAVA55_SOURCES = (
    *sorted(Path(__file__).with_name("java55").glob("*.java")),
    JAVA_SOURCES / "JsonOut.java",
)

#: JVM options of every process: on JDK 9+ RocketMQ reaches into ``java.nio`` internals by
#: reflection (``UtilAll.cleanBuffer`` unmapping a ``MappedByteBuffer``, which a broker does
#: when it recovers after SIGKILL and destroys index files newer than the checkpoint), and the
#: JDK refuses it unless the packages are opened; small heaps, since a test runs several.
JVM_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:-OmitStackTraceInFastThrow",
    "-Dfile.encoding=UTF-8",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.nio=ALL-UNNAMED",
    "--add-opens=java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens=java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports=java.base/jdk.internal.ref=ALL-UNNAMED",
)
SERVER_HEAP = ("-Xms128m", "-Xmx768m", "-XX:MaxDirectMemorySize=1g")
CLIENT_HEAP = ("-Xms32m", "-Xmx512m")

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
ADMIN_MAIN = "org.apache.rocketmq.tools.command.MQAdminStartup"
PROXY_MAIN = "org.apache.rocketmq.proxy.ProxyStartup"

#: The logging configuration every process gets, written by the harness: one file per process.
#: 4.9.x servers load ``$rocketmqHome/conf/logback_<role>.xml`` themselves; 5.x loads the file
#: named by ``logback.configurationFile`` (its shaded logback maps the class names).
LOGBACK = """<?xml version="1.0" encoding="UTF-8"?>
<configuration>
  <appender name="FILE" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <append>true</append>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %-5p [%t] %c{{1}} - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="FILE"/></root>
</configuration>
"""

_VERSION_JAR = re.compile(r"^rocketmq-(?:common|client|broker|remoting)-(\d+\.\d+\.\d+)\b")


class InstallError(AssertionError):
    """The install cannot run here, or one of its processes failed; says why."""


@dataclass(frozen=True)
class Install:
    """A usable Apache RocketMQ install: ``home/lib/*.jar`` and a JDK to run it."""

    home: Path
    version: str
    java: str
    javac: str

    @property
    def lib(self) -> Path:
        """The jars' directory."""
        return self.home / "lib"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        """``(5, 3, 3)`` for ``"5.3.3"``."""
        return tuple(int(p) for p in self.version.split("."))

    @property
    def v5(self) -> bool:
        """Whether this is a 5.x install (where several behaviours differ from 4.9.x)."""
        return self.version_tuple >= (5,)

    @property
    def ordinal(self) -> int:
        """The ``MQVersion.Version`` ordinal its servers answer with: 4.9.x is ``393 + 2x``
        (409 for 4.9.8), 5.x.y ``413 + 20x + 2y`` (479 for 5.3.3, 513 for 5.5.0).

        Raises:
            InstallError: a release line the formula does not cover.
        """
        major, minor, patch = self.version_tuple[:3]
        if (major, minor) == (4, 9):
            return 393 + 2 * patch
        if major == 5:
            return 413 + 20 * minor + 2 * patch
        raise InstallError(f"no MQVersion ordinal known for {self.version}")

    @property
    def version_name(self) -> str:
        """The version as RocketMQ names it on the wire and in ``mqadmin``: ``V4_9_8``."""
        return "V" + self.version.replace(".", "_")

    def classpath(self, *extra: Path | str) -> str:
        """``extra`` entries, then every jar of the install."""
        return os.pathsep.join([*map(str, extra), str(self.lib / "*")])

    def java_argv(
        self,
        main: str,
        *args: str,
        classpath: Sequence[Path | str] = (),
        jvm_options: Sequence[str] = (),
        heap: Sequence[str] = CLIENT_HEAP,
    ) -> list[str]:
        """``java`` with the harness's options running ``main`` of the install (and of
        ``classpath``, searched first)."""
        return [
            self.java,
            *JVM_OPTIONS,
            *heap,
            *jvm_options,
            "-cp",
            self.classpath(*classpath),
            main,
            *args,
        ]


def _jdk_tool(name: str, env: Mapping[str, str]) -> str | None:
    java_home = env.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name, path=env.get("PATH"))


def _jar_version(jar: Path) -> str | None:
    """The version in a RocketMQ jar's Maven metadata (a renamed jar keeps it)."""
    with contextlib.suppress(OSError, zipfile.BadZipFile), zipfile.ZipFile(jar) as z:
        for name in z.namelist():
            if name.startswith("META-INF/maven/org.apache.rocketmq/") and name.endswith(
                "/pom.properties"
            ):
                for line in z.read(name).decode("latin-1").splitlines():
                    if line.startswith("version="):
                        found = re.match(r"\d+\.\d+\.\d+", line[len("version=") :])
                        if found:
                            return found.group(0)
    return None


def _detect_version(lib: Path) -> str | None:
    jars = sorted(lib.glob("rocketmq-*.jar"))
    for jar in jars:
        m = _VERSION_JAR.match(jar.name)
        if m:
            return m.group(1)
    for jar in jars:
        found = _jar_version(jar)
        if found:
            return found
    return None


def find_install(env: Mapping[str, str] | None = None) -> Install | None:
    """The install ``ROCKETMQ_HOME`` names in ``env`` (default: this process's) or, without
    it, the release ``ROCKETMQ_VERSION`` names (resolved from Maven Central the first time);
    ``None`` when neither is set.

    Raises:
        InstallError: the install is unusable, cannot be resolved, or there is no JDK; the
            message is one line saying which.
    """
    env = os.environ if env is None else env
    raw = env.get(ENV, "").strip()
    wanted = env.get(VERSION_ENV, "").strip()
    if not raw and wanted:
        try:
            raw = str(maven.resolve(wanted, env))
        except maven.ResolveError as exc:
            raise InstallError(str(exc)) from None
    if not raw:
        return None
    home = Path(raw).expanduser().resolve()
    lib = home / "lib"
    if not home.is_dir():
        raise InstallError(f"{ENV}={raw} is not a directory")
    if not any(lib.glob("*.jar")):
        raise InstallError(
            f"{ENV}={raw} has no lib/*.jar: it must name an Apache RocketMQ binary install"
        )
    if not any(lib.glob("rocketmq-*.jar")):
        raise InstallError(f"{ENV}={raw}: lib/ holds no rocketmq-*.jar")
    version = _detect_version(lib)
    if version is None:
        raise InstallError(
            f"{ENV}={raw}: cannot tell the RocketMQ version (no lib/rocketmq-common-<version>.jar "
            "and no Maven metadata in its jars)"
        )
    if wanted and not env.get(ENV, "").strip() and version != wanted:
        raise InstallError(f"{VERSION_ENV}={wanted} resolved to an install of {version}: {raw}")
    java, javac = _jdk_tool("java", env), _jdk_tool("javac", env)
    if java is None or javac is None:
        raise InstallError(
            f"{ENV}={raw} is set but no JDK was found (java and javac on PATH or in JAVA_HOME)"
        )
    return Install(home=home, version=version, java=java, javac=javac)


@functools.cache
def install() -> Install | None:
    """:func:`find_install` for this process, looked at once."""
    return find_install()


def require_install() -> Install:
    """The install, or skip the calling test with one line when there is none.

    Raises:
        InstallError: ``ROCKETMQ_HOME`` is set but unusable.
    """
    found = install()
    if found is None:
        pytest.skip(NO_INSTALL)
    return found


def tail_of(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log file (a note when there is none)."""
    try:
        text = path.read_bytes()[-32768:].decode("utf-8", errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def write_home(home: Path, role: str, files: Mapping[str, str] | None = None) -> Path:
    """A process's ``rocketmqHome``: ``conf/`` with its logging configuration (and
    ``files``), ``logs/``; returns the logging configuration's path."""
    conf = home / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    (home / "logs").mkdir(exist_ok=True)
    logback = conf / f"logback_{role}.xml"
    logback.write_text(LOGBACK.format(log=home / "logs" / f"{home.name}.log"))
    for file_name, text in (files or {}).items():
        (conf / file_name).write_text(text)
    return logback


def home_options(home: Path, logback: Path) -> list[str]:
    # user.home: where 4.9.x writes what it keeps beside the store (and client logs);
    # rocketmq.home.dir: the servers' rocketmqHome, and where ACL 1.0 reads conf/plain_acl.yml
    return [
        f"-Duser.home={home}",
        f"-Drocketmq.home.dir={home}",
        f"-Dlogback.configurationFile={logback}",
        f"-Drocketmq.client.logRoot={home / 'logs'}",
    ]


def tools_home(tmp: Path) -> Path:
    """A ``rocketmqHome`` for ``mqadmin`` under ``tmp``: its logging configuration (4.9.x's
    ``MQAdminStartup`` loads ``$rocketmq.home.dir/conf/logback_tools.xml``)."""
    home = tmp / "tools-home"
    if not (home / "conf" / "logback_tools.xml").is_file():
        write_home(home, "tools")
    return home


def tools_options(tmp: Path) -> list[str]:
    """The JVM options of a process that runs ``mqadmin`` commands."""
    home = tools_home(tmp)
    return home_options(home, home / "conf" / "logback_tools.xml")


def run_java(
    main: str,
    *args: str,
    classpath: Sequence[Path | str] = (),
    tmp: Path,
    jvm_options: Sequence[str] = (),
    timeout: float = 120.0,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``main`` (of ``classpath`` or the install) to completion in ``tmp``; its result
    (the exit code is the caller's to check).

    Raises:
        InstallError: it timed out.
    """
    found = require_install()
    tmp.mkdir(parents=True, exist_ok=True)
    argv = found.java_argv(
        main, *args, classpath=classpath, jvm_options=[*tools_options(tmp), *jvm_options]
    )
    try:
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "TMPDIR": str(tmp)},
            check=False,
            cwd=tmp,
            input=input,
        )
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"{main} {' '.join(args)} timed out after {timeout:.0f} s") from exc


def run_admin(namesrv: str, *args: str, timeout: float = 90.0, tmp: Path) -> str:
    """Run ``mqadmin SUBCOMMAND ... -n NAMESRV`` in ``tmp``; its stdout.

    In ``tmp`` because ``consumerStatus -g`` writes each client's running info to
    ``<millis>/<clientId>`` under its working directory (``ConsumerStatusSubCommand``).

    Raises:
        InstallError: it exited non-zero or timed out.
    """
    proc = run_java(ADMIN_MAIN, *args, "-n", namesrv, tmp=tmp, timeout=timeout)
    if proc.returncode != 0:
        raise InstallError(
            f"mqadmin {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout


def compile_java(out: Path, sources: Sequence[Path] | None = None) -> Path:
    """Compile the test programs (``java/*.java`` by default) against the install into
    ``out``."""
    found = require_install()
    if sources is None:
        sources = sorted(JAVA_SOURCES.glob("*.java"))
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [
            found.javac,
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-proc:none",
            "-cp",
            found.classpath(),
            "-d",
            str(out),
            *map(str, sources),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if proc.returncode != 0:
        raise InstallError(f"javac failed:\n{proc.stdout}\n{proc.stderr}")
    return out
