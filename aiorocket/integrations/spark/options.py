"""The options of the ``rocketmq`` Spark source and sink, checked on the driver (the lists
are in `source` and `sink`,
and in ``docs/how-to/spark.md``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiorocket import SyncQueueReader
from aiorocket._names import validate_group
from aiorocket._reader import InlineReader
from aiorocket.errors import ConfigurationError
from aiorocket.models import validate_name

__all__ = ["SourceOptions", "client_settings", "flag", "positive"]


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
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigurationError(f"option {name} must be an integer, not {raw!r}") from None
    if value <= 0:
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

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate the source options (keys are lower-case in Spark's option map).

        Raises:
            ConfigurationError: a missing or invalid option.
        """
        opts = {k.lower(): v for k, v in options.items()}
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
            _check_spec(starting, "startingOffsets")
        ending = opts.get("endingoffsets", "latest")
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
                f'{name} JSON must look like {{"topic": {{"broker-a:0": 42}}}} '
                "(queue keys broker:id or id; offsets >= 0, -2 earliest, -1 latest)"
            )
        return
    raise ConfigurationError(
        f"{name} must be earliest, latest, a timestamp in ms or JSON, not {spec!r}"
    )
