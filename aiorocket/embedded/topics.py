"""Topic configurations (``TopicConfigManager``): system topics, auto-creation, persistence.

Names are checked against ``^[%|a-zA-Z0-9_-]{1,127}$`` (``TopicValidator``) before anything
reaches the disk. Topics created at run time are written to ``topics.json`` atomically before
the request that created them is answered; system topics are rebuilt from the configuration at
start (docs/protocol.md §6.1).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from aiorocket._names import (
    CREATE_TOPIC_KEY,
    DLQ_PREFIX,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    TIMER_TOPIC,
    dlq_topic,
    is_valid_name,
    reply_topic,
    retry_topic,
)
from aiorocket._protocol.attributes import MESSAGE_TYPE
from aiorocket._protocol.codes import Perm
from aiorocket.embedded.config import BrokerConfig
from aiorocket.embedded.files import PersistedTable, write_json_atomically
from aiorocket.settings import closest_name

__all__ = [
    "CHECK_MAX_TOPIC",
    "DLQ_PREFIX",
    "HALF_TOPIC",
    "NOT_ALLOWED_SEND_TOPICS",
    "OFFSET_MOVED_EVENT",
    "OP_TOPIC",
    "RETRY_PREFIX",
    "REVIVE_TOPIC_PREFIX",
    "SCHEDULE_TOPIC",
    "SELF_TEST_TOPIC",
    "TIMER_TOPIC",
    "TopicConfig",
    "TopicTable",
    "dlq_topic",
    "is_valid_name",
    "retry_topic",
    "revive_topic",
]

#: ``TopicValidator.RMQ_SYS_SELF_TEST_TOPIC``.
SELF_TEST_TOPIC: Final = "SELF_TEST_TOPIC"
#: ``TopicValidator.RMQ_SYS_OFFSET_MOVED_EVENT``.
OFFSET_MOVED_EVENT: Final = "OFFSET_MOVED_EVENT"
#: ``TopicValidator.RMQ_SYS_TRANS_HALF_TOPIC``: pending half messages, one queue.
HALF_TOPIC: Final = "RMQ_SYS_TRANS_HALF_TOPIC"
#: ``TopicValidator.RMQ_SYS_TRANS_OP_HALF_TOPIC``: one op message per resolved half.
OP_TOPIC: Final = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: ``TopicValidator.RMQ_SYS_TRANS_CHECK_MAX_TIME_TOPIC``: halves checked too often.
CHECK_MAX_TOPIC: Final = "TRANS_CHECK_MAX_TIME_TOPIC"

#: ``PopAckConstants.REVIVE_TOPIC``: the POP revive log of a cluster is this plus its name.
REVIVE_TOPIC_PREFIX: Final = "rmq_sys_REVIVE_LOG_"


def revive_topic(cluster: str) -> str:
    """``PopAckConstants.buildClusterReviveTopic``: the POP revive log's topic."""
    return REVIVE_TOPIC_PREFIX + cluster


#: ``TopicValidator.isNotAllowedSendTopic``: sending to these answers NO_PERMISSION (16). The
#: timer topic is added: 5.3.3 would store such a message as a rolled timer and fail to read its
#: due time, so it is refused instead.
NOT_ALLOWED_SEND_TOPICS: Final = frozenset(
    {
        SCHEDULE_TOPIC,
        TIMER_TOPIC,
        HALF_TOPIC,
        OP_TOPIC,
        CHECK_MAX_TOPIC,
        SELF_TEST_TOPIC,
        OFFSET_MOVED_EVENT,
    }
)

log = logging.getLogger("aiorocket.embedded")


def _internal(name: str) -> bool:
    """A group's retry or dead-letter topic: created by the broker's own rules, not a typo."""
    return name.startswith((RETRY_PREFIX, DLQ_PREFIX))


_RW = int(Perm.READ | Perm.WRITE)


@dataclass(frozen=True, slots=True, kw_only=True)
class TopicConfig:
    """One topic on this broker (Java ``TopicConfig``)."""

    name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = _RW
    topic_filter_type: str = "SINGLE_TAG"
    topic_sys_flag: int = 0
    order: bool = False
    #: 5.x attributes (``message.type``, ``lite.topic.expiration``, ...)
    attributes: dict[str, str] = field(default_factory=dict, hash=False)

    @property
    def message_type(self) -> str:
        """``TopicConfig.getTopicMessageType``: the ``message.type`` attribute, ``NORMAL`` when
        unset."""
        return self.attributes.get(MESSAGE_TYPE, "NORMAL")

    @property
    def queue_count(self) -> int:
        """Queue ids ``0 … queue_count-1`` exist (``max(read, write)``)."""
        return max(self.read_queue_nums, self.write_queue_nums)

    @property
    def readable(self) -> bool:
        """PermName.isReadable."""
        return bool(self.perm & Perm.READ)

    @property
    def writable(self) -> bool:
        """PermName.isWriteable."""
        return bool(self.perm & Perm.WRITE)


