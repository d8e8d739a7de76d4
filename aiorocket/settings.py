"""Settings of clients, producers and consumers: validated once, frozen, documented.

Defaults follow the Java 4.9 client (``ClientConfig``, ``DefaultMQProducer``) under Python names.
Every timing constant is a setting so tests can shrink it.
"""

from __future__ import annotations

import difflib
import ssl
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from aiorocket._names import CREATE_TOPIC_KEY
from aiorocket.errors import ConfigurationError
from aiorocket.models import MessageQueue

__all__ = [
    "ALLOCATION_STRATEGIES",
    "ClientSettings",
    "ConsumerSettings",
    "ProducerSettings",
    "TransactionProducerSettings",
    "build_settings",
    "closest_name",
    "describe_errors",
]


class ClientSettings(BaseModel):
    """What every client (producer or consumer) needs.

    Attributes:
        namesrv: name server addresses (``"host:port"``); a ``;``- or ``,``-separated string
            is accepted too.
        instance_name: the instance part of the client id (``<ip>@<instance>``); by default
            ``<pid>#<unique number>`` so two clients in one process never share an id.
        namespace: prefix applied to topics and groups (``<namespace>%<name>``), as Java's
            ``ClientConfig.namespace`` does.
        access_key, secret_key: ACL 1.0 credentials; when both are set every request is signed
            (HMAC-SHA1, docs/protocol.md §8).
        request_timeout: default RPC timeout in seconds (Java: 3 s).
        connect_timeout: TCP connect timeout in seconds.
        route_refresh_interval: how often routes are polled from the name server (Java: 30 s).
        route_retry_interval: the least time between two on-demand route fetches of one topic:
            a request that finds no master for a broker name, or cannot reach the cached
            address, asks the name server again at once (coalesced per topic, at most once per
            this interval), so a new master is used about a second after the name server knows
            it, not at the next poll.
        heartbeat_interval: how often heartbeats go to brokers (Java: 30 s).
        max_frame_size: the largest frame accepted from a peer (16 MiB).
        tls: connect to name servers and brokers over TLS. ``True`` verifies their
            certificates against the system's CAs (plus ``tls_ca``) and checks that each one
            names the address connected to; an ``ssl.SSLContext`` is used as it is (see
            [`aiorocket.tls.client_context`][aiorocket.tls.client_context]). Java clients verify
            nothing unless ``tls.client.authServer=true``; aiorocket verifies unless told not to.
        tls_ca: a PEM file of CA certificates to trust besides the system's (a private CA);
            needs ``tls=True``.
        tls_verify: ``False`` skips every certificate check (Java's default; encrypted but
            not authenticated, for test clusters only); needs ``tls=True``.
        serialize_type: the header dialect of the requests this client sends: ``"json"``
            (the default, what every RocketMQ peer reads) or ``"rocketmq"``, the binary
            header (docs/protocol.md §1.5) that a Java client sends when started with
            ``-Drocketmq.serialize.type=ROCKETMQ``. Java brokers answer a request in its own
            dialect, so responses come back binary too, and the broker parses less per pull.
            Requests a broker sends to the client are answered in their dialect, as Java's
            ``NettyRemotingAbstract`` does. The binary header carries codes and versions as
            int16 and drops empty ext values (Java reads them as null).
        trace: record message traces as Java's ``enableMsgTrace`` does (producers: a Pub
            record per send, EndTransaction for transactions; push consumers: SubBefore and
            SubAfter per handler call; pull consumers: both at once per poll, as Java's lite
            pull consumer; ``SimpleConsumer`` traces nothing), stored in
            the trace topic where ``mqadmin queryMsgTraceById`` and ``aiorocket admin trace``
            find them. Tracing never blocks or fails a send or a handler: records that do not
            fit its bounded buffer are dropped (counted, logged).
        trace_topic: the trace topic (Java ``customizedTraceTopic``); ``None``:
            ``RMQ_SYS_TRACE_TOPIC``.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    namesrv: tuple[str, ...] = Field(min_length=1)
    instance_name: str | None = None
    namespace: str | None = None
    access_key: str | None = None
    secret_key: str | None = Field(default=None, repr=False)
    request_timeout: float = Field(default=3.0, gt=0)
    connect_timeout: float = Field(default=3.0, gt=0)
    route_refresh_interval: float = Field(default=30.0, gt=0)
    route_retry_interval: float = Field(default=0.2, gt=0)
    heartbeat_interval: float = Field(default=30.0, gt=0)
    max_frame_size: int = Field(default=16 * 1024 * 1024, ge=1024)
    tls: bool | ssl.SSLContext = False
    tls_ca: Path | None = None
    tls_verify: bool = True
    serialize_type: Literal["json", "rocketmq"] = "json"
    trace: bool = False
    trace_topic: str | None = None

    @model_validator(mode="after")
    def _check_tls(self) -> ClientSettings:
        if isinstance(self.tls, ssl.SSLContext):
            if self.tls_ca is not None or not self.tls_verify:
                raise ValueError("tls_ca and tls_verify apply to tls=True, not to an SSLContext")
        elif not self.tls and (self.tls_ca is not None or not self.tls_verify):
            raise ValueError("tls_ca and tls_verify need tls=True")
        return self

    @field_validator("namesrv", mode="before")
    @classmethod
    def _split_namesrv(cls, value: Any) -> Any:
        if isinstance(value, str):
            parts = [p.strip() for p in value.replace(",", ";").split(";")]
            return tuple(p for p in parts if p)
        return value

    @field_validator("namesrv")
    @classmethod
    def _check_addresses(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for addr in value:
            host, sep, port = addr.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"name server address {addr!r} is not host:port")
        return value


class ProducerSettings(ClientSettings):
    """Settings of a [`Producer`][aiorocket.Producer] (Java ``DefaultMQProducer`` defaults).

    Attributes:
        group: the producer group (used for heartbeats and transaction checks).
        send_timeout: seconds a whole send may take, retries included (Java
            ``sendMsgTimeout``: each retry gets what is left of it).
        retries: further attempts after a failed synchronous send (Java
            ``retryTimesWhenSendFailed`` = 2), preferring another broker.
        compress_threshold: bodies of at least this many bytes are zlib-compressed (4096).
        compress_level: zlib level (Java: 5).
        max_message_size: bodies (or batches) above this are refused before sending (4 MiB).
        default_topic_queue_nums: queues of a topic auto-created on first send (Java: 4).
        create_topic_key: the template topic used to auto-create topics (``TBW102``).
    """

    group: str = "DEFAULT_PRODUCER"
    send_timeout: float = Field(default=3.0, gt=0)
    retries: int = Field(default=2, ge=0, le=16)
    compress_threshold: int = Field(default=4096, ge=0)
    compress_level: int = Field(default=5, ge=0, le=9)
    max_message_size: int = Field(default=4 * 1024 * 1024, gt=0)
    default_topic_queue_nums: int = Field(default=4, gt=0)
    create_topic_key: str = CREATE_TOPIC_KEY


class TransactionProducerSettings(ProducerSettings):
    """Settings of a [`TransactionProducer`][aiorocket.TransactionProducer]: those of a producer
    plus the check-back limits (Java ``TransactionMQProducer``: one check thread, 2000 queued).

    Attributes:
        check_concurrency: check-backs (``check`` calls) run at the same time at most (1).
        check_backlog: check-backs waiting or running at most; more are dropped, logged (the
            broker asks again at its next check).
    """

    check_concurrency: int = Field(default=1, ge=1, le=1024)
    check_backlog: int = Field(default=2000, ge=1)


ALLOCATION_STRATEGIES: tuple[str, ...] = ("averagely", "by_circle", "consistent_hash", "by_config")
"""Names accepted by `ConsumerSettings.allocation` (Java ``AllocateMessageQueueStrategy``)."""


class ConsumerSettings(ClientSettings):
    """Settings of a [`PushConsumer`][aiorocket.PushConsumer] (Java ``DefaultMQPushConsumer``
    defaults).

    Durations are in seconds, sizes in MiB where the name says so.

    Attributes:
        group: the consumer group (required).
        message_model: ``"clustering"`` (each message to one member of the group; offsets kept
            by the broker) or ``"broadcasting"`` (every member gets every message; offsets kept
            in a local file).
        consume_from: where a queue with no stored offset starts: ``"last"`` (the queue's end,
            Java CONSUME_FROM_LAST_OFFSET), ``"first"`` (offset 0) or a ``datetime`` (the
            message stored closest to it, CONSUME_FROM_TIMESTAMP). docs/protocol.md §6.5: a young
            broker answers offset 0 for a new group, so "last" may still start at 0.
        orderly: consume each queue in order, one handler call at a time per queue (Java
            ``MessageListenerOrderly``); in clustering mode a queue is consumed only while this
            member holds the broker's lock on it (see the ``lock_*`` settings).
        order_by: what an orderly consumer keeps in order: ``"queue"`` (the default, Java's
            behaviour: the whole queue, one call at a time), ``"sharding_key"`` (each key of
            the ``__SHARDINGKEY`` property, which the producer sets from ``sharding_key``:
            the messages of one queue with the same key one call at a time in queue order,
            different keys concurrently up to ``concurrency``) or a callable ``msg -> str |
            None`` giving the key. Messages without a key (``None`` or ``""``) keep queue
            order among themselves and run concurrently with keyed ones, as one more key. A
            call holds messages of one key; a failure delays that key's later messages only;
            ``ctx.auto_commit = False`` is refused. Needs ``orderly=True``.
        allocation: how queues are shared in a group: ``"averagely"`` (default), ``"by_circle"``,
            ``"consistent_hash"``, ``"by_config"`` (takes
            `allocation_queues`), or a
            callable ``(queues, consumer_ids, my_id) -> queues`` (every member must use the same).
        allocation_queues: the fixed queues of the ``"by_config"`` strategy.
        consistent_hash_virtual_nodes: virtual nodes per consumer of ``"consistent_hash"`` (10).
        pull_batch_size: messages asked for per pull (``pullBatchSize``, 32).
        consume_batch_size: messages per handler call (``consumeMessageBatchMaxSize``, 1).
        concurrency: handler calls running at once (the bound of Java's consume thread pool;
            64 suits ``async def`` handlers).
        pull_threshold_for_queue: a queue stops pulling while it caches more messages (1000).
        pull_threshold_size_for_queue: ... or more MiB of bodies (100).
        pull_threshold_for_topic: when >= 0, a topic-wide message cap split evenly over its
            assigned queues (replaces the per-queue count; off by default, -1).
        pull_threshold_size_for_topic: the same for MiB (-1: off).
        max_span: a queue stops pulling while its cached offsets span more than this
            (``consumeConcurrentlyMaxSpan``, 2000): one stuck message cannot hold back an
            ever-growing cache.
        pull_interval: pause between a successful pull and the next one (0).
        max_reconsume_times: deliveries after the first before a message goes to
            ``%DLQ%group``; ``None`` is Java's -1: 16 for concurrent consumption, unlimited
            for orderly consumption (a suspended message is retried until it succeeds, since
            skipping it would break the order; set a limit to dead-letter it instead).
        consume_timeout: a handler call running longer than this has its messages sent back
            for a later retry (15 min, Java ``consumeTimeout``); the check runs every
            ``consume_timeout``, so a call is caught between one and two timeouts after it
            started.
        cancel_timed_out_handlers: concurrent consumption: a handler call caught running past
            ``consume_timeout`` is also cancelled (it sees ``asyncio.CancelledError``, and its
            slot of ``concurrency`` is free again). False keeps Java's behaviour for handlers
            that must not be interrupted: the call runs on, holding its slot, and its outcome
            is ignored since its messages were sent back already.
        reconsume_later_delay: a failed message that could not be sent back is consumed again
            locally after this long (5 s).
        send_back_timeout: timeout of CONSUMER_SEND_MSG_BACK (5 s).
        offset_persist_interval: how often offsets are persisted (5 s).
        rebalance_interval: how often queues are re-allocated (20 s); a broker notification
            triggers it at once.
        missing_route_retry: a subscribed topic with no route (it does not exist yet: the
            consumer started before any producer) is looked up again after this long, then
            after twice as long each time up to ``route_refresh_interval``; when it appears the
            consumer heartbeats and rebalances at once (1 s). Java waits for its next route
            poll (``pollNameServerInterval``, 30 s).
        pull_suspend_timeout: how long the broker may hold a pull with no message (15 s).
        pull_timeout: timeout of a held pull (30 s); must exceed ``pull_suspend_timeout``.
        pull_retry_max_delay: the longest pause between pull retries after errors (1 s; the
            pause grows from 0.05 s with jitter).
        offset_illegal_delay: after OFFSET_ILLEGAL a queue is reset and re-added this much later
            (10 s, as Java's PullCallback does).
        offset_out_of_range: where a queue restarts when its offset is below the oldest message
            the broker still stores (retention deleted segments under a slow or stopped
            consumer; the broker answers OFFSET_ILLEGAL): ``"first"`` (default, Java's
            behaviour) at that oldest message, skipping only what is gone; ``"last"`` at the
            queue's end, skipping the backlog too. Applied once per occurrence, logged as a
            warning with both offsets, and stored as the queue's offset; an offset beyond the
            queue's end restarts where the broker says. Never a silent rewind to 0.
        shutdown_grace: how long a shutdown waits for running handlers (10 s).
        post_subscription: send the tag expression with every pull (pull sysFlag 0x4, as the
            C++ client does) rather than relying on the subscription of the last heartbeat.
        offset_store_dir: where broadcasting consumers keep their offsets
            (``<dir>/<ip>@<instance_name or DEFAULT>/<group>/offsets.json``).
        lock_renew_interval: orderly, clustering: how often the locks of held queues are
            renewed with LOCK_BATCH_MQ (20 s, Java ``rocketmq.client.rebalance.lockInterval``).
        lock_expiry: orderly, clustering: a queue lock not renewed for this long is no longer
            trusted and its queue is neither pulled nor consumed (30 s, Java
            ``rocketmq.client.rebalance.lockMaxLiveTime``). Keep it below the broker's lease
            (60 s) so a member stops before the broker can give its queue to another one.
        max_continuous_consume_time: orderly: a queue's consume task hands control back after
            working this long and is resubmitted, so one busy queue cannot hold a
            concurrency slot forever (60 s, Java ``MAX_TIME_CONSUME_CONTINUOUSLY``). Ordering
            by key has no such slice: every call takes a slot and gives it back.
        suspend_delay: orderly: the pause after ``SUSPEND_CURRENT_QUEUE_A_MOMENT`` or
            ``ROLLBACK`` unless the handler sets ``ctx.suspend_millis`` (1 s, Java
            ``suspendCurrentQueueTimeMillis``); 0.01 .. 30 s. Ordering by key pauses only the
            failed key.
        unlock_delay: orderly, clustering: a queue taken away by rebalance is unlocked once its
            running handler call ended; when it still had pulled messages (it was still being
            consumed) the unlock waits this much longer (20 s, Java
            ``rocketmq.client.unlockDelayTimeMills``).
        consume_mode: how a push consumer reads (RocketMQ 5.x): ``"pull"`` (the default:
            queues shared by client-side rebalance, offsets committed), ``"pop"`` (the broker
            hands out messages and takes acks; no rebalance, so a group may have more members
            than queues; needs 5.x brokers or the embedded one) or ``"server"`` (ask the
            broker which queues to read and how, QUERY_ASSIGNMENT, and follow it as it changes
            with ``mqadmin setConsumeMode`` / ``aiorocket admin set-consume-mode``; as the 5.x
            Java push consumer with client rebalance off).
        invisible_duration: POP: seconds a popped message stays invisible to the rest of the
            group unless acked (60 s, Java ``popInvisibleTime``); a push consumer extends it
            while its handler runs.
        pop_retry_delays: POP: the delay before the n-th retry of a failed message, by
            attempt (Java ``popDelayLevel``: 10 s, 30 s, 1 min, 2 min, ... 2 h); the last one
            repeats.

    Raises:
        ConfigurationError: through [`build_settings`][aiorocket.settings.build_settings], for any
            invalid value.
    """

    group: str = Field(min_length=1)
    message_model: Literal["clustering", "broadcasting"] = "clustering"
    consume_from: Literal["last", "first"] | datetime = "last"
    orderly: bool = False
    order_by: Literal["queue", "sharding_key"] | Callable[..., Any] = "queue"
    allocation: str | Callable[..., Any] = "averagely"
    allocation_queues: tuple[MessageQueue, ...] = ()
    consistent_hash_virtual_nodes: int = Field(default=10, ge=1, le=1000)
    pull_batch_size: int = Field(default=32, ge=1, le=1024)
    consume_batch_size: int = Field(default=1, ge=1, le=1024)
    concurrency: int = Field(default=64, ge=1, le=10000)
    pull_threshold_for_queue: int = Field(default=1000, ge=1, le=65535)
    pull_threshold_size_for_queue: int = Field(default=100, ge=1, le=1024)
    pull_threshold_for_topic: int = Field(default=-1, ge=-1)
    pull_threshold_size_for_topic: int = Field(default=-1, ge=-1)
    max_span: int = Field(default=2000, ge=1, le=65535)
    pull_interval: float = Field(default=0.0, ge=0)
    max_reconsume_times: int | None = Field(default=None, ge=0)
    consume_timeout: float = Field(default=900.0, gt=0)
    cancel_timed_out_handlers: bool = True
    reconsume_later_delay: float = Field(default=5.0, ge=0)
    send_back_timeout: float = Field(default=5.0, gt=0)
    offset_persist_interval: float = Field(default=5.0, gt=0)
    rebalance_interval: float = Field(default=20.0, gt=0)
    missing_route_retry: float = Field(default=1.0, gt=0)
    pull_suspend_timeout: float = Field(default=15.0, gt=0)
    pull_timeout: float = Field(default=30.0, gt=0)
    pull_retry_max_delay: float = Field(default=1.0, ge=0.05)
    offset_illegal_delay: float = Field(default=10.0, ge=0)
    offset_out_of_range: Literal["first", "last"] = "first"
    shutdown_grace: float = Field(default=10.0, ge=0)
    post_subscription: bool = True
    offset_store_dir: Path = Field(default_factory=lambda: Path.home() / ".aiorocket_offsets")
    lock_renew_interval: float = Field(default=20.0, gt=0)
    lock_expiry: float = Field(default=30.0, gt=0)
    max_continuous_consume_time: float = Field(default=60.0, gt=0)
    suspend_delay: float = Field(default=1.0, ge=0.01, le=30.0)
    unlock_delay: float = Field(default=20.0, ge=0)
    consume_mode: Literal["pull", "pop", "server"] = "pull"
    invisible_duration: float = Field(default=60.0, gt=0)
    pop_retry_delays: tuple[float, ...] = (
        10,
        30,
        60,
        120,
        180,
        240,
        300,
        360,
        420,
        480,
        540,
        600,
        1200,
        1800,
        3600,
        7200,
    )

    @field_validator("allocation")
    @classmethod
    def _check_allocation(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ALLOCATION_STRATEGIES:
            raise ValueError(f"unknown allocation {value!r}; use one of {ALLOCATION_STRATEGIES}")
        return value

    @model_validator(mode="after")
    def _check_consistency(self) -> ConsumerSettings:
        if self.pull_timeout <= self.pull_suspend_timeout:
            raise ValueError("pull_timeout must exceed pull_suspend_timeout")
        if self.order_by != "queue" and not self.orderly:
            raise ValueError("order_by needs orderly=True (concurrent consumers keep no order)")
        if self.allocation == "by_config" and not self.allocation_queues:
            raise ValueError('allocation "by_config" needs allocation_queues')
        if not self.pop_retry_delays or min(self.pop_retry_delays) <= 0:
            raise ValueError("pop_retry_delays must be positive delays, at least one")
        if self.consume_mode != "pull" and self.message_model != "clustering":
            raise ValueError("consume_mode 'pop' and 'server' are clustering only")
        if self.lock_renew_interval >= self.lock_expiry:
            # Renewals must come before the trusted lifetime runs out, or every queue would
            # stop between two renewals.
            raise ValueError("lock_renew_interval must be shorter than lock_expiry")
        return self

    @property
    def effective_max_reconsume_times(self) -> int:
        """``max_reconsume_times`` with Java's default applied: 16 for concurrent consumers,
        ``2**31 - 1`` (Java ``Integer.MAX_VALUE``, in effect unlimited) for orderly ones."""
        if self.max_reconsume_times is not None:
            return self.max_reconsume_times
        return 2**31 - 1 if self.orderly else 16


_S = TypeVar("_S", bound=BaseModel)


def closest_name(name: str, choices: Iterable[str], n: int = 1) -> str:
    """`` (did you mean 'x'?)`` for the valid name closest to a misspelt one (up to ``n`` of
    them, closest first: `` (did you mean 'x' or 'y'?)``), else ``""``."""
    match = difflib.get_close_matches(name, [c for c in choices if c != name], n=n, cutoff=0.6)
    return f" (did you mean {' or '.join(map(repr, match))}?)" if match else ""


def describe_errors(exc: ValidationError, valid: Iterable[str]) -> str:
    """One line naming every problem of ``exc``; an unknown name gets the closest of
    ``valid`` as a suggestion."""
    names = list(valid)
    problems = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "settings"
        if err["type"] == "extra_forbidden":
            problems.append(f"unknown setting {where!r}{closest_name(where, names)}")
        else:
            problems.append(f"{where}: {err['msg']}")
    return "; ".join(problems)


def build_settings(cls: type[_S], values: Mapping[str, Any]) -> _S:
    """Validate ``values`` into ``cls``.

    Raises:
        ConfigurationError: a value is missing, unknown or invalid; the message names it
            (and, for an unknown name, the closest valid one).
    """
    try:
        return cls(**values)
    except ValidationError as exc:
        problems = describe_errors(exc, cls.model_fields)
        raise ConfigurationError(f"invalid {cls.__name__}: {problems}") from None
