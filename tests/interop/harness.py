"""Running the C++ peer (``cpp_peer.py``) from async tests.

The Apache C++ client is only ever loaded in a child process. :func:`run_peer` starts one in
its own process group with a hard deadline, reads its ``@@ {json}`` event lines as they come,
and kills the whole group when the block ends, whatever happened inside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.interop.cpp_peer import EVENT_PREFIX, EXIT_INCOMPLETE, EXIT_OK

__all__ = [
    "EXIT_INCOMPLETE",
    "EXIT_OK",
    "PEER_SCRIPT",
    "Event",
    "PeerError",
    "PeerProcess",
    "cli_broker",
    "delivery_mismatches",
    "require_cpp_client",
    "run_peer",
    "unique_name",
]

PEER_SCRIPT = Path(__file__).with_name("cpp_peer.py")

#: one decoded event line of the peer
Event = dict[str, Any]


async def create_topics(namesrv: str, *topics: str, queues: int = 4) -> None:
    """Create ``topics`` (``queues`` each, a C++ producer's default) before a peer consumer
    subscribes to them: a name server, the embedded one as Java's, creates no topic on lookup,
    and the C++ consumer would find a new topic only at its 30 s route poll."""
    from aiorocket import Admin

    async with Admin(namesrv=namesrv) as admin:
        for topic in topics:
            await admin.create_topic(topic, queues=queues)


def unique_name(prefix: str) -> str:
    """A topic or group name no other test (or earlier run on the same data) uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def cpp_consume_args(namesrv: str, topic: str, group: str, *extra: str) -> list[str]:
    """The peer command line of a C++ consumer of ``group`` on ``topic`` (``extra`` after)."""
    return ["consume", "--namesrv", namesrv, "--group", group, "--topic", topic, *extra]


def delivery_mismatches(sent: Mapping[str, Any], got: Event) -> list[str]:
    """How a delivered message (a ``msg`` event) differs from what was sent.

    ``sent`` is a :func:`~tests.interop.cpp_peer.build_message` description plus ``topic``
    (a ``sent`` event of the producing peer has all of them). Compares topic, tags, the KEYS
    string, the body and every user property; an empty list means intact.
    """
    problems = []
    for name in ("topic", "tags", "keys", "body"):
        if got.get(name) != sent[name]:
            shown = repr(got.get(name))[:200]
            problems.append(f"{name}: sent {repr(sent[name])[:200]}, got {shown}")
    props = got.get("properties") or {}
    for name, value in sent["properties"].items():
        if props.get(name) != value:
            problems.append(f"property {name}: sent {value!r}, got {props.get(name)!r}")
    return problems


class PeerError(AssertionError):
    """The peer misbehaved (timed out, exited early, reported an error); carries diagnostics."""


@functools.cache
def _cpp_client_problem() -> str | None:
    """Why the C++ client cannot load here, or ``None`` when it can (checked once)."""
    code = "import rocketmq.client"
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "importing rocketmq.client in a subprocess hung for 60 s"
    if proc.returncode == 0:
        return None
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    detail = lines[-1] if lines else f"exit code {proc.returncode}"
    return f"the Apache C++ client (PyPI rocketmq==0.4.4) cannot load here: {detail}"


def require_cpp_client() -> None:
    """Skip the calling test when ``import rocketmq.client`` fails in a subprocess.

    The wheel bundles a Linux x86-64 ``librocketmq``; anywhere it cannot load, the interop
    tests are skipped with the import error as the reason. Any other failure is a real one.
    """
    problem = _cpp_client_problem()
    if problem is not None:
        pytest.skip(problem)


class PeerProcess:
    """A running ``cpp_peer.py``: its events so far, and waiting on more of them.

    Create through :func:`run_peer`. ``events`` holds every event in arrival order; waiting
    methods raise :class:`PeerError` with the peer's stderr and client-log tails on failure.
    """

    def __init__(
        self, name: str, proc: asyncio.subprocess.Process, home: Path, argv: Sequence[str]
    ) -> None:
        self.name = name
        self.proc = proc
        self.home = home
        self.argv = list(argv)
        self.events: list[Event] = []
        #: lines on stdout that were not events (there should be none)
        self.noise: list[str] = []
        self._stderr: deque[str] = deque(maxlen=200)
        self._changed = asyncio.Event()
        self._readers = [
            asyncio.create_task(self._read_stdout(), name=f"{name}-stdout"),
            asyncio.create_task(self._read_stderr(), name=f"{name}-stderr"),
        ]
        self.returncode: int | None = None

    # -- reading --------------------------------------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            if line.startswith(EVENT_PREFIX):
                try:
                    event = json.loads(line[len(EVENT_PREFIX) :])
                except json.JSONDecodeError:
                    self.noise.append(line)
                else:
                    event["_t"] = time.time()
                    self.events.append(event)
            elif line:
                self.noise.append(line)
            self._changed.set()
        self._changed.set()

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            self._stderr.append(raw.decode("utf-8", errors="replace").rstrip("\n"))

    # -- queries --------------------------------------------------------------------------------

    def of(self, kind: str) -> list[Event]:
        """The events named ``kind`` received so far (``"msg"``, ``"sent"``, ...)."""
        return [e for e in self.events if e.get("event") == kind]

    @property
    def summary(self) -> Event | None:
        """The final summary event, once printed."""
        found = self.of("summary")
        return found[-1] if found else None

    @property
    def exited(self) -> bool:
        """Whether the process has ended and its output has been read to the end."""
        return self.proc.returncode is not None and self._readers[0].done()

    def diagnostics(self) -> str:
        """The peer's command, exit code, stderr tail, non-event output and C++ log tail."""
        parts = [
            f"peer {self.name}: argv={' '.join(self.argv)}",
            f"returncode={self.proc.returncode} events={len(self.events)}",
        ]
        errors = [e for e in self.events if "error" in str(e.get("event"))]
        if errors:
            parts.append("error events: " + json.dumps(errors[:5], ensure_ascii=False))
        if self.noise:
            parts.append("non-event stdout: " + "\n".join(self.noise[-10:]))
        if self._stderr:
            parts.append("stderr tail:\n" + "\n".join(list(self._stderr)[-30:]))
        log_tail = self.client_log_tail(40)
        if log_tail:
            parts.append("C++ client log tail:\n" + log_tail)
        return "\n".join(parts)

    def client_log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the C++ client's own log (under the peer's HOME)."""
        logs = sorted(
            (self.home / "logs" / "rocketmq-cpp").glob("*rocketmq-cpp.log*"),
            key=lambda p: p.stat().st_mtime,
        )
        if not logs:
            return ""
        with logs[-1].open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            text = f.read().decode("utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    # -- waiting --------------------------------------------------------------------------------

    async def wait_until(
        self, predicate: Callable[[PeerProcess], bool], timeout: float, what: str = ""
    ) -> None:
        """Wait until ``predicate(self)`` holds, re-checking after every new line.

        Raises:
            PeerError: the timeout passed or the peer exited without the predicate holding.
        """
        deadline = asyncio.get_running_loop().time() + timeout
        while not predicate(self):
            if self._readers[0].done():
                await self._reap()
                raise PeerError(
                    f"{self.name} exited before {what or 'the condition held'}\n"
                    + self.diagnostics()
                )
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise PeerError(
                    f"{self.name}: timed out after {timeout:.1f} s waiting for "
                    f"{what or 'a condition'}\n" + self.diagnostics()
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))

    async def wait_event(self, kind: str, timeout: float) -> Event:
        """Wait for the first event named ``kind`` and return it."""
        await self.wait_until(lambda p: bool(p.of(kind)), timeout, f"a {kind!r} event")
        return self.of(kind)[0]

    async def wait_distinct(self, count: int, timeout: float) -> None:
        """Wait until ``count`` distinct message ids have been delivered."""
        await self.wait_until(
            lambda p: len({e["id"] for e in p.of("msg")}) >= count,
            timeout,
            f"{count} distinct messages",
        )

    async def _reap(self) -> int:
        rc = await self.proc.wait()
        await asyncio.gather(*self._readers, return_exceptions=True)
        self.returncode = rc
        return rc

    async def wait_exit(self, timeout: float, expect: int | None = EXIT_OK) -> int:
        """Wait for the peer to exit; check its code unless ``expect`` is ``None``.

        Raises:
            PeerError: it is still running after ``timeout`` (it is then killed) or exited
                with another code.
        """
        try:
            rc = await asyncio.wait_for(self._reap(), timeout)
        except TimeoutError:
            await self.kill()
            raise PeerError(
                f"{self.name} still running after {timeout:.1f} s\n" + self.diagnostics()
            ) from None
        if expect is not None and rc != expect:
            raise PeerError(
                f"{self.name} exited with {rc}, expected {expect}\n" + self.diagnostics()
            )
        return rc

    # -- stopping -------------------------------------------------------------------------------

    async def stop(self, grace: float = 15.0) -> int:
        """Ask the peer to finish (SIGTERM: a consumer shuts down cleanly and prints its
        summary); kill its process group if it has not exited after ``grace`` seconds."""
        if self.proc.returncode is None:
            self._signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self._reap(), grace)
        except TimeoutError:
            await self.kill()
            return await self._reap()

    async def kill(self) -> None:
        """SIGKILL the peer's whole process group and reap it."""
        self._signal(signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._reap(), 10)

    def _signal(self, sig: signal.Signals) -> None:
        # The peer leads its own session, so its pid is its process-group id; killing the group
        # also takes any helper it might have forked. Once reaped, the id may be reused.
        if self.proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