class TopicTable(PersistedTable):
    """The topics this broker hosts.

    Args:
        path: ``topics.json``; ``None`` keeps created topics in memory only.
        config: supplies the auto-create switch, queue counts and the delay-level count.
    """

    _table_key = "topicConfigTable"

    def __init__(self, path: Path | None, *, config: BrokerConfig) -> None:
        self._path = path
        self._config = config
        self._topics: dict[str, TopicConfig] = {}
        self._persisted: set[str] = set()
        self._system: dict[str, TopicConfig] = {}
        for cfg in self._system_topics(config):
            self._system[cfg.name] = cfg
            self._topics[cfg.name] = cfg

    @staticmethod
    def _system_topics(config: BrokerConfig) -> list[TopicConfig]:
        # BrokerController/TopicConfigManager create these at start (docs/protocol.md §6.1).
        out = [
            TopicConfig(name=SELF_TEST_TOPIC, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(name=OFFSET_MOVED_EVENT, read_queue_nums=1, write_queue_nums=1),
            TopicConfig(
                name=SCHEDULE_TOPIC,
                read_queue_nums=len(config.delay_levels),
                write_queue_nums=len(config.delay_levels),
            ),
        ]
        # TopicConfigManager: the cluster's reply topic (request/reply, docs/protocol.md §13),
        # one queue, whatever the other switches say.
        out.append(
            TopicConfig(
                name=reply_topic(config.cluster_name), read_queue_nums=1, write_queue_nums=1
            )
        )
        if config.trace_topic_enable:
            # TopicConfigManager: traceTopicEnable creates msgTraceTopicName, one queue.
            name = config.msg_trace_topic_name
            out.append(TopicConfig(name=name, read_queue_nums=1, write_queue_nums=1))
        if config.timers_enabled and config.timer_wheel_enable:
            # TopicConfigManager (5.x): created when timerWheelEnable, one queue.
            out.append(TopicConfig(name=TIMER_TOPIC, read_queue_nums=1, write_queue_nums=1))
        if config.timers_enabled:
            # TopicConfigManager (5.x): the POP revive log (docs/protocol.md §12.3); one queue here
            # (Apache: reviveQueueNum, 8), the only one the embedded broker writes.
            name = revive_topic(config.cluster_name)
            out.append(TopicConfig(name=name, read_queue_nums=1, write_queue_nums=1))
        if config.auto_create_topics:
            n = max(config.template_topic_queues, config.default_queues)
            out.append(
                TopicConfig(
                    name=CREATE_TOPIC_KEY,
                    read_queue_nums=n,
                    write_queue_nums=n,
                    perm=int(Perm.INHERIT | Perm.READ | Perm.WRITE),
                )
            )
        return out

    def _decode(self, data: dict[str, Any]) -> None:
        for name, raw in data["topicConfigTable"].items():
            if not isinstance(raw, dict) or not is_valid_name(name):
                raise ValueError(f"{self._path}: malformed topic {name!r}")
            cfg = TopicConfig(
                name=name,
                read_queue_nums=int(raw["read_queue_nums"]),
                write_queue_nums=int(raw["write_queue_nums"]),
                perm=int(raw.get("perm", _RW)),
                topic_filter_type=str(raw.get("topic_filter_type", "SINGLE_TAG")),
                topic_sys_flag=int(raw.get("topic_sys_flag", 0)),
                order=bool(raw.get("order", False)),
                attributes={str(k): str(v) for k, v in (raw.get("attributes") or {}).items()},
            )
            if name in self._system:
                continue  # rebuilt from the configuration
            self._topics[name] = cfg
            self._persisted.add(name)

    def _persist(self) -> None:
        if self._path is None:
            return
        table: dict[str, Any] = {}
        for name in sorted(self._persisted):
            raw = asdict(self._topics[name])
            del raw["name"]
            raw["attributes"] = dict(raw["attributes"])
            table[name] = raw
        write_json_atomically(self._path, {"topicConfigTable": table})

    def get(self, name: str) -> TopicConfig | None:
        """The topic's configuration, or ``None``."""
        return self._topics.get(name)

    def is_system(self, name: str) -> bool:
        """Whether ``name`` is a topic the broker creates itself (and rebuilds at start)."""
        return name in self._system

    def __contains__(self, name: object) -> bool:
        return name in self._topics

    def names(self) -> list[str]:
        """Every topic name, sorted."""
        return sorted(self._topics)

    def all(self) -> list[TopicConfig]:
        """Every topic, sorted by name."""
        return [self._topics[n] for n in sorted(self._topics)]

    def put(self, cfg: TopicConfig, *, auto: str | None = None) -> TopicConfig:
        """Create or replace a topic and persist it before returning.

        Raises:
            ValueError: the name is invalid or a system topic.
            OSError: the table cannot be written.
        """
        if not is_valid_name(cfg.name):
            raise ValueError(f"invalid topic name {cfg.name!r}")
        if cfg.name in self._system:
            raise ValueError(f"{cfg.name!r} is a system topic")
        if cfg.read_queue_nums < 1 or cfg.write_queue_nums < 1:
            raise ValueError("a topic needs at least one queue")
        old = self._topics.get(cfg.name)
        self._topics[cfg.name] = cfg
        self._persisted.add(cfg.name)
        try:
            self._persist()
        except BaseException:
            if old is None:
                del self._topics[cfg.name]
                self._persisted.discard(cfg.name)
            else:
                self._topics[cfg.name] = old
            raise
        if auto is None:
            log.info("created topic %s with %d queues", cfg.name, cfg.queue_count)
        else:
            self._log_auto_created(cfg, auto)
        return cfg

    def _log_auto_created(self, cfg: TopicConfig, how: str) -> None:
        # A Java broker logs an auto-creation only in its own store log; a typo'd topic then
        # takes messages its consumers never see. One line per topic (it is created once),
        # a warning when an existing topic has a close name.
        others = [n for n in self._topics if n not in self._system and not _internal(n)]
        hint = closest_name(cfg.name, others, n=3)
        log.log(
            logging.WARNING if hint else logging.INFO,
            "auto-created topic %s with %d queues on %s (auto_create_topics)%s",
            cfg.name,
            cfg.queue_count,
            how,
            hint,
        )

    def delete(self, name: str) -> bool:
        """Remove a topic created at run time and persist the table (``deleteTopicConfig``);
        returns whether it existed.

        Raises:
            ValueError: a system topic.
            OSError: the table cannot be written.
        """
        if name in self._system:
            raise ValueError(f"{name!r} is a system topic")
        old = self._topics.pop(name, None)
        if old is None:
            return False
        was_persisted = name in self._persisted
        self._persisted.discard(name)
        try:
            self._persist()
        except BaseException:
            self._topics[name] = old
            if was_persisted:
                self._persisted.add(name)
            raise
        log.info("deleted topic %s", name)
        return True

    def ensure(self, name: str, queues: int, *, perm: int = _RW) -> TopicConfig:
        """Return the topic, creating it with ``queues`` queues if absent
        (``createTopicInSendMessageBackMethod`` for retry and DLQ topics).

        Raises:
            ValueError: the name is invalid.
            OSError: the table cannot be written.
        """
        cfg = self._topics.get(name)
        if cfg is not None:
            return cfg
        return self.put(
            TopicConfig(name=name, read_queue_nums=queues, write_queue_nums=queues, perm=perm)
        )

    def create_on_send(
        self, name: str, default_topic: str, default_queue_nums: int
    ) -> TopicConfig | None:
        """``createTopicInSendMessageMethod``: create ``name`` from its template, or ``None``.

        The template must exist and carry PERM_INHERIT; the new topic gets
        ``min(default_queue_nums, template.writeQueueNums)`` queues and the template's perm
        without INHERIT. A ``%RETRY%`` topic with no usable template gets 1 queue, perm 6.

        Raises:
            ValueError: the name is invalid.
            OSError: the table cannot be written.
        """
        existing = self._topics.get(name)
        if existing is not None:
            return existing
        template = self._topics.get(default_topic)
        if (
            template is not None
            and template.perm & Perm.INHERIT
            and self._config.auto_create_topics
        ):
            n = max(1, min(default_queue_nums, template.write_queue_nums))
            return self.put(
                TopicConfig(
                    name=name,
                    read_queue_nums=n,
                    write_queue_nums=n,
                    perm=template.perm & ~int(Perm.INHERIT),
                    topic_filter_type=template.topic_filter_type,
                ),
                auto=None if _internal(name) else "its first send",
            )
        if name.startswith(RETRY_PREFIX):
            return self.ensure(name, self._config.retry_queue_nums)
        return None

    def create_on_lookup(self, name: str) -> TopicConfig | None:
        """The topic a route lookup answers for, or ``None`` (TOPIC_NOT_EXIST).

        The embedded name server's opt-in shortcut (docs/protocol.md §7.5): with
        ``auto_create_topics`` and ``create_topics_on_lookup`` on, an unknown valid topic is
        created with ``default_queues`` queues (1 for retry and DLQ topics) when a client asks
        for its route. With either off (``create_topics_on_lookup`` is off by default), an
        unknown topic stays unknown, as with a Java name server (``pickupTopicRouteData``
        only reads).

        Raises:
            OSError: the table cannot be written.
        """
        existing = self._topics.get(name)
        if existing is not None:
            return existing
        config = self._config
        if not (config.auto_create_topics and config.create_topics_on_lookup):
            return None
        if not is_valid_name(name):
            return None
        if name.startswith((RETRY_PREFIX, DLQ_PREFIX)):
            n = self._config.retry_queue_nums if name.startswith(RETRY_PREFIX) else 1
            return self.ensure(name, n)
        n = self._config.default_queues
        return self.put(
            TopicConfig(name=name, read_queue_nums=n, write_queue_nums=n),
            auto="a route lookup (create_topics_on_lookup)",
        )

    def with_perm(self, name: str, perm: int) -> TopicConfig:
        """Change a topic's permission bits (admin ``wipeWritePerm``-style changes, tests).

        Raises:
            KeyError: no such topic.
            ValueError: a system topic.
        """
        return self.put(replace(self._topics[name], perm=perm))
