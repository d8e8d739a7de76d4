"""A Java client program of the tests (``java/``, ``java5/``) running against a cluster or the
embedded broker, and the JSON event lines it prints."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tests.interop.apache.install import InstallError, require_install, tail_of, tools_options

__all__ = ["JavaClient"]


class JavaClient:
    """A running Java client program and the JSON lines it printed so far.

    The Java client logs to stdout too; only lines starting with ``{`` are events. Create with
    :meth:`start`; always :meth:`stop` or :meth:`kill` it (the fixtures' ``finally`` does).
    """

    def __init__(self, name: str, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log
        self.events: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read(), name=f"{name}-stdout")
        self.returncode: int | None = None

    @classmethod
    async def start(
        cls,
        classes: Path,
        main: str,
        *args: str,
        name: str | None = None,
        tmp: Path,
        jvm_options: Sequence[str] = (),
    ) -> JavaClient:
        """Run ``main`` from ``classes`` with ``args``; ``tmp`` holds its client logs;
        ``jvm_options`` go to its JVM (e.g. ``-Dtls.enable=true``)."""
        found = require_install()
        tmp.mkdir(parents=True, exist_ok=True)
        label = name or main
        log = tmp / f"{label}-{os.urandom(3).hex()}.out"
        argv = found.java_argv(
            main,
            *args,
            classpath=[classes],
            jvm_options=[*tools_options(tmp), *jvm_options],
        )
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "TMPDIR": str(tmp)},
            # a JSON line may carry a large body: asyncio's default 64 KiB line limit would
            # stop the reader and leave the program blocked on a full pipe
            limit=64 * 1024 * 1024,
        )
        return cls(label, proc, log)

    @classmethod
    async def run(
        cls, classes: Path, main: str, *args: str, timeout: float, **options: Any
    ) -> JavaClient:
        """:meth:`start` the program (``options``: the keywords of :meth:`start`) and wait for
        it to exit 0 (:meth:`wait_exit` within ``timeout``); stopped whatever happens.

        Raises:
            InstallError: it timed out or exited with another code than 0.
        """
        client = await cls.start(classes, main, *args, **options)
        try:
            await client.wait_exit(timeout)
        finally:
            await client.stop()
        return client

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        with self.log.open("ab") as out:
            async for raw in self.proc.stdout:
                out.write(raw)
                out.flush()
                line = raw.decode("utf-8", errors="replace").strip()
                if line.startswith("{"):
                    with contextlib.suppress(json.JSONDecodeError):
                        self.events.append(json.loads(line))
                        self._changed.set()
        self._changed.set()

    def of(self, kind: str) -> list[dict[str, Any]]:
        """Events whose ``"ev"`` field is ``kind``."""
        return [e for e in self.events if e.get("ev") == kind]

    def diagnostics(self) -> str:
        """The tail of the program's output, for assertion messages."""
        return f"--- {self.name} (pid {self.proc.pid}) output tail ---\n{tail_of(self.log, 60)}"

    async def wait_until(
        self, predicate: Callable[[JavaClient], bool], timeout: float, what: str = ""
    ) -> None:
        """Wait until ``predicate(self)`` holds, re-checking after each new line.

        Raises:
            InstallError: the timeout passed or the program exited first.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not predicate(self):
            if self._reader.done():
                await self._reap()
                raise InstallError(
                    f"{self.name} exited ({self.returncode}) before {what or 'the condition'}\n"
                    + self.diagnostics()
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise InstallError(
                    f"{self.name}: timed out after {timeout:.0f} s waiting for "
                    f"{what or 'a condition'}\n" + self.diagnostics()
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))

    async def wait_event(self, kind: str, timeout: float) -> dict[str, Any]:
        """The first event of ``kind``, waiting up to ``timeout`` for it."""
        await self.wait_until(lambda c: bool(c.of(kind)), timeout, f"a {kind!r} event")
        return self.of(kind)[0]

    async def _reap(self) -> int:
        rc = await self.proc.wait()
        with contextlib.suppress(Exception):
            await self._reader
        self.returncode = rc
        return rc

    async def wait_exit(self, timeout: float, expect: int | None = 0) -> int:
        """Wait for the program to exit (killed after ``timeout``); check its exit code.

        Raises:
            InstallError: it timed out or exited with another code than ``expect``.
        """
        try:
            rc = await asyncio.wait_for(self._reap(), timeout)
        except TimeoutError:
            await self.kill()
            raise InstallError(
                f"{self.name} still running after {timeout:.0f} s\n" + self.diagnostics()
            ) from None
        if expect is not None and rc != expect:
            raise InstallError(f"{self.name} exited {rc}, expected {expect}\n" + self.diagnostics())
        return rc

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    async def stop(self, grace: float = 15.0) -> int:
        """SIGTERM (the JVM runs its shutdown hooks: the client unregisters), then SIGKILL."""
        if self.proc.returncode is None:
            self._signal(signal.SIGTERM)
            try:
                return await asyncio.wait_for(self._reap(), grace)
            except TimeoutError:
                pass
        await self.kill()
        return self.returncode if self.returncode is not None else -9

    async def kill(self) -> None:
        """SIGKILL the program's process group and reap it."""
        self._signal(signal.SIGKILL)
        await self._reap()
