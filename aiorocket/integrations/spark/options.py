"""The options of the ``rocketmq`` Spark source and sink, checked on the driver (the lists
are in `source` and `sink`,
and in ``docs/how-to/spark.md``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from aiorocket import SyncQueueReader
from aiorocket._names import validate_group
from aiorocket._reader import InlineReader
from aiorocket.errors import ConfigurationError
from aiorocket.integrations.spark.compat import NATIVE, flat_offsets, normalize
from aiorocket.models import validate_name
from aiorocket.settings import ProducerSettings, build_settings

__all__ = [
    "SinkOptions",
    "SourceOptions",
    "client_settings",
    "flag",
    "positive",
    "positive_int",
    "seconds",
]

#: The producer group of sinks that name none.
DEFAULT_GROUP: Final = "SPARK_ROCKETMQ_SINK"
_DEFAULT_IN_FLIGHT: Final = 256


def flag(raw: str | None, name: str, default: bool) -> bool:
    """An option that is ``true`` or ``false`` (any case); ``default`` when unset.

    Raises:
        ConfigurationError: another value.
    """
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigurationError(f"option {name} must be true or false, not {raw!r}")
    return value == "true"


def positive(raw: str | None, name: str) -> int | None:
    """A positive integer option, or ``None`` when unset.

    Raises:
        ConfigurationError: not an integer, or not positive.
    """
    return None if raw is None else positive_int(raw, name)


def positive_int(raw: str, name: str) -> int:
    """A positive integer option.

    Raises:
        ConfigurationError: not an integer, or not positive.
    """
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"option {name} must be an integer, not {raw!r}") from None
    if value <= 0:
        raise ConfigurationError(f"option {name} must be positive")
    return value


def seconds(raw: str | None, name: str, default: float) -> float:
    """A positive number of seconds; ``default`` when unset.

    Raises:
        ConfigurationError: not a number, or not positive.
    """
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigurationError(
            f"option {name} must be a number of seconds, not {raw!r}"
        ) from None
    if not value > 0:
        raise ConfigurationError(f"option {name} must be positive")
    return value


def client_settings(opts: Mapping[str, str]) -> dict[str, Any]:
    """The client settings both the source and the sink take (``namespace``, ``accessKey``,
    ``secretKey``, ``requestTimeout``, ``tls``, ``tlsCa``, ``tlsVerify``) from lower-cased
    options, as keyword arguments of a client.

    Raises:
        ConfigurationError: an invalid value.
    """
    client: dict[str, Any] = {}
    if "namespace" in opts:
        client["namespace"] = opts["namespace"]
    if "accesskey" in opts or "secretkey" in opts:
        client["access_key"] = opts.get("accesskey")
        client["secret_key"] = opts.get("secretkey")
    if "requesttimeout" in opts:
        try:
            client["request_timeout"] = float(opts["requesttimeout"])
        except ValueError:
            raise ConfigurationError("option requestTimeout must be a number") from None
    tls_ca = opts.get("tlsca", "").strip() or None
    if flag(opts.get("tls"), "tls", False) or tls_ca is not None:
        # plain values only: an ssl.SSLContext cannot be pickled to the executors
        client["tls"] = True
        client["tls_ca"] = tls_ca
        client["tls_verify"] = flag(opts.get("tlsverify"), "tlsVerify", True)
    return client


@dataclass(frozen=True)
class SourceOptions:
    """Validated options; plain values, so readers stay picklable."""

    namesrv: str
    topics: tuple[str, ...]
    tags: str
    starting: str | None
    ending: str
    max_per_trigger: int | None
    max_per_partition: int | None
    fail_on_data_loss: bool
    group: str | None
    use_arrow: bool
    client: dict[str, Any] = field(default_factory=dict)
    #: the rows' columns: ``aiorocket`` or ``rocketmq-spark`` (``compat.py``)
    schema: str = NATIVE

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate the source options (names are case-insensitive; rocketmq-spark's names
        are accepted too, see ``compat.py``).

        Raises:
            ConfigurationError: a missing or invalid option.
        """
        opts = normalize(options)
        namesrv = opts.get("namesrv", "").strip()
        if not namesrv:
            raise ConfigurationError('the rocketmq source needs option("namesrv", "host:port")')
        topics = tuple(t.strip() for t in opts.get("topic", "").split(",") if t.strip())
        if not topics:
            raise ConfigurationError('the rocketmq source needs option("topic", "name[,name]")')
        for topic in topics:
            validate_name(topic)
        starting = opts.get("startingoffsets")
        if starting is not None:
            starting = flat_offsets(starting)
            _check_spec(starting, "startingOffsets")
        ending = flat_offsets(opts.get("endingoffsets", "latest"))
        _check_spec(ending, "endingOffsets")
        if ending.strip().lower() == "earliest":
            raise ConfigurationError("endingOffsets cannot be earliest")
        client = client_settings(opts)
        group = opts.get("group", "").strip() or None
        if group is not None:
            validate_group(group, "consumer group")
        parsed = cls(
            namesrv=namesrv,
            topics=topics,
            tags=opts.get("tags", "*").strip() or "*",
            starting=starting,
            ending=ending,
            max_per_trigger=positive(opts.get("maxoffsetspertrigger"), "maxOffsetsPerTrigger"),
            max_per_partition=positive(
                opts.get("maxoffsetsperpartition"), "maxOffsetsPerPartition"
            ),
            fail_on_data_loss=flag(opts.get("failondataloss"), "failOnDataLoss", True),
            group=group,
            use_arrow=flag(opts.get("usearrow"), "useArrow", True),
            client=client,
            schema=opts["schema"],
        )
        # Settings and names are checked here, on the driver, before any task runs.
        SyncQueueReader(namesrv=namesrv, **client)
        return parsed

    def open_inline_reader(self) -> InlineReader:
        """A started reader whose loop runs in the calling thread (executors).

        Raises:
            ConfigurationError: invalid client settings.
        """
        reader = InlineReader(namesrv=self.namesrv, **self.client)
        reader.start()
        return reader

    def open_reader(self) -> SyncQueueReader:
        """A started reader for these options.

        Raises:
            ConfigurationError: invalid client settings.
        """
        reader = SyncQueueReader(namesrv=self.namesrv, **self.client)
        reader.start()
        return reader


