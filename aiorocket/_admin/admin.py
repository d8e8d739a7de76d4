"""``Admin``: what ``mqadmin`` does for an operator, on our own client layer (no Java).

Each method is the request sequence of the matching ``DefaultMQAdminExtImpl`` call, so it
works against a Java 4.9 cluster and against the embedded broker alike:

* [`Admin.lag`][aiorocket.Admin.lag] is ``examineConsumeStats``: the route of ``%RETRY%<group>``
  names the brokers that know the group; each answers GET_CONSUME_STATS for every topic the group
  has offsets for (the numbers ``mqadmin consumerProgress`` prints);
* [`Admin.reset_offset`][aiorocket.Admin.reset_offset] is ``resetOffsetByTimestamp``:
  INVOKE_BROKER_TO_RESET_OFFSET to every master of the topic, which pushes the new offsets to the
  live members; when no member is online the committed offsets are rewritten directly
  (``resetOffsetByTimestampOld``);
* [`Admin.message`][aiorocket.Admin.message] views a message by its offset id (VIEW_MESSAGE_BY_ID at
  the store host the id names) or, with a topic, by its client id (QUERY_MESSAGE with the UNIQ_KEY
  flag); [`Admin.messages_by_key`][aiorocket.Admin.messages_by_key] is ``queryMsgByKey``,
  [`Admin.trace`][aiorocket.Admin.trace] ``queryMsgTraceById`` (the same query on the trace topic,
  bodies decoded);
* [`Admin.create_topic`][aiorocket.Admin.create_topic] /
  [`Admin.delete_topic`][aiorocket.Admin.delete_topic] go to every master of the cluster
  (GET_BROKER_CLUSTER_INFO), then the name servers for deletion;
  [`Admin.create_group`][aiorocket.Admin.create_group] (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
  to every master too.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from aiorocket._admin import dlq
from aiorocket._admin.trace import TraceEntry, trace_entries
from aiorocket._client.owner import ClientOwner
from aiorocket._client.pop import set_message_request_mode
from aiorocket._client.pull import to_received
from aiorocket._protocol.admin_bodies import ConsumeStats, SubscriptionGroupConfig
from aiorocket._protocol.attributes import (
    LITE_BIND_TOPIC,
    LITE_EXPIRATION,
    LITE_SUB_MODEL,
    MESSAGE_TYPE,
    format_changes,
)
from aiorocket._protocol.bodies import ClusterInfo, ResetOffsetBody, TopicRouteData
from aiorocket._protocol.codes import Perm, RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    UNIQUE_KEY_QUERY,
    CreateTopicRequestHeader,
    DeleteTopicFromNamesrvRequestHeader,
    DeleteTopicRequestHeader,
    GetConsumeStatsRequestHeader,
    QueryMessageRequestHeader,
    ResetOffsetRequestHeader,
    ViewMessageRequestHeader,
)
from aiorocket._protocol.message import decode_messages
from aiorocket._protocol.msgid import parse_offset_msg_id
from aiorocket._protocol.pop import SetMessageRequestModeRequestBody
from aiorocket._trace import DEFAULT_TRACE_TOPIC
from aiorocket.errors import (
    BrokerError,
    ConfigurationError,
    ConsumerNotOnlineError,
    NotANameServerError,
    QueryNotFoundError,
    RemoteProtocolError,
    TopicNotExistError,
    TransportError,
    broker_error,
)
from aiorocket.models import MessageQueue, ReceivedMessage, TopicMessageType, validate_name
from aiorocket.settings import ClientSettings, build_settings

__all__ = ["Admin", "GroupLag", "QueueLag", "TopicRoute"]

#: where [`Admin.reset_offset`][aiorocket.Admin.reset_offset] can move a group
ResetTarget = Literal["earliest", "latest"] | datetime | int
_LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class QueueLag:
    """One queue of a consumer group's progress.

    Attributes:
        queue: the queue.
        broker_offset: the broker's next offset (max offset) of the queue.
        committed_offset: the group's committed offset (0 when it has none).
        lag: ``broker_offset - committed_offset``: messages not consumed yet.
        last_timestamp: store time (ms) of the last consumed message, 0 if unknown.
    """

    queue: MessageQueue
    broker_offset: int
    committed_offset: int
    lag: int
    last_timestamp: int


@dataclass(frozen=True, slots=True)
class GroupLag:
    """A consumer group's progress over every topic it has offsets for (``mqadmin
    consumerProgress -g``).

    Attributes:
        group: the consumer group.
        queues: one row per queue, sorted by topic, broker and queue id.
        consume_tps: messages per second the brokers served the group lately.
    """

    group: str
    queues: tuple[QueueLag, ...]
    consume_tps: float = 0.0

    @property
    def total(self) -> int:
        """The summed lag (``Diff Total``)."""
        return sum(q.lag for q in self.queues)

    def by_topic(self) -> dict[str, int]:
        """The summed lag of each topic."""
        out: dict[str, int] = {}
        for q in self.queues:
            out[q.queue.topic] = out.get(q.queue.topic, 0) + q.lag
        return out


@dataclass(frozen=True, slots=True)
class TopicRoute:
    """Where a topic lives (``mqadmin topicRoute``).

    Attributes:
        topic: the topic.
        brokers: broker name → broker id → address (id 0 is the master).
        queues: broker name → ``(read queues, write queues, perm)``.
        order_topic_conf: the name server's order configuration, if any.
    """

    topic: str
    brokers: dict[str, dict[int, str]] = field(default_factory=dict)
    queues: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    order_topic_conf: str | None = None


def _check_code(resp: RemotingCommand) -> RemotingCommand:
    if resp.code != ResponseCode.SUCCESS:
        raise broker_error(resp.code, resp.remark)
    return resp


def _request_name(resp: RemotingCommand) -> str:
    # The refusal's remark is RemotingHelper's " request type 106 not supported".
    found = re.search(r"request type (\d+)", resp.remark or "")
    if found is None:
        return "this one"
    code = int(found.group(1))
    try:
        return f"{RequestCode(code).name} ({code})"
    except ValueError:
        return f"request {code}"


def _topic_attributes(
    message_type: TopicMessageType | str | None, lite_expiration: int | None
) -> str | None:
    """UPDATE_AND_CREATE_TOPIC's ``attributes`` for ``Admin.create_topic``'s arguments.

    Raises:
        ConfigurationError: an unknown type, or an expiration without LITE or below -1.
    """
    values: dict[str, str] = {}
    kind = None
    if message_type is not None:
        try:
            kind = TopicMessageType(message_type)
        except ValueError:
            names = ", ".join(t.value for t in TopicMessageType)
            raise ConfigurationError(f"message_type {message_type!r} is none of {names}") from None
        values[MESSAGE_TYPE] = kind.value
    if lite_expiration is not None:
        if kind is not TopicMessageType.LITE or lite_expiration < -1:
            raise ConfigurationError("lite_topic_expiration needs message_type='LITE' and >= -1")
        values[LITE_EXPIRATION] = str(lite_expiration)
    return format_changes(values) or None


def _timestamp_ms(to: ResetTarget) -> int:
    if isinstance(to, datetime):
        if to.tzinfo is None:
            raise ConfigurationError("a reset time must be timezone-aware")
        return int(to.timestamp() * 1000)
    if isinstance(to, int) and not isinstance(to, bool):
        if to < 0:
            raise ConfigurationError(f"a reset time must not be negative: {to}")
        return to
    if to == "earliest":
        return 0
    if to == "latest":
        return -1  # Broker2Client.resetOffset: -1 means each queue's max offset
    raise ConfigurationError(f"reset target must be earliest, latest or a time, not {to!r}")


class Admin(ClientOwner):
    """An operators' client for a RocketMQ 4.x cluster (embedded or Java).

    ```python
    async with Admin(namesrv="127.0.0.1:9876") as admin:
        lag = await admin.lag("billing")
        print(lag.total, lag.by_topic())
    ```

    Keyword arguments are the settings of [`ClientSettings`][aiorocket.settings.ClientSettings]
    (``namesrv`` required; ``request_timeout`` bounds every call). Names are used as given
    (no namespace is applied: an operator sees the wire names).

    Raises:
        ConfigurationError: invalid settings (at construction).
    """

    _what = "admin client"

    def __init__(self, *, namesrv: str | Sequence[str], **settings: Any) -> None:
        super().__init__(build_settings(ClientSettings, {"namesrv": namesrv, **settings}))

    async def _checked(self, resp: RemotingCommand) -> RemotingCommand:
        """``resp`` if it succeeded, else the matching broker error; a request the proxy
        does not serve raises [`NotANameServerError`][aiorocket.errors.NotANameServerError]."""
        if resp.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and await self._behind_proxy():
            raise self._proxy_error(_request_name(resp))
        return _check_code(resp)

    def _proxy_error(self, what: str) -> NotANameServerError:
        namesrv = ",".join(self.settings.namesrv)
        return NotANameServerError(
            f"{namesrv} is a RocketMQ proxy, not a name server: a proxy serves sending, "
            f"consuming and routes but not admin requests such as {what}; "
            "give Admin the name server's address (the proxy's namesrvAddr)"
        )

    async def _behind_proxy(self) -> bool:
        client = self._require()
        for addr in self.settings.namesrv:
            with contextlib.suppress(TransportError):
                return await client.is_proxy(addr)
        return False

    # -- name server --------------------------------------------------------------------------

    async def topics(self) -> list[str]:
        """Every topic the name server knows, sorted (``mqadmin topicList``).

        Raises:
            BrokerError, TransportError: the name server failed or could not be reached.
            ClientClosedError: not started, or closed.
        """
        try:
            return await self._require().topic_names()
        except BrokerError as exc:
            if exc.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and await self._behind_proxy():
                raise self._proxy_error("GET_ALL_TOPIC_LIST_FROM_NAMESERVER (206)") from None
            raise

    async def _route(self, topic: str) -> TopicRouteData:
        client = self._require()
        try:
            return await client.fetch_route(topic)
        except TopicNotExistError as exc:
            hint = "" if topic.startswith("%") else await client.missing_topic_hint(topic)
            # After the remark's first line: a Java name server adds a FAQ link on a second.
            first, _, rest = exc.remark.partition("\n")
            raise TopicNotExistError(first + hint + (f"\n{rest}" if rest else "")) from None

    async def route(self, topic: str) -> TopicRoute:
        """The topic's route (``mqadmin topicRoute``).

        Raises:
            InvalidNameError: a bad topic name.
            TopicNotExistError: the name server has no route for it.
            BrokerError, TransportError: the name server failed or could not be reached.
        """
        validate_name(topic)
        r = await self._route(topic)
        return TopicRoute(
            topic=topic,
            brokers={b.broker_name: dict(b.broker_addrs) for b in r.broker_datas},
            queues={
                q.broker_name: (q.read_queue_nums, q.write_queue_nums, q.perm)
                for q in r.queue_datas
            },
            order_topic_conf=r.order_topic_conf,
        )

    async def _cluster_masters(self, cluster: str | None) -> list[str]:
        resp = await self._checked(
            await self._require().invoke_namesrv(
                RemotingCommand.request(RequestCode.GET_BROKER_CLUSTER_INFO)
            )
        )
        info = ClusterInfo.from_json(resp.body)
        if cluster is None:
            names = list(info.broker_addr_table)
        elif cluster in info.cluster_addr_table:
            names = list(info.cluster_addr_table[cluster])
        else:
            raise ConfigurationError(f"no cluster named {cluster!r}")
        masters = [info.broker_addr_table[n].broker_addrs.get(0) for n in names]
        return sorted(a for a in masters if a)

    @staticmethod
    def _masters(route: TopicRouteData) -> list[tuple[str, str]]:
        out = []
        for b in route.broker_datas:
            addr = b.broker_addrs.get(0)
            if addr:
                out.append((b.broker_name, addr))
        return out

    # -- consumer progress --------------------------------------------------------------------

    async def lag(self, group: str) -> GroupLag:
        """The group's progress per queue (``mqadmin consumerProgress -g``).

        Raises:
            InvalidNameError: a bad group name.
            ConsumerNotOnlineError: no broker knows offsets of the group.
            TopicNotExistError: no broker knows the group (no ``%RETRY%`` route).
            BrokerError, TransportError: a server failed or could not be reached.
        """
        validate_name(group, "consumer group")
        client = self._require()
        route = await self._route(f"%RETRY%{group}")
        table: dict[MessageQueue, Any] = {}
        tps = 0.0
        header = GetConsumeStatsRequestHeader(consumer_group=group)
        for _name, addr in self._masters(route):
            resp = await self._checked(
                await client.invoke(
                    addr, RemotingCommand.request(RequestCode.GET_CONSUME_STATS, header.to_ext())
                )
            )
            stats = ConsumeStats.from_json(resp.body)
            table.update(stats.offset_table)
            tps += stats.consume_tps
        if not table:
            raise ConsumerNotOnlineError(
                f"no consume stats for group {group}: it has no committed offset on any broker"
            )
        rows = tuple(
            QueueLag(mq, w.broker_offset, w.consumer_offset, w.diff, w.last_timestamp)
            for mq, w in sorted(table.items())
        )
        return GroupLag(group, rows, tps)

    async def reset_offset(
        self, group: str, topic: str, to: ResetTarget
    ) -> dict[MessageQueue, int]:
        """Move ``group``'s offsets of ``topic`` to ``"earliest"``, ``"latest"``, or the
        first message stored at or after a time (aware ``datetime`` or epoch ms), forward or
        backward (``mqadmin resetOffsetByTime``, forced). Live members are told by the
        broker and re-pull from there; for a group with no live member the committed offsets
        are rewritten. Returns the new offset of each queue.

        Raises:
            ConfigurationError: a bad target.
            InvalidNameError: a bad group or topic name.
            TopicNotExistError: the topic has no route.
            BrokerError, TransportError: a server failed or could not be reached.
        """
        validate_name(group, "consumer group")
        validate_name(topic)
        timestamp = _timestamp_ms(to)
        client = self._require()
        route = await self._route(topic)
        out: dict[MessageQueue, int] = {}
        header = ResetOffsetRequestHeader(
            topic=topic, group=group, timestamp=timestamp, is_force=True
        )
        for name, addr in self._masters(route):
            resp = await client.invoke(
                addr,
                RemotingCommand.request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header.to_ext()),
            )
            if resp.code == ResponseCode.CONSUMER_NOT_ONLINE:
                out.update(
                    await self._reset_offline(group, topic, route, name, addr, to, timestamp)
                )
                continue
            await self._checked(resp)
            if resp.body:
                out.update(ResetOffsetBody.from_json(resp.body).offset_table)
        return dict(sorted(out.items()))

    async def _reset_offline(
        self,
        group: str,
        topic: str,
        route: TopicRouteData,
        broker_name: str,
        addr: str,
        to: ResetTarget,
        timestamp: int,
    ) -> dict[MessageQueue, int]:
        # resetOffsetByTimestampOld: compute each queue's offset and commit it directly.
        client = self._require()
        out: dict[MessageQueue, int] = {}
        for mq in route.subscribe_queues(topic):
            if mq.broker_name != broker_name:
                continue
            if to == "latest":
                offset = await client.get_max_offset(addr, mq)
            elif to == "earliest":
                offset = await client.get_min_offset(addr, mq)
            else:
                offset = await client.search_offset(addr, mq, timestamp)
            await client.update_consumer_offset(addr, group, mq, offset, oneway=False)
            out[mq] = offset
        return out

    # -- messages -----------------------------------------------------------------------------

    async def message(self, msg_id: str, *, topic: str | None = None) -> ReceivedMessage:
        """The message with ``msg_id``: an offset id (what the broker assigns; the store host
        is in it) or, with ``topic``, a producer's client id (``UNIQ_KEY``).

        Raises:
            QueryNotFoundError: no such message.
            BrokerError, TransportError: a server failed or could not be reached.
        """
        client = self._require()
        try:
            host, port, offset = parse_offset_msg_id(msg_id)
        except RemoteProtocolError:
            host = ""
        if host:
            cmd = RemotingCommand.request(
                RequestCode.VIEW_MESSAGE_BY_ID, ViewMessageRequestHeader(offset=offset).to_ext()
            )
            try:
                resp = await self._checked(await client.invoke(f"{host}:{port}", cmd))
                msgs = self._decode(resp.body, "")
                if msgs:
                    return msgs[0]
            except BrokerError:
                if topic is None:
                    raise QueryNotFoundError(f"no message with offset id {msg_id}") from None
        if topic is None:
            raise QueryNotFoundError(
                f"{msg_id} is not an offset message id; give the topic to look up a client id"
            )
        found = await self._query(topic, msg_id, 32, unique=True)
        for m in found:
            if m.msg_id == msg_id:
                return m
        raise QueryNotFoundError(f"no message {msg_id} in topic {topic}")

    async def messages_by_key(
        self, topic: str, key: str, *, max_num: int = 64
    ) -> list[ReceivedMessage]:
        """Messages of ``topic`` carrying ``key`` in their KEYS, newest first
        (``mqadmin queryMsgByKey``); empty if none.

        Raises:
            InvalidNameError: a bad topic name.
            TopicNotExistError: the topic has no route.
            BrokerError, TransportError: a server failed or could not be reached.
        """
        validate_name(topic)
        found = await self._query(topic, key, max_num, unique=False)
        hits = [m for m in found if key in m.keys]
        hits.sort(key=lambda m: m.store_timestamp, reverse=True)
        return hits[:max_num]

    async def trace(
        self, msg_id: str, *, trace_topic: str = DEFAULT_TRACE_TOPIC, max_num: int = 64
    ) -> list[TraceEntry]:
        """The trace of the message with client id ``msg_id``, oldest record first (``mqadmin
        queryMsgTraceById``): the trace messages keyed by the id (QUERY_MESSAGE by key on
        ``trace_topic``), decoded as Java's ``TraceDataEncoder`` writes them; empty if none.

        Raises:
            InvalidNameError: a bad topic name.
            TopicNotExistError: the trace topic has no route.
            BrokerError, TransportError: a server failed or could not be reached.
        """
        validate_name(trace_topic)
        found = await self._query(trace_topic, msg_id, max_num, unique=False)
        return trace_entries(msg_id, (m for m in found if msg_id in m.keys))

    async def _query(
        self, topic: str, key: str, max_num: int, *, unique: bool
    ) -> list[ReceivedMessage]:
        client = self._require()
        route = await self._route(topic)
        header = QueryMessageRequestHeader(
            topic=topic, key=key, max_num=max_num, begin_timestamp=0, end_timestamp=_LONG_MAX
        )
        ext = header.to_ext()
        if unique:
            ext[UNIQUE_KEY_QUERY] = "true"
        out: list[ReceivedMessage] = []
        for name, addr in self._masters(route):
            resp = await client.invoke(
                addr, RemotingCommand.request(RequestCode.QUERY_MESSAGE, ext)
            )
            if resp.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            await self._checked(resp)
            out.extend(self._decode(resp.body, name))
        return out

    async def dead_letters(
        self,
        group: str,
        *,
        namespace: str | None = None,
        max_reconsume_times: int = dlq.DEFAULT_MAX_RECONSUME_TIMES,
        limit: int = 1000,
    ) -> list[dlq.DlqEntry]:
        """The dead letters of ``group`` with their original topic and reason
        (`aiorocket._admin.dlq.dead_letters`); empty when it has none.

        Raises:
            ConfigurationError: ``limit`` below 1.
            InvalidNameError: a bad group name.
            BrokerError, TransportError: a server failed or could not be reached.
        """
        return await dlq.dead_letters(
            self._require(),
            group,
            namespace=namespace,
            max_reconsume_times=max_reconsume_times,
            limit=limit,
        )

    async def resend_dead_letters(
        self,
        group: str,
        *,
        namespace: str | None = None,
        dry_run: bool = False,
        limit: int = 1000,
    ) -> list[dlq.ResendOutcome]:
        """Send ``group``'s dead letters back to their original topics, each once however
        often this runs (`aiorocket._admin.dlq.resend_dead_letters`).

        Raises:
            ConfigurationError: ``limit`` below 1.
            InvalidNameError: a bad group name.
            BrokerError, TransportError: a server failed or could not be reached.
        """
        return await dlq.resend_dead_letters(
            self._require(), group, namespace=namespace, dry_run=dry_run, limit=limit
        )

    @staticmethod
    def _decode(body: bytes, broker_name: str) -> list[ReceivedMessage]:
        records = decode_messages(body)
        return to_received(
            records, broker_name=broker_name, tag_filter=None, retry_queue=False, namespace=None
        )

    # -- topics -------------------------------------------------------------------------------

    async def create_topic(
        self,
        topic: str,
        *,
        queues: int = 8,
        perm: int = int(Perm.READ | Perm.WRITE),
        order: bool = False,
        cluster: str | None = None,
        message_type: TopicMessageType | str | None = None,
        lite_topic_expiration: int | None = None,
    ) -> list[str]:
        """Create or update ``topic`` with ``queues`` read and write queues on every master
        of ``cluster`` (every cluster by default) (``mqadmin updateTopic -c``). Returns the
        broker addresses.

        Args:
            topic: the topic.
            queues: read and write queues on each master.
            perm: permission bits.
            order: mark the topic ordered (``mqadmin updateTopic -o``).
            cluster: the cluster (every cluster by default).
            message_type: RocketMQ 5's [`TopicMessageType`][aiorocket.TopicMessageType] (its
                ``message.type`` attribute, ``mqadmin updateTopic -a +message.type=FIFO``),
                which a 5.x proxy checks every message against: a ``PRIORITY`` topic takes
                priority messages (5.4+), a ``LITE`` one is the parent of lite topics (5.5+).
                A 4.x broker ignores it.
            lite_topic_expiration: with ``message_type="LITE"``: minutes after their last
                message idle lite topics are deleted (``lite.topic.expiration``; default
                never).

        Raises:
            ConfigurationError: a bad queue count, message type or expiration, or an unknown
                cluster.
            InvalidNameError: a bad topic name.
            BrokerError, TransportError: a server failed or could not be reached.
        """
        validate_name(topic)
        if not 1 <= queues <= 1024:
            raise ConfigurationError(f"queues must be in 1..1024, not {queues}")
        client = self._require()
        header = CreateTopicRequestHeader(
            topic=topic,
            read_queue_nums=queues,
            write_queue_nums=queues,
            perm=perm,
            order=order,
            attributes=_topic_attributes(message_type, lite_topic_expiration),
        )
        masters = await self._cluster_masters(cluster)
        for addr in masters:
            await self._checked(
                await client.invoke(
                    addr,
                    RemotingCommand.request(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_ext()),
                )
            )
        return masters

    async def create_group(
        self,
        group: str,
        *,
        lite_bind_topic: str | None = None,
        lite_exclusive: bool = False,
        cluster: str | None = None,
    ) -> list[str]:
        """Create or update the subscription group ``group`` (Java's default settings) on every
        master of ``cluster`` (every cluster by default) (``mqadmin updateSubGroup -c``).
        Returns the broker addresses.

        Args:
            group: the consumer group.
            lite_bind_topic: RocketMQ 5.5: the parent topic (of type LITE) the group's
                [LiteConsumer][aiorocket.LiteConsumer]s read (``lite.bind.topic``).
            lite_exclusive: with ``lite_bind_topic``: a lite topic has one subscriber in the
                group at a time; the one that subscribes it last takes it from the others
                (``lite.sub.model=Exclusive``).
            cluster: the cluster (every cluster by default).

        Raises:
            ConfigurationError: ``lite_exclusive`` without ``lite_bind_topic``, an unknown
                cluster.
            InvalidNameError: a bad group or topic name.
            BrokerError, TransportError: a server failed or could not be reached.
        """
        validate_name(group, "consumer group")
        changes: dict[str, str] = {}
        if lite_bind_topic is not None:
            changes["+" + LITE_BIND_TOPIC] = validate_name(lite_bind_topic)
        if lite_exclusive:
            if lite_bind_topic is None:
                raise ConfigurationError("lite_exclusive needs lite_bind_topic")
            changes["+" + LITE_SUB_MODEL] = "Exclusive"
        client = self._require()
        body = SubscriptionGroupConfig(group_name=group, attributes=changes or None).to_json()
        masters = await self._cluster_masters(cluster)
        for addr in masters:
            cmd = RemotingCommand.request(
                RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=body
            )
            await self._checked(await client.invoke(addr, cmd))
        return masters

    async def delete_topic(self, topic: str, *, cluster: str | None = None) -> list[str]:
        """Delete ``topic`` from every master of ``cluster`` (every cluster by default), then
        from the name servers (``mqadmin deleteTopic -c``). Returns the broker addresses.

        Raises:
            ConfigurationError: an unknown cluster.
            InvalidNameError: a bad topic name.
            BrokerError, TransportError: a server failed or could not be reached.
        """
        validate_name(topic)
        client = self._require()
        masters = await self._cluster_masters(cluster)
        ext = DeleteTopicRequestHeader(topic=topic).to_ext()
        for addr in masters:
            await self._checked(
                await client.invoke(
                    addr, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_BROKER, ext)
                )
            )
        ns_ext = DeleteTopicFromNamesrvRequestHeader(topic=topic).to_ext()
        for ns in self.settings.namesrv:
            await self._checked(
                await client.invoke(
                    ns, RemotingCommand.request(RequestCode.DELETE_TOPIC_IN_NAMESRV, ns_ext)
                )
            )
        return masters

    async def set_consume_mode(
        self,
        group: str,
        topic: str,
        mode: Literal["pull", "pop"],
        *,
        pop_share_queue_num: int = 0,
        cluster: str | None = None,
    ) -> list[str]:
        """Switch how ``group`` reads ``topic`` on every master of ``cluster`` (by default on
        every master serving the topic): ``"pull"`` or ``"pop"`` (``mqadmin setConsumeMode``,
        RocketMQ 5.x; the broker refuses a topic it does not have with code 17).
        Push consumers that follow the broker's assignment (``consume_mode="server"``) switch
        at their next rebalance. Returns the broker addresses.

        Raises:
            ConfigurationError: a bad mode or share count, or an unknown cluster.
            InvalidNameError: a bad group or topic name.
            TopicNotExistError: no broker serves the topic.
            RequestCodeNotSupportedError: a broker without server-side assignment (4.x).
            BrokerError, TransportError: a server failed or could not be reached.
        """
        validate_name(group, "consumer group")
        validate_name(topic)
        if mode not in ("pull", "pop"):
            raise ConfigurationError(f"mode must be 'pull' or 'pop', not {mode!r}")
        if pop_share_queue_num < 0:
            raise ConfigurationError("pop_share_queue_num must not be negative")
        client = self._require()
        body = SetMessageRequestModeRequestBody(
            topic=topic,
            consumer_group=group,
            mode=mode.upper(),
            pop_share_queue_num=pop_share_queue_num,
        )
        if cluster is None:
            masters = sorted(addr for _, addr in self._masters(await self._route(topic)))
        else:
            masters = await self._cluster_masters(cluster)
        for addr in masters:
            await set_message_request_mode(client, addr, body)
        return masters
