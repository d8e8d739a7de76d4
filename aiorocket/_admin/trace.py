"""Reading message traces back (``mqadmin queryMsgTraceById``, Java ``TraceView``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from aiorocket._trace import TraceType, decode_trace
from aiorocket.models import ReceivedMessage

__all__ = ["TraceEntry", "trace_entries"]


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One trace record of a message, as ``mqadmin queryMsgTraceById`` reads it.

    Attributes:
        type: ``Pub``, ``SubBefore``, ``SubAfter``, ``EndTransaction`` or ``Recall``.
        timestamp: epoch ms when the send or the handler call started (SubAfter: ended).
        group: the producer or consumer group.
        client_host: the tracing client's IP address (the trace message's born host without
            its port, as ``TraceView`` takes it with ``getBornHostString``).
        topic: the message's topic (only Pub and EndTransaction records carry it; the
            others take it from a Pub record of the same message when there is one).
        msg_id: the message's client id.
        tags, keys: as traced (``"null"`` when the message had none, as Java writes it).
        cost_ms: the send's or the handler's time per message.
        success: whether the send or the handler succeeded.
        status: ``"success"`` or ``"failed"`` (TraceView's words).
        store_host: the broker the message was sent to (Pub, EndTransaction).
        offset_msg_id: the broker's message id (Pub).
        retry_times: the reconsume times at delivery (SubBefore).
        request_id: ties a SubBefore to its SubAfter.
        transaction_state: the transaction's outcome (EndTransaction).
    """

    type: str
    timestamp: int
    group: str
    client_host: str
    topic: str
    msg_id: str
    tags: str
    keys: str
    cost_ms: int
    success: bool
    status: str
    store_host: str
    offset_msg_id: str
    retry_times: int
    request_id: str
    transaction_state: str


def trace_entries(msg_id: str, messages: Iterable[ReceivedMessage]) -> list[TraceEntry]:
    """The records about ``msg_id`` in trace messages, oldest first (``TraceView
    .decodeFromTraceTransData`` keeps the records whose first message is ``msg_id``)."""
    out: list[TraceEntry] = []
    for m in messages:
        text = bytes(m.body).decode("utf-8", "replace")
        client_host = m.born_host.rsplit(":", 1)[0]
        for ctx in decode_trace(text):
            bean = ctx.beans[0]
            if bean.msg_id != msg_id:
                continue
            out.append(
                TraceEntry(
                    type=ctx.trace_type.value,
                    timestamp=ctx.timestamp,
                    group=ctx.group or "",
                    client_host=client_host,
                    topic=bean.topic or "",
                    msg_id=msg_id,
                    tags=bean.tags or "",
                    keys=bean.keys or "",
                    cost_ms=ctx.cost_ms,
                    success=ctx.success,
                    status="success" if ctx.success else "failed",
                    store_host=bean.store_host or "",
                    offset_msg_id=bean.offset_msg_id or "",
                    retry_times=bean.retry_times,
                    request_id=ctx.request_id or "",
                    transaction_state=bean.transaction_state or "",
                )
            )
    topic = next((e.topic for e in out if e.type == TraceType.Pub.value and e.topic), "")
    if topic:
        out = [e if e.topic else _with_topic(e, topic) for e in out]
    out.sort(key=lambda e: (e.timestamp, _ORDER.get(e.type, 9)))
    return out


_ORDER = {"Pub": 0, "EndTransaction": 1, "SubBefore": 2, "SubAfter": 3, "Recall": 4}


def _with_topic(e: TraceEntry, topic: str) -> TraceEntry:
    return replace(e, topic=topic)
