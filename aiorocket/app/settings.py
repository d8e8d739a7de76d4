"""App settings: keyword arguments first, then ``AIOROCKET_*`` environment variables.

The consumer and client settings an App takes are not declared twice: their fields are those
of [`ConsumerSettings`][aiorocket.settings.ConsumerSettings] and
[`ClientSettings`][aiorocket.settings.ClientSettings] (same types, defaults and limits), added to
[`AppSettings`][aiorocket.app.AppSettings] when this module loads.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationError, create_model, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aiorocket.errors import ConfigurationError
from aiorocket.settings import (
    ClientSettings,
    ConsumerSettings,
    build_settings,
    closest_name,
    describe_errors,
)

__all__ = [
    "CLIENT_SETTINGS",
    "GROUP_SETTINGS",
    "AppSettings",
    "check_group_settings",
    "load_app_settings",
]

ENV_PREFIX = "AIOROCKET_"
#: consumer settings the App sets per group from its subscribers (``orderly``, ``order_by``,
#: ``batch_size``) or that name the group itself; they are refused elsewhere
_PER_SUBSCRIBER = {
    "group": "the subscriber's group",
    "orderly": "@app.subscriber(orderly=...)",
    "order_by": "@app.subscriber(order_by=...)",
    "consume_batch_size": "@app.subscriber(batch=True, batch_size=...)",
}
#: the per-group settings of a push consumer (ConsumerSettings' own fields) an App takes as
#: keyword arguments, ``AIOROCKET_<NAME>`` variables and ``@app.subscriber`` options
GROUP_SETTINGS: tuple[str, ...] = tuple(
    name
    for name in ConsumerSettings.model_fields
    if name not in ClientSettings.model_fields and name not in _PER_SUBSCRIBER
)
#: client settings the App declares itself (they apply to every client of the app)
_DECLARED_CLIENT = {
    "namesrv",
    "namespace",
    "access_key",
    "secret_key",
    "tls",
    "tls_ca",
    "tls_verify",
    "serialize_type",
    "trace",
    "trace_topic",
}
#: the other client settings (timeouts, intervals) an App takes for every one of its clients;
#: ``instance_name`` is left out: the producer and each consumer need their own client id
CLIENT_SETTINGS: tuple[str, ...] = tuple(
    name
    for name in ClientSettings.model_fields
    if name not in _DECLARED_CLIENT and name != "instance_name"
)
#: ``AIOROCKET_*`` variables that are not App settings (read elsewhere in the library)
_OTHER_ENV = frozenset({"AIOROCKET_NO_EXTENSIONS"})


def _copied_fields() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for model, names in ((ClientSettings, CLIENT_SETTINGS), (ConsumerSettings, GROUP_SETTINGS)):
        for name in names:
            info = model.model_fields[name]
            fields[name] = (info.annotation, info)
    return fields


if TYPE_CHECKING:
    _Inherited = BaseSettings
else:
    # One declaration per setting: the copied fields keep their type, default and limits.
    _Inherited = create_model("_Inherited", __base__=BaseSettings, **_copied_fields())


class AppSettings(_Inherited):
    """Settings of an [`App`][aiorocket.app.App].

    Every field can come from the environment with the ``AIOROCKET_`` prefix
    (``AIOROCKET_NAMESRV=127.0.0.1:9876``, ``AIOROCKET_CONSUME_FROM=first``); keyword
    arguments win over the environment. An unknown keyword argument or an ``AIOROCKET_*``
    variable that names no setting is an error that names it.

    Besides the attributes below, an App takes

    * every per-group setting of [`ConsumerSettings`][aiorocket.settings.ConsumerSettings] listed in
      `GROUP_SETTINGS` (``consume_from``, ``message_model``, ``pull_batch_size``,
      ``max_reconsume_times``, ``rebalance_interval``, ``consume_mode``, ...), for every
      consumer of the app; ``@app.subscriber(...)`` takes the same names for its group;
    * the client settings of `CLIENT_SETTINGS` (``request_timeout``,
      ``connect_timeout``, ``route_refresh_interval``, ``heartbeat_interval``, ...), for every
      client of the app.

    Attributes:
        namesrv: name server addresses, ``;``- or ``,``-separated.
        producer_group: the group of the app's shared producer.
        namespace: prefix of topics and groups (Java ``ClientConfig.namespace``).
        access_key, secret_key: ACL credentials, used by the producer and every consumer.
        tls, tls_ca, tls_verify: TLS to name servers and brokers, for every client of the app
            (see [`ClientSettings`][aiorocket.settings.ClientSettings]; ``AIOROCKET_TLS=true``,
            ``AIOROCKET_TLS_CA=/path/ca.pem``).
        serialize_type: the header dialect of every client's requests, ``"json"`` or
            ``"rocketmq"`` (binary; see [`ClientSettings`][aiorocket.settings.ClientSettings];
            ``AIOROCKET_SERIALIZE_TYPE=rocketmq``).
        trace, trace_topic: message trace for the producer and every subscriber (see
            [`ClientSettings`][aiorocket.settings.ClientSettings]; ``AIOROCKET_TRACE=true``).
        consumer: consumer settings as one dict (``{"rebalance_interval": 5}``), the same
            as giving them one by one; after loading, it holds every consumer setting given
            (keyword arguments over the environment). Per-subscriber options win.
        producer: extra [`ProducerSettings`][aiorocket.settings.ProducerSettings] for the producer.
        stuck_after: a queue with cached messages and no consumption for this many seconds
            makes the app not ready.
        status_interval: seconds between the worker's status lines when not on a terminal.
        failure_log_interval: a failing handler's failures are logged with their traceback
            at most once per this many seconds per handler; the failures in between are
            counted in the next line (0: every failure with its traceback).
        readiness_interval: seconds between two checks that the name server and the brokers
            of the app's topics answer (a route lookup, a max-offset query per broker).
        readiness_timeout: how long one such check may take.
        failing_after: the name server or a broker failing its checks, or a subscriber's
            pulls failing, for this many seconds makes the app not ready (``/readyz`` 503).
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", frozen=True, arbitrary_types_allowed=True
    )

    namesrv: str = "127.0.0.1:9876"
    producer_group: str = "aiorocket-app"
    namespace: str | None = None
    access_key: str | None = None
    secret_key: str | None = Field(default=None, repr=False)
    tls: bool | ssl.SSLContext = False
    tls_ca: Path | None = None
    tls_verify: bool = True
    serialize_type: Literal["json", "rocketmq"] = "json"
    trace: bool = False
    trace_topic: str | None = None
    consumer: dict[str, Any] = Field(default_factory=dict)
    producer: dict[str, Any] = Field(default_factory=dict)
    stuck_after: float = Field(default=60.0, gt=0)
    status_interval: float = Field(default=10.0, gt=0)
    failure_log_interval: float = Field(default=10.0, ge=0)
    readiness_interval: float = Field(default=5.0, gt=0)
    readiness_timeout: float = Field(default=3.0, gt=0)
    failing_after: float = Field(default=15.0, ge=0)

    @field_validator("namesrv", mode="before")
    @classmethod
    def _join(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return ";".join(str(v) for v in value)
        return value

    def client_settings(self) -> dict[str, Any]:
        """The settings every client of the app shares."""
        out: dict[str, Any] = {"namesrv": self.namesrv}
        for name in ("namespace", "access_key", "secret_key", "tls_ca", "trace_topic"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        if self.tls is not False:
            out["tls"] = self.tls
        if not self.tls_verify:
            out["tls_verify"] = False
        if self.trace:
            out["trace"] = True
        if self.serialize_type != "json":
            out["serialize_type"] = self.serialize_type
        for name in CLIENT_SETTINGS:
            if name in self.model_fields_set:
                out[name] = getattr(self, name)
        return out


def _check_environment(environ: Mapping[str, str]) -> None:
    """Refuse an ``AIOROCKET_*`` variable that names no setting: pydantic-settings ignores
    those, so a misspelt ``AIOROCKET_CONSUME_FORM`` would be silently without effect."""
    valid = {ENV_PREFIX + name.upper() for name in AppSettings.model_fields}
    for key in sorted(environ):
        upper = key.upper()
        if upper.startswith(ENV_PREFIX) and upper not in valid and upper not in _OTHER_ENV:
            raise ConfigurationError(
                f"invalid app settings: environment variable {key} names no setting"
                f"{closest_name(upper, valid)}"
            )


def check_group_settings(values: Mapping[str, Any], where: str, *, client: bool = True) -> None:
    """Refuse names that are not per-group consumer settings (``where`` says whose), nor,
    with ``client``, client settings.

    Raises:
        ConfigurationError: the first such name, with the closest valid one.
    """
    valid = (*GROUP_SETTINGS, *ClientSettings.model_fields) if client else GROUP_SETTINGS
    for name in values:
        if name in _PER_SUBSCRIBER:
            raise ConfigurationError(f"{where}: {name!r} is set by {_PER_SUBSCRIBER[name]}")
        if name not in valid:
            raise ConfigurationError(
                f"{where}: unknown consumer setting {name!r}{closest_name(name, valid)}"
            )


def load_app_settings(
    values: dict[str, Any], environ: Mapping[str, str] | None = None
) -> AppSettings:
    """Validate keyword settings merged over the environment.

    The consumer settings given one by one and those of the ``consumer`` dict are merged into
    ``consumer`` (keyword arguments over the environment; the same name twice among the
    keyword arguments is an error) and checked against
    [`ConsumerSettings`][aiorocket.settings.ConsumerSettings] at once.

    Raises:
        ConfigurationError: a value or name is unknown or invalid; the message names it.
    """
    _check_environment(os.environ if environ is None else environ)
    given = {k: v for k, v in values.items() if v is not None}
    try:
        settings = AppSettings(**given)
    except ValidationError as exc:
        problems = describe_errors(exc, AppSettings.model_fields)
        raise ConfigurationError(f"invalid app settings: {problems}") from None
    check_group_settings(settings.consumer, "invalid app settings: consumer")
    from_kwargs = {k: given[k] for k in GROUP_SETTINGS if k in given}
    twice = sorted(from_kwargs.keys() & given.get("consumer", {}).keys())
    if twice:
        raise ConfigurationError(
            f"invalid app settings: {twice[0]!r} given both directly and in consumer"
        )
    from_env = {
        k: getattr(settings, k)
        for k in GROUP_SETTINGS
        if k in settings.model_fields_set and k not in given
    }
    merged = {**from_env, **settings.consumer, **from_kwargs}
    build_settings(
        ConsumerSettings, {**settings.client_settings(), "group": "app-settings", **merged}
    )
    return settings.model_copy(update={"consumer": merged})
