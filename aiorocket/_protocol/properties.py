"""Message properties: the well-known keys and the ``key\\x01value\\x02…`` encoding (§4.5).

The same text travels in the send header (``i`` / ``properties``), in stored records and in
batch records. Java drops the final ``\\x02``; Go, C++ and ali-ons keep it, so the decoder
accepts both and the encoder writes the Java form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NoReturn

from aiorocket.errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "BUYER_ID",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
    "CLUSTER",
    "CONSUME_START_TIME",
    "CORRELATION_ID",
    "DELAY",
    "FIRST_POP_TIME",
    "INNER_MULTI_DISPATCH",
    "INNER_MULTI_QUEUE_OFFSET",
    "INSTANCE_ID",
    "KEYS",
    "LITE_TOPIC",
    "LMQ_SEPARATOR",
    "MAX_OFFSET",
    "MAX_PROPERTIES_SIZE",
    "MAX_RECONSUME_TIMES",
    "MIN_OFFSET",
    "MSG_REGION",
    "MSG_TYPE",
    "NAME_VALUE_SEPARATOR",
    "ORIGIN_MESSAGE_ID",
    "POP_CK",
    "PGROUP",
    "PROPERTY_SEPARATOR",
    "REAL_QID",
    "REAL_TOPIC",
    "RECONSUME_TIME",
    "REPLY_ARRIVE_TIME",
    "REPLY_MESSAGE_FLAG",
    "REPLY_PUSH_TIME",
    "REPLY_TO_CLIENT",
    "RETRY_TOPIC",
    "PRIORITY",
    "SHARDING_KEY",
    "START_DELIVER_TIME",
    "TAGS",
    "TIMER_DELAY_MS",
    "TIMER_DELAY_SEC",
    "TIMER_DELIVER_MS",
    "TIMER_DEL_UNIQKEY",
    "TIMER_DEQUEUE_MS",
    "TIMER_ENQUEUE_MS",
    "TIMER_KEYS",
    "TIMER_OUT_MS",
    "TIMER_ROLL_TIMES",
    "TRACE_ON",
    "TRANSACTION_CHECK_TIMES",
    "TRAN_MSG",
    "TRAN_PREPARED_QUEUE_OFFSET",
    "TTL",
    "UNIQ_KEY",
    "WAIT",
    "decode_properties",
    "encode_properties",
    "message_kind",
    "encode_properties_bytes",
    "properties_bytes",
]

# MessageConst wire keys (4.9.8 names; §4.5.1).

#: PROPERTY_KEYS: business keys, several joined by one space.
KEYS: Final[str] = "KEYS"
#: PROPERTY_TAGS: the message's single tag.
TAGS: Final[str] = "TAGS"
#: PROPERTY_WAIT_STORE_MSG_OK: ask the broker to wait for flush / replication.
WAIT: Final[str] = "WAIT"
#: PROPERTY_DELAY_TIME_LEVEL: delay level 1..18.
DELAY: Final[str] = "DELAY"
#: PROPERTY_RETRY_TOPIC: the original topic of a retried message.
RETRY_TOPIC: Final[str] = "RETRY_TOPIC"
#: PROPERTY_REAL_TOPIC: the real topic of a message parked in a system topic.
REAL_TOPIC: Final[str] = "REAL_TOPIC"
#: PROPERTY_REAL_QUEUE_ID: the real queue id of a parked message.
REAL_QID: Final[str] = "REAL_QID"
#: PROPERTY_TRANSACTION_PREPARED: "true" marks a transactional half message.
TRAN_MSG: Final[str] = "TRAN_MSG"
#: PROPERTY_PRODUCER_GROUP: the producer group asked to check a transaction.
PGROUP: Final[str] = "PGROUP"
#: PROPERTY_MIN_OFFSET: set locally by the consumer from the pull response.
MIN_OFFSET: Final[str] = "MIN_OFFSET"
#: PROPERTY_MAX_OFFSET: set locally by the consumer from the pull response.
MAX_OFFSET: Final[str] = "MAX_OFFSET"
#: PROPERTY_BUYER_ID (legacy).
BUYER_ID: Final[str] = "BUYER_ID"
#: PROPERTY_ORIGIN_MESSAGE_ID: the id of the first delivery of a retried message.
ORIGIN_MESSAGE_ID: Final[str] = "ORIGIN_MESSAGE_ID"
#: PROPERTY_RECONSUME_TIME: client retry fallback; moved into header ``j`` before sending.
RECONSUME_TIME: Final[str] = "RECONSUME_TIME"
#: PROPERTY_MAX_RECONSUME_TIMES: client retry fallback; moved into header ``l``.
MAX_RECONSUME_TIMES: Final[str] = "MAX_RECONSUME_TIMES"
#: PROPERTY_MSG_REGION: trace region id.
MSG_REGION: Final[str] = "MSG_REGION"
#: PROPERTY_TRACE_SWITCH.
TRACE_ON: Final[str] = "TRACE_ON"
#: PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: the client message id (§4.4).
UNIQ_KEY: Final[str] = "UNIQ_KEY"
#: PROPERTY_CONSUME_START_TIMESTAMP: set locally when consumption begins.
CONSUME_START_TIME: Final[str] = "CONSUME_START_TIME"
#: PROPERTY_TRANSACTION_PREPARED_QUEUE_OFFSET (broker, transactions).
TRAN_PREPARED_QUEUE_OFFSET: Final[str] = "TRAN_PREPARED_QUEUE_OFFSET"
#: PROPERTY_TRANSACTION_CHECK_TIMES (broker, transactions).
TRANSACTION_CHECK_TIMES: Final[str] = "TRANSACTION_CHECK_TIMES"
#: PROPERTY_CHECK_IMMUNITY_TIME_IN_SECONDS (transactional producer).
CHECK_IMMUNITY_TIME_IN_SECONDS: Final[str] = "CHECK_IMMUNITY_TIME_IN_SECONDS"
#: PROPERTY_INSTANCE_ID (client namespace support).
INSTANCE_ID: Final[str] = "INSTANCE_ID"
#: PROPERTY_CLUSTER: the broker cluster name, added to every stored message.
CLUSTER: Final[str] = "CLUSTER"

# Request/reply (MessageConst since 4.6; docs/protocol.md §13).

#: PROPERTY_CORRELATION_ID: matches a reply to its request (the requester's UUID).
CORRELATION_ID: Final[str] = "CORRELATION_ID"
#: PROPERTY_MESSAGE_REPLY_TO_CLIENT: the client id the broker pushes the reply to.
REPLY_TO_CLIENT: Final[str] = "REPLY_TO_CLIENT"
#: PROPERTY_MESSAGE_TTL: the requester's timeout in milliseconds, copied onto the reply.
TTL: Final[str] = "TTL"
#: PROPERTY_MESSAGE_TYPE: ``"reply"`` (`REPLY_MESSAGE_FLAG`) marks a reply message.
MSG_TYPE: Final[str] = "MSG_TYPE"
#: ``MixAll.REPLY_MESSAGE_FLAG``: the `MSG_TYPE` of a reply.
REPLY_MESSAGE_FLAG: Final[str] = "reply"
#: PROPERTY_PUSH_REPLY_TIME: set by the broker when it pushes a reply (ms).
REPLY_PUSH_TIME: Final[str] = "PUSH_REPLY_TIME"
#: PROPERTY_REPLY_MESSAGE_ARRIVE_TIME: set by the requester when the reply arrives (ms).
REPLY_ARRIVE_TIME: Final[str] = "ARRIVE_TIME"

#: Java 5.x SHARDING_KEY (Go's client spells it ``SHARDING_KEY``; §11.1 item 12).
SHARDING_KEY: Final[str] = "__SHARDINGKEY"
#: PROPERTY_LITE_TOPIC (5.5): the lite topic of a message sent to its parent (§12.8).
LITE_TOPIC: Final[str] = "__LITE_TOPIC"
#: PROPERTY_INNER_MULTI_DISPATCH: the light message queues (LMQ) a stored message is also
#: indexed in, ``,``-separated (§12.8).
INNER_MULTI_DISPATCH: Final[str] = "INNER_MULTI_DISPATCH"
#: PROPERTY_INNER_MULTI_QUEUE_OFFSET: its offset in each of those queues, in the same order.
INNER_MULTI_QUEUE_OFFSET: Final[str] = "INNER_MULTI_QUEUE_OFFSET"
#: ``MixAll.LMQ_DISPATCH_SEPARATOR``: separates the entries of the two properties above.
LMQ_SEPARATOR: Final[str] = ","
#: Aliyun ONS timed delivery; the Java client hook only inspects it.
START_DELIVER_TIME: Final[str] = "__STARTDELIVERTIME"
#: PROPERTY_PRIORITY (5.4+): a priority message's priority, 0 the lowest (§12.6).
PRIORITY: Final[str] = "_SYS_MSG_PRIORITY_"

#: PROPERTY_POP_CK: a popped message's receipt handle, when the broker writes it itself (a
#: message re-encoded from a POP retry topic; docs/protocol.md §12.3).
POP_CK: Final[str] = "POP_CK"
#: PROPERTY_FIRST_POP_TIME: when the message was first popped (ms), kept across revives.
FIRST_POP_TIME: Final[str] = "1ST_POP_TIME"

# RocketMQ 5.x timer messages (MessageConst 5.3.3; docs/protocol.md §12.4).

#: PROPERTY_TIMER_DELIVER_MS: deliver at this absolute time (ms since the epoch).
TIMER_DELIVER_MS: Final[str] = "TIMER_DELIVER_MS"
#: PROPERTY_TIMER_DELAY_SEC: deliver this many seconds after the broker stores the message.
TIMER_DELAY_SEC: Final[str] = "TIMER_DELAY_SEC"
#: PROPERTY_TIMER_DELAY_MS: deliver this many milliseconds after the broker stores it.
TIMER_DELAY_MS: Final[str] = "TIMER_DELAY_MS"
#: PROPERTY_TIMER_OUT_MS: set by the broker when it parks a timer message: its slot time.
TIMER_OUT_MS: Final[str] = "TIMER_OUT_MS"
#: PROPERTY_TIMER_ENQUEUE_MS: set by the broker: when the message entered the timer.
TIMER_ENQUEUE_MS: Final[str] = "TIMER_ENQUEUE_MS"
#: PROPERTY_TIMER_DEQUEUE_MS: set by the broker: when the message left the timer.
TIMER_DEQUEUE_MS: Final[str] = "TIMER_DEQUEUE_MS"
#: PROPERTY_TIMER_ROLL_TIMES: set by the broker each time it re-parks a far-off timer.
TIMER_ROLL_TIMES: Final[str] = "TIMER_ROLL_TIMES"
#: PROPERTY_TIMER_DEL_UNIQKEY: ``<topic>+<UNIQ_KEY>`` of the timer message this one cancels.
TIMER_DEL_UNIQKEY: Final[str] = "TIMER_DEL_UNIQKEY"
#: the properties that make a message a timer message (``HookUtils.checkIfTimerMessage``).
TIMER_KEYS: Final[tuple[str, ...]] = (TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS)

#: MessageDecoder.NAME_VALUE_SEPARATOR.
NAME_VALUE_SEPARATOR: Final[str] = "\x01"
#: MessageDecoder.PROPERTY_SEPARATOR.
PROPERTY_SEPARATOR: Final[str] = "\x02"
#: The broker answers MESSAGE_ILLEGAL (13) beyond this many encoded bytes (a Java short).
MAX_PROPERTIES_SIZE: Final[int] = 32767


def decode_properties(data: bytes | str) -> dict[str, str]:
    """Parse a properties string the way ``MessageDecoder.string2messageProperties`` does.

    Items are split on ``\\x02``; the key is what precedes the first ``\\x01`` and the value
    all that follows it (a value may thus contain ``\\x01``). Items without ``\\x01`` or with
    an empty key or value are dropped silently, a repeated key keeps its last value, and a
    trailing ``\\x02`` is accepted. (Java also skips items shorter than 3 chars; that rule is
    implied by the non-empty key and value.)

    Raises:
        RemoteProtocolError: ``data`` is bytes that are not valid UTF-8.
    """
    if isinstance(data, bytes):
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(f"message properties are not UTF-8: {exc}") from None
    else:
        text = data
    props: dict[str, str] = {}
    if not text:
        return props
    for item in text.split("\x02"):
        key, _, value = item.partition("\x01")
        if key and value:
            props[key] = value
    return props


def encode_properties(props: Mapping[str, str]) -> str:
    """Encode properties in Java's form: ``k\\x01v`` items joined by ``\\x02``, none trailing.

    Insertion order is kept. The size limit is not checked here (it applies to the UTF-8
    bytes; see `encode_properties_bytes`).

    Raises:
        LocalProtocolError: a key or value is empty or contains ``\\x01`` or ``\\x02``.
    """
    if not props:
        return ""
    text = "\x02".join(map("\x01".join, props.items()))
    n = len(props)
    # One \x01 per item and one \x02 between items: any extra one came from a key or value.
    # Counting in C is far cheaper than scanning every key and value in Python.
    if (
        text.count("\x01") != n
        or text.count("\x02") != n - 1
        or "" in props.values()
        or "" in props
    ):
        _raise_bad_property(props)
    return text


def encode_properties_bytes(props: Mapping[str, str]) -> bytes:
    """Encode properties as UTF-8 bytes, as they appear in stored and batch records.

    Raises:
        LocalProtocolError: a key or value is empty, contains ``\\x01``/``\\x02`` or a lone
            surrogate, or the encoding exceeds `MAX_PROPERTIES_SIZE` bytes.
    """
    return properties_bytes(encode_properties(props))


def properties_bytes(text: str, what: str = "message properties") -> bytes:
    """Properties text (as `encode_properties` writes it) as the UTF-8 bytes a record
    carries, within the record format's limit.

    Raises:
        LocalProtocolError: a lone surrogate, or more than `MAX_PROPERTIES_SIZE` bytes
            (``what`` names them in the message).
    """
    try:
        data = text.encode()
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"{what} are not encodable: {exc}") from None
    if len(data) > MAX_PROPERTIES_SIZE:
        raise LocalProtocolError(
            f"{what} are {len(data)} bytes, over the limit of {MAX_PROPERTIES_SIZE}"
        )
    return data


def _raise_bad_property(props: Mapping[str, str]) -> NoReturn:
    for key, value in props.items():
        if not key:
            raise LocalProtocolError("a message property has an empty name")
        if not value:
            raise LocalProtocolError(f"message property {key!r} has an empty value")
        for text in (key, value):
            if "\x01" in text or "\x02" in text:
                raise LocalProtocolError(
                    f"message property {key!r} contains a separator (\\x01 or \\x02)"
                )
    raise LocalProtocolError("invalid message properties")


def message_kind(props: Mapping[str, str]) -> str:
    """``TopicMessageType.parseFromMessageProperty``: a message's kind from its properties,
    in Java's order (``TRANSACTION``, ``DELAY``, ``FIFO``, ``PRIORITY``, ``LITE``, else
    ``NORMAL``), as a 5.x proxy checks it against its topic's ``message.type``."""
    if props.get(TRAN_MSG, "").lower() == "true":
        return "TRANSACTION"
    if DELAY in props or any(k in props for k in TIMER_KEYS):
        return "DELAY"
    if SHARDING_KEY in props:
        return "FIFO"
    if PRIORITY in props:
        return "PRIORITY"
    if LITE_TOPIC in props:
        return "LITE"
    return "NORMAL"
