"""A consumer group's dead letters: list them with why they got there, resend them to the topic
they came from (what the RocketMQ dashboard's "resend" does for an operator).

Where a dead letter comes from, and what it carries:

* the broker moves a message to ``%DLQ%<group>`` (one queue) when a consumer sends it back after
  ``max_reconsume_times`` deliveries, or with delay level -1 (``SendMessageProcessor``'s
  ``consumerSendMsgBack``, 4.9 and 5.3 alike). The copy keeps the message's properties, adds
  ``RETRY_TOPIC`` (the original topic, unless already set by an earlier retry) and
  ``ORIGIN_MESSAGE_ID``, and counts the deliveries in its reconsume times; a message that went
  through the delay levels also keeps ``REAL_TOPIC`` (``%RETRY%<group>``). The broker records
  no reason: the listing infers "max reconsume times (N) reached" from the reconsume times;
* an [`App`][aiorocket.app.App] subscriber publishes its own copy (an invalid body, a retry policy
  giving up, ``DeadLetter``) with the handler's error in ``AIOROCKET_DLQ_REASON`` and the
  5.x names ``DLQ_ORIGIN_TOPIC`` / ``DLQ_ORIGIN_MESSAGE_ID``; that reason is shown as it is.

Resending is idempotent through a marker: the offsets of the consumer group
`RESEND_GROUP` on the DLQ's queues (ordinary consumer offsets, stored by the broker like
any group's). A resend starts at the marker (the queue's first message without one), publishes
each message to its original topic and moves the marker past it at once, so running it again
resends nothing, and an interrupted run resends at most the one message whose marker update
was lost. The listing marks what the marker has passed as resent.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from aiorocket._client.instance import ClientInstance
from aiorocket._client.pull import PullStatus, to_received
from aiorocket._names import (
    CREATE_TOPIC_KEY,
    DLQ_PREFIX,
    RETRY_PREFIX,
    dlq_topic,
    now_ms,
    validate_name,
    without_namespace,
    wrap_namespace,
)
from aiorocket._protocol import properties as mp
from aiorocket._protocol.codes import PullSysFlag
from aiorocket._protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader
from aiorocket._protocol.message import decode_messages
from aiorocket.errors import BrokerError, ConfigurationError, ServiceNotAvailableError
from aiorocket.models import MessageQueue, ReceivedMessage

__all__ = [
    "DEFAULT_MAX_RECONSUME_TIMES",
    "DLQ_REASON",
    "RESEND_GROUP",
    "DlqEntry",
    "ResendOutcome",
    "dead_letters",
    "resend_dead_letters",
]

log = logging.getLogger("aiorocket.admin")

#: The consumer group whose offsets on ``%DLQ%<group>`` mark what was resent (and that the
#: listing's pulls name). One group serves every DLQ: offsets are kept per topic.
RESEND_GROUP: Final = "AIOROCKET_DLQ_RESEND"
#: ``retryMaxTimes`` of a subscription group unless configured (Java's default, 16).
DEFAULT_MAX_RECONSUME_TIMES: Final = 16
#: The property an App puts the handler's error in (``aiorocket.app``).
DLQ_REASON: Final = "AIOROCKET_DLQ_REASON"
#: 5.x names of the original topic and id (``MessageConst.PROPERTY_DLQ_ORIGIN_*``).
_DLQ_ORIGIN_TOPIC: Final = "DLQ_ORIGIN_TOPIC"
_DLQ_ORIGIN_MESSAGE_ID: Final = "DLQ_ORIGIN_MESSAGE_ID"
#: Properties of the dead letter that are the broker's bookkeeping of its retries and its trip
#: to the DLQ, not the producer's: a resent copy is a fresh message of the original topic.
_NOT_RESENT: Final = frozenset(
    {
        mp.DELAY,
        mp.REAL_TOPIC,
        mp.REAL_QID,
        mp.RETRY_TOPIC,
        mp.ORIGIN_MESSAGE_ID,
        mp.RECONSUME_TIME,
        mp.MAX_RECONSUME_TIMES,
        mp.WAIT,
        mp.TRAN_MSG,
        mp.CLUSTER,
        mp.MIN_OFFSET,
        mp.MAX_OFFSET,
        mp.POP_CK,
        DLQ_REASON,
        _DLQ_ORIGIN_TOPIC,
        _DLQ_ORIGIN_MESSAGE_ID,
    }
)
_PULL_BATCH = 32
_SYS_FLAG: Final = int(PullSysFlag.SUBSCRIPTION)


@dataclass(frozen=True, slots=True)
class DlqEntry:
    """One dead letter of a consumer group.

    Attributes:
        message: the stored dead letter (topic ``%DLQ%<group>``, wire name).
        origin_topic: the topic it was consumed from (namespace removed), ``""`` if unknown.
        wire_origin_topic: the same as it is on the wire (where a resend goes).
        origin_msg_id: the id of the message as first stored (``ORIGIN_MESSAGE_ID``), if known.
        reason: why it is here: the handler's error an App recorded, else what the reconsume
            times tell.
        resent: whether ``resend`` already sent it back (the marker is past it).
    """

    message: ReceivedMessage
    origin_topic: str
    wire_origin_topic: str
    origin_msg_id: str | None
    reason: str
    resent: bool

    @property
    def msg_id(self) -> str:
        """The message's client id (``UNIQ_KEY``), else its offset id."""
        return self.message.msg_id

    @property
    def reconsume_times(self) -> int:
        """Deliveries counted by the broker when it stored the dead letter."""
        return self.message.reconsume_times

    @property
    def store_timestamp(self) -> int:
        """When the dead letter was stored (ms)."""
        return self.message.store_timestamp

    @property
    def keys(self) -> list[str]:
        """The message's keys."""
        return self.message.keys


