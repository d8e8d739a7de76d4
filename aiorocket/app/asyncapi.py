"""The AsyncAPI 3.0 document of an [App][aiorocket.app.App]: what a team reads to know which
topics carry which messages.

* ``servers``: the app's name servers (protocol ``rocketmq``);
* ``channels``: one per topic (address = the topic), with the messages it carries; the
  ``<cluster>_REPLY_TOPIC`` replies travel on is one more when there are replies;
* ``operations``: ``receive`` for each subscriber (its group, tag filter or SQL92 selector,
  orderliness as ``x-rocketmq-*`` fields), ``send`` for each declared publisher; a subscriber
  whose handler returns a value, or a publisher declared with a ``reply`` model, has a
  ``reply`` linking the reply channel and message (request/reply, docs/protocol.md §13);
* ``components``: one message per payload type and the JSON schemas pydantic derives.

[App.asyncapi][aiorocket.app.App.asyncapi] builds it; ``aiorocket asyncapi module:app [--yaml]``
prints it; [asyncapi_router][aiorocket.integrations.fastapi.asyncapi_router] serves it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, TypeAdapter

__all__ = ["Endpoint", "build_document", "to_yaml"]

_REF_TEMPLATE = "#/components/schemas/{model}"
_REPLY_CHANNEL = "replies"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    """One subscriber (``receive``) or declared publisher (``send``) of an app.

    Attributes:
        action: ``"receive"`` for a subscriber, ``"send"`` for a publisher.
        name: the operation id (the handler's name, or ``publish<Topic>``).
        topic: the topic.
        payload: the body's declared type (a pydantic model, ``dict``, ``str``, ``bytes``).
        reply: the reply's type for request/reply, else ``None``.
        tags: the tag filter (``"a || b"``), ``None`` for every tag.
        sql: an SQL92 selector instead of tags.
        group: the consumer group of a subscriber.
        orderly: whether a subscriber consumes in order.
        description: what it does (the handler's docstring).
    """

    action: Literal["receive", "send"]
    name: str
    topic: str
    payload: Any
    reply: Any = None
    tags: str | None = None
    sql: str | None = None
    group: str | None = None
    orderly: bool = False
    description: str | None = None


def _key(name: str) -> str:
    # component and channel keys: ^[a-zA-Z0-9.\-_]+$
    return _UNSAFE.sub("_", name) or "_"


class _Builder:
    def __init__(self) -> None:
        self.schemas: dict[str, Any] = {}
        self.messages: dict[str, Any] = {}
        self.channels: dict[str, Any] = {}
        self.operations: dict[str, Any] = {}

    def message(self, annotation: Any, *, correlated: bool) -> str:
        """The component message of ``annotation``'s payload; returns its key."""
        name, content_type, schema = self._payload(annotation)
        key = _key(name)
        if key not in self.messages:
            message: dict[str, Any] = {
                "name": key,
                "title": name,
                "summary": f"A {name} body ({content_type}).",
                "contentType": content_type,
                "payload": schema,
            }
            self.messages[key] = message
        if correlated:
            self.messages[key]["correlationId"] = {
                "description": "the request's CORRELATION_ID, copied onto its reply",
                "location": "$message.header#/CORRELATION_ID",
            }
        return key

    def _payload(self, annotation: Any) -> tuple[str, str, dict[str, Any]]:
        if annotation is bytes:
            return "Bytes", "application/octet-stream", {"type": "string", "format": "binary"}
        if annotation is str:
            return "Text", "text/plain", {"type": "string"}
        schema = TypeAdapter(annotation).json_schema(ref_template=_REF_TEMPLATE)
        for name, sub in schema.pop("$defs", {}).items():
            self.schemas.setdefault(name, sub)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            name = annotation.__name__
            self.schemas[name] = schema
            return name, "application/json", {"$ref": _REF_TEMPLATE.format(model=name)}
        title = str(schema.get("title") or getattr(annotation, "__name__", "Json"))
        return title.title().replace(" ", ""), "application/json", schema

    def channel(self, key: str, address: str, description: str, message: str) -> None:
        channel = self.channels.setdefault(
            key, {"address": address, "description": description, "messages": {}}
        )
        channel["messages"][message] = {"$ref": f"#/components/messages/{message}"}

    def operation(self, endpoint: Endpoint) -> None:
        channel = _key(endpoint.topic)
        message = self.message(endpoint.payload, correlated=endpoint.reply is not None)
        self.channel(channel, endpoint.topic, f"The topic {endpoint.topic}.", message)
        op: dict[str, Any] = {
            "action": endpoint.action,
            "channel": {"$ref": f"#/channels/{channel}"},
            "summary": _summary(endpoint),
            "description": endpoint.description or _summary(endpoint),
            "messages": [{"$ref": f"#/channels/{channel}/messages/{message}"}],
        }
        if endpoint.group is not None:
            op["x-rocketmq-group"] = endpoint.group
        if endpoint.sql is not None:
            op["x-rocketmq-sql"] = endpoint.sql
        elif endpoint.tags is not None:
            op["x-rocketmq-tags"] = endpoint.tags
        if endpoint.action == "receive":
            op["x-rocketmq-orderly"] = endpoint.orderly
        if endpoint.reply is not None:
            answer = self.message(endpoint.reply, correlated=True)
            self.channel(
                _REPLY_CHANNEL,
                "{cluster}_REPLY_TOPIC",
                "The cluster's reply topic: the broker pushes each reply straight to the "
                "client named by the request's REPLY_TO_CLIENT.",
                answer,
            )
            op["reply"] = {
                "channel": {"$ref": f"#/channels/{_REPLY_CHANNEL}"},
                "messages": [{"$ref": f"#/channels/{_REPLY_CHANNEL}/messages/{answer}"}],
            }
        key = base = _key(endpoint.name)
        n = 1
        while key in self.operations:  # two publishers of one topic
            n += 1
            key = f"{base}_{n}"
        self.operations[key] = op


def _summary(endpoint: Endpoint) -> str:
    if endpoint.action == "send":
        what = f"Publishes to {endpoint.topic}"
    else:
        what = f"Group {endpoint.group} consumes {endpoint.topic}"
    if endpoint.sql is not None:
        what += f" where {endpoint.sql}"
    elif endpoint.tags is not None:
        what += f" tagged {endpoint.tags}"
    if endpoint.orderly:
        what += ", in order"
    if endpoint.reply is not None:
        what += ", replying to requests" if endpoint.action == "receive" else ", as requests"
    return what + "."


def build_document(
    endpoints: Sequence[Endpoint],
    *,
    namesrv: Sequence[str],
    title: str,
    version: str,
    description: str | None = None,
) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of ``endpoints`` served by the name servers ``namesrv``."""
    b = _Builder()
    for endpoint in endpoints:
        b.operation(endpoint)
    doc: dict[str, Any] = {
        "asyncapi": "3.0.0",
        "info": {
            "title": title,
            "version": version,
            "description": description
            or f"The topics, messages and operations of the {title} RocketMQ application.",
        },
        "defaultContentType": "application/json",
        "servers": {
            f"namesrv{i}": {
                "host": addr,
                "protocol": "rocketmq",
                "description": "A RocketMQ name server; clients look up the brokers there.",
            }
            for i, addr in enumerate(namesrv)
        },
        "channels": b.channels,
        "operations": b.operations,
        "components": {"messages": b.messages, "schemas": b.schemas},
    }
    if _REPLY_CHANNEL in b.channels:
        b.channels[_REPLY_CHANNEL]["parameters"] = {
            "cluster": {
                "description": "The broker cluster's name (brokerClusterName).",
                "default": "DefaultCluster",
            }
        }
    return doc


def to_yaml(value: Any, indent: int = 0) -> str:
    """``value`` (JSON data) as YAML in block style: plain keys where YAML reads them back as
    the same string, every string value quoted as JSON quotes it (a JSON string is a YAML
    double-quoted scalar)."""
    pad = "  " * indent
    if isinstance(value, dict) and value:
        lines = []
        for k, v in value.items():
            key = _yaml_key(str(k))
            if isinstance(v, dict | list) and v:
                lines.append(f"{pad}{key}:\n{to_yaml(v, indent + 1)}")
            else:
                lines.append(f"{pad}{key}: {to_yaml(v, indent + 1)}")
        return "\n".join(lines)
    if isinstance(value, list) and value:
        lines = []
        for v in value:
            if isinstance(v, dict | list) and v:
                # the item's first line follows the dash; the rest keep its indentation
                text = to_yaml(v, indent + 1)
                lines.append(f"{pad}- {text[len(pad) + 2 :]}")
            else:
                lines.append(f"{pad}- {to_yaml(v, indent + 1)}")
        return "\n".join(lines)
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return json.dumps(value)


_PLAIN_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_.$-]*")
#: words YAML 1.1 readers take for booleans or null
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "on", "off", "true", "false", "null"})


def _yaml_key(key: str) -> str:
    if _PLAIN_KEY.fullmatch(key) and key.lower() not in _YAML_WORDS:
        return key
    return json.dumps(key)