@contextlib.asynccontextmanager
async def run_peer(
    name: str,
    args: Sequence[str],
    *,
    home: Path,
    deadline: float = 120.0,
) -> AsyncIterator[PeerProcess]:
    """Start ``cpp_peer.py args...`` and yield it; kill it when the block exits.

    Args:
        name: a label for diagnostics.
        args: the peer's command line (mode first).
        home: a private directory used as the peer's ``HOME``: the C++ client writes its logs
            (``logs/rocketmq-cpp``) and local offsets there.
        deadline: seconds after which the peer is killed even if the block is still running.
    """
    os.makedirs(home, exist_ok=True)
    argv = [sys.executable, "-u", str(PEER_SCRIPT), *args]
    env = dict(os.environ)
    env["HOME"] = str(home)
    env["PYTHONUNBUFFERED"] = "1"
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=str(home),
        start_new_session=True,
        # Events can be long (bodies); the default 64 KiB line limit is too tight.
        limit=16 * 1024 * 1024,
    )
    peer = PeerProcess(name, proc, home, argv)

    async def watchdog() -> None:
        await asyncio.sleep(deadline)
        peer._signal(signal.SIGKILL)

    guard = asyncio.create_task(watchdog(), name=f"{name}-deadline")
    try:
        yield peer
    finally:
        guard.cancel()
        if peer.proc.returncode is None:
            await peer.kill()
        else:
            await peer._reap()


