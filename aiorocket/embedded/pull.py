"""PULL_MESSAGE (11): Java's ``PullMessageProcessor`` with long polling (docs/protocol.md §6.4).

Order of processing: validate (names, topic, permission, queue id), resolve the subscription
(from the request when it carries one, else from the group's heartbeat), commit the
piggy-backed offset, read, and map the store status to a wire code (§3.3). A NO_NEW_MSG result
of a pull with the SUSPEND bit is held until a matching message arrives or the hold time runs
out, then read once more. Found messages are written as the stored bytes, never re-encoded.
"""

from __future__ import annotations

import dataclasses
import logging
import struct

from aiorocket._protocol.codes import (
    FLAG_RESPONSE,
    VERSION_V4_9_8,
    PullSysFlag,
    RequestCode,
    ResponseCode,
    SerializeType,
)
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import RequestTemplate
from aiorocket._protocol.headers import PullMessageRequestHeader
from aiorocket._protocol.message import decode_message
from aiorocket._protocol.sql92 import EXPRESSION_TYPE_SQL92, Sql92Filter, compile_sql92
from aiorocket._protocol.tags import TagFilter, parse_tag_expression
from aiorocket._remoting import Connection
from aiorocket._remoting.server import ServerConnection
from aiorocket.embedded.context import BrokerContext, Processor, handles
from aiorocket.embedded.store import MessageStore
from aiorocket.embedded.store_results import GetResult, GetStatus
from aiorocket.embedded.topics import is_valid_name
from aiorocket.errors import InvalidSelectorError, RemoteProtocolError

__all__ = ["PullProcessor", "pull_code", "read_matching"]

log = logging.getLogger("aiorocket.embedded")

#: PullMessageProcessor's answer to a non-TAG subscription without ``enablePropertyFilter``
_FILTER_REFUSED = "The broker does not support consumer to filter message by "
#: entries an SQL92 pull examines at most before answering NO_MATCHED_MESSAGE (the store's
#: scan budget with a filter, ``maxFilterMessageCount`` 16000 / 20 per index unit in Java)
_MAX_SQL_SCAN = 800

# Plain ints: an IntFlag operation costs an enum construction on every pull.
_COMMIT_OFFSET = int(PullSysFlag.COMMIT_OFFSET)
_SUSPEND = int(PullSysFlag.SUSPEND)
_SUBSCRIPTION = int(PullSysFlag.SUBSCRIPTION)
#: bound on the names and tag expressions remembered as already checked / parsed
_CACHE_SIZE = 4096

_SUCCESS = int(ResponseCode.SUCCESS)
_NOT_FOUND = int(ResponseCode.PULL_NOT_FOUND)
_RETRY = int(ResponseCode.PULL_RETRY_IMMEDIATELY)
_MOVED = int(ResponseCode.PULL_OFFSET_MOVED)

_CODES = {
    GetStatus.FOUND: _SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: _RETRY,
    GetStatus.MESSAGE_WAS_REMOVING: _RETRY,
    GetStatus.OFFSET_FOUND_NULL: _NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: _NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: _MOVED,
    GetStatus.OFFSET_TOO_SMALL: _MOVED,
}


class FoundResponse:
    """The frame of a pull's SUCCESS answer in the JSON dialect, rendered once.

    Only the opaque and three offsets change from one found pull to the next, so the header
    is a template (the general encoder's output with ``%d`` holes, see ``RequestTemplate``):
    the frame is byte-identical to encoding ``cmd.make_response(...)`` stamped with ``version``
    (the broker's ``remoting_version``), at a fraction of the cost.
    """

    __slots__ = ("_template",)

    _PREFIX = struct.Struct(">iI")  # frameLength, headerWord (JSON: the type byte is 0)

    def __init__(self, version: int = VERSION_V4_9_8) -> None:
        probe = RemotingCommand(
            _SUCCESS,
            flag=FLAG_RESPONSE,
            version=version,
            remark=GetStatus.FOUND.value,
            ext_fields={
                "suggestWhichBrokerId": "0",
                "nextBeginOffset": "0",
                "minOffset": "0",
                "maxOffset": "0",
            },
        )
        self._template = RequestTemplate(probe, ("nextBeginOffset", "minOffset", "maxOffset"))

    def encode(
        self, opaque: int, result: GetResult, body: list[bytes]
    ) -> list[bytes | bytearray | memoryview]:
        """The frame answering request ``opaque`` with ``result``, ``body`` its records."""
        frame = self._template.encode(
            opaque, (result.next_begin_offset, result.min_offset, result.max_offset)
        )[0]
        header = frame[8:]
        hlen = len(header)
        blen = 0
        for part in body:
            blen += len(part)
        return [self._PREFIX.pack(4 + hlen + blen, hlen) + header, *body]