@dataclass(frozen=True, slots=True)
class ResendOutcome:
    """What a resend did with one dead letter.

    Attributes:
        entry: the dead letter.
        new_msg_id: the offset id of the copy stored in the original topic; ``None`` when it
            was not sent (a dry run, or ``error``).
        error: why it could not be resent (no original topic known, or it no longer exists);
            the marker moves past it all the same, so it is not tried again.
    """

    entry: DlqEntry
    new_msg_id: str | None = None
    error: str | None = None


def _reason(props: dict[str, str], reconsume_times: int, max_reconsume_times: int) -> str:
    recorded = props.get(DLQ_REASON)
    if recorded:
        return recorded
    # Java's client puts its limit in MAX_RECONSUME_TIMES when it resends a message itself.
    limit = props.get(mp.MAX_RECONSUME_TIMES, "")
    max_times = int(limit) if limit.isdigit() else max_reconsume_times
    # consumerSendMsgBack stores reconsumeTimes + 1 of the copy it dead-letters: past the limit
    # when the limit was reached, otherwise the consumer asked for the DLQ (delay level -1).
    if reconsume_times > max_times:
        return f"max reconsume times ({max_times}) reached"
    return (
        f"dead-lettered after {reconsume_times} deliveries (a retry limit below {max_times}, "
        "or sent there directly)"
    )


def _origin(props: dict[str, str], namespace: str | None) -> tuple[str, str]:
    # RETRY_TOPIC is the wire name the broker recorded; an App's DLQ_ORIGIN_TOPIC is the
    # topic as its handler saw it (namespace removed). REAL_TOPIC names the original topic only
    # when it is not the group's retry topic (a delayed message dead-lettered directly).
    wire = props.get(mp.RETRY_TOPIC) or ""
    if not wire and props.get(_DLQ_ORIGIN_TOPIC):
        wire = wrap_namespace(namespace, props[_DLQ_ORIGIN_TOPIC])
    real = props.get(mp.REAL_TOPIC) or ""
    if not wire and real and not real.startswith((RETRY_PREFIX, DLQ_PREFIX)):
        wire = real
    return without_namespace(namespace, wire), wire


