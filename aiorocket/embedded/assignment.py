"""Server-side assignment (RocketMQ 5.x, docs/protocol.md §12.3): QUERY_ASSIGNMENT (400),
SET_MESSAGE_REQUEST_MODE (401) and GET_ALL_MESSAGE_REQUEST_MODE (402) — Java's
``QueryAssignmentProcessor`` and ``MessageRequestModeManager``.

The mode table says how a group reads a topic: PULL (rebalance and pull, the 4.x way) or POP,
with ``popShareQueueNum``. It is set by ``mqadmin setConsumeMode`` and kept in
``messageRequestMode.json`` (Apache's file and format), written before the request is
answered. A topic and group without an entry read by ``default_message_request_mode``; retry
topics always by PULL, and their mode cannot be set (NO_PERMISSION).

QUERY_ASSIGNMENT answers the queues of this broker a client is to consume (``doLoadBalance``):
broadcasting, every readable queue; clustering, the queues allocated by the strategy the
client names (``AVG`` or ``AVG_BY_CIRCLE``) over the sorted queues and the sorted client ids
of the group's registered consumers (heartbeats). In POP mode (``allocate4Pop``), with
``popShareQueueNum`` <= 0 or at least the group's size - 1 every client gets the broker's
queues as one queue -1 (pop from any); otherwise its own share plus that of the
``popShareQueueNum`` clients after it, or, with more clients than queues, queue
``index % queues``. No answer (an empty body object) when the topic is unknown, the group has
no registered consumer or the strategy is unknown.

The strategies are the client's own (``aiorocket/_protocol/allocation.py``): Java brokers
run the same classes as Java clients, so a broker's answer and a client-side rebalance agree.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from aiorocket._names import RETRY_PREFIX, is_valid_name
from aiorocket._protocol.allocation import (
    allocate_averagely,
    allocate_by_circle,
    sort_client_ids,
    sort_queues,
)
from aiorocket._protocol.codes import RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.pop import (
    MessageQueueAssignment,
    MessageRequestModeWrapper,
    QueryAssignmentRequestBody,
    QueryAssignmentResponseBody,
    SetMessageRequestModeRequestBody,
)
from aiorocket._remoting import Connection
from aiorocket.embedded.context import BrokerContext, Processor, handles
from aiorocket.embedded.files import PersistedTable, write_json_atomically
from aiorocket.models import MessageQueue

__all__ = ["AssignmentProcessor", "RequestModes"]

log = logging.getLogger("aiorocket.embedded")

_Allocate = Callable[[Sequence[MessageQueue], Sequence[str], str], list[MessageQueue]]
_TABLE: Final = "messageRequestModeMap"


_STRATEGIES: Final[dict[str, _Allocate]] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_by_circle,
}


class RequestModes(PersistedTable):
    """The request mode of each (topic, group) set so far, persisted to ``path``
    (``messageRequestMode.json``).

    Args:
        path: the JSON file; ``None`` keeps the table in memory only.
    """

    _table_key = _TABLE

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._table: dict[str, dict[str, SetMessageRequestModeRequestBody]] = {}

    def _decode(self, data: dict[str, Any]) -> None:
        wrapper = MessageRequestModeWrapper.from_dict(data, str(self._path))
        self._table = {t: dict(groups) for t, groups in wrapper.message_request_mode_map.items()}

    def get(self, topic: str, group: str) -> SetMessageRequestModeRequestBody | None:
        """The mode set for ``group`` reading ``topic``, or ``None``."""
        return self._table.get(topic, {}).get(group)

    def wrapper(self) -> MessageRequestModeWrapper:
        """The whole table as GET_ALL_MESSAGE_REQUEST_MODE answers it."""
        return MessageRequestModeWrapper({t: dict(g) for t, g in self._table.items()})

    def put(self, mode: SetMessageRequestModeRequestBody) -> None:
        """Set a mode and write the table.

        Raises:
            OSError: the table cannot be written.
        """
        groups = self._table.setdefault(mode.topic, {})
        old = groups.get(mode.consumer_group)
        groups[mode.consumer_group] = mode
        if self._path is None:
            return
        try:
            write_json_atomically(self._path, self.wrapper().to_dict())
        except BaseException:
            if old is None:
                del groups[mode.consumer_group]
            else:
                groups[mode.consumer_group] = old
            raise


class AssignmentProcessor(Processor):
    """Serves QUERY_ASSIGNMENT, SET_MESSAGE_REQUEST_MODE and GET_ALL_MESSAGE_REQUEST_MODE.

    Args:
        ctx: the broker's topics, registered consumers, settings and data directory (the mode
            table is read from ``config/messageRequestMode.json`` here).

    Raises:
        OSError, ValueError: the mode table cannot be read.
    """

    def __init__(self, ctx: BrokerContext) -> None:
        super().__init__(ctx)
        self.modes = RequestModes(ctx.data_dir / "config" / "messageRequestMode.json")
        self.modes.load()

    def _mode(self, topic: str, group: str) -> SetMessageRequestModeRequestBody:
        mode = self.modes.get(topic, group)
        if mode is not None:
            return mode
        if topic.startswith(RETRY_PREFIX):
            return SetMessageRequestModeRequestBody(topic, group, "PULL")
        default = self._config.default_message_request_mode
        share = self._config.default_pop_share_queue_num if default == "POP" else 0
        return SetMessageRequestModeRequestBody(topic, group, default, share)

    def _queues(self, topic: str) -> list[MessageQueue] | None:
        """``getTopicSubscribeInfo``: the topic's readable queues here, ``None`` if unknown."""
        cfg = self._topics.get(topic)
        if cfg is None:
            return None
        if not cfg.readable:
            return []
        name = self._config.broker_name
        return [MessageQueue(topic, name, q) for q in range(cfg.read_queue_nums)]

    @handles(RequestCode.QUERY_ASSIGNMENT)
    async def query_assignment(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """QUERY_ASSIGNMENT: the queues this client is to consume, with their mode.

        Raises:
            RemoteProtocolError: the body is malformed.
        """
        body = QueryAssignmentRequestBody.from_json(cmd.body)
        mode = self._mode(body.topic, body.consumer_group)
        queues = self._balance(body, mode)
        assignments = None
        if queues is not None:
            assignments = tuple(
                MessageQueueAssignment(mq, mode.mode, {}) for mq in sorted(set(queues))
            )
        answer = QueryAssignmentResponseBody(assignments)
        return cmd.make_response(ResponseCode.SUCCESS, body=answer.to_json())

    def _balance(
        self, body: QueryAssignmentRequestBody, mode: SetMessageRequestModeRequestBody
    ) -> list[MessageQueue] | None:
        """``doLoadBalance``; ``None``: no valid answer (the client keeps what it has)."""
        mq_set = self._queues(body.topic)
        if mq_set is None:
            return None
        if body.message_model == "BROADCASTING":
            return mq_set
        group = self._groups.consumer_group(body.consumer_group)
        strategy = _STRATEGIES.get(body.strategy_name)
        if group is None or strategy is None:
            return None
        cid_all = sort_client_ids(group.client_ids())
        mq_all = sort_queues(mq_set)
        if not cid_all or not mq_all or not body.client_id:
            return None  # the Java strategies refuse these (and the broker answers null)
        if mode.mode == "POP":
            return self._allocate_pop(strategy, mq_all, cid_all, body.client_id, mode)
        return strategy(mq_all, cid_all, body.client_id)

    @staticmethod
    def _allocate_pop(
        strategy: _Allocate,
        mq_all: list[MessageQueue],
        cid_all: list[str],
        client_id: str,
        mode: SetMessageRequestModeRequestBody,
    ) -> list[MessageQueue]:
        """``allocate4Pop``."""
        share = mode.pop_share_queue_num
        if share <= 0 or share >= len(cid_all) - 1:
            # every client pops every queue of the broker: one queue -1 per broker
            return [MessageQueue(mq.topic, mq.broker_name, -1) for mq in mq_all]
        if len(cid_all) > len(mq_all):
            if client_id not in cid_all:
                return []
            return [mq_all[cid_all.index(client_id) % len(mq_all)]]
        out = strategy(mq_all, cid_all, client_id)
        if client_id in cid_all:
            index = cid_all.index(client_id)
            for _ in range(share):
                index = (index + 1) % len(cid_all)
                out += strategy(mq_all, cid_all, cid_all[index])
        return out

    @handles(RequestCode.SET_MESSAGE_REQUEST_MODE)
    async def set_message_request_mode(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """SET_MESSAGE_REQUEST_MODE (``mqadmin setConsumeMode``): store a group's mode of a
        topic.

        Raises:
            RemoteProtocolError: the body is malformed.
            OSError: the table cannot be written.
        """
        body = SetMessageRequestModeRequestBody.from_json(cmd.body)
        if body.topic.startswith(RETRY_PREFIX):
            return cmd.make_response(
                ResponseCode.NO_PERMISSION, remark="retry topic is not allowed to set mode"
            )
        if self._topics.get(body.topic) is None:
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST, remark=f"topic[{body.topic}] not exist"
            )
        # Groups are created on first use (autoCreateSubscriptionGroup): only a name that can
        # never be one is refused.
        if not is_valid_name(body.consumer_group):
            return cmd.make_response(
                ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST,
                remark="subscription group does not exist",
            )
        self.modes.put(body)
        log.info(
            "request mode of %s on %s set to %s (popShareQueueNum %d)",
            body.consumer_group,
            body.topic,
            body.mode,
            body.pop_share_queue_num,
        )
        return cmd.make_response(ResponseCode.SUCCESS)

    @handles(RequestCode.GET_ALL_MESSAGE_REQUEST_MODE)
    async def get_all_message_request_mode(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """GET_ALL_MESSAGE_REQUEST_MODE: the whole mode table."""
        return cmd.make_response(ResponseCode.SUCCESS, body=self.modes.wrapper().to_json())
