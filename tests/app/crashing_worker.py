"""An App whose consumer's pull task hits a bug: ``aiorocket run tests.app.crashing_worker:app``
with ``CRASHING_WORKER=1``.

The bug (`buggy_put`): caching a pulled message whose body is ``b"crash"``, inside the pull
task, raises `InjectedBug` after printing ``CRASH AT <time.time()>`` to stderr, so that a test
can measure how long the process lives on.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence

from aiorocket import App, ReceivedMessage
from aiorocket._consumer.process_queue import ProcessQueue

__all__ = ["InjectedBug", "app", "buggy_put"]

_Put = Callable[[ProcessQueue, Sequence[ReceivedMessage]], int]


class InjectedBug(RuntimeError):
    """An unexpected error in a consumer's pull task (a bug, not a RocketMQ failure)."""


def buggy_put(original: _Put) -> _Put:
    """``ProcessQueue.put`` raising `InjectedBug` on a ``b"crash"`` message."""

    def put(self: ProcessQueue, msgs: Sequence[ReceivedMessage]) -> int:
        if any(m.body == b"crash" for m in msgs):
            print(f"CRASH AT {time.time():.6f}", file=sys.stderr, flush=True)
            raise InjectedBug("the pull task met a bug")
        return original(self, msgs)

    return put


if os.environ.get("CRASHING_WORKER") == "1":
    ProcessQueue.put = buggy_put(ProcessQueue.put)  # type: ignore[method-assign, assignment]

app = App()


@app.subscriber(os.environ.get("WORKER_TOPIC", "crashes"), group="crashing")
async def handle(body: bytes) -> None:
    """Consume (nothing to do)."""
