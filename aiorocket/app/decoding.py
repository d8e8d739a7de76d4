"""Typed handler bodies: the first parameter's annotation chooses how a body is decoded, the
return annotation what a handler replies with; values are encoded as `encode_body`."""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from aiorocket.errors import ConfigurationError
from aiorocket.models import ReceivedMessage

__all__ = ["BodyDecodeError", "HandlerSignature", "body_decoder", "encode_body", "inspect_handler"]


class BodyDecodeError(ValueError):
    """A message body did not decode or validate as the handler's declared type."""


@dataclass(frozen=True, slots=True)
class HandlerSignature:
    """How to call a handler: decode each body, and whether it wants the raw message."""

    decode: Callable[[bytes], Any]
    wants_message: bool
    batch: bool
    body_type: str
    #: the body's declared type (``bytes`` when undeclared), for the AsyncAPI document
    body_annotation: Any = bytes
    #: the declared return type when the handler returns something (it replies with it to a
    #: request), else ``None``
    reply_annotation: Any = None


def encode_body(value: Any) -> bytes:
    """A body to send: a pydantic model or a JSON value (``dict``, ``list``) as JSON, ``str``
    as UTF-8, bytes as they are."""
    if isinstance(value, BaseModel):
        return value.model_dump_json().encode()
    if isinstance(value, Mapping | list):
        return json.dumps(value, separators=(",", ":")).encode()
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    return json.dumps(value).encode()


def body_decoder(annotation: Any) -> Callable[[bytes], Any]:
    """How a body declared as ``annotation`` is decoded (``bytes``, ``str``, a pydantic
    model, ``dict``/``list`` JSON).

    Raises:
        ConfigurationError: an unsupported type.
    """
    return _decoder(annotation)[0]


def _decoder(annotation: Any) -> tuple[Callable[[bytes], Any], str]:
    if annotation is inspect.Parameter.empty or annotation is bytes:
        return (lambda b: b), "bytes"
    if annotation is str:

        def as_text(b: bytes) -> str:
            try:
                return b.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BodyDecodeError(f"body is not UTF-8: {exc}") from None

        return as_text, "str"
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        model = annotation

        def as_model(b: bytes) -> Any:
            try:
                return model.model_validate_json(b)
            except ValidationError as exc:
                raise BodyDecodeError(
                    f"body does not validate as {model.__name__}: {exc}"
                ) from None

        return as_model, model.__name__
    origin = typing.get_origin(annotation) or annotation
    if origin in (dict, list) or annotation is Any:
        adapter: TypeAdapter[Any] = TypeAdapter(annotation)

        def as_json(b: bytes) -> Any:
            try:
                return adapter.validate_python(json.loads(b))
            except (ValueError, ValidationError) as exc:
                raise BodyDecodeError(f"body is not valid JSON for {annotation}: {exc}") from None

        return as_json, "json"
    raise ConfigurationError(
        f"cannot decode message bodies as {annotation!r}: use bytes, str, dict, list or a "
        "pydantic model"
    )


def inspect_handler(fn: Callable[..., Any], *, batch: bool) -> HandlerSignature:
    """Read ``fn``'s signature: ``async def h(body: T, msg: ReceivedMessage = ...)``.

    With ``batch=True`` the first parameter is ``list[T]`` (and the optional second one
    ``list[ReceivedMessage]``).

    Raises:
        ConfigurationError: not an ``async def``, no parameter, or an unsupported type.
    """
    if not inspect.iscoroutinefunction(fn):
        raise ConfigurationError(f"handler {fn.__qualname__} must be an async def function")
    params = list(inspect.signature(fn).parameters.values())
    if not params:
        raise ConfigurationError(f"handler {fn.__qualname__} must take the message body")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ConfigurationError(
            f"cannot resolve the annotations of {fn.__qualname__}: {exc}"
        ) from None
    first = hints.get(params[0].name, inspect.Parameter.empty)
    if batch:
        if typing.get_origin(first) is list:
            (first,) = typing.get_args(first) or (bytes,)
        elif first is not inspect.Parameter.empty:
            raise ConfigurationError(f"batch handler {fn.__qualname__} must take list[...] bodies")
    decode, name = _decoder(first)
    returns = hints.get("return", inspect.Parameter.empty)
    reply = None if returns in (inspect.Parameter.empty, None, type(None)) else returns
    wants_message = False
    if len(params) > 1:
        second = hints.get(params[1].name)
        expected = list[ReceivedMessage] if batch else ReceivedMessage
        if second != expected and params[1].default is inspect.Parameter.empty:
            raise ConfigurationError(
                f"the second parameter of {fn.__qualname__} must be typed {expected}"
            )
        wants_message = second == expected
    return HandlerSignature(
        decode=decode,
        wants_message=wants_message,
        batch=batch,
        body_type=name,
        body_annotation=bytes if first is inspect.Parameter.empty else first,
        reply_annotation=reply,
    )
