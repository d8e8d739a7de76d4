"""Value types shared by every layer: plain, frozen and slotted."""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Final, Protocol, cast

from aiorocket._names import is_valid_lite_topic, validate_name, validate_user_property
from aiorocket.errors import ConfigurationError

__all__ = [
    "MAX_DELAY_LEVEL",
    "ConcurrentContext",
    "ConsumeStatus",
    "Message",
    "MessageQueue",
    "OrderlyContext",
    "OrderlyStatus",
    "ReceivedMessage",
    "SendResult",
    "SendStatus",
    "TopicMessageType",
    "validate_name",
]

#: The broker's ``messageDelayLevel`` has 18 levels (1 s … 2 h); higher values clamp to 18.
MAX_DELAY_LEVEL: Final = 18


class TopicMessageType(enum.Enum):
    """The kind of messages a RocketMQ 5 topic takes (its ``message.type`` attribute, Java
    ``TopicMessageType``).

    A 5.x proxy refuses a message whose kind is not its topic's (``MIXED`` takes every kind);
    a broker reached directly does not check. A message's kind follows from what it carries,
    in this order: a transaction (``TRANSACTION``), a delay level or delivery time
    (``DELAY``), a sharding key or message group (``FIFO``), a priority (``PRIORITY``,
    RocketMQ 5.4+), a lite topic (``LITE``, 5.5+); anything else is ``NORMAL``.
    """

    NORMAL = "NORMAL"
    FIFO = "FIFO"
    DELAY = "DELAY"
    TRANSACTION = "TRANSACTION"
    PRIORITY = "PRIORITY"
    LITE = "LITE"
    MIXED = "MIXED"


@dataclass(frozen=True, slots=True, order=True)
class MessageQueue:
    """One queue of a topic on one broker: ``(topic, broker_name, queue_id)``.

    Ordering is by topic, then broker name, then queue id: the order in which the Java client
    sorts ``mqAll`` before allocating queues (AllocateMessageQueueAveragely), so every member
    of a group computes the same allocation.
    """

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


