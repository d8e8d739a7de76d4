"""Reading and writing the JSON dialect of Alibaba fastjson 1.x (docs/protocol.md §5.1).

Brokers and name servers encode bodies with fastjson, whose default output is not always
standard JSON: a map with ``Long`` keys is written with bare integer keys (``{0:"a"}``), and a
map keyed by ``MessageQueue`` uses a JSON object as the key
(``{{"brokerName":"b","queueId":0,"topic":"T"}:12}``). `loads` reads standard JSON and
those forms; `dumps` writes compact standard JSON, plus object keys when asked to.

Rules of this module:

* Every malformed input makes `loads` raise
  [`RemoteProtocolError`][aiorocket.errors.RemoteProtocolError] and nothing else. ``NaN``,
  ``Infinity`` and numbers that overflow a double are refused.
* Nesting deeper than `MAX_DEPTH` is refused by the tolerant reader. Standard JSON goes
  through `json.loads` first and may nest deeper if the interpreter's stack allows it.
* Object keys read back as: strings → ``str``; integers → ``int``; fractions → ``float``;
  ``true``/``false``/``null`` → ``bool``/``None``; objects → `ObjectKey`; arrays → ``tuple``.
* `dumps` writes ``int`` keys quoted (``{"0":"a"}``), so they read back as ``str`` keys.
  ``ObjectKey`` and ``MessageQueue`` keys are written as object keys and read back as
  `ObjectKey`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from aiorocket.errors import LocalProtocolError, RemoteProtocolError
from aiorocket.models import MessageQueue

__all__ = ["MAX_DEPTH", "ObjectKey", "dumps", "loads"]

#: Deepest nesting of arrays and objects the tolerant reader and the writer accept.
MAX_DEPTH = 512


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """A JSON object used as a map key, in a hashable canonical form.

    ``items`` holds ``(key, value)`` pairs sorted by key; nested objects are themselves
    ``ObjectKey`` and nested arrays are tuples, so equal objects give equal keys whatever
    the order their members arrived in.
    """

    items: tuple[tuple[Any, Any], ...]

    @classmethod
    def from_dict(cls, obj: Mapping[Any, Any]) -> ObjectKey:
        """Freeze a decoded JSON object: nested dicts become ``ObjectKey``, lists tuples."""
        return cls(tuple(sorted(((k, _freeze(v)) for k, v in obj.items()), key=_item_order)))

    def to_dict(self) -> dict[Any, Any]:
        """Return the object as a plain dict (nested tuples become lists again)."""
        return {k: _thaw(v) for k, v in self.items}

    def get(self, key: Any, default: Any = None) -> Any:
        """Return the frozen value of member ``key``, or ``default`` if it is absent."""
        for k, v in self.items:
            if k == key:
                return v
        return default


def _item_order(item: tuple[Any, Any]) -> tuple[Any, ...]:
    # A total order over keys of mixed types; fastjson's own bean members are all strings.
    key = item[0]
    if isinstance(key, str):
        return (0, key)
    return (1, type(key).__name__, repr(key))


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return ObjectKey.from_dict(value)
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, ObjectKey):
        return value.to_dict()
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# Reading


def _reject_constant(name: str) -> NoReturn:
    # json.loads accepts NaN/Infinity by default; fastjson output never contains them.
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:32]} overflows a double")
    return value


_STANDARD = json.JSONDecoder(
    parse_float=_finite_float, parse_constant=_reject_constant, strict=False
).decode

_WS = re.compile(r"[ \t\n\r]*")
_NUMBER = re.compile(r"(-?(?:0|[1-9][0-9]*))(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_CHUNK = re.compile(r'([^"\\]*)(["\\])', re.DOTALL)
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_NO_KEY: Any = object()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode one JSON document in fastjson's dialect (see the module docstring).

    Leading and trailing whitespace is allowed (the C++ client ends bodies with ``"\\n"``).

    Raises:
        RemoteProtocolError: the input is not UTF-8, not JSON, nests too deeply, or holds
            ``NaN``/``Infinity`` or an out-of-range number.
        TypeError: ``data`` is neither bytes-like nor ``str`` (a caller bug).
    """
    if isinstance(data, str):
        text = data
    elif isinstance(data, bytes | bytearray | memoryview):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RemoteProtocolError(f"JSON body is not valid UTF-8: {exc.reason}") from None
    else:
        raise TypeError(f"loads() takes bytes or str, not {type(data).__name__}")
    try:
        return _STANDARD(text)
    except (ValueError, RecursionError):
        # Not standard JSON: bare or object keys, or garbage. The tolerant reader accepts
        # everything json.loads does plus fastjson's keys, so its verdict stands.
        pass
    return _parse_tolerant(text)


