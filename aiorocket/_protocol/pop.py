"""RocketMQ 5.x POP consumption and server-side assignment on the wire (docs/protocol.md §12.3):
the request and response headers, the receipt handle a broker hands out with every popped
message, and the bodies of BATCH_ACK_MESSAGE, QUERY_ASSIGNMENT and SET_MESSAGE_REQUEST_MODE.

Sans-IO like the rest of this package. The receipt handle is Java's ``ExtraInfoUtil`` string
(``POP_CK`` property on the client side), the offset-info strings of the POP response those of
``ExtraInfoUtil.build*Info``; the bodies follow the 5.3 beans, fastjson names included.
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass
from typing import Annotated, Any, Final

from pydantic import PlainValidator

from aiorocket._names import RETRY_PREFIX, pop_retry_topic
from aiorocket._protocol.schema import (
    MQ,
    OMIT_IF_NONE,
    Body,
    Int32,
    Int64,
    WireKind,
    header_class,
    java_enum,
    member,
)
from aiorocket._protocol.schema import Header as _Header
from aiorocket._protocol.schema import wire as _wire
from aiorocket.errors import RemoteProtocolError

__all__ = [
    "CONSUME_INIT_MODES",
    "MESSAGE_REQUEST_MODES",
    "POP_ORDER_REVIVE_QUEUE",
    "AckMessageRequestHeader",
    "BatchAck",
    "BatchAckMessageRequestBody",
    "ChangeInvisibleTimeRequestHeader",
    "ChangeInvisibleTimeResponseHeader",
    "MessageQueueAssignment",
    "MessageRequestModeWrapper",
    "NotificationRequestHeader",
    "NotificationResponseHeader",
    "OffsetInfo",
    "PopMessageRequestHeader",
    "PopMessageResponseHeader",
    "QueryAssignmentRequestBody",
    "QueryAssignmentResponseBody",
    "ReceiptHandle",
    "SetMessageRequestModeRequestBody",
    "format_offset_info",
    "parse_offset_info",
    "retry_mark",
]

_INT = WireKind.INT
_LONG = WireKind.LONG

#: ``KeyBuilder.POP_ORDER_REVIVE_QUEUE``: the revive queue id of a handle of an ordered POP
POP_ORDER_REVIVE_QUEUE: Final = 999
#: ``MessageRequestMode`` names: how a group's clients read a topic (``mqadmin setConsumeMode``)
MESSAGE_REQUEST_MODES: tuple[str, ...] = ("PULL", "POP")
#: ``ConsumeInitMode``: where a group's first POP of a queue starts (``initMode``)
CONSUME_INIT_MODES: tuple[str, ...] = ("MIN", "MAX")

# ``ExtraInfoUtil``'s marks of the topic a handle's message was read from.
_NORMAL, _RETRY_V1, _RETRY_V2 = "0", "1", "2"


def retry_mark(topic: str) -> str:
    """``ExtraInfoUtil.getRetry``: ``"2"`` for a v2 POP retry topic, ``"1"`` for any other
    ``%RETRY%`` topic, ``"0"`` otherwise."""
    if topic.startswith(RETRY_PREFIX):
        return _RETRY_V2 if "+" in topic else _RETRY_V1
    return _NORMAL


# --------------------------------------------------------------------------- headers


@header_class
class PopMessageRequestHeader(_Header):
    """POP_MESSAGE (200050) — Java's ``PopMessageRequestHeader``. ``queue_id`` -1 pops from any
    queue of the topic; ``poll_time`` (ms) holds the request while nothing is there."""

    consumer_group: str = _wire("consumerGroup", required=True)
    topic: str = _wire("topic", required=True)
    queue_id: int = _wire("queueId", _INT, required=True)
    max_msg_nums: int = _wire("maxMsgNums", _INT, required=True)
    #: ms the popped messages stay invisible to the group unless acked
    invisible_time: int = _wire("invisibleTime", _LONG, required=True)
    poll_time: int = _wire("pollTime", _LONG, required=True)
    born_time: int = _wire("bornTime", _LONG, required=True)
    #: `CONSUME_INIT_MODES` index: 0 from the queue's start, 1 from its end
    init_mode: int = _wire("initMode", _INT, required=True)
    exp_type: str | None = _wire("expType", default=None)
    exp: str | None = _wire("exp", default=None)
    order: bool = _wire("order", default=False)
    attempt_id: str | None = _wire("attemptId", default=None)
    broker_name: str | None = _wire("bname", default=None)
    #: Not Java's: ``PullMessageRequestHeader`` fields for Apache's proxy, whose remoting server
    #: hands POP_MESSAGE to its pull activity (5.3.3, 5.5.0): with the subscription bit set
    #: (``PullSysFlag.SUBSCRIPTION``) it forwards the request untouched, waiting
    #: ``suspendTimeoutMillis`` + 10 s. Brokers ignore both (docs/protocol.md §12.5).
    proxy_sys_flag: int | None = _wire("sysFlag", _INT, default=None)
    proxy_suspend_ms: int | None = _wire("suspendTimeoutMillis", _LONG, default=None)


@header_class
class PopMessageResponseHeader(_Header):
    """The response to POP_MESSAGE — Java's ``PopMessageResponseHeader``: when the messages
    were popped, for how long, the revive queue of their checkpoint, how many are left, and
    per queue the checkpoint's start offset, the popped offsets and (ordered POP) how many
    times each was delivered (the ``*_info`` strings, see `parse_offset_info`)."""

    pop_time: int = _wire("popTime", _LONG, required=True)
    invisible_time: int = _wire("invisibleTime", _LONG, required=True)
    revive_qid: int = _wire("reviveQid", _INT, required=True)
    rest_num: int = _wire("restNum", _LONG, required=True)
    start_offset_info: str | None = _wire("startOffsetInfo", default=None)
    msg_offset_info: str | None = _wire("msgOffsetInfo", default=None)
    order_count_info: str | None = _wire("orderCountInfo", default=None)


@header_class
class AckMessageRequestHeader(_Header):
    """ACK_MESSAGE (200051) — Java's ``AckMessageRequestHeader``: ``topic`` is the topic the
    message was popped from (its POP retry topic for a retried one), ``extra_info`` the
    receipt handle, ``offset`` the message's queue offset."""

    consumer_group: str = _wire("consumerGroup", required=True)
    topic: str = _wire("topic", required=True)
    queue_id: int = _wire("queueId", _INT, required=True)
    extra_info: str = _wire("extraInfo", required=True)
    offset: int = _wire("offset", _LONG, required=True)
    broker_name: str | None = _wire("bname", default=None)
    #: 5.5: the lite topic of a message popped by POP_LITE_MESSAGE (``topic`` its parent,
    #: ``offset`` its offset in the lite topic, docs/protocol.md §12.8)
    lite_topic: str | None = _wire("liteTopic", default=None)


