"""Trace records and their text format (Java ``TraceContext``, ``TraceBean``,
``TraceDataEncoder``).

A trace message's body is a run of records, each ending with ``\\x02`` (``FIELD_SPLITOR``),
fields separated by ``\\x01`` (``CONTENT_SPLITOR``); the first field names the record type.
Java writes absent strings with ``StringBuilder.append(null)``, i.e. as ``"null"``: so do we
(a message without keys is traced with keys ``null``), so that the bytes match.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, TypeAlias

from aiorocket._protocol.properties import KEYS, MSG_REGION, TRACE_ON

if TYPE_CHECKING:
    from aiorocket.models import ReceivedMessage

__all__ = [
    "CONTENT_SPLITOR",
    "DEFAULT_TRACE_TOPIC",
    "ConsumeCall",
    "FIELD_SPLITOR",
    "MessageType",
    "TraceBean",
    "TraceContext",
    "TraceType",
    "TransferBean",
    "decode_trace",
    "encode_consume",
    "encode_trace",
    "trace_group_name",
]

log = logging.getLogger("aiorocket.trace")

#: ``TopicValidator.RMQ_SYS_TRACE_TOPIC``: where traces go unless a topic is configured.
DEFAULT_TRACE_TOPIC: Final = "RMQ_SYS_TRACE_TOPIC"
#: ``TraceConstants.CONTENT_SPLITOR``: between the fields of a record.
CONTENT_SPLITOR: Final = "\x01"
#: ``TraceConstants.FIELD_SPLITOR``: after each record.
FIELD_SPLITOR: Final = "\x02"
#: ``TraceConstants.GROUP_NAME_PREFIX``: the trace producer's group starts with this.
_GROUP_PREFIX: Final = "_INNER_TRACE_PRODUCER"


class TraceType(enum.Enum):
    """Java ``TraceType``: the record types (their names are written)."""

    Pub = "Pub"
    Recall = "Recall"
    SubBefore = "SubBefore"
    SubAfter = "SubAfter"
    EndTransaction = "EndTransaction"


class MessageType(enum.IntEnum):
    """Java ``MessageType``; its ordinal is written."""

    Normal_Msg = 0
    Trans_Msg_Half = 1
    Trans_msg_Commit = 2
    Delay_Msg = 3
    Order_Msg = 4


def _s(value: str | None) -> str:
    # StringBuilder.append((String) null) appends "null".
    return "null" if value is None else value


def _b(value: bool) -> str:
    return "true" if value else "false"


@dataclass(slots=True)
class TraceBean:
    """One message in a trace record (Java ``TraceBean``); ``None`` strings are Java nulls.

    Attributes:
        topic, msg_id, offset_msg_id, tags, keys: the message's (keys space-joined as in its
            ``KEYS`` property).
        store_host: the broker address it was sent to (Pub) or stored at.
        client_host: the tracing client's address.
        store_time: epoch ms (Pub: send start plus half the cost, as Java estimates it).
        retry_times: the message's reconsume times (SubBefore).
        body_length: the body's size in bytes (Pub).
        msg_type: the Java ``MessageType`` (Pub, EndTransaction).
        transaction_state: ``COMMIT_MESSAGE``, ``ROLLBACK_MESSAGE`` or ``UNKNOW``.
        transaction_id: the transaction id (EndTransaction).
        from_transaction_check: whether the state answers a broker check-back.
    """

    topic: str | None = ""
    msg_id: str | None = ""
    offset_msg_id: str | None = ""
    tags: str | None = ""
    keys: str | None = ""
    store_host: str | None = ""
    client_host: str | None = ""
    store_time: int = 0
    retry_times: int = 0
    body_length: int = 0
    msg_type: MessageType | None = None
    transaction_state: str | None = None
    transaction_id: str | None = None
    from_transaction_check: bool = False


@dataclass(slots=True)
class TraceContext:
    """One trace record (Java ``TraceContext``): a type, its context and its messages.

    Attributes:
        trace_type: what happened.
        timestamp: epoch ms when it started.
        region_id: the broker's region (``MSG_REGION``; Java traces nothing without one).
        group: the producer or consumer group, without namespace.
        cost_ms: the send's or the handler's time, per message.
        success: whether the send or the handler succeeded.
        request_id: ties a SubBefore to its SubAfter (a client message id in Java).
        context_code: the ``ConsumeReturnType`` ordinal (SubAfter).
        beans: the messages (one for Pub and EndTransaction, the batch for Sub records).
    """

    trace_type: TraceType
    timestamp: int = 0
    region_id: str | None = ""
    group: str | None = ""
    cost_ms: int = 0
    success: bool = True
    request_id: str | None = ""
    context_code: int = 0
    beans: list[TraceBean] = field(default_factory=list)


@dataclass(slots=True)  # not frozen: one is built per traced handler call
class TransferBean:
    """An encoded record and the keys its trace message is found by (Java
    ``TraceTransferBean``): each message id, then each of its keys."""

    data: str
    keys: tuple[str, ...]


def _record_fields(ctx: TraceContext) -> tuple[str, str, str, str]:
    """What Pub, SubBefore, EndTransaction and Recall records start with: the record's
    type, time, region and group."""
    return ctx.trace_type.value, str(ctx.timestamp), _s(ctx.region_id), _s(ctx.group)


def _message_fields(ctx: TraceContext, b: TraceBean) -> tuple[str, ...]:
    """What Pub, EndTransaction and Recall records start with: the record, then the message."""
    return (*_record_fields(ctx), _s(b.topic), _s(b.msg_id))


def _pub_fields(ctx: TraceContext, b: TraceBean) -> tuple[str, ...]:
    return (
        *_message_fields(ctx, b),
        _s(b.tags),
        _s(b.keys),
        _s(b.store_host),
        str(b.body_length),
        str(ctx.cost_ms),
        _ordinal(b.msg_type),
        _s(b.offset_msg_id),
        _b(ctx.success),
    )


def _sub_before_fields(ctx: TraceContext, b: TraceBean) -> tuple[str, ...]:
    return (
        *_record_fields(ctx),
        _s(ctx.request_id),
        _s(b.msg_id),
        str(b.retry_times),
        _s(b.keys),
    )


def _sub_after_fields(ctx: TraceContext, b: TraceBean) -> tuple[str, ...]:
    return (
        ctx.trace_type.value,
        _s(ctx.request_id),
        _s(b.msg_id),
        str(ctx.cost_ms),
        _b(ctx.success),
        _s(b.keys),
        str(ctx.context_code),
        str(ctx.timestamp),
        _s(ctx.group),
    )


def _end_transaction_fields(ctx: TraceContext, b: TraceBean) -> tuple[str, ...]:
    return (
        *_message_fields(ctx, b),
        _s(b.tags),
        _s(b.keys),
        _s(b.store_host),
        _ordinal(b.msg_type),
        _s(b.transaction_id),
        _s(b.transaction_state),
        _b(b.from_transaction_check),
    )


def _recall_fields(ctx: TraceContext, b: TraceBean) -> tuple[str, ...]:
    return (*_message_fields(ctx, b), _b(ctx.success))


#: each record type's fields, and whether it writes a record per bean (Sub records) or one
#: for the first bean (Java ``TraceDataEncoder.encoderFromContextBean``)
_FIELDS: Final[
    dict[TraceType, tuple[Callable[[TraceContext, TraceBean], tuple[str, ...]], bool]]
] = {
    TraceType.Pub: (_pub_fields, False),
    TraceType.SubBefore: (_sub_before_fields, True),
    TraceType.SubAfter: (_sub_after_fields, True),
    TraceType.EndTransaction: (_end_transaction_fields, False),
    TraceType.Recall: (_recall_fields, False),
}


def encode_trace(ctx: TraceContext) -> TransferBean:
    """Java ``TraceDataEncoder.encoderFromContextBean`` (local access channel)."""
    c, f = CONTENT_SPLITOR, FIELD_SPLITOR
    parts: list[str] = []
    entry = _FIELDS.get(ctx.trace_type)
    if entry is not None:
        fields_of, every_bean = entry
        beans = ctx.beans if every_bean else ctx.beans[:1]
        parts = [c.join(fields_of(ctx, b)) + f for b in beans]
    keys: list[str] = []
    for b in ctx.beans:
        keys.append(_s(b.msg_id))
        if b.keys:
            # MessageConst.KEY_SEPARATOR is one space; String.split drops trailing empties.
            keys.extend(k for k in b.keys.split(" ") if k)
    return TransferBean("".join(parts), tuple(keys))


#: One traced handler call: its messages, start and end (epoch ms), success and
#: ``ConsumeReturnType`` ordinal. A plain tuple: the consume hook builds one per call on the
#: hot path, and its SubBefore / SubAfter records are encoded only when they are sent.
ConsumeCall: TypeAlias = "tuple[Sequence[ReceivedMessage], int, int, bool, int]"


def encode_consume(call: ConsumeCall, group: str, request_id: str) -> TransferBean | None:
    """The SubBefore and SubAfter records of one handler call, byte for byte what
    `encode_trace` writes for the two contexts Java's ``ConsumeMessageTraceHookImpl``
    builds (messages with ``TRACE_ON=false`` left out; the region is the last traced
    message's); ``None`` when no message is traced."""
    msgs, started, ended, success, code = call
    c, f = CONTENT_SPLITOR, FIELD_SPLITOR
    ok = "true" if success else "false"
    if len(msgs) == 1:  # the usual call: one string, no lists
        m = msgs[0]
        props = m.properties
        if props.get(TRACE_ON) == "false":
            return None
        raw = props.get(KEYS)
        k = "null" if raw is None else raw
        msg_id = m.msg_id
        data = (
            f"SubBefore{c}{started}{c}{props.get(MSG_REGION, '')}{c}{group}{c}{request_id}{c}"
            f"{msg_id}{c}{m.reconsume_times}{c}{k}{f}"
            f"SubAfter{c}{request_id}{c}{msg_id}{c}{ended - started}{c}{ok}{c}{k}{c}{code}{c}"
            f"{ended}{c}{group}{f}"
        )
        if not raw:
            return TransferBean(data, (msg_id,))
        return TransferBean(data, (msg_id, *(x for x in raw.split(" ") if x)))
    traced = [m for m in msgs if m.properties.get(TRACE_ON) != "false"]
    if not traced:
        return None
    region = traced[-1].properties.get(MSG_REGION, "")
    # Java divides the call's time by every message handed over, traced or not.
    cost = (ended - started) // len(msgs)
    head = f"SubBefore{c}{started}{c}{region}{c}{group}{c}{request_id}{c}"
    tail = f"{c}{cost}{c}{ok}{c}"
    end = f"{c}{code}{c}{ended}{c}{group}{f}"
    before: list[str] = []
    after: list[str] = []
    keys: list[str] = []
    for m in traced:
        msg_id = m.msg_id
        raw = m.properties.get(KEYS)
        k = _s(raw)
        before.append(f"{head}{msg_id}{c}{m.reconsume_times}{c}{k}{f}")
        after.append(f"SubAfter{c}{request_id}{c}{msg_id}{tail}{k}{end}")
        keys.append(msg_id)
        if raw:
            keys.extend(x for x in raw.split(" ") if x)
    return TransferBean("".join(before) + "".join(after), tuple(keys))


def _ordinal(t: MessageType | None) -> str:
    # Java would throw on a null type; Normal is what every hook sets when in doubt.
    return str(int(t if t is not None else MessageType.Normal_Msg))


def _bool(text: str) -> bool:
    # Boolean.parseBoolean: "true" in any case, anything else false.
    return text.lower() == "true"


def decode_trace(text: str) -> list[TraceContext]:
    """Java ``TraceDataEncoder.decoderFromTraceDataString``: the records of a trace
    message's body. Malformed records are skipped (logged), unknown types ignored."""
    out: list[TraceContext] = []
    for record in text.split(FIELD_SPLITOR):
        if not record:
            continue
        line = record.split(CONTENT_SPLITOR)
        while line and not line[-1]:
            line.pop()  # Java's String.split drops trailing empty fields
        try:
            ctx = _decode_one(line)
        except (IndexError, ValueError):
            log.warning("malformed trace record %r", record)
            continue
        if ctx is not None:
            out.append(ctx)
    return out


def _decode_one(line: list[str]) -> TraceContext | None:
    kind = line[0]
    if kind == "Pub":
        bean = TraceBean(
            topic=line[4],
            msg_id=line[5],
            tags=line[6],
            keys=line[7],
            store_host=line[8],
            body_length=int(line[9]),
            msg_type=MessageType(int(line[11])),
        )
        ctx = TraceContext(
            TraceType.Pub,
            timestamp=int(line[1]),
            region_id=line[2],
            group=line[3],
            cost_ms=int(line[10]),
            beans=[bean],
        )
        if len(line) == 13:
            ctx.success = _bool(line[12])
        elif len(line) >= 14:
            bean.offset_msg_id = line[12]
            ctx.success = _bool(line[13])
            if len(line) >= 15:
                bean.client_host = line[14]
        return ctx
    if kind == "SubBefore":
        bean = TraceBean(msg_id=line[5], retry_times=int(line[6]), keys=line[7])
        return TraceContext(
            TraceType.SubBefore,
            timestamp=int(line[1]),
            region_id=line[2],
            group=line[3],
            request_id=line[4],
            beans=[bean],
        )
    if kind == "SubAfter":
        ctx = TraceContext(
            TraceType.SubAfter,
            request_id=line[1],
            cost_ms=int(line[3]),
            success=_bool(line[4]),
            beans=[TraceBean(msg_id=line[2], keys=line[5])],
        )
        if len(line) >= 7:
            ctx.context_code = int(line[6])
        if len(line) >= 9:
            ctx.timestamp = int(line[7])
            ctx.group = line[8]
        return ctx
    if kind == "EndTransaction":
        bean = TraceBean(
            topic=line[4],
            msg_id=line[5],
            tags=line[6],
            keys=line[7],
            store_host=line[8],
            msg_type=MessageType(int(line[9])),
            transaction_id=line[10],
            transaction_state=line[11],
            from_transaction_check=_bool(line[12]),
        )
        return TraceContext(
            TraceType.EndTransaction,
            timestamp=int(line[1]),
            region_id=line[2],
            group=line[3],
            beans=[bean],
        )
    if kind == "Recall":
        return TraceContext(
            TraceType.Recall,
            timestamp=int(line[1]),
            region_id=line[2],
            group=line[3],
            success=_bool(line[6]),
            beans=[TraceBean(topic=line[4], msg_id=line[5])],
        )
    return None


def trace_group_name(group: str, kind: str, n: int) -> str:
    """``AsyncTraceDispatcher.genGroupNameForTrace``: the trace producer's group."""
    return f"{_GROUP_PREFIX}-{group}-{kind}-{n}"
