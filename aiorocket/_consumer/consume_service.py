"""What the concurrent and the orderly consume services share: the collaborators a handler
call is run and recorded with, and how a call's outcome is reported to the consume hooks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from aiorocket._client.instance import ClientInstance
from aiorocket._consumer.hooks import ConsumeHook, ConsumeHookContext, run_after
from aiorocket._consumer.offset_store import OffsetStore
from aiorocket._consumer.send_back import SendBack
from aiorocket._consumer.stats import StatsRecorder
from aiorocket.models import ConsumeStatus
from aiorocket.settings import ConsumerSettings

__all__ = ["ConsumeServiceBase"]

_H = TypeVar("_H")


@dataclass(eq=False, repr=False)
class ConsumeServiceBase(Generic[_H]):
    """Base of the consume services, built from (positionally):

    Args:
        handler: the user's ``async def (msgs, ctx)``.
        group: the wire consumer group (namespace applied).
        settings: the consumer's settings.
        client: for sending messages back to the broker (retry, DLQ).
        offsets: where consumed offsets are recorded.
        stats: the consumer's counters.
        hooks: run around each handler call.
    """

    _handler: _H
    _group: str
    _settings: ConsumerSettings
    _client: ClientInstance
    _offsets: OffsetStore
    _stats: StatsRecorder
    _hooks: tuple[ConsumeHook, ...]
    _clustering: bool = field(init=False)
    _batch: int = field(init=False)
    _closing: bool = field(init=False, default=False)
    _sender: SendBack = field(init=False)

    def __post_init__(self) -> None:
        settings = self._settings
        self._clustering = settings.message_model == "clustering"
        self._batch = settings.consume_batch_size
        self._sender = SendBack(client=self._client, group=self._group, settings=settings)

    def _after_hooks(
        self, hook_ctx: ConsumeHookContext, ok: bool, raised: BaseException | None, rt: float
    ) -> None:
        """Run the after-hooks of a handler call that took ``rt`` seconds: it succeeded
        (``ok``), failed, or ``raised`` (what it raised)."""
        hook_ctx.status = ConsumeStatus.CONSUME_SUCCESS if ok else ConsumeStatus.RECONSUME_LATER
        hook_ctx.success = ok
        if raised is not None:
            hook_ctx.return_type = "EXCEPTION"
            hook_ctx.exception = raised
        elif rt >= self._settings.consume_timeout:
            hook_ctx.return_type = "TIME_OUT"
        else:
            hook_ctx.return_type = "SUCCESS" if ok else "FAILED"
        run_after(self._hooks, hook_ctx)
        # its traceback holds the consume task's frame: no cycle left behind
        hook_ctx.exception = None
