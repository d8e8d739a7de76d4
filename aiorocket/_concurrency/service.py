"""One lifecycle for everything that runs background tasks: a `Service` owns a
supervisor task holding a task group, from start-up to the end of shutdown.

Usage (the owner keeps a ``Service`` and hands it its steps; all are optional):

```python
self._service = Service(
    f"broker {name}",            # task name and log prefix ("broker x crashed")
    startup=self._startup,       # async, in the supervisor: spawn tasks, first I/O
    shutdown=self._shutdown,     # async, graceful: stop loops, flush (after close())
    abort=self._abort,           # async (started: bool): after a crash or failed start
    finalize=self._finalize,     # sync, always last (release files, locks)
    logger=log,
)
await self._service.start()      # returns when startup() returned; its error is raised
self._service.start_soon()       # or so, from synchronous code (a failure is logged)
self._service.spawn(coro, name="flush")   # a background task the service owns
await self._service.close()      # shielded: stop, shutdown(), cancel what is left;
                                 # raises what shutdown() raised (the close error)
await self._service.wait_closed()          # re-raises a crash (a bug), once logged
self._service.watch(child)       # a crash of child (its wait_closed()) crashes this one
```

An owner derives from `ServiceOwner`, keeps its ``Service`` in ``self._lifecycle`` and gets
``start``/``close``/``wait_closed``/``async with`` from it.

`Service.spawn` works from ``startup()`` on (not before ``start()``; from synchronous
code after ``start_soon()``, spawn inside ``startup()``) until the supervisor ends; it raises
[`ClientClosedError`][aiorocket.errors.ClientClosedError] then. One ``Service`` runs once: to
restart, make a new one.

The properties:

* ``start()`` returns once ``startup()`` finished, inside the supervisor's task group (not in
  the caller's task), so start-up errors reach the caller, unwrapped; a cancelled
  ``start()`` still waits (shielded, up to ``cleanup_timeout``) for the clean-up.
* A background task failing after start-up does not touch the task that called ``start()``
  (a FastAPI lifespan, a test): the group is cancelled, the crash is logged, ``abort()`` runs,
  ``on_crash`` is called, and `Service.wait_closed` / `Service.raise_crash`
  re-raise it: an exception group whose message names the service ("consumer g crashed"),
  holding what failed (`describe_crash` makes one line of it).
* ``shutdown()`` raising is no crash but the close error: ``close()`` raises it (once).
* ``close()`` is idempotent and shielded: a caller in a cancelled anyio scope (a task group,
  a lifespan) still gets the whole shutdown, and its cancellation afterwards; a plain
  ``Task.cancel()`` of the caller returns early, the shutdown still finishes in the
  supervisor. Tasks from `Service.spawn` still running
  after ``shutdown()`` are cancelled; tasks created on `Service.task_group` directly are
  waited for (they must end by themselves, e.g. when their connection closes). Each step of
  ``shutdown()``/``abort()`` should be bounded: `bounded` does it for one step.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Awaitable, Callable, Coroutine
from types import TracebackType
from typing import Any, Protocol, Self

import anyio

from aiorocket.errors import ClientClosedError, NeverStartedWarning

__all__ = ["AsyncResource", "Service", "ServiceOwner", "bounded", "describe_crash"]

_log = logging.getLogger("aiorocket")


async def bounded(
    step: Awaitable[object], what: str, timeout: float, logger: logging.Logger
) -> bool:
    """Await one last step of a shutdown (flush, unlock, unregister): shielded, since the
    cancellation that may have started the shutdown must not cut it short, and bounded by
    ``timeout``, since it must not hang it either. Failures are logged, not raised; returns
    whether the step completed."""
    with anyio.move_on_after(timeout, shield=True) as scope:
        try:
            await step
        except Exception:
            logger.warning("%s failed", what, exc_info=True)
            return False
    if scope.cancelled_caught:
        logger.warning("%s did not finish within %.1f s", what, timeout)
        return False
    return True


def describe_crash(exc: BaseException) -> str:
    """One line naming what crashed and on what: ``"app crashed: consumer g crashed:
    RuntimeError: boom"`` for the exception group of a crashed `Service` (the names of the
    services it went through, then each error's type and message)."""
    if isinstance(exc, BaseExceptionGroup):
        inner = "; ".join(describe_crash(e) for e in exc.exceptions)
        return f"{exc.message}: {inner}"
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Closable(Protocol):
    def wait_closed(self) -> Awaitable[None]: ...