@header_class
class ChangeInvisibleTimeRequestHeader(_Header):
    """CHANGE_MESSAGE_INVISIBLETIME (200053) — Java's ``ChangeInvisibleTimeRequestHeader``:
    the message becomes visible ``invisible_time`` ms from now; the answer carries the new
    handle's pop time (the old handle is spent)."""

    consumer_group: str = _wire("consumerGroup", required=True)
    topic: str = _wire("topic", required=True)
    queue_id: int = _wire("queueId", _INT, required=True)
    extra_info: str = _wire("extraInfo", required=True)
    offset: int = _wire("offset", _LONG, required=True)
    invisible_time: int = _wire("invisibleTime", _LONG, required=True)
    broker_name: str | None = _wire("bname", default=None)
    #: 5.5: as in ``AckMessageRequestHeader``
    lite_topic: str | None = _wire("liteTopic", default=None)
    #: 5.5, lite only: hold back the message's whole lite topic until then
    suspend: bool | None = _wire("suspend", default=None)


@header_class
class ChangeInvisibleTimeResponseHeader(_Header):
    """The response to CHANGE_MESSAGE_INVISIBLETIME — Java's
    ``ChangeInvisibleTimeResponseHeader``."""

    pop_time: int = _wire("popTime", _LONG, required=True)
    invisible_time: int = _wire("invisibleTime", _LONG, required=True)
    revive_qid: int = _wire("reviveQid", _INT, required=True)


@header_class
class NotificationRequestHeader(_Header):
    """NOTIFICATION (200054) — Java's ``NotificationRequestHeader``: held up to ``poll_time``
    ms until the queue (-1: any) has a message for the group; answers whether it has."""

    consumer_group: str = _wire("consumerGroup", required=True)
    topic: str = _wire("topic", required=True)
    queue_id: int = _wire("queueId", _INT, required=True)
    poll_time: int = _wire("pollTime", _LONG, required=True)
    born_time: int = _wire("bornTime", _LONG, required=True)
    order: bool = _wire("order", default=False)
    attempt_id: str | None = _wire("attemptId", default=None)
    broker_name: str | None = _wire("bname", default=None)


