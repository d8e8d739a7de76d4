"""Send hooks (Java ``SendMessageHook``): called around every send attempt, and optionally
around every send call.

One mechanism, two levels, both registered with
[`Producer.register_hook`][aiorocket.Producer.register_hook]; a hook implements either pair or both:

* [`SendHook`][aiorocket.SendHook] (``send_before`` / ``send_after``): around each attempt, once the
  queue and broker are chosen, as Java's ``SendMessageHook`` (a retry is a new attempt; a batch is
  one attempt per sub-batch, as Java runs it for a ``MessageBatch``). The message is already
  encoded: changing it here changes nothing on the wire.
* [`SendCallHook`][aiorocket.SendCallHook] (``send_prepare`` / ``send_done``): once per ``send``,
  ``send_oneway`` or ``send_batch`` call. ``send_prepare`` runs *before* the properties are
  encoded, so what it adds to [`SendCallContext.properties`][aiorocket.SendCallContext.properties]
  travels with the messages (how trace context is propagated); ``send_done`` runs when the call
  returns or raises.

Hooks run inline on the send path, so they must be quick and must not block; an exception
from a hook is logged and ignored, as Java's ``executeSendMessageHookBefore/After`` do.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from aiorocket.models import Message, MessageQueue, SendResult

__all__ = [
    "SendCallContext",
    "SendCallHook",
    "SendHook",
    "SendHookContext",
    "run_send_after",
    "run_send_before",
    "run_send_done",
    "run_send_prepare",
]

log = logging.getLogger("aiorocket.producer")


@dataclass(slots=True)
class SendHookContext:
    """What a send hook sees at each attempt (Java ``SendMessageContext``).

    Attributes:
        group: the producer group, without namespace.
        message: the message being sent; for a batch, the sub-batch as one message (its
            topic and its encoded body, no tags or keys: Java's ``MessageBatch``).
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
        batch: the messages of the sub-batch (empty for a single message).
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
    batch: Sequence[Message] = ()


@dataclass(slots=True)
class SendCallContext:
    """What a send hook sees once per send call (``send``, ``send_oneway``, ``send_batch``).

    Attributes:
        group: the producer group, without namespace.
        topic: the messages' topic, without namespace.
        messages: the messages of the call (one unless ``batch``).
        properties: per message, the properties about to be encoded (user and system ones:
            ``UNIQ_KEY`` is the message id). ``send_prepare`` may add user properties; what it
            adds is sent with the message. Changing system properties is not supported.
        batch: a ``send_batch`` call.
        oneway: a ``send_oneway`` call (no result).
        results: the call's results, set before ``send_done`` on success (one per sub-batch
            for a batch; none for a oneway send).
        exception: the call's error, set while ``send_done`` runs on failure.
        props: free space for a hook to pass values from prepare to done.
    """

    group: str
    topic: str
    messages: Sequence[Message]
    properties: list[dict[str, str]]
    batch: bool = False
    oneway: bool = False
    results: list[SendResult] = field(default_factory=list)
    exception: BaseException | None = None
    props: dict[str, object] = field(default_factory=dict)


class SendHook(Protocol):
    """A pair of callbacks around each send attempt."""

    def send_before(self, ctx: SendHookContext) -> None:
        """Called just before the request goes out."""

    def send_after(self, ctx: SendHookContext) -> None:
        """Called once the attempt succeeded or failed (not for oneway sends' answers,
        which do not exist)."""


class SendCallHook(Protocol):
    """A pair of callbacks around each send call (see the module docs)."""

    def send_prepare(self, call: SendCallContext) -> None:
        """Called before the messages' properties are encoded (after the arguments were
        checked)."""

    def send_done(self, call: SendCallContext) -> None:
        """Called once the call returned (``results``) or raised (``exception``)."""


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


def run_send_prepare(hooks: Sequence[SendCallHook], call: SendCallContext) -> None:
    """Call every hook's ``send_prepare``; exceptions are logged and ignored."""
    for hook in hooks:
        try:
            hook.send_prepare(call)
        except Exception:
            log.warning("send hook %r failed preparing a send", hook, exc_info=True)


def run_send_done(hooks: Sequence[SendCallHook], call: SendCallContext) -> None:
    """Call every hook's ``send_done``; exceptions are logged and ignored. The call's
    exception is unbound afterwards: its traceback holds the sender's frame."""
    for hook in hooks:
        try:
            hook.send_done(call)
        except Exception:
            log.warning("send hook %r failed after a send", hook, exc_info=True)
    call.exception = None