def _check_spec(spec: str, name: str) -> None:
    s = spec.strip()
    if s.lower() in ("earliest", "latest") or s.isdigit():
        return
    if s.startswith("{"):
        try:
            parsed = json.loads(s)
        except ValueError as exc:
            raise ConfigurationError(f"{name} is not valid JSON: {exc}") from None
        ok = isinstance(parsed, dict) and all(
            isinstance(v, dict)
            and all(
                isinstance(k, str) and k.rpartition(":")[2].isdigit() and type(o) is int and o >= -2
                for k, o in v.items()
            )
            for v in parsed.values()
        )
        if not ok:
            raise ConfigurationError(
                f'{name} JSON must look like {{"topic": {{"broker-a:0": 42}}}} or '
                f'rocketmq-spark\'s {{"topic": {{"broker-a": {{"0": 42}}}}}} '
                "(queue keys broker:id or id; offsets >= 0, -2 earliest, -1 latest)"
            )
        return
    raise ConfigurationError(
        f"{name} must be earliest, latest, a timestamp in ms or JSON, not {spec!r}"
    )


@dataclass(frozen=True)
class SinkOptions:
    """Validated sink options; plain values, so writers stay picklable (the list is in
    `aiorocket.integrations.spark.sink`)."""

    namesrv: str
    topic: str | None
    group: str
    idempotent_keys: bool
    max_in_flight: int
    client: dict[str, Any] = field(default_factory=dict)
    #: ``aiorocket`` or ``rocketmq-spark`` (which columns are read, whether the ``topic``
    #: option wins over the ``topic`` column)
    schema: str = NATIVE
    exactly_once: bool = False
    #: the decision record's directory (``transactionLog``), when given
    transaction_log: str | None = None
    #: the streaming query's ``checkpointLocation``, when Spark passed it
    checkpoint: str | None = None
    transaction_timeout: float = 120.0
    commit_timeout: float = 300.0
    coordinator_idle: float = 600.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        """Validate the sink options (case-insensitive names; rocketmq-spark's accepted).

        Raises:
            ConfigurationError: a missing or invalid option.
        """
        opts = normalize(options)
        namesrv = opts.get("namesrv", "").strip()
        if not namesrv:
            raise ConfigurationError('the rocketmq sink needs option("namesrv", "host:port")')
        topic = opts.get("topic", "").strip() or None
        if topic is not None:
            validate_name(topic)
        group = opts.get("group", "").strip() or DEFAULT_GROUP
        client = client_settings(opts)
        if "sendtimeout" in opts:
            client["send_timeout"] = seconds(opts["sendtimeout"], "sendTimeout", 3.0)
        if "retries" in opts:
            try:
                client["retries"] = int(opts["retries"])
            except ValueError:
                raise ConfigurationError("option retries must be an integer") from None
        size = positive(opts.get("maxmessagesize"), "maxMessageSize")
        if size is not None:
            client["max_message_size"] = size
        parsed = cls(
            namesrv=namesrv,
            topic=topic,
            group=group,
            idempotent_keys=flag(opts.get("idempotentkeys"), "idempotentKeys", False),
            max_in_flight=positive(opts.get("maxinflight"), "maxInFlight") or _DEFAULT_IN_FLIGHT,
            client=client,
            schema=opts["schema"],
            exactly_once=flag(opts.get("exactlyonce"), "exactlyOnce", False),
            transaction_log=opts.get("transactionlog", "").strip() or None,
            checkpoint=opts.get("checkpointlocation", "").strip() or None,
            transaction_timeout=float(
                round(seconds(opts.get("transactiontimeout"), "transactionTimeout", 120.0)) or 1
            ),
            commit_timeout=seconds(opts.get("committimeout"), "commitTimeout", 300.0),
            coordinator_idle=seconds(
                opts.get("coordinatoridletimeout"), "coordinatorIdleTimeout", 600.0
            ),
        )
        # Settings and names are checked here, on the driver, before any task runs.
        parsed.settings()
        return parsed

    def settings(self) -> ProducerSettings:
        """The producer's settings.

        Raises:
            ConfigurationError: invalid settings.
        """
        settings = build_settings(
            ProducerSettings, {"namesrv": self.namesrv, "group": self.group, **self.client}
        )
        validate_name(self.group, "producer group")
        return settings

    def key(self) -> tuple[Any, ...]:
        """What tells one producer's settings from another's (the per-process cache key)."""
        return (
            self.namesrv,
            self.group,
            self.exactly_once,
            tuple(sorted(self.client.items())),
        )
