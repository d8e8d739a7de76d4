"""Settings of clients, producers and consumers: validated once, frozen, documented.

Defaults follow the Java 4.9 client (``ClientConfig``, ``DefaultMQProducer``) under Python names.
Every timing constant is a setting so tests can shrink it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from aiorocket.errors import ConfigurationError

__all__ = ["ClientSettings", "ProducerSettings", "build_settings"]


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
            (HMAC-SHA1, REMOTING.md §8).
        request_timeout: default RPC timeout in seconds (Java: 3 s).
        connect_timeout: TCP connect timeout in seconds.
        route_refresh_interval: how often routes are polled from the name server (Java: 30 s).
        heartbeat_interval: how often heartbeats go to brokers (Java: 30 s).
        max_frame_size: the largest frame accepted from a peer (16 MiB).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    namesrv: tuple[str, ...] = Field(min_length=1)
    instance_name: str | None = None
    namespace: str | None = None
    access_key: str | None = None
    secret_key: str | None = Field(default=None, repr=False)
    request_timeout: float = Field(default=3.0, gt=0)
    connect_timeout: float = Field(default=3.0, gt=0)
    route_refresh_interval: float = Field(default=30.0, gt=0)
    heartbeat_interval: float = Field(default=30.0, gt=0)
    max_frame_size: int = Field(default=16 * 1024 * 1024, ge=1024)

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
    """Settings of a :class:`~aiorocket.Producer` (Java ``DefaultMQProducer`` defaults).

    Attributes:
        group: the producer group (used for heartbeats and transaction checks).
        send_timeout: seconds to wait for a send response.
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
    create_topic_key: str = "TBW102"


_S = TypeVar("_S", bound=BaseModel)


def build_settings(cls: type[_S], values: Mapping[str, Any]) -> _S:
    """Validate ``values`` into ``cls``.

    Raises:
        ConfigurationError: a value is missing, unknown or invalid; the message names it.
    """
    try:
        return cls(**values)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ConfigurationError(f"invalid {cls.__name__}: {problems}") from None