def _entry(
    msg: ReceivedMessage, namespace: str | None, max_reconsume_times: int, marker: int
) -> DlqEntry:
    props = msg.properties
    origin, wire = _origin(props, namespace)
    return DlqEntry(
        message=msg,
        origin_topic=origin,
        wire_origin_topic=wire,
        origin_msg_id=props.get(mp.ORIGIN_MESSAGE_ID) or props.get(_DLQ_ORIGIN_MESSAGE_ID),
        reason=_reason(props, msg.reconsume_times, max_reconsume_times),
        resent=msg.queue_offset < marker,
    )


def _dlq_wire_topic(group: str, namespace: str | None) -> str:
    validate_name(group, "consumer group")
    return wrap_namespace(namespace, dlq_topic(group))


async def _dlq_queues(client: ClientInstance, topic: str) -> list[tuple[MessageQueue, str]]:
    """The DLQ's queues with the address to read them at; empty when the topic does not exist.

    The topic list is asked first: a route lookup of a missing topic may create it on a name
    server that creates topics on lookup (the embedded one by default).
    """
    if topic not in await client.topic_names():
        return []
    route = await client.fetch_route(topic)
    out = []
    for mq in route.subscribe_queues(topic):
        try:
            out.append((mq, await client.find_broker(mq.broker_name, topic)))
        except ServiceNotAvailableError:
            continue  # the broker left the route meanwhile
    return out


async def _marker(client: ClientInstance, addr: str, mq: MessageQueue, group: str) -> int:
    offset = await client.query_consumer_offset(addr, group, mq)
    return offset if offset is not None and offset >= 0 else 0


async def _read(
    client: ClientInstance, addr: str, mq: MessageQueue, start: int, group: str, limit: int
) -> list[ReceivedMessage]:
    """Up to ``limit`` messages of ``mq`` from ``start`` to the queue's end."""
    out: list[ReceivedMessage] = []
    offset = start
    timeout = client.settings.request_timeout
    while len(out) < limit:
        header = PullMessageRequestHeader(
            consumer_group=group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=min(_PULL_BATCH, limit - len(out)),
            sys_flag=_SYS_FLAG,
            commit_offset=0,
            suspend_timeout_millis=0,
            subscription="*",
            sub_version=0,
            expression_type="TAG",
            broker_name=mq.broker_name,
        )
        resp = await client.pull_message(addr, header, timeout=timeout)
        nxt = resp.header.next_begin_offset
        if resp.code == PullStatus.FOUND:
            records = [r for r in decode_messages(resp.body) if r.queue_offset >= offset]
            out.extend(
                to_received(
                    records,
                    broker_name=mq.broker_name,
                    tag_filter=None,
                    retry_queue=False,
                    namespace=None,
                )
            )
        elif resp.code == PullStatus.NO_NEW_MSG:
            break
        if nxt <= offset:
            break
        offset = nxt
    return out[:limit]


def _entries(
    msgs: list[ReceivedMessage], namespace: str | None, max_times: int, marker: int
) -> Iterator[DlqEntry]:
    for m in msgs:
        yield _entry(m, namespace, max_times, marker)


async def dead_letters(
    client: ClientInstance,
    group: str,
    *,
    namespace: str | None = None,
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
    limit: int = 1000,
) -> list[DlqEntry]:
    """The dead letters of ``group`` (``%DLQ%<group>``, under ``namespace`` if given), oldest
    first per queue, at most ``limit``; empty when the group has none (no DLQ topic: nothing
    is created to find that out).

    ``max_reconsume_times`` is the group's limit the reasons are told against (a dead letter
    carries no limit unless Java's client resent it itself).

    Raises:
        ConfigurationError: ``limit`` below 1.
        InvalidNameError: a bad group name.
        BrokerError, TransportError: a server failed or could not be reached.
    """
    if limit < 1:
        raise ConfigurationError(f"limit must be at least 1, not {limit}")
    topic = _dlq_wire_topic(group, namespace)
    marker_group = wrap_namespace(namespace, RESEND_GROUP)
    out: list[DlqEntry] = []
    for mq, addr in await _dlq_queues(client, topic):
        lo = max(await client.get_min_offset(addr, mq), 0)
        marker = await _marker(client, addr, mq, marker_group)
        msgs = await _read(client, addr, mq, lo, marker_group, limit - len(out))
        out.extend(_entries(msgs, namespace, max_reconsume_times, marker))
        if len(out) >= limit:
            break
    return out