class AsyncResource:
    """``async with`` for an object with ``start()`` and ``close()``: entering starts it,
    leaving closes it and then, when the body itself ended cleanly, re-raises what
    `_raise_crash` finds (a background crash of the owner's `Service`)."""

    async def start(self) -> None:
        """Start; overridden by every subclass."""
        raise NotImplementedError

    async def close(self) -> None:
        """Close; overridden by every subclass."""
        raise NotImplementedError

    def _raise_crash(self) -> None:
        """Re-raise a background crash after a clean exit; none by default."""

    def _never_started(self) -> str | None:
        """What to name in a [NeverStartedWarning][aiorocket.errors.NeverStartedWarning]
        when this object is collected: ``None`` once it was started or closed (the default:
        never warn)."""
        return None

    def __del__(self) -> None:
        try:
            what = self._never_started()
        except AttributeError:  # the constructor failed part-way: nothing was made
            return
        if what is not None:
            warnings.warn(
                f"{what} was created but never started, so it did nothing: use "
                "`async with client:` or `await client.start()`",
                NeverStartedWarning,
                source=self,
                stacklevel=2,
            )

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
        if exc is None:
            self._raise_crash()


async def _nothing() -> None:
    pass


async def _nothing_started(started: bool) -> None:
    pass


class Service:
    """A supervisor task owning a task group (see the module docs).

    Args:
        name: the supervisor task's name and the log prefix of a crash.
        startup: run in the supervisor inside the task group; ``start()`` returns after it.
        shutdown: the graceful shutdown, run in the task group after a stop was requested.
        abort: run after a crash or a failed start-up (outside the task group); its argument
            says whether start-up had finished.
        finalize: run last, always (synchronous).
        on_crash: called with the error after a crash was logged and ``abort()`` ran.
        cleanup_timeout: how long a failed or cancelled ``start()`` waits for the clean-up.
        logger: where a crash is logged.
    """

    def __init__(
        self,
        name: str,
        *,
        startup: Callable[[], Awaitable[None]] = _nothing,
        shutdown: Callable[[], Awaitable[None]] = _nothing,
        abort: Callable[[bool], Awaitable[None]] = _nothing_started,
        finalize: Callable[[], None] | None = None,
        on_crash: Callable[[BaseException], None] | None = None,
        cleanup_timeout: float = 3.0,
        logger: logging.Logger = _log,
    ) -> None:
        self.name = name
        self._startup = startup
        self._shutdown = shutdown
        self._abort = abort
        self._finalize = finalize
        self._on_crash = on_crash
        self.cleanup_timeout = cleanup_timeout
        self._log = logger
        self._runner: asyncio.Task[None] | None = None
        self._ready: asyncio.Future[None]
        self._tg: asyncio.TaskGroup | None = None
        #: the tasks of `spawn` still running
        self.tasks: set[asyncio.Task[Any]] = set()
        self._watches: set[asyncio.Task[Any]] = set()
        self._stop = asyncio.Event()
        self._crash: BaseException | None = None
        self._crash_reported = False
        self._close_error: Exception | None = None
        self._closing = False
        self._ready_once = False

    # -- state --------------------------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether `start` was called (successful or not)."""
        return self._runner is not None

    @property
    def ready(self) -> bool:
        """Whether ``startup()`` finished (it stays so after the service closed)."""
        return self._ready_once

    @property
    def running(self) -> bool:
        """Whether ``startup()`` finished and no stop was requested (nor a crash happened)."""
        return self._ready_once and not self._closing

    @property
    def closing(self) -> bool:
        """Whether a stop was requested or the supervisor ended (closed, crashed)."""
        return self._closing

    @property
    def closed(self) -> bool:
        """Whether the supervisor has ended (closed, crashed, failed start)."""
        return self._runner is not None and self._runner.done()

    @property
    def crash(self) -> BaseException | None:
        """The unexpected error that ended the service (logged), if any."""
        return self._crash

    @property
    def task_group(self) -> asyncio.TaskGroup:
        """The supervisor's task group (while running); tasks created here directly are waited
        for at the end, not cancelled.

        Raises:
            ClientClosedError: the service is not running.
        """
        if self._tg is None:
            raise ClientClosedError(f"{self.name} is not running")
        return self._tg

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str | None = None) -> asyncio.Task[Any]:
        """Run ``coro`` in the service's task group; cancelled after ``shutdown()`` if still
        running. A failure (other than cancellation) crashes the service.

        Raises:
            ClientClosedError: the service is not running.
        """
        task = self.task_group.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def watch(self, child: _Closable, name: str | None = None) -> None:
        """Crash this service when ``child`` (an object with ``wait_closed()``, another
        service's owner) crashes: a spawned task waits for ``child.wait_closed()``, whose error
        then fails this service's task group. A child that closes cleanly ends the watch; a
        stop request ends it too (a crash while ``shutdown()`` closes the child is the close
        error then, not a second crash cutting the shutdown short).

        Raises:
            ClientClosedError: the service is not running.
        """

        async def wait() -> None:
            await child.wait_closed()

        task = self.spawn(wait(), name=name or f"{self.name}: watch")
        self._watches.add(task)
        task.add_done_callback(self._watches.discard)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the supervisor; returns once ``startup()`` finished (at once when it has).

        Raises:
            ClientClosedError: the service was closed before.
            Exception: what ``startup()`` raised, or the task group's error when a task
                crashed during start-up.
        """
        if self._closing:
            raise ClientClosedError(f"{self.name} is closed")
        if self._runner is not None:
            # A concurrent start(): it too returns once the service is ready.
            await asyncio.shield(self._ready)
            return
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._ready = ready
        self._runner = asyncio.create_task(self._supervise(ready), name=self.name)
        try:
            await asyncio.shield(ready)
        except BaseException:
            self._request_stop()
            # The supervisor's clean-up, awaited even if this call is being cancelled, but
            # bounded.
            with anyio.move_on_after(self.cleanup_timeout, shield=True):
                await asyncio.wait([self._runner])
            raise

    def start_soon(self) -> None:
        """Start the supervisor without waiting for ``startup()`` (for a synchronous owner);
        a start-up failure is logged, and `wait_closed` returns then.

        Raises:
            ClientClosedError: the service was closed before.
        """
        if self._closing:
            raise ClientClosedError(f"{self.name} is closed")
        if self._runner is not None:
            return
        self._ready = asyncio.get_running_loop().create_future()
        self._ready.add_done_callback(self._log_start_failure)
        self._runner = asyncio.create_task(self._supervise(self._ready), name=self.name)

    def _log_start_failure(self, ready: asyncio.Future[None]) -> None:
        if not ready.cancelled() and (exc := ready.exception()) is not None:
            self._log.error("%s failed to start", self.name, exc_info=exc)

    async def close(self) -> None:
        """Stop gracefully; safe to call more than once, and before `start`.

        Raises:
            Exception: what ``shutdown()`` raised (once: to the first call after it); a
                crash is re-raised by `wait_closed` instead.
        """
        if self._runner is None:
            self._closing = True
            return
        self._request_stop()
        # Shielded: a caller being cancelled (an anyio task group, a lifespan) still gets the
        # whole shutdown and its cancellation afterwards; asyncio.wait neither cancels the
        # supervisor nor swallows a cancellation of this call.
        with anyio.CancelScope(shield=True):
            await asyncio.wait([self._runner])
        error, self._close_error = self._close_error, None
        if error is not None:
            raise error

    async def wait_closed(self) -> None:
        """Wait until the service has stopped (closed, or crashed).

        Raises:
            BaseExceptionGroup: the service crashed on an unexpected error (a bug), which it
                also logged.
        """
        if self._runner is None:
            return
        await asyncio.wait([self._runner])
        if self._crash is not None:
            self._crash_reported = True
            raise self._crash

    def raise_crash(self) -> None:
        """Raise the crash if it was not raised to the owner yet (for ``__aexit__``)."""
        if self._crash is not None and not self._crash_reported:
            self._crash_reported = True
            raise self._crash

    def _request_stop(self) -> None:
        self._closing = True
        self._stop.set()

    async def _supervise(self, ready: asyncio.Future[None]) -> None:
        """The supervisor: owns the task group from start-up to the end of shutdown."""
        phase = "starting"
        start_error: Exception | None = None
        try:
            async with asyncio.TaskGroup() as tg:
                self._tg = tg
                try:
                    await self._startup()
                except Exception as exc:
                    start_error = exc
                    raise
                ready.set_result(None)
                self._ready_once = True
                phase = "running"
                await self._stop.wait()
                phase = "stopping"
                for task in list(self._watches):
                    task.cancel()
                try:
                    await self._shutdown()
                except Exception as exc:
                    self._close_error = exc  # close() raises it: a failed flush, no bug
                phase = "stopped"
                for task in list(self.tasks):
                    task.cancel()
        except BaseException as exc:
            self._tg = None  # (finished: spawn() raises from now on)
            self._closing = True  # (the owner's abort() sees it closing)
            crashed = False
            if not ready.done():
                # Start-up failed: the error goes to start()'s caller, unwrapped if it was
                # raised by a start-up step, as the task group's error if a task crashed.
                if start_error is not None:
                    ready.set_exception(start_error)
                elif isinstance(exc, asyncio.CancelledError):
                    ready.cancel()
                else:
                    ready.set_exception(exc)
            elif phase != "stopped" and not isinstance(exc, asyncio.CancelledError):
                # A task of the group failed on something unexpected: a bug. Be loud, and
                # name this service in what the owner re-raises (an owner's owner adds its
                # own name around it: "app crashed: consumer g crashed: ...").
                errors = exc.exceptions if isinstance(exc, BaseExceptionGroup) else (exc,)
                named = BaseExceptionGroup(f"{self.name} crashed", errors)
                self._crash = exc = named.with_traceback(exc.__traceback__)
                crashed = True
                self._log.error("%s", describe_crash(exc), exc_info=exc)
            if phase != "stopped":
                await self._abort(phase != "starting")
            if crashed and self._on_crash is not None:
                self._on_crash(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self._tg = None
            self._closing = True
            if self._finalize is not None:
                self._finalize()


class ServiceOwner(AsyncResource):
    """An `AsyncResource` whose background work runs in one `Service`, kept in ``self._lifecycle``
    (set by the constructor): ``start``, ``close``, ``wait_closed``, the crash re-raised on a
    clean exit of ``async with``, all from it. An owner overrides ``start``/``close`` only to
    add its own checks around them."""

    _lifecycle: Service

    async def start(self) -> None:
        """Start; returns once the start-up finished (its error is raised).

        Raises:
            ClientClosedError: it was closed before.
        """
        await self._lifecycle.start()

    async def close(self) -> None:
        """Stop gracefully; safe to call more than once, and before ``start``.

        Raises:
            Exception: a final step failed (a flush); a crash is re-raised by ``wait_closed``.
        """
        await self._lifecycle.close()

    async def wait_closed(self) -> None:
        """Wait until it has stopped: closed, or crashed on an unexpected error (a bug).

        Raises:
            BaseExceptionGroup: it crashed (also logged); the group's message names what
                crashed, its exceptions are what failed.
        """
        await self._lifecycle.wait_closed()

    @property
    def crash(self) -> BaseException | None:
        """The unexpected error it crashed on (raised by ``wait_closed``), or ``None``."""
        return self._lifecycle.crash

    def _raise_crash(self) -> None:
        self._lifecycle.raise_crash()
