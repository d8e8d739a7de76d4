"""Consume hooks (Java ``ConsumeMessageHook``): called before and after every handler call;
receive hooks: called once per ``PullConsumer.poll`` / ``SimpleConsumer.receive`` that returns
messages.

Both are registered with the consumer's ``register_hook`` (a hook implements either or
both). A handler call runs in the task that ran ``consume_before``, and ``consume_after``
runs there right after it (unless the task is cancelled meanwhile, at shutdown): a hook may
set context variables for the handler and reset them after. Hooks run inline on the consume
path, so they must be quick and must not block; an exception from a hook is logged and
ignored, as Java's ``executeHookBefore/After`` do.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiorocket.models import ConsumeStatus, MessageQueue, ReceivedMessage

__all__ = [
    "ConsumeHook",
    "ConsumeHookContext",
    "ReceiveHook",
    "ReceiveHookContext",
    "run_after",
    "run_before",
    "run_received",
]

log = logging.getLogger("aiorocket.consumer")


@dataclass(slots=True)
class ConsumeHookContext:
    """What a hook sees (Java ``ConsumeMessageContext``).

    Attributes:
        group: the consumer group.
        queue: the queue the messages came from.
        messages: the batch handed to the handler.
        status: the handler's outcome (set before ``consume_after``; ``None`` before).
        success: whether the whole batch succeeded.
        return_type: ``SUCCESS``, ``FAILED``, ``EXCEPTION`` or ``TIME_OUT`` (Java
            ``ConsumeReturnType``), set before ``consume_after``.
        props: free space for a hook to pass values from before to after.
        exception: what the handler raised (``EXCEPTION``), set while ``consume_after`` runs.
    """

    group: str
    queue: MessageQueue
    messages: Sequence[ReceivedMessage]
    status: ConsumeStatus | None = None
    success: bool = False
    return_type: str = ""
    props: dict[str, object] = field(default_factory=dict)
    exception: BaseException | None = None


@dataclass(slots=True)
class ReceiveHookContext:
    """What a receive hook sees: the messages one ``poll`` / ``receive`` call returns.

    Attributes:
        group: the consumer group, without namespace.
        namespace: the consumer's namespace, if any.
        operation: ``"poll"`` (a pull consumer) or ``"receive"`` (a simple consumer).
        messages: the messages returned (never empty).
        started_ns: ``time.time_ns()`` when the call started.
    """

    group: str
    namespace: str | None
    operation: str
    messages: Sequence[ReceivedMessage]
    started_ns: int


class ConsumeHook(Protocol):
    """A pair of callbacks around each handler call."""

    def consume_before(self, ctx: ConsumeHookContext) -> None:
        """Called just before the handler."""

    def consume_after(self, ctx: ConsumeHookContext) -> None:
        """Called just after the handler, with the outcome filled in."""


class ReceiveHook(Protocol):
    """A callback for the messages a pull-style call returns."""

    def received(self, ctx: ReceiveHookContext) -> None:
        """Called just before the messages are returned to the caller."""


def run_received(hooks: Sequence[ReceiveHook], ctx: ReceiveHookContext) -> None:
    """Call every hook's ``received``; exceptions are logged and ignored."""
    for hook in hooks:
        try:
            hook.received(ctx)
        except Exception:
            log.warning("receive hook %r failed", hook, exc_info=True)


def run_before(hooks: Sequence[ConsumeHook], ctx: ConsumeHookContext) -> None:
    """Call every hook's ``consume_before``; exceptions are logged and ignored."""
    _run(hooks, ctx, after=False)


def run_after(hooks: Sequence[ConsumeHook], ctx: ConsumeHookContext) -> None:
    """Call every hook's ``consume_after``; exceptions are logged and ignored."""
    _run(hooks, ctx, after=True)


def _run(hooks: Sequence[ConsumeHook], ctx: ConsumeHookContext, *, after: bool) -> None:
    for hook in hooks:
        try:
            if after:
                hook.consume_after(ctx)
            else:
                hook.consume_before(ctx)
        except Exception:
            stage = "after" if after else "before"
            log.warning("consume hook %r failed %s consumption", hook, stage, exc_info=True)