def cpp_consumer(
    namesrv: str, topic: str, group: str, expect: int, home: Path
) -> contextlib.AbstractAsyncContextManager[PeerProcess]:
    """:func:`run_peer`: a concurrent C++ consumer of ``topic`` until it has ``expect``
    messages."""
    return run_peer(
        "consumer", cpp_consume_args(namesrv, topic, group, "--expect", str(expect)), home=home
    )


_LISTENING = re.compile(r"listening on (\d+\.\d+\.\d+\.\d+:\d+)")


@contextlib.asynccontextmanager
async def cli_broker(data_dir: Path, *args: str, startup: float = 30.0) -> AsyncIterator[str]:
    """Run ``aiorocket broker --port 0 --data-dir DIR args...`` and yield its address.

    On exit the broker gets SIGTERM and must stop cleanly (exit code 0) within 15 s;
    otherwise its process group is killed and :class:`PeerError` carries its output. An
    exception from the block gets the tail of the broker's output as a note.
    """
    argv = [sys.executable, "-m", "aiorocket", "broker", "--port", "0"]
    argv += ["--data-dir", str(data_dir), *args]
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    assert proc.stdout is not None
    output: deque[str] = deque(maxlen=200)

    async def read_until_listening() -> str:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            output.append(line)
            found = _LISTENING.search(line)
            if found:
                return found.group(1)
        raise PeerError("the broker exited before listening:\n" + "\n".join(output))

    async def drain() -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            output.append(raw.decode("utf-8", errors="replace").rstrip("\n"))

    def kill_group() -> None:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)

    try:
        address = await asyncio.wait_for(read_until_listening(), startup)
    except BaseException:
        kill_group()
        await proc.wait()
        raise
    # Keep reading, so a chatty broker never blocks on a full pipe.
    reader = asyncio.create_task(drain(), name="cli-broker-output")
    try:
        yield address
    except BaseException as exc:
        # The broker's own output usually explains a failure seen by its clients.
        exc.add_note("broker output (tail):\n" + "\n".join(list(output)[-40:]))
        raise
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            rc = await asyncio.wait_for(proc.wait(), 15)
        except TimeoutError:
            kill_group()
            rc = await proc.wait()
        await asyncio.gather(reader, return_exceptions=True)
    if rc != 0:
        raise PeerError(f"the broker exited with {rc}:\n" + "\n".join(output))