@dataclass(frozen=True, slots=True)
class Message:
    """A message to send.

    Args:
        topic: the destination topic.
        body: the payload (``bytes``; ``str`` is encoded as UTF-8).
        tags: one tag, used by consumers' tag expressions (``"created"``).
        keys: business keys, searchable on the broker (sent space-joined in ``KEYS``).
        properties: user properties (``str`` names and values without ``\\x01``/``\\x02``);
            RocketMQ's system property names (``TAGS``, ``KEYS``, ``DELAY``, ``UNIQ_KEY``, ...)
            are refused, as Java's ``putUserProperty`` refuses them.
        delay_level: 1-18 to deliver after the broker's delay level (1 s … 2 h).
        message_group: RocketMQ 5.x's name for the sharding key (its FIFO message group):
            the message is sent as if ``sharding_key=message_group`` were passed to
            [`Producer.send`][aiorocket.Producer.send]: it goes to the queue of that key
            and carries it as ``__SHARDINGKEY``, so messages of one group stay in order.
        priority: RocketMQ 5.4+ message priority, 0 the lowest (``_SYS_MSG_PRIORITY_``): the
            broker stores the message in queue ``min(priority, queues - 1)`` and POP consumers
            of a ``PRIORITY`` topic read higher queues first (docs/how-to/rocketmq5.md). A
            priority message has no delay, delivery time, message group or lite topic.
        lite_topic: RocketMQ 5.5: the lite topic (1-64 characters from ``[a-zA-Z0-9_-]``) of
            ``topic``, a topic of type LITE; [LiteConsumer][aiorocket.LiteConsumer]s that
            subscribe it receive the message. Sent as ``__LITE_TOPIC``, one at a time (no
            batch), to the queue the lite topic maps to; excludes a message group, a delay and
            a delivery time.

    Raises:
        ConfigurationError: the body is not bytes or text (a `dict`: encode it first, or
            publish it with [App.publish][aiorocket.app.App.publish]), or a tag, key, property,
            delay level, message group, priority or lite topic is invalid.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    delay_level: int | None = None
    message_group: str | None = None
    priority: int | None = None
    lite_topic: str | None = None

    def __init__(
        self,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        *,
        tags: str | None = None,
        keys: Sequence[str] | str = (),
        properties: Mapping[str, str] | None = None,
        delay_level: int | None = None,
        message_group: str | None = None,
        priority: int | None = None,
        lite_topic: str | None = None,
    ) -> None:
        body = _body_bytes(body)
        if properties:
            _check_user_properties(properties)
        if isinstance(keys, str):
            keys = (keys,)
        keys = tuple(keys)
        for k in keys:
            if not k or " " in k:
                raise ConfigurationError(f"message key {k!r} must be non-empty without spaces")
        if tags is not None and (not tags or "||" in tags):
            raise ConfigurationError(f"tag {tags!r} must be non-empty and contain no '||'")
        if delay_level is not None and not 0 <= delay_level <= MAX_DELAY_LEVEL:
            raise ConfigurationError(f"delay_level must be within 0..{MAX_DELAY_LEVEL}")
        # MessageBuilderImpl.setMessageGroup refuses a blank group; the separators would break
        # the properties string the group travels in.
        if message_group is not None and (
            not message_group.strip() or "\x01" in message_group or "\x02" in message_group
        ):
            raise ConfigurationError(
                f"message_group {message_group!r} must be non-blank without \\x01 or \\x02"
            )
        if priority is not None:
            # Message.setPriority: "The priority must be greater than or equal to 0".
            if isinstance(priority, bool) or not isinstance(priority, int) or priority < 0:
                raise ConfigurationError(f"priority must be an int >= 0, not {priority!r}")
            if delay_level or message_group is not None or lite_topic is not None:
                # TopicMessageType: one kind per message (a broker drops the priority of a
                # delay or FIFO message).
                raise ConfigurationError(
                    "a priority message has no delay_level, message_group or lite_topic"
                )
        if lite_topic is not None and (
            not is_valid_lite_topic(lite_topic) or message_group is not None or delay_level
        ):
            raise ConfigurationError(
                f"lite_topic {lite_topic!r} must be 1-64 characters from [a-zA-Z0-9_-], "
                "without a message_group or delay_level"
            )
        object.__setattr__(self, "topic", topic)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "tags", tags)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "properties", dict(properties or {}))
        object.__setattr__(self, "delay_level", delay_level or None)
        object.__setattr__(self, "message_group", message_group)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "lite_topic", lite_topic)

    @classmethod
    def with_properties(
        cls,
        topic: str,
        body: bytes | bytearray | memoryview | str,
        properties: Mapping[str, str],
        *,
        tags: str | None = None,
        keys: Sequence[str] | str = (),
        delay_level: int | None = None,
        message_group: str | None = None,
    ) -> Message:
        """A message carrying ``properties`` as they are, system names included (Java's
        ``MessageAccessor``): for forwarding a received message's properties (a dead-letter
        copy) or presetting its client id (``UNIQ_KEY``, kept by the producer as Java's
        ``setUniqID`` keeps it). Most code wants the checked constructor instead.

        Raises:
            ConfigurationError: as the constructor, except for the property names.
        """
        msg = cls(
            topic, body, tags=tags, keys=keys, delay_level=delay_level, message_group=message_group
        )
        object.__setattr__(msg, "properties", dict(properties))
        return msg


def _body_bytes(body: object) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, bytearray | memoryview):
        return bytes(body)
    hint = (
        "; encode it first (json.dumps(body).encode()) or let App.publish encode it as JSON"
        if isinstance(body, Mapping | list | tuple) or hasattr(body, "model_dump_json")
        else ""
    )
    raise ConfigurationError(
        f"a message body must be bytes or str, not {type(body).__name__}{hint}"
    )


def _check_user_properties(properties: Mapping[str, str]) -> None:
    for name, value in properties.items():
        validate_user_property(name)
        if not isinstance(value, str):
            raise ConfigurationError(
                f"property {name!r}: values must be str, not {type(value).__name__} "
                f"(use str({value!r}))"
            )


class SendStatus(enum.Enum):
    """How the broker stored a sent message (Java ``SendStatus``): a
    [`SendResult`][aiorocket.SendResult]'s ``status``.

    Every status means the message *was stored* (a send the broker refused raises instead):

    * ``SEND_OK`` (response code 0): flushed and replicated as the broker is configured to;
    * ``FLUSH_DISK_TIMEOUT`` (10): the synchronous flush to disk timed out;
    * ``FLUSH_SLAVE_TIMEOUT`` (12): the synchronous replication to the slave timed out;
    * ``SLAVE_NOT_AVAILABLE`` (11): no slave was there to replicate it to.

    Compare members with ``is`` (``result.status is SendStatus.SEND_OK``); a member's
    ``value`` is its Java name.
    """

    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


@dataclass(frozen=True, slots=True)
class SendResult:
    """The outcome of a successful send.

    Attributes:
        status: see [`SendStatus`][aiorocket.SendStatus].
        msg_id: the client message id (``UNIQ_KEY``); for a batch, the ids joined with ``,``.
        offset_msg_id: the broker's offset message id(s), also ``,``-joined for a batch.
        queue: the queue the message went to (its topic without the client namespace, as
            in Java's SendResult).
        queue_offset: its offset in that queue (the first one for a batch).
        recall_handle: what [`Producer.recall`][aiorocket.Producer.recall] takes to cancel a
            timer message before it is due (RocketMQ 5.3.2+ brokers answer it for a single
            timer message); ``None`` otherwise.
    """

    status: SendStatus
    msg_id: str
    offset_msg_id: str
    queue: MessageQueue
    queue_offset: int
    recall_handle: str | None = None


class ConsumeStatus(enum.Enum):
    """What a concurrent handler reports (Java ``ConsumeConcurrentlyStatus``).

    Returning ``None`` means ``CONSUME_SUCCESS``; raising an exception means
    ``RECONSUME_LATER``.
    """

    #: the messages are done (up to
    #: [`ConcurrentContext.ack_index`][aiorocket.ConcurrentContext.ack_index]).
    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    #: deliver the messages again later (through ``%RETRY%<group>`` in clustering mode).
    RECONSUME_LATER = "RECONSUME_LATER"


class ConcurrentContext:
    """Per-call context of a concurrent handler (Java ``ConsumeConcurrentlyContext``).

    Attributes:
        queue: the queue the messages came from.
        ack_index: with ``CONSUME_SUCCESS``, the index of the last successful message of the
            batch; the ones after it are retried. Defaults to "all of them".
        delay_level: the retry delay of failed messages: 0 lets the broker choose (level
            3 + reconsume times), -1 sends them straight to the dead-letter queue, 1-18 picks
            a level.
    """

    __slots__ = ("ack_index", "delay_level", "queue")

    def __init__(self, queue: MessageQueue, *, ack_index: int = 2**31 - 1) -> None:
        self.queue = queue
        self.ack_index = ack_index
        self.delay_level = 0

    def __repr__(self) -> str:
        return (
            f"ConcurrentContext(queue={self.queue}, ack_index={self.ack_index}, "
            f"delay_level={self.delay_level})"
        )


_new = object.__new__


def _concurrent_context(queue: MessageQueue) -> ConcurrentContext:
    """``ConcurrentContext(queue)`` without the ``__init__`` call (one per handler call on the
    consumer's hot path: the call through the type costs more than the three stores)."""
    ctx: ConcurrentContext = _new(ConcurrentContext)
    ctx.queue = queue
    ctx.ack_index = 2**31 - 1
    ctx.delay_level = 0
    return ctx


class OrderlyStatus(enum.Enum):
    """What an orderly handler reports (Java ``ConsumeOrderlyStatus``).

    Returning ``None`` means ``SUCCESS``; raising an exception means
    ``SUSPEND_CURRENT_QUEUE_A_MOMENT``. ``COMMIT`` and ``ROLLBACK`` only mean something with
    ``ctx.auto_commit = False``; with auto-commit on they count as ``SUCCESS`` (as in Java).
    """

    #: the messages are done; with auto-commit the queue's offset moves past them.
    SUCCESS = "SUCCESS"
    #: deliver the same messages again after
    #: [`OrderlyContext.suspend_millis`][aiorocket.OrderlyContext.suspend_millis]; nothing later in
    #: the queue (ordering by key: of the same key) is delivered meanwhile.
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
    #: (auto-commit off) commit every message consumed since the last commit.
    COMMIT = "COMMIT"
    #: (auto-commit off) put back every message consumed since the last commit and deliver
    #: them again after [`OrderlyContext.suspend_millis`][aiorocket.OrderlyContext.suspend_millis].
    ROLLBACK = "ROLLBACK"


class OrderlyContext:
    """Per-call context of an orderly handler (Java ``ConsumeOrderlyContext``).

    Attributes:
        queue: the queue the messages came from (all messages of a call share it).
        key: ordering by key (``order_by`` other than ``"queue"``): the key all messages of
            the call share, ``None`` for messages without a key; always ``None`` when the
            whole queue is ordered.
        auto_commit: with ``True`` (the default) a successful call commits its messages;
            set it to ``False`` in the handler to commit only on ``COMMIT`` (and undo on
            ``ROLLBACK``), the messages of successful calls staying uncommitted until then.
            Ordering by key refuses ``False``
            ([`ConfigurationError`][aiorocket.errors.ConfigurationError] raised by the assignment):
            ``COMMIT`` and ``ROLLBACK`` settle everything consumed in a queue since the last commit,
            which mixes keys that run concurrently.
        suspend_millis: how long the queue (ordering by key: the key) pauses after
            ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` or ``ROLLBACK``, in milliseconds; starts at the
            consumer's ``suspend_delay`` and is kept within 10 ms .. 30 s (Java clamps it the
            same way).
    """

    __slots__ = ("_auto_commit", "_by_key", "key", "queue", "suspend_millis")

    def __init__(
        self, queue: MessageQueue, *, auto_commit: bool = True, suspend_millis: int = 1000
    ) -> None:
        self.queue = queue
        self.key: str | None = None
        self._by_key = False
        self._auto_commit = auto_commit
        self.suspend_millis = suspend_millis

    @classmethod
    def _for_key(cls, queue: MessageQueue, key: str | None, suspend_millis: int) -> OrderlyContext:
        """The context of a call ordered by key (auto-commit only)."""
        ctx = cls(queue, suspend_millis=suspend_millis)
        ctx.key = key
        ctx._by_key = True
        return ctx

    @property
    def auto_commit(self) -> bool:
        return self._auto_commit

    @auto_commit.setter
    def auto_commit(self, value: bool) -> None:
        if self._by_key and not value:
            raise ConfigurationError(
                "auto_commit=False is not supported when ordering by key (order_by is not "
                '"queue"): COMMIT and ROLLBACK settle a whole queue, whose keys run '
                'concurrently; use order_by="queue" for manual commits'
            )
        self._auto_commit = value

    def __repr__(self) -> str:
        key = f", key={self.key!r}" if self._by_key else ""
        return (
            f"OrderlyContext(queue={self.queue}{key}, auto_commit={self.auto_commit}, "
            f"suspend_millis={self.suspend_millis})"
        )


class _Stored(Protocol):
    """The fields of a stored message record (``aiorocket._protocol.message.MessageRecord``)."""

    body: bytes
    queue_id: int
    flag: int
    queue_offset: int
    commit_log_offset: int
    sys_flag: int
    born_timestamp: int
    born_host: str
    born_port: int
    store_timestamp: int
    store_host: str
    store_port: int
    reconsume_times: int
    properties: dict[str, str]


def _offset_msg_id(host: str, port: int, commit_log_offset: int) -> str:
    # MessageDecoder.createMessageId: hex of store IP, port (int32) and commit-log offset.
    try:
        ip = ipaddress.ip_address(host).packed.hex()
    except ValueError:
        return ""
    return f"{ip}{port & 0xFFFFFFFF:08x}{commit_log_offset & 0xFFFFFFFFFFFFFFFF:016x}".upper()


class ReceivedMessage:
    """A message delivered to a handler; read-only.

    Attributes:
        topic: the topic it was sent to (for a retried message, the original topic, not
            ``%RETRY%<group>``; without the client namespace).
        body: the payload, decompressed.
        tags: its tag, if any.
        keys: its business keys.
        properties: every property, user and system ones (do not modify).
        broker_name, queue_id, queue_offset: where it is stored.
        msg_id: the producer's id (``UNIQ_KEY``), else
            `offset_msg_id`.
        offset_msg_id: the broker's id (store host + commit-log offset).
        commit_log_offset: its position in the broker's commit log.
        reconsume_times: earlier deliveries that failed (0 on the first delivery).
        born_timestamp, store_timestamp: epoch milliseconds at the producer and the broker.
        born_host, store_host: ``"ip:port"`` of the producer and the broker.
        flag, sys_flag: the raw flag words.

    The consumer builds these from pulled records without copying their fields (the
    per-message path is hot); [`create`][aiorocket.ReceivedMessage.create] builds one by hand, e.g.
    for tests.
    """

    __slots__ = ("_broker_name", "_r", "_reconsume_times", "_topic")

    _r: _Stored
    _topic: str
    _broker_name: str
    _reconsume_times: int

    def __init__(self, record: _Stored, *, topic: str, broker_name: str) -> None:
        self._r = record
        self._topic = topic
        self._broker_name = broker_name
        self._reconsume_times = record.reconsume_times

    @classmethod
    def create(
        cls,
        *,
        topic: str,
        body: bytes,
        tags: str | None = None,
        keys: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        broker_name: str = "",
        queue_id: int = 0,
        queue_offset: int = 0,
        commit_log_offset: int = 0,
        msg_id: str | None = None,
        reconsume_times: int = 0,
        born_timestamp: int = 0,
        store_timestamp: int = 0,
        born_host: str = "127.0.0.1:0",
        store_host: str = "127.0.0.1:0",
        flag: int = 0,
    ) -> ReceivedMessage:
        """Build a message by hand; ``tags``, ``keys`` and ``msg_id`` go into the properties.

        Raises:
            ConfigurationError: a host is not ``"ip:port"``.
        """
        props = dict(properties or {})
        if tags is not None:
            props["TAGS"] = tags
        if keys:
            props["KEYS"] = " ".join(keys)
        if msg_id is not None:
            props["UNIQ_KEY"] = msg_id
        bh, bp = _split_host(born_host)
        sh, sp = _split_host(store_host)
        # Any object with the record's fields will do; the decoder's own is MessageRecord.
        fields = SimpleNamespace(
            body=bytes(body),
            queue_id=queue_id,
            flag=flag,
            queue_offset=queue_offset,
            commit_log_offset=commit_log_offset,
            sys_flag=0,
            born_timestamp=born_timestamp,
            born_host=bh,
            born_port=bp,
            store_timestamp=store_timestamp,
            store_host=sh,
            store_port=sp,
            reconsume_times=reconsume_times,
            properties=props,
        )
        return cls(cast(_Stored, fields), topic=topic, broker_name=broker_name)

    def _with_reconsume_times(self, times: int) -> ReceivedMessage:
        """A copy counting ``times`` earlier deliveries (a local retry, Java
        ``msg.setReconsumeTimes``)."""
        copy = ReceivedMessage(self._r, topic=self._topic, broker_name=self._broker_name)
        copy._reconsume_times = times
        return copy

    @property
    def topic(self) -> str:
        return self._topic

    @property
    def body(self) -> bytes:
        return self._r.body

    @property
    def tags(self) -> str | None:
        return self._r.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        raw = self._r.properties.get("KEYS")
        return raw.split() if raw else []

    @property
    def properties(self) -> dict[str, str]:
        return self._r.properties

    @property
    def lite_topic(self) -> str | None:
        """The lite topic it was sent to (RocketMQ 5.5's ``__LITE_TOPIC``), if any."""
        return self._r.properties.get("__LITE_TOPIC")

    @property
    def broker_name(self) -> str:
        return self._broker_name

    @property
    def queue(self) -> MessageQueue:
        """The queue as a [`MessageQueue`][aiorocket.MessageQueue] (topic as delivered)."""
        return MessageQueue(self._topic, self._broker_name, self._r.queue_id)

    @property
    def queue_id(self) -> int:
        return self._r.queue_id

    @property
    def queue_offset(self) -> int:
        return self._r.queue_offset

    @property
    def commit_log_offset(self) -> int:
        return self._r.commit_log_offset

    @property
    def msg_id(self) -> str:
        return self._r.properties.get("UNIQ_KEY") or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        r = self._r
        return _offset_msg_id(r.store_host, r.store_port, r.commit_log_offset)

    @property
    def priority(self) -> int | None:
        """The message's RocketMQ 5.4+ priority (``_SYS_MSG_PRIORITY_``), if it has one."""
        raw = self._r.properties.get("_SYS_MSG_PRIORITY_")
        return int(raw) if raw is not None and raw.isdigit() else None

    @property
    def reconsume_times(self) -> int:
        return self._reconsume_times

    @property
    def born_timestamp(self) -> int:
        return self._r.born_timestamp

    @property
    def store_timestamp(self) -> int:
        return self._r.store_timestamp

    @property
    def born_host(self) -> str:
        return _join_host(self._r.born_host, self._r.born_port)

    @property
    def store_host(self) -> str:
        return _join_host(self._r.store_host, self._r.store_port)

    @property
    def flag(self) -> int:
        return self._r.flag

    @property
    def sys_flag(self) -> int:
        return self._r.sys_flag

    def __repr__(self) -> str:
        return (
            f"ReceivedMessage(topic={self._topic!r}, queue={self._broker_name}:"
            f"{self._r.queue_id}, offset={self._r.queue_offset}, msg_id={self.msg_id!r}, "
            f"reconsume_times={self._reconsume_times}, body={len(self._r.body)} bytes)"
        )


def _split_host(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigurationError(f"host {addr!r} is not ip:port")
    return host.strip("[]"), int(port)


def _join_host(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