@header_class
class NotificationResponseHeader(_Header):
    """The response to NOTIFICATION — Java's ``NotificationResponseHeader``."""

    has_msg: bool = _wire("hasMsg", required=True, default=False)
    polling_full: bool = _wire("pollingFull", default=False)


# --------------------------------------------------------------------------- receipt handles


@dataclass(frozen=True, slots=True)
class ReceiptHandle:
    """What a broker needs to ack a popped message or change its invisible time: Java's
    ``ExtraInfoUtil`` string, eight fields separated by spaces.

    ``ck_offset`` is the queue offset the pop's checkpoint starts at, ``pop_time`` (ms) when
    it was popped, ``invisible_time`` (ms) for how long, ``revive_qid`` the revive queue of
    the checkpoint (`POP_ORDER_REVIVE_QUEUE` for an ordered POP), ``retry`` the mark of
    the topic it was read from (`retry_mark`), then the broker name, queue id and the
    message's own queue offset.
    """

    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    offset: int

    @classmethod
    def parse(cls, text: str) -> ReceiptHandle:
        """Read a handle.

        Raises:
            RemoteProtocolError: not eight space-separated fields of the right types.
        """
        parts = text.split(" ")
        if len(parts) != 8 or parts[4] not in (_NORMAL, _RETRY_V1, _RETRY_V2) or not parts[5]:
            raise RemoteProtocolError(f"malformed receipt handle {text!r}")
        try:
            return cls(
                int(parts[0]),
                int(parts[1]),
                int(parts[2]),
                int(parts[3]),
                parts[4],
                parts[5],
                int(parts[6]),
                int(parts[7]),
            )
        except ValueError:
            raise RemoteProtocolError(f"malformed receipt handle {text!r}") from None

    @property
    def text(self) -> str:
        """The handle as the broker reads it (``extraInfo``)."""
        return " ".join(
            (
                str(self.ck_offset),
                str(self.pop_time),
                str(self.invisible_time),
                str(self.revive_qid),
                self.retry,
                self.broker_name,
                str(self.queue_id),
                str(self.offset),
            )
        )

    @property
    def visible_at_ms(self) -> int:
        """When the message becomes visible to the group again unless acked (ms)."""
        return self.pop_time + self.invisible_time

    @property
    def ordered(self) -> bool:
        """Whether it came from an ordered (FIFO) POP."""
        return self.revive_qid == POP_ORDER_REVIVE_QUEUE

    def popped_topic(self, topic: str, group: str) -> str:
        """The topic the message was popped from, for ``topic`` of ``group``
        (``ExtraInfoUtil.getRealTopic``): ``topic`` or one of its POP retry topics."""
        if self.retry == _NORMAL:
            return topic
        return pop_retry_topic(topic, group, v2=self.retry == _RETRY_V2)

    def renewed(self, pop_time: int, invisible_time: int, revive_qid: int) -> ReceiptHandle:
        """The handle a CHANGE_MESSAGE_INVISIBLETIME answer gives in place of this one
        (``ChangeInvisibleTimeProcessor``: a new checkpoint at the message's own offset)."""
        return dataclasses.replace(
            self,
            ck_offset=self.offset,
            pop_time=pop_time,
            invisible_time=invisible_time,
            revive_qid=revive_qid,
        )


#: ``"<retry mark>@<queue id>"`` (or ``"<mark>@qo<queue id>%<offset>"`` for per-message
#: counts) → values, as `parse_offset_info` reads them
OffsetInfo = dict[str, list[int]]


def parse_offset_info(text: str | None) -> OffsetInfo:
    """Read a POP response's ``startOffsetInfo`` / ``msgOffsetInfo`` / ``orderCountInfo``:
    ``;``-separated ``"<mark> <key> <v1,v2,...>"`` (``ExtraInfoUtil.parse*Info``).

    Raises:
        RemoteProtocolError: malformed, or a key given twice.
    """
    out: OffsetInfo = {}
    if not text:
        return out
    for part in text.split(";"):
        fields = part.split(" ")
        if len(fields) != 3:
            raise RemoteProtocolError(f"malformed POP offset info {text!r}")
        key = f"{fields[0]}@{fields[1]}"
        if key in out:
            raise RemoteProtocolError(f"POP offset info {text!r} repeats {key}")
        try:
            out[key] = [int(v) for v in fields[2].split(",")]
        except ValueError:
            raise RemoteProtocolError(f"malformed POP offset info {text!r}") from None
    return out