async def resend_dead_letters(
    client: ClientInstance,
    group: str,
    *,
    namespace: str | None = None,
    max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
    dry_run: bool = False,
    limit: int = 1000,
) -> list[ResendOutcome]:
    """Send each dead letter of ``group`` not resent before back to its original topic, as a
    new message with the producer's properties (keys, tags, user properties, client id), and
    move the marker past it; at most ``limit`` per call. ``dry_run`` only says what would be
    resent (nothing is sent, the marker stays).

    Every consumer group of the original topic receives the copy, not only ``group``.

    Raises:
        ConfigurationError: ``limit`` below 1.
        InvalidNameError: a bad group name.
        BrokerError, TransportError: a server failed or could not be reached (what was resent
            before stays marked).
    """
    if limit < 1:
        raise ConfigurationError(f"limit must be at least 1, not {limit}")
    topic = _dlq_wire_topic(group, namespace)
    marker_group = wrap_namespace(namespace, RESEND_GROUP)
    out: list[ResendOutcome] = []
    counter = itertools.count()
    for mq, addr in await _dlq_queues(client, topic):
        lo = max(await client.get_min_offset(addr, mq), 0)
        start = max(await _marker(client, addr, mq, marker_group), lo)
        msgs = await _read(client, addr, mq, start, marker_group, limit - len(out))
        for entry in _entries(msgs, namespace, max_reconsume_times, start):
            if dry_run:
                out.append(ResendOutcome(entry))
                continue
            outcome = await _resend(client, entry, next(counter))
            out.append(outcome)
            # Marked after each message: a second run (or a run after a crash) starts past it.
            await client.update_consumer_offset(
                addr, marker_group, mq, entry.message.queue_offset + 1, oneway=False
            )
        if len(out) >= limit:
            break
    return out


async def _resend(client: ClientInstance, entry: DlqEntry, seq: int) -> ResendOutcome:
    msg = entry.message
    if not entry.wire_origin_topic:
        log.warning("dead letter %s names no original topic; not resent", msg.msg_id)
        return ResendOutcome(entry, error="no original topic recorded")
    topic = entry.wire_origin_topic
    try:
        route = await client.fetch_route(topic)
    except BrokerError as exc:
        return ResendOutcome(entry, error=f"topic {topic} has no route: {exc}")
    queues = route.publish_queues(topic)
    if not queues:
        return ResendOutcome(entry, error=f"topic {topic} has no writable queue")
    mq = queues[seq % len(queues)]
    try:
        addr = await client.find_broker(mq.broker_name, topic, master=True)
    except ServiceNotAvailableError as exc:
        return ResendOutcome(entry, error=exc.remark)
    props = {k: v for k, v in msg.properties.items() if k not in _NOT_RESENT}
    header = SendMessageRequestHeader(
        producer_group=RESEND_GROUP,
        topic=topic,
        default_topic=CREATE_TOPIC_KEY,
        default_topic_queue_nums=4,
        queue_id=mq.queue_id,
        sys_flag=0,  # the body was decompressed when read
        born_timestamp=now_ms(),
        flag=msg.flag,
        properties=mp.encode_properties(props),
        batch=False,
        broker_name=mq.broker_name,
    )
    result = await client.send_message(
        addr, header, msg.body, timeout=client.settings.request_timeout
    )
    assert result is not None  # not oneway
    log.info("dead letter %s resent to %s as %s", msg.msg_id, topic, result.header.msg_id)
    return ResendOutcome(entry, new_msg_id=result.header.msg_id)
