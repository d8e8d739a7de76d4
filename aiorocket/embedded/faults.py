"""Fault hooks of the embedded broker, for tests (``aiorocket.testing`` documents their use).

Java brokers have no such hooks; each one produces, on demand, a situation a real cluster
produces on its own, through the same wire requests a client sees then:

* `BrokerFaults.fail_next` answers the next requests of one code with an error code
  (SYSTEM_BUSY when a broker's page cache is busy or its send thread pool is full, SYSTEM_ERROR,
  ...), without processing them;
* `BrokerFaults.notify_rebalance` sends NOTIFY_CONSUMER_IDS_CHANGED to every member of a
  group, what a broker does when a member joins or leaves (``Broker2Client``);
* `BrokerFaults.redeliver` moves a group's offset of one queue back and tells the
  members with RESET_CONSUMER_CLIENT_OFFSET, what ``mqadmin resetOffsetByTime`` makes a broker
  do (the messages from that offset on are delivered again);
* `BrokerFaults.drop_below` makes a queue's messages below an offset unreadable, as
  retention does when it deletes old commit-log segments: a pull below it is answered
  OFFSET_MOVED.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Hashable
from dataclasses import dataclass

from aiorocket._protocol.bodies import ResetOffsetBody
from aiorocket._protocol.codes import FLAG_ONEWAY, RequestCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import ResetOffsetRequestHeader
from aiorocket._remoting import Connection
from aiorocket.embedded.context import BrokerContext, Processor
from aiorocket.errors import ConfigurationError, ConnectionClosedError, TransportError
from aiorocket.models import MessageQueue

__all__ = ["BrokerFaults", "InjectedFailure"]

log = logging.getLogger("aiorocket.embedded")


@dataclass(frozen=True, slots=True)
class InjectedFailure:
    """One request answered by `BrokerFaults.fail_next` instead of being processed."""

    #: ``time.monotonic()`` when it arrived
    at: float
    request_code: int
    response_code: int


@dataclass(slots=True)
class _Rule:
    response_code: int
    remaining: int
    remark: str


class BrokerFaults(Processor):
    """The fault state of one broker and the hooks that act on it; it answers no request
    code of its own, the broker asks `intercept` before dispatching each request.

    Args:
        ctx: the broker's collaborators (registrations to notify or reset, committed
            offsets, the store, the topic table, the broker name of the queues sent).
    """

    def __init__(self, ctx: BrokerContext) -> None:
        super().__init__(ctx)
        self._broker_name = ctx.config.broker_name
        self._rules: dict[int, list[_Rule]] = {}
        #: every request answered by a `fail_next` rule, oldest first
        self.injected: list[InjectedFailure] = []

    # -- failing requests --------------------------------------------------------------------

    def fail_next(
        self, request_code: int, response_code: int, times: int = 1, *, remark: str = ""
    ) -> None:
        """Answer the next ``times`` requests with ``request_code`` with ``response_code``.

        Rules for one request code queue up: a second call takes effect once the first one's
        requests are used up. A oneway request is swallowed (it has no response).

        Raises:
            ConfigurationError: ``times`` is below 1 or ``response_code`` is SUCCESS (0).
        """
        if times < 1:
            raise ConfigurationError("times must be at least 1")
        if int(response_code) == 0:
            raise ConfigurationError("fail_next needs an error response code, not SUCCESS")
        text = remark or f"[aiorocket fault] injected response {int(response_code)}"
        self._rules.setdefault(int(request_code), []).append(_Rule(int(response_code), times, text))

    @property
    def armed(self) -> bool:
        """Whether a `fail_next` rule waits for requests."""
        return bool(self._rules)

    @property
    def pending_failures(self) -> int:
        """Requests still to be failed by `fail_next` rules."""
        return sum(r.remaining for rules in self._rules.values() for r in rules)

    def clear(self) -> None:
        """Forget every `fail_next` rule not used up yet."""
        self._rules.clear()

    def intercept(self, cmd: RemotingCommand) -> RemotingCommand | None:
        """The injected answer to ``cmd`` if a rule applies (the request is then not
        processed; for a oneway request the answer is never sent), else ``None``."""
        rules = self._rules.get(cmd.code)
        if not rules:
            return None
        rule = rules[0]
        rule.remaining -= 1
        if rule.remaining <= 0:
            rules.pop(0)
            if not rules:
                del self._rules[cmd.code]
        self.injected.append(InjectedFailure(time.monotonic(), cmd.code, rule.response_code))
        if not cmd.flag & FLAG_ONEWAY:
            log.info("request code %d answered %d (injected)", cmd.code, rule.response_code)
        return cmd.make_response(rule.response_code, remark=rule.remark)

    # -- consumers ---------------------------------------------------------------------------

    def _channels(self, group: str) -> list[Hashable]:
        info = self._groups.consumer_group(group)
        return list(info.channels) if info is not None else []

    async def notify_rebalance(self, group: str) -> int:
        """Send NOTIFY_CONSUMER_IDS_CHANGED to every member of ``group``; returns how many
        were told (members rebalance at once, as after a membership change)."""
        told = 0
        cmd_ext = {"consumerGroup": group}
        for channel in self._channels(group):
            if not isinstance(channel, Connection) or channel.is_closed:
                continue
            cmd = RemotingCommand.request(
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, dict(cmd_ext), oneway=True
            )
            with contextlib.suppress(ConnectionClosedError, TransportError):
                await channel.send_oneway(cmd)
                told += 1
        log.info("told %d member(s) of %s to rebalance (injected)", told, group)
        return told

    async def redeliver(
        self, topic: str, queue_id: int, from_offset: int, *, group: str | None = None
    ) -> list[str]:
        """Move the committed offset of ``topic``'s queue ``queue_id`` back to ``from_offset``
        for ``group`` (default: every group subscribed to or consuming the topic) and send
        each online member RESET_CONSUMER_CLIENT_OFFSET for that queue, so the messages from
        ``from_offset`` on are delivered again. Returns the groups concerned.

        Raises:
            ConfigurationError: unknown topic, queue id out of range or a negative offset.
        """
        cfg = self._topics.get(topic)
        if cfg is None:
            raise ConfigurationError(f"no topic {topic!r} on this broker")
        if not 0 <= queue_id < cfg.read_queue_nums:
            raise ConfigurationError(f"queue {queue_id} is outside topic {topic!r}")
        if from_offset < 0:
            raise ConfigurationError("from_offset must not be negative")
        if group is not None:
            groups = [group]
        else:
            online = {
                g
                for g in self._groups.consumer_groups()
                if (info := self._groups.consumer_group(g)) is not None
                and topic in info.subscriptions
            }
            groups = sorted(online | set(self._offsets.groups_of(topic)))
        mq = MessageQueue(topic, self._broker_name, queue_id)
        body = ResetOffsetBody({mq: from_offset}).to_json()
        header = ResetOffsetRequestHeader(
            topic=topic, group="", timestamp=int(time.time() * 1000), is_force=True
        )
        for g in groups:
            self._offsets.commit(g, topic, queue_id, from_offset)
            ext = {**header.to_ext(), "group": g}
            for channel in self._channels(g):
                if not isinstance(channel, Connection) or channel.is_closed:
                    continue
                cmd = RemotingCommand.request(
                    RequestCode.RESET_CONSUMER_CLIENT_OFFSET, ext, body, oneway=True
                )
                with contextlib.suppress(ConnectionClosedError, TransportError):
                    await channel.send_oneway(cmd)
        log.info(
            "redelivering %s queue %d from offset %d to %s (injected)",
            topic,
            queue_id,
            from_offset,
            ", ".join(groups) or "no group",
        )
        return groups

    # -- storage -----------------------------------------------------------------------------

    def drop_below(self, topic: str, queue_id: int, offset: int) -> int:
        """Make the messages of the queue below ``offset`` unreadable, as if retention had
        deleted their segments; returns the queue's new minimum offset (``offset`` clamped to
        what the queue holds). Reads below it are answered OFFSET_MOVED with the new minimum.
        Lasts until the broker restarts (the files stay).

        Raises:
            ConfigurationError: the queue holds no message.
        """
        new_min = self._store.drop_below(topic, queue_id, offset)
        if new_min < 0:
            raise ConfigurationError(f"queue {queue_id} of {topic!r} holds no message")
        log.info("queue %d of %s now starts at offset %d (injected)", queue_id, topic, new_min)
        return new_min