def pull_code(status: GetStatus, request_offset: int, found: int) -> int:
    """The wire code of a store status (docs/protocol.md §3.3).

    An empty or unknown queue is NO_NEW_MSG (19) for offset 0 and OFFSET_MOVED (21) for any
    other offset; FOUND without a message (``found`` = 0) is never answered as SUCCESS.
    """
    if status in (GetStatus.NO_MESSAGE_IN_QUEUE, GetStatus.NO_MATCHED_LOGIC_QUEUE):
        return _NOT_FOUND if request_offset == 0 else _MOVED
    if status is GetStatus.FOUND and not found:
        return _RETRY
    return _CODES[status]


def read_matching(
    store: MessageStore,
    topic: str,
    queue_id: int,
    offset: int,
    max_msgs: int,
    max_bytes: int,
    sql: Sql92Filter,
) -> GetResult:
    """``getMessage`` with an SQL92 filter: read, keep the records whose properties match
    (``ExpressionMessageFilter.isMatchedByCommitLog``), and read on while nothing matched
    within the scan budget. Skipped records still advance ``next_begin_offset``.

    Raises:
        OSError: the store failed to read.
    """
    scanned = 0
    while True:
        result = store.get(topic, queue_id, offset, max_msgs=max_msgs, max_bytes=max_bytes)
        if result.status is not GetStatus.FOUND:
            # Nothing (more) to read: report the first read's status if nothing was
            # examined, else what was skipped so far.
            if scanned == 0:
                return result
            break
        kept = [i for i, raw in enumerate(result.messages) if _sql_matches(raw, sql)]
        scanned += result.scanned
        if kept:
            return dataclasses.replace(
                result,
                messages=[result.messages[i] for i in kept],
                tags_codes=[result.tags_codes[i] for i in kept],
                queue_offsets=[result.queue_offsets[i] for i in kept],
                scanned=scanned,
            )
        offset = result.next_begin_offset
        if scanned >= _MAX_SQL_SCAN:
            break
    return GetResult(
        GetStatus.NO_MATCHED_MESSAGE,
        offset,
        result.min_offset,
        result.max_offset,
        scanned=scanned,
    )


def _sql_matches(raw: bytes, sql: Sql92Filter) -> bool:
    try:
        record, _ = decode_message(raw, decompress=False)
    except RemoteProtocolError:
        log.exception("a stored record does not decode; not delivered by SQL92")
        return False
    return sql.matches(record.properties)


