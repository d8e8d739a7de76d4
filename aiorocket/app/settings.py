"""App settings: keyword arguments first, then ``AIOROCKET_*`` environment variables."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from aiorocket.errors import ConfigurationError

__all__ = ["AppSettings", "load_app_settings"]


class AppSettings(BaseSettings):
    """Settings of an :class:`~aiorocket.App`.

    Every field can come from the environment with the ``AIOROCKET_`` prefix
    (``AIOROCKET_NAMESRV=127.0.0.1:9876``); keyword arguments win over the environment.

    Attributes:
        namesrv: name server addresses, ``;``- or ``,``-separated.
        producer_group: the group of the app's shared producer.
        namespace: prefix of topics and groups (Java ``ClientConfig.namespace``).
        access_key, secret_key: ACL credentials, used by the producer and every consumer.
        tls, tls_ca, tls_verify: TLS to name servers and brokers, for every client of the app
            (see :class:`~aiorocket.settings.ClientSettings`; ``AIOROCKET_TLS=true``,
            ``AIOROCKET_TLS_CA=/path/ca.pem``).
        serialize_type: the header dialect of every client's requests, ``"json"`` or
            ``"rocketmq"`` (binary; see :class:`~aiorocket.settings.ClientSettings`;
            ``AIOROCKET_SERIALIZE_TYPE=rocketmq``).
        trace, trace_topic: message trace for the producer and every subscriber (see
            :class:`~aiorocket.settings.ClientSettings`; ``AIOROCKET_TRACE=true``).
        consumer: extra :class:`~aiorocket.settings.ConsumerSettings` for every consumer
            (e.g. ``{"rebalance_interval": 5}``); per-subscriber options win.
        producer: extra :class:`~aiorocket.settings.ProducerSettings` for the producer.
        stuck_after: a queue with cached messages and no consumption for this many seconds
            makes the app not ready.
        status_interval: seconds between the worker's status lines when not on a terminal.
    """

    model_config = SettingsConfigDict(
        env_prefix="AIOROCKET_", extra="forbid", frozen=True, arbitrary_types_allowed=True
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
        return out


def load_app_settings(values: dict[str, Any]) -> AppSettings:
    """Validate keyword settings merged over the environment.

    Raises:
        ConfigurationError: a value is unknown or invalid; the message names it.
    """
    try:
        return AppSettings(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigurationError(f"invalid app settings: {problems}") from None