def _skip(text: str, pos: int) -> int:
    m = _WS.match(text, pos)
    return pos if m is None else m.end()


def _fail(text: str, pos: int, reason: str) -> NoReturn:
    raise RemoteProtocolError(f"invalid JSON at offset {pos} of {len(text)}: {reason}")


def _parse_tolerant(text: str) -> Any:
    """Parse ``text`` with fastjson's tolerance for non-string object keys.

    Iterative (an explicit stack of open containers), so depth is bounded by MAX_DEPTH and
    not by the interpreter's recursion limit.
    """
    n = len(text)
    # Each frame: [container, pending key or _NO_KEY while the key is being read].
    stack: list[list[Any]] = []
    pos = _skip(text, 0)
    while True:
        # Read one value starting at ``pos``.
        if pos >= n:
            _fail(text, pos, "unexpected end of input")
        ch = text[pos]
        value: Any
        if ch == "{" or ch == "[":
            if len(stack) >= MAX_DEPTH:
                _fail(text, pos, f"nesting deeper than {MAX_DEPTH}")
            close = "}" if ch == "{" else "]"
            pos = _skip(text, pos + 1)
            if text.startswith(close, pos):
                value = {} if ch == "{" else []
                pos += 1
            else:
                stack.append([{} if ch == "{" else [], _NO_KEY])
                continue
        elif ch == '"':
            value, pos = _scan_string(text, pos + 1)
        elif ch == "-" or "0" <= ch <= "9":
            m = _NUMBER.match(text, pos)
            if m is None:
                _fail(text, pos, "malformed number")
            integer, frac, exp = m.groups()
            if frac is None and exp is None:
                try:
                    value = int(integer)
                except ValueError:  # over sys.get_int_max_str_digits()
                    _fail(text, pos, "integer too long")
            else:
                value = float(m.group())
                if not math.isfinite(value):
                    _fail(text, pos, "number overflows a double")
            pos = m.end()
        elif text.startswith("true", pos):
            value, pos = True, pos + 4
        elif text.startswith("false", pos):
            value, pos = False, pos + 5
        elif text.startswith("null", pos):
            value, pos = None, pos + 4
        else:
            _fail(text, pos, f"unexpected character {ch!r}")

        # A value is complete: attach it to its container, closing containers that end here.
        while True:
            pos = _skip(text, pos)
            if not stack:
                if pos != n:
                    _fail(text, pos, "extra data after the document")
                return value
            frame = stack[-1]
            container = frame[0]
            sep = text[pos : pos + 1]
            if isinstance(container, list):
                container.append(value)
                close = "]"
            elif frame[1] is _NO_KEY:
                # fastjson writes non-string map keys bare: any JSON value may be a key.
                frame[1] = _freeze(value)
                if sep != ":":
                    _fail(text, pos, "expected ':' after an object key")
                pos = _skip(text, pos + 1)
                break
            else:
                container[frame[1]] = value
                frame[1] = _NO_KEY
                close = "}"
            if sep == ",":
                pos = _skip(text, pos + 1)
                break
            if sep != close:
                _fail(text, pos, f"expected ',' or {close!r}")
            pos += 1
            stack.pop()
            value = container


def _scan_string(text: str, pos: int) -> tuple[str, int]:
    """Read a string body starting just after its opening quote; return it and the end."""
    parts: list[str] = []
    while True:
        m = _CHUNK.match(text, pos)
        if m is None:
            _fail(text, pos, "unterminated string")
        chunk, terminator = m.groups()
        if chunk:
            parts.append(chunk)
        pos = m.end()
        if terminator == '"':
            return "".join(parts), pos
        esc = text[pos : pos + 1]
        if esc != "u":
            try:
                parts.append(_ESCAPES[esc])
            except KeyError:
                _fail(text, pos, f"invalid escape {esc!r}")
            pos += 1
            continue
        code = _hex4(text, pos + 1)
        pos += 5
        if 0xD800 <= code <= 0xDBFF and text.startswith("\\u", pos):
            # A UTF-16 surrogate pair spelled as two escapes, as Java writes non-BMP characters.
            low = _hex4(text, pos + 2)
            if 0xDC00 <= low <= 0xDFFF:
                code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                pos += 6
        parts.append(chr(code))


