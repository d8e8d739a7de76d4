"""Settings of the embedded broker: every timing constant and limit in one frozen value.

Defaults follow a 4.9.8 broker (docs/protocol.md §6.11), plus the timer-message settings of a
5.3.3 one (§12.4); tests shorten the timers (delay levels, lock lease, channel expiry) rather
than sleeping through the real ones.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from aiorocket._names import is_valid_name
from aiorocket._protocol.codes import (
    VERSION_V5_0_0_SNAPSHOT,
    VERSION_V5_3_2,
    VERSION_V5_4_0,
    VERSION_V5_5_0,
)
from aiorocket.errors import ConfigurationError
from aiorocket.tls import TLS_MODES, TlsMode

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "BrokerConfig",
    "parse_delay_levels",
]


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_LEVEL = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


def parse_delay_levels(text: str) -> tuple[float, ...]:
    """Parse a ``messageDelayLevel`` string such as ``"1s 5s 10s 30s 1m 2h"`` into seconds.

    Units are ``ms``, ``s``, ``m``, ``h`` and ``d`` (Java's ``ScheduleMessageService`` knows
    ``s m h d``; ``ms`` is an addition so tests can use sub-second levels).

    Raises:
        ConfigurationError: a level is not a positive number followed by a unit, or the
            string has no level at all.
    """
    levels: list[float] = []
    for item in text.split():
        m = _LEVEL.fullmatch(item)
        if m is None:
            raise ConfigurationError(f"invalid delay level {item!r}: expected e.g. 10s, 2m, 1h")
        levels.append(float(m.group(1)) * _UNITS[m.group(2)])
    if not levels:
        raise ConfigurationError("the delay level table is empty")
    return tuple(levels)


DEFAULT_DELAY_LEVELS: tuple[float, ...] = parse_delay_levels(
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
)
"""``MessageStoreConfig.messageDelayLevel`` of 4.9.8, in seconds (docs/protocol.md §6.6)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """Configuration of [`EmbeddedBroker`][aiorocket.embedded.EmbeddedBroker].

    Durations are in seconds, sizes in bytes. The object validates itself on creation.

    Raises:
        ConfigurationError: a value is out of range (see each field).
    """

    #: ``brokerName``: appears in routes, lock bodies and ``bname`` headers.
    broker_name: str = "broker-a"
    #: ``brokerClusterName``: routes, cluster info and the ``CLUSTER`` message property.
    cluster_name: str = "DefaultCluster"
    #: The host put in routes and in stored records; ``None``: the bound IPv4 address, or
    #: 127.0.0.1 when bound to all interfaces and no other address can be found.
    advertised_host: str | None = None
    #: The port put in routes and in stored records; ``None``: the bound port. Set it when
    #: clients must reach the broker through something in between (a NAT, a port forward,
    #: [`aiorocket.testing.ChaosProxy`][aiorocket.testing.ChaosProxy]): the name server answers
    #: routes with it.
    advertised_port: int | None = None

    #: ``flushDiskType``: "async" acknowledges sends at once and flushes every
    #: ``flush_interval``; "sync" acknowledges a send only after fsync.
    flush: Literal["async", "sync"] = "async"
    #: async flush period (``flushIntervalCommitLog``, 500 ms): at most this window of
    #: acknowledged messages can be lost to a power failure (never to a killed process).
    flush_interval: float = 0.5
    #: ``syncFlushTimeout``: after this a sync send is answered FLUSH_DISK_TIMEOUT (10).
    sync_flush_timeout: float = 5.0
    #: stored messages older than this are deleted (``fileReservedTime``, 72 h).
    retention_hours: float = 72.0
    #: commit-log segment size; retention deletes whole segments. A record must fit in one,
    #: so keep it above ``max_message_size`` unless small segments are the point (tests).
    segment_size: int = 256 * 1024 * 1024

    #: queue count of topics the broker creates on demand (route lookup, heartbeat-less send).
    default_queues: int = 4
    #: ``autoCreateTopicEnable``: create unknown topics on send (from ``TBW102``), and on route
    #: lookup when ``create_topics_on_lookup`` is on too.
    auto_create_topics: bool = True
    #: An opt-in shortcut of the embedded name server (docs/protocol.md §7.5), not Java's: with
    #: ``auto_create_topics`` too, a route lookup of an unknown valid topic creates it, so any
    #: client that starts before the topic exists finds it at once. Its price: every lookup
    #: creates, an operator's too (``aiorocket admin route X``, ``admin lag G`` creating
    #: ``%RETRY%G``). Off (the default): lookups of unknown topics answer TOPIC_NOT_EXIST (17)
    #: and create nothing, as a 4.9 name server does; aiorocket consumers that started first
    #: look the topic up again soon (``ConsumerSettings.missing_route_retry``).
    create_topics_on_lookup: bool = False
    #: queue count of ``TBW102`` (``defaultTopicQueueNums``, 8); at least ``default_queues``.
    template_topic_queues: int = 8
    #: ``traceTopicEnable``: create the message trace topic at start (one queue), so clients
    #: tracing with the default topic and ``mqadmin queryMsgTraceById`` find it. Java's
    #: default is false; an idle one-queue topic costs nothing here.
    trace_topic_enable: bool = True
    #: ``msgTraceTopicName``.
    msg_trace_topic_name: str = "RMQ_SYS_TRACE_TOPIC"

    #: ``maxMessageSize``: larger bodies (or batch bodies) are refused with code 13.
    max_message_size: int = 4 * 1024 * 1024
    #: messages served per pull at most (``maxTransferCountOnMessageInMemory``, 32).
    max_pull_messages: int = 32
    #: bytes served per pull at most (``maxTransferBytesOnMessageInMemory``, 256 KiB); a pull
    #: always gets at least one message.
    max_pull_bytes: int = 256 * 1024
    #: cap on the hold of a suspended pull; clients time out at 30 s (docs/protocol.md §6.4).
    long_poll_max_hold: float = 25.0

    #: POP consumption (docs/protocol.md §12.3). ``popFromRetryProbability`` (20): the percentage
    #: of POPs that read the group's POP retry topic before the topic itself; the others read it
    #: after, when the topic did not fill the batch.
    pop_from_retry_probability: int = 20
    #: ``popFromRetryProbabilityForPriority`` (0): the same for a POP of a ``PRIORITY`` topic
    #: (5.4+; docs/protocol.md §12.6).
    pop_from_retry_probability_for_priority: int = 0
    #: ``priorityOrderAsc``: a higher priority is a higher number (queue id); False reverses it.
    priority_order_asc: bool = True
    #: ``recallMessageEnable`` (off, as in Apache): whether RECALL_MESSAGE may cancel a pending
    #: timer message (5.3.2+; docs/protocol.md §12.7).
    recall_message_enable: bool = False
    #: ``reviveInterval`` (1 s): the revive task looks for due POP checkpoints at least this
    #: often (it also wakes when one is due sooner).
    pop_revive_interval: float = 1.0
    #: ``maxPopPollingSize``: held POP (and, apart, NOTIFICATION) requests at most; beyond it a
    #: POP is answered POLLING_FULL (209).
    pop_max_polling: int = 100_000
    #: ``popPollingSize`` (1024): held requests per topic, group and queue at most.
    pop_max_polling_per_queue: int = 1024
    #: ``popResponseReturnActualRetryTopic``: off (Apache's default), a message popped from a
    #: POP retry topic is re-encoded with the topic asked for and its ``POP_CK`` property.
    pop_response_return_actual_retry_topic: bool = False
    #: ``defaultMessageRequestMode``: how a group reads a topic it set no mode for
    #: (QUERY_ASSIGNMENT); retry topics are always read by PULL.
    default_message_request_mode: Literal["PULL", "POP"] = "PULL"
    #: ``defaultPopShareQueueNum`` (-1): in POP mode without a set mode, <= 0 gives every client
    #: every queue.
    default_pop_share_queue_num: int = -1

    #: Lite topics (docs/protocol.md §12.8). ``liteSubscriptionCheckTimeoutMills`` (3 min): a
    #: client whose lite subscriptions did not change for this long is forgotten (clients
    #: repeat theirs every 30 s).
    lite_subscription_timeout: float = 180.0
    #: ``liteSubscriptionCheckInterval`` (2 min): how often forgotten clients are looked for.
    lite_subscription_check_interval: float = 120.0
    #: ``maxLiteSubscriptionCount``: (client, lite topic) subscriptions at most; beyond it a
    #: subscription is refused with code 2018.
    max_lite_subscriptions: int = 100_000
    #: ``liteTtlCheckInterval`` (2 min): how often idle lite topics are looked for.
    lite_expiry_check_interval: float = 120.0
    #: ``minLiteTTl`` (15 min): no lite topic expires sooner after its last message, nor in this
    #: long after the broker starts.
    min_lite_ttl: float = 900.0
    #: seconds in one minute of a parent topic's ``lite.topic.expiration`` attribute (60; tests
    #: shrink it to let lite topics expire quickly).
    lite_expiration_minute: float = 60.0

    #: delay of each level, level 1 first (``messageDelayLevel``); its length is the number of
    #: queues of ``SCHEDULE_TOPIC_XXXX``.
    delay_levels: tuple[float, ...] = field(default=DEFAULT_DELAY_LEVELS)
    #: ``timerWheelEnable``: serve timer messages (``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` /
    #: ``TIMER_DELAY_MS``, docs/protocol.md §12.4). Off, such a send is refused with code 1, as
    #: a 5.x broker refuses it. Only meaningful with ``remoting_version`` >= 412.
    timer_wheel_enable: bool = True
    #: ``timerMaxDelaySec`` (3 days): a timer message due later than this is refused (13).
    timer_max_delay: float = 3 * 86400.0
    #: ``timerPrecisionMs`` (Apache: 1000, at least 100): due times are rounded up to a multiple
    #: of it. The embedded broker delivers at the millisecond by default.
    timer_precision_ms: int = 1
    #: ``timerRollWindowSlot`` x precision (2 days): a timer parked longer than this is parked
    #: again (``TIMER_ROLL_TIMES`` + 1), so retention never removes a pending one.
    timer_roll_window: float = 2 * 86400.0
    #: The ``MQVersion`` ordinal stamped on every response (docs/protocol.md §0.3). Clients read a
    #: broker's abilities off it: aiorocket sends timer messages only to brokers >= 412
    #: (V5_0_0_SNAPSHOT). Below 412 the broker behaves as 4.9.8 does: timer properties are
    #: plain properties and such a message is delivered at once. The default is 5.5.0's (513):
    #: clients of every version read it (a 4.x client ignores it).
    remoting_version: int = VERSION_V5_5_0

    #: ``retryMaxTimes`` of a subscription group (16).
    max_reconsume_times: int = 16
    #: ``retryQueueNums`` of a subscription group (1).
    retry_queue_nums: int = 1

    #: ``rocketmq.broker.rebalance.lockMaxLiveTime``: a queue lock expires after this (60 s).
    lock_lease: float = 60.0
    #: a client channel without a heartbeat for this long is dropped (``channelExpiredTimeout``).
    channel_expiry: float = 120.0
    #: how often expired channels are looked for (``ClientHousekeepingService``, 10 s).
    channel_scan_interval: float = 10.0
    #: ``notifyConsumerIdsChangedEnable``.
    notify_consumer_ids_changed: bool = True
    #: ``enablePropertyFilter``: serve SQL92 subscriptions (off by default, as in Java, where
    #: consumers subscribing by SQL92 are then refused).
    enable_property_filter: bool = False
    #: QUERY_CONSUMER_OFFSET for a group with no stored offset: True answers offset 0 while the
    #: queue still starts at offset 0, as a young 4.9.8 broker does; False always answers 22.
    #: Likewise a group's first POP with ``initMode`` MAX starts at 0 on such a queue (5.x
    #: ``initPopOffsetByCheckMsgInMem``); False: at the queue's last message.
    new_group_offset_zero: bool = True
    #: committed offsets and delay progress are written to disk at least this often. With
    #: sync flush an UPDATE_CONSUMER_OFFSET is on disk before it is answered; offsets
    #: piggy-backed on pulls wait for this timer.
    offsets_flush_interval: float = 1.0

    #: ``transactionCheckInterval`` (60 s): how often pending half messages are checked back.
    transaction_check_interval: float = 60.0
    #: ``transactionTimeOut`` (6 s): a half message younger than this is not checked yet (its
    #: ``CHECK_IMMUNITY_TIME_IN_SECONDS`` property, when set, replaces it).
    transaction_timeout: float = 6.0
    #: ``transactionCheckMax`` (15): after this many check-backs a half message is discarded
    #: into ``TRANS_CHECK_MAX_TIME_TOPIC`` (logged).
    transaction_check_max: int = 15

    #: ``storeReplyMessageEnable`` (true): a reply (SEND_REPLY_MESSAGE) is also stored in
    #: ``<cluster>_REPLY_TOPIC`` besides being pushed to its requester (docs/protocol.md §13).
    store_reply_messages: bool = True
    #: how long a request the broker sends a client waits for its answer (a pushed reply, a
    #: forwarded running-info request; ``Broker2Client.callClient``: 10 s).
    call_client_timeout: float = 10.0

    #: ACL (docs/protocol.md §8): when both are set every broker request must be signed with them.
    access_key: str | None = None
    secret_key: str | None = field(default=None, repr=False)

    #: TLS (docs/protocol.md has no in-band upgrade; Java ``tls.server.certPath`` and
    #: ``tls.server.keyPath``): the PEM certificate chain and private key of the port, which
    #: serves the name server and the broker alike.
    tls_cert: str | Path | None = None
    tls_key: str | Path | None = None
    #: ``tls.server.mode``: "enforcing" (TLS only), "permissive" (TLS and plain on the one
    #: port) or "disabled". ``None``: "enforcing" when ``tls_cert`` is set, else "disabled"
    #: (Java defaults to permissive; a broker given a certificate here refuses plain clients
    #: unless told otherwise).
    tls_mode: TlsMode | None = None
    #: when set, TLS clients must present a certificate issued by one of these CAs (PEM; Java
    #: ``tls.server.need.client.auth=require`` with ``tls.server.trustCertPath``).
    tls_client_ca: str | Path | None = None
    #: seconds a new connection may take to send its first byte and finish the TLS handshake.
    tls_handshake_timeout: float = 10.0

    def __post_init__(self) -> None:
        self._check_addresses()
        self._check_limits()
        self._check_security()

    def _check_addresses(self) -> None:
        for name in (self.broker_name, self.cluster_name, self.msg_trace_topic_name):
            # Java creates topics named after both, so they follow the topic-name rule.
            if not is_valid_name(name):
                raise ConfigurationError(f"invalid broker, cluster or trace topic name {name!r}")
        if self.advertised_host is not None:
            try:
                ipaddress.IPv4Address(self.advertised_host)
            except ValueError:
                raise ConfigurationError(
                    f"advertised_host must be an IPv4 address, not {self.advertised_host!r}"
                ) from None
        if self.advertised_port is not None and not 0 < self.advertised_port <= 65535:
            raise ConfigurationError(f"advertised_port {self.advertised_port} is outside 1..65535")

    def _check_limits(self) -> None:
        if self.flush not in ("async", "sync"):
            raise ConfigurationError(f"flush must be 'async' or 'sync', not {self.flush!r}")
        if not 0 < self.flush_interval <= 0.5:
            raise ConfigurationError("flush_interval must be in (0, 0.5] seconds")
        if self.segment_size < 4096:
            raise ConfigurationError("segment_size must be at least 4096 bytes")
        if not 0 < self.default_queues <= 1024:
            raise ConfigurationError("default_queues must be in 1..1024")
        if self.template_topic_queues < 1 or self.template_topic_queues > 1024:
            raise ConfigurationError("template_topic_queues must be in 1..1024")
        if not 0 < self.max_message_size <= 15 * 1024 * 1024:
            raise ConfigurationError("max_message_size must be in 1 B .. 15 MiB (frame cap)")
        if self.max_pull_messages < 32:
            raise ConfigurationError("max_pull_messages must be at least 32")
        if self.max_pull_bytes < 1:
            raise ConfigurationError("max_pull_bytes must be positive")
        if not self.delay_levels or any(d <= 0 for d in self.delay_levels):
            raise ConfigurationError("delay_levels must be positive and non-empty")
        if len(self.delay_levels) > 64:
            raise ConfigurationError("at most 64 delay levels")
        for name in (
            "sync_flush_timeout",
            "retention_hours",
            "long_poll_max_hold",
            "lock_lease",
            "channel_expiry",
            "channel_scan_interval",
            "offsets_flush_interval",
            "transaction_check_interval",
            "transaction_timeout",
            "call_client_timeout",
            "timer_max_delay",
            "timer_roll_window",
            "lite_subscription_timeout",
            "lite_subscription_check_interval",
            "lite_expiry_check_interval",
            "lite_expiration_minute",
        ):
            if getattr(self, name) <= 0:
                raise ConfigurationError(f"{name} must be positive")
        if not 1 <= self.timer_precision_ms <= 1000:
            raise ConfigurationError("timer_precision_ms must be in 1..1000")
        if not 0 <= self.remoting_version <= 32767:
            raise ConfigurationError("remoting_version must fit a binary header (0..32767)")
        if self.max_reconsume_times < 0 or self.retry_queue_nums < 1:
            raise ConfigurationError("max_reconsume_times >= 0 and retry_queue_nums >= 1")
        if not 0 <= self.pop_from_retry_probability_for_priority <= 100:
            raise ConfigurationError("pop_from_retry_probability_for_priority must be 0..100")
        if not 0 <= self.pop_from_retry_probability <= 100 or self.pop_revive_interval <= 0:
            raise ConfigurationError(
                "pop_from_retry_probability in 0..100, pop_revive_interval > 0"
            )
        if self.pop_max_polling < 0 or self.pop_max_polling_per_queue < 0:
            raise ConfigurationError("pop_max_polling and pop_max_polling_per_queue must be >= 0")
        if self.default_message_request_mode not in ("PULL", "POP"):
            raise ConfigurationError("default_message_request_mode must be 'PULL' or 'POP'")
        if self.min_lite_ttl < 0 or self.max_lite_subscriptions < 0:
            raise ConfigurationError("min_lite_ttl and max_lite_subscriptions must be >= 0")
        if self.transaction_check_max < 1:
            raise ConfigurationError("transaction_check_max must be at least 1")

    def _check_security(self) -> None:
        if (self.access_key is None) != (self.secret_key is None):
            raise ConfigurationError("ACL needs both access_key and secret_key")
        if self.access_key == "" or self.secret_key == "":
            raise ConfigurationError("ACL credentials must not be empty")
        if self.tls_mode is not None and self.tls_mode not in TLS_MODES:
            raise ConfigurationError(f"tls_mode must be one of {TLS_MODES}, not {self.tls_mode!r}")
        if self.tls_key is not None and self.tls_cert is None:
            raise ConfigurationError("tls_key needs tls_cert")
        if self.effective_tls_mode != "disabled" and self.tls_cert is None:
            raise ConfigurationError(f"tls_mode {self.tls_mode!r} needs tls_cert (and tls_key)")
        if self.tls_handshake_timeout <= 0:
            raise ConfigurationError("tls_handshake_timeout must be positive")

    @property
    def effective_tls_mode(self) -> TlsMode:
        """``tls_mode`` with its default applied."""
        if self.tls_mode is not None:
            return self.tls_mode
        return "enforcing" if self.tls_cert is not None else "disabled"

    @property
    def timers_enabled(self) -> bool:
        """Whether timer properties are interpreted at all: the broker answers as a 5.x one
        (``remoting_version`` >= 412). A 4.9.8 broker stores them as plain properties."""
        return self.remoting_version >= VERSION_V5_0_0_SNAPSHOT

    @property
    def priorities_enabled(self) -> bool:
        """Whether the broker honours message priorities (``remoting_version`` >= 493,
        V5_4_0)."""
        return self.remoting_version >= VERSION_V5_4_0

    @property
    def recall_enabled(self) -> bool:
        """Whether the broker serves RECALL_MESSAGE (``remoting_version`` >= 477, V5_3_2)."""
        return self.remoting_version >= VERSION_V5_3_2

    @property
    def acl_enabled(self) -> bool:
        """Whether requests must carry a valid signature."""
        return self.access_key is not None
