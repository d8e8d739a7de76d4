"""Send hooks (Java ``SendMessageHook``): called around every send attempt.

Hooks run inline on the send path, so they must be quick and must not block; an exception
from a hook is logged and ignored, as Java's ``executeSendMessageHookBefore/After`` do.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiorocket.models import Message, MessageQueue, SendResult

__all__ = ["SendHook", "SendHookContext", "run_send_after", "run_send_before"]

log = logging.getLogger("aiorocket.producer")


@dataclass(slots=True)
class SendHookContext:
    """What a send hook sees (Java ``SendMessageContext``).

    Attributes:
        group: the producer group, without namespace.
        message: the message being sent.
        queue: the queue chosen for this attempt.
        broker_addr: the broker address it goes to.
        msg_type: ``"Normal"``, ``"Delay"`` or ``"Trans"`` (a half message; Java
            ``MessageType``'s short names).
        result: the broker's answer (set before ``send_after`` on success).
        exception: the attempt's error (set before ``send_after`` on failure).
        region_id, trace_on: the send response's ``MSG_REGION`` and ``TRACE_ON``.
        started: epoch ms when the attempt started.
        cost_ms: how long the attempt took (set before ``send_after``).
        props: free space for a hook to pass values from before to after.
    """

    group: str
    message: Message
    queue: MessageQueue
    broker_addr: str
    msg_type: str = "Normal"
    result: SendResult | None = None
    exception: BaseException | None = None
    region_id: str | None = None
    trace_on: bool | None = None
    started: int = 0
    cost_ms: int = 0
    props: dict[str, object] = field(default_factory=dict)


class SendHook(Protocol):
    """A pair of callbacks around each send attempt."""

    def send_before(self, ctx: SendHookContext) -> None:
        """Called just before the request goes out."""

    def send_after(self, ctx: SendHookContext) -> None:
        """Called once the attempt succeeded or failed (not for oneway sends' answers,
        which do not exist)."""


def run_send_before(hooks: Sequence[SendHook], ctx: SendHookContext) -> None:
    """Call every hook's ``send_before``; exceptions are logged and ignored."""
    for hook in hooks:
        try:
            hook.send_before(ctx)
        except Exception:
            log.warning("send hook %r failed before sending", hook, exc_info=True)


def run_send_after(hooks: Sequence[SendHook], ctx: SendHookContext) -> None:
    """Call every hook's ``send_after``; exceptions are logged and ignored."""
    for hook in hooks:
        try:
            hook.send_after(ctx)
        except Exception:
            log.warning("send hook %r failed after sending", hook, exc_info=True)