class PullProcessor(Processor):
    """Serves PULL_MESSAGE (and 5.x's LITE_PULL_MESSAGE) from the store, holding empty pulls.

    Args:
        ctx: the broker's store, topic table, heartbeat subscriptions (for pulls without the
            SUBSCRIPTION bit), offsets (piggy-backed commits go there), held-pull registry
            (woken by the write path), settings (pull limits, the hold cap) and statistics
            (each pull that found messages is counted).
    """

    def __init__(self, ctx: BrokerContext) -> None:
        super().__init__(ctx)
        self._waiters = ctx.waiters
        self._on_served = ctx.stats.got
        # Every pull of a queue names the same group and topic and carries the same tag
        # expression: check and parse each once (bounded; cleared when full).
        # Stamped like every other response (ServerConnection's response_version).
        self._found = FoundResponse(ctx.config.remoting_version)
        self._valid_names: set[str] = set()
        self._tag_filters: dict[str, TagFilter] = {}

    def _valid(self, name: str) -> bool:
        names = self._valid_names
        if name in names:
            return True
        if not is_valid_name(name):
            return False
        if len(names) >= _CACHE_SIZE:
            names.clear()
        names.add(name)
        return True

    def _tag_filter(self, expression: str | None) -> TagFilter:
        if expression is None:
            return parse_tag_expression(None)
        filters = self._tag_filters
        parsed = filters.get(expression)
        if parsed is None:
            parsed = parse_tag_expression(expression)
            if len(filters) >= _CACHE_SIZE:
                filters.clear()
            filters[expression] = parsed
        return parsed

    def _filter(
        self, cmd: RemotingCommand, h: PullMessageRequestHeader
    ) -> TagFilter | Sql92Filter | RemotingCommand:
        if h.sys_flag & _SUBSCRIPTION:
            expression_type = h.expression_type
            if not expression_type or expression_type == "TAG":
                return self._tag_filter(h.subscription)
            expression_type = expression_type.upper()
            if expression_type == "TAG":
                return self._tag_filter(h.subscription)
            if expression_type != EXPRESSION_TYPE_SQL92 or not self._config.enable_property_filter:
                return cmd.make_response(
                    ResponseCode.SYSTEM_ERROR, remark=_FILTER_REFUSED + expression_type
                )
            try:
                return compile_sql92(h.subscription or "")
            except InvalidSelectorError:
                return cmd.make_response(
                    ResponseCode.SUBSCRIPTION_PARSE_FAILED,
                    remark="parse the consumer's subscription failed",
                )
        sub = self._groups.subscription(h.consumer_group, h.topic)
        if sub is None:
            return cmd.make_response(
                ResponseCode.SUBSCRIPTION_NOT_EXIST,
                remark=f"the consumer's subscription not exist, group: {h.consumer_group}",
            )
        if sub.data.sub_version < h.sub_version:
            return cmd.make_response(
                ResponseCode.SUBSCRIPTION_NOT_LATEST,
                remark="the consumer's subscription not latest",
            )
        if sub.tag_filter is not None:
            return sub.tag_filter
        expression_type = (sub.data.expression_type or "TAG").upper()
        if expression_type != EXPRESSION_TYPE_SQL92 or not self._config.enable_property_filter:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=_FILTER_REFUSED + expression_type
            )
        if sub.sql_filter is None:
            return cmd.make_response(
                ResponseCode.FILTER_DATA_NOT_EXIST,
                remark="The broker's consumer filter data is not exist!"
                "Your expression may be wrong!",
            )
        return sub.sql_filter

    def _get_sql(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, sql: Sql92Filter
    ) -> GetResult:
        return read_matching(
            self._store, topic, queue_id, offset, max_msgs, self._config.max_pull_bytes, sql
        )

    # 5.x clients send LITE_PULL_MESSAGE (361) from DefaultLitePullConsumer; the 5.x broker
    # serves it with the same processor (BrokerController.registerProcessor).
    @handles(RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE)
    async def pull(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        """PULL_MESSAGE: answer found messages, or hold an empty pull (docs/protocol.md §6.4).

        Returns ``None`` when the response (with the stored records as its body) was
        written directly to ``conn``.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the store failed to read.
        """
        h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
        topic, queue_id, group = h.topic, h.queue_id, h.consumer_group
        if not self._valid(group):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"the consumer group[{group}] is illegal"
            )
        if not self._valid(topic):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"the topic[{topic}] is illegal"
            )
        cfg = self._topics.get(topic)
        if cfg is None:
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                remark=f"topic[{topic}] not exist, apply first please!",
            )
        if not cfg.readable:
            return cmd.make_response(
                ResponseCode.NO_PERMISSION,
                remark=f"the topic[{topic}] pulling message is forbidden",
            )
        if not 0 <= queue_id < cfg.read_queue_nums:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"queueId[{queue_id}] is illegal, topic:[{topic}] "
                f"topicConfig.readQueueNums:[{cfg.read_queue_nums}] consumer:[{conn.peer[0]}]",
            )
        tag_filter = self._filter(cmd, h)
        if isinstance(tag_filter, RemotingCommand):
            return tag_filter
        sql = tag_filter if isinstance(tag_filter, Sql92Filter) else None
        matches = (
            None
            if isinstance(tag_filter, Sql92Filter) or tag_filter.match_all
            else tag_filter.matches_code
        )
        if h.sys_flag & _COMMIT_OFFSET:
            # Step 7 of §6.4: stored whatever the outcome of the read.
            self._offsets.commit(group, topic, queue_id, h.commit_offset)

        config = self._config
        max_msgs = min(max(h.max_msg_nums, 1), config.max_pull_messages)
        offset = h.queue_offset
        store = self._store

        def read() -> GetResult:
            if sql is not None:
                return self._get_sql(topic, queue_id, offset, max_msgs, sql)
            return store.get(
                topic,
                queue_id,
                offset,
                max_msgs=max_msgs,
                max_bytes=config.max_pull_bytes,
                matches=matches,
            )

        result = read()
        code = pull_code(result.status, offset, len(result.messages))
        if code == _NOT_FOUND and h.sys_flag & _SUSPEND:
            hold = min(h.suspend_timeout_millis / 1000.0, config.long_poll_max_hold)
            if hold > 0:
                # An SQL92 pull wakes on any arrival; a miss answers NO_MATCHED_MESSAGE
                # with the offset moved past it, and the client pulls again at once.
                await self._waiters.wait(topic, queue_id, offset, matches=matches, timeout=hold)
                result = read()
                code = pull_code(result.status, offset, len(result.messages))
        if result.messages:
            self._on_served(group, topic, len(result.messages))
        return self._respond(conn, cmd, result, code)

    def _respond(
        self, conn: Connection, cmd: RemotingCommand, result: GetResult, code: int
    ) -> RemotingCommand | None:
        if code == _SUCCESS:
            if type(conn) is ServerConnection and cmd.serialize_type == SerializeType.JSON:
                conn.send_encoded(self._found.encode(cmd.opaque, result, result.messages))
                return None
            response = self._response(cmd, result, code)
            parts: list[bytes | bytearray | memoryview] = list(result.messages)
            conn.send_response(response, body_parts=parts)
            return None
        return self._response(cmd, result, code)

    @staticmethod
    def _response(cmd: RemotingCommand, result: GetResult, code: int) -> RemotingCommand:
        return cmd.make_response(
            code,
            remark=result.status.value,
            ext_fields={
                "suggestWhichBrokerId": "0",
                "nextBeginOffset": str(result.next_begin_offset),
                "minOffset": str(result.min_offset),
                "maxOffset": str(result.max_offset),
            },
        )