def format_offset_info(entries: list[tuple[str, str, list[int]]]) -> str:
    """The inverse of `parse_offset_info` for ``(topic, key, values)`` entries, the
    topic giving the retry mark (``ExtraInfoUtil.build*Info``)."""
    return ";".join(
        f"{retry_mark(topic)} {key} {','.join(str(v) for v in values)}"
        for topic, key, values in entries
    )


# --------------------------------------------------------------------------- bodies


def _bitset_read(value: Any) -> frozenset[int]:
    # fastjson writes BitSet.toByteArray() (little-endian) as a base64 string.
    if isinstance(value, frozenset):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected a base64 bit set, got {type(value).__name__}")
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        raise ValueError("expected a base64 bit set") from None
    number = int.from_bytes(raw, "little")
    return frozenset(i for i in range(number.bit_length()) if number >> i & 1)


def _bitset_bytes(bits: frozenset[int]) -> bytes:
    number = 0
    for i in bits:
        number |= 1 << i
    return number.to_bytes((number.bit_length() + 7) // 8, "little")


@dataclass(frozen=True, slots=True)
class BatchAck(Body):
    """One checkpoint's acks in a BATCH_ACK_MESSAGE body (Java ``BatchAck``, fastjson short
    names): the offsets acked are ``start_offset`` + each member of ``bits``."""

    consumer_group: Annotated[str, member("c")]
    topic: Annotated[str, member("t")]
    #: the `retry_mark` of the topic the messages were popped from
    retry: Annotated[str, member("r")]
    start_offset: Annotated[Int64, member("so")]
    queue_id: Annotated[Int32, member("q")]
    revive_queue_id: Annotated[Int32, member("rq")]
    pop_time: Annotated[Int64, member("pt")]
    invisible_time: Annotated[Int64, member("it")]
    bits: Annotated[frozenset[int], PlainValidator(_bitset_read), member("b")] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        """The bean as fastjson writes it, the bit set as base64."""
        out = Body.to_dict(self)
        out["b"] = base64.b64encode(_bitset_bytes(self.bits)).decode()
        return out


@dataclass(frozen=True, slots=True)
class BatchAckMessageRequestBody(Body):
    """The BATCH_ACK_MESSAGE (200151) request body (Java ``BatchAckMessageRequestBody``)."""

    broker_name: Annotated[str | None, OMIT_IF_NONE] = None
    acks: tuple[BatchAck, ...] = ()


_RequestMode = Annotated[str, java_enum(MESSAGE_REQUEST_MODES)]


@dataclass(frozen=True, slots=True)
class SetMessageRequestModeRequestBody(Body):
    """The SET_MESSAGE_REQUEST_MODE (401) body and an entry of the broker's mode table (Java
    ``SetMessageRequestModeRequestBody``): how ``consumer_group`` reads ``topic``; with POP,
    ``pop_share_queue_num`` > 0 gives each client its own queues plus that many neighbours'."""

    topic: str
    consumer_group: str
    mode: _RequestMode = "PULL"
    pop_share_queue_num: Int32 = 0


@dataclass(frozen=True, slots=True)
class MessageRequestModeWrapper(Body):
    """The GET_ALL_MESSAGE_REQUEST_MODE (402) body, also the broker's persisted table (Java
    ``MessageRequestModeSerializeWrapper``): topic → group → mode."""

    message_request_mode_map: Annotated[
        dict[str, dict[str, SetMessageRequestModeRequestBody]], member(default={})
    ]


@dataclass(frozen=True, slots=True)
class QueryAssignmentRequestBody(Body):
    """The QUERY_ASSIGNMENT (400) request body (Java ``QueryAssignmentRequestBody``)."""

    topic: str
    consumer_group: str
    client_id: str
    strategy_name: str = "AVG"
    message_model: Annotated[str, java_enum(("BROADCASTING", "CLUSTERING"))] = "CLUSTERING"


@dataclass(frozen=True, slots=True)
class MessageQueueAssignment(Body):
    """One queue of a QUERY_ASSIGNMENT answer and how to read it (Java
    ``MessageQueueAssignment``); a POP assignment of queue id -1 means any queue of the
    broker."""

    message_queue: MQ
    mode: _RequestMode = "PULL"
    attachments: Annotated[dict[str, str] | None, OMIT_IF_NONE] = None


@dataclass(frozen=True, slots=True)
class QueryAssignmentResponseBody(Body):
    """The QUERY_ASSIGNMENT answer (Java ``QueryAssignmentResponseBody``); ``None`` when the
    broker could not assign (unknown topic or group)."""

    message_queue_assignments: Annotated[
        tuple[MessageQueueAssignment, ...] | None, OMIT_IF_NONE
    ] = None