def _hex4(text: str, pos: int) -> int:
    if _HEX4.match(text, pos) is None:
        _fail(text, pos, "invalid \\u escape")
    return int(text[pos : pos + 4], 16)


# --------------------------------------------------------------------------------------------
# Writing

_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_COMPACT_ASCII = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False)


def dumps(obj: Any) -> bytes:
    """Encode ``obj`` as compact UTF-8 JSON (separators ``,`` and ``:``, no whitespace).

    Accepts dicts, lists, tuples, ``str``, ``int``, ``float``, ``bool``, ``None`` and
    `ObjectKey`. Dict keys may be ``str``, ``int``/``float``/``bool``/``None`` (written
    quoted, as `json.dumps` does), or `ObjectKey`/``MessageQueue`` (written as
    fastjson object keys, e.g. ``{"brokerName":"b","queueId":0,"topic":"T"}:1``). Dict order
    is kept. Strings holding lone surrogates are written with ``\\u`` escapes.

    Raises:
        LocalProtocolError: a value or key of another type (dataclasses included), a NaN or
            infinite float, a reference cycle, or nesting deeper than `MAX_DEPTH`.
    """
    try:
        return _dumps_text(obj, _COMPACT).encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates cannot be UTF-8; escape them the way Java's writers do.
        return _dumps_text(obj, _COMPACT_ASCII).encode("ascii")


def _dumps_text(obj: Any, encoder: json.JSONEncoder) -> str:
    try:
        return encoder.encode(obj)
    except TypeError:
        pass  # object keys or an unsupported type: the slow writer sorts it out
    except (ValueError, RecursionError) as exc:
        raise LocalProtocolError(f"cannot encode as JSON: {exc}") from None
    out: list[str] = []
    _write_value(obj, out, encoder, 0)
    return "".join(out)


def _encode_leaf(obj: str | int | float | None, encoder: json.JSONEncoder) -> str:
    try:
        return encoder.encode(obj)
    except ValueError as exc:  # NaN or infinity
        raise LocalProtocolError(f"cannot encode as JSON: {exc}") from None


def _write_value(obj: Any, out: list[str], encoder: json.JSONEncoder, depth: int) -> None:
    if isinstance(obj, str | int | float) or obj is None:
        out.append(_encode_leaf(obj, encoder))
        return
    if depth >= MAX_DEPTH:
        raise LocalProtocolError(f"cannot encode as JSON: nesting deeper than {MAX_DEPTH}")
    if isinstance(obj, dict | ObjectKey):
        items = obj.items if isinstance(obj, ObjectKey) else obj.items()
        out.append("{")
        first = True
        for key, value in items:
            if not first:
                out.append(",")
            first = False
            _write_key(key, out, encoder, depth + 1)
            out.append(":")
            _write_value(value, out, encoder, depth + 1)
        out.append("}")
        return
    if isinstance(obj, list | tuple):
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            _write_value(value, out, encoder, depth + 1)
        out.append("]")
        return
    raise LocalProtocolError(f"cannot encode a {type(obj).__name__} as JSON")


def _write_key(key: Any, out: list[str], encoder: json.JSONEncoder, depth: int) -> None:
    if isinstance(key, str):
        out.append(encoder.encode(key))
    elif isinstance(key, int | float) or key is None:
        # json.dumps quotes scalar keys ("0", "true", "null"); every client accepts "0" (§5.1).
        out.append('"' + _encode_leaf(key, encoder) + '"')
    elif isinstance(key, MessageQueue):
        if not isinstance(key.queue_id, int) or isinstance(key.queue_id, bool):
            raise LocalProtocolError(f"MessageQueue.queue_id must be an int: {key!r}")
        # fastjson writes a MessageQueue map key as the bean itself, members sorted by name.
        _write_value(
            {"brokerName": key.broker_name, "queueId": key.queue_id, "topic": key.topic},
            out,
            encoder,
            depth,
        )
    elif isinstance(key, ObjectKey | tuple):
        _write_value(key, out, encoder, depth)
    else:
        raise LocalProtocolError(f"cannot encode a {type(key).__name__} as a JSON object key")
