"""The declarative machinery of the remoting codec: typed headers and JSON bodies.

Headers (docs/protocol.md §1.8, §2.2): each is a frozen, slotted, keyword-only dataclass
declared with `header_class`. Its fields are declared with `wire`, which names the
``extFields`` key, the Java type (`WireKind`) and whether the Java broker marks the
field ``@CFNotNull``. From those declarations the decorator compiles, once per class at import,
the straight-line functions behind `Header.from_ext` and `Header.to_ext`: both sit
on hot paths (send, pull).

Header typing rules (Java's ``RemotingCommand.decodeCommandCustomHeader``):

* every value is a string on the wire; ints are decimal, booleans ``"true"``/``"false"``;
* an absent or empty mandatory field raises
  [`MissingHeaderFieldError`][aiorocket.errors.MissingHeaderFieldError] (Java answers SYSTEM_ERROR
  "the custom field <x> is null");
* a malformed number is an error for a mandatory field and "absent" for an optional one, as
  Java logs the parse failure and leaves the field unset;
* a boolean is true only for ``"true"`` in any case, so ``"1"`` (the C++ client's ``batch``
  and ``unitMode``) is false;
* empty optional values are absent (Go sends ``"subscription":""``); unknown keys (ACL's
  ``AccessKey``/``Signature``/``OnsChannel``, 5.x additions, ...) are ignored.

Bodies (docs/protocol.md §5): frozen, slotted dataclasses deriving from `Body`, whose
fields are typed with the lenient readers below (`Int32`, `Int64`, `Bool`,
`Float`, `java_enum`, `MQ`). pydantic validates decoded JSON against those
declarations (`Body.from_dict`); `Body.to_dict` writes the members in alphabetical
order, as fastjson writes beans. Wire names are the camelCase of the attribute unless a field
says otherwise with `member`. The readings are fastjson's (§5.2 "Broker parsing rules"):

* absent members and explicit ``null`` mean "unset": the decoding default (Java's default for
  primitives, empty for collections); a missing mandatory member raises;
* integers may arrive as numeric strings (Go's ``codeSet``, C++'s ``subVersion``);
* booleans may arrive as ``0``/``1`` or ``"true"``/``"false"``;
* enums may arrive as their Java name or ordinal (C++), and are normalised to the name;
  unknown names are kept as they are, unknown ordinals raise;
* map keys may be bare integers, quoted integers, or JSON objects (``MessageQueue`` keys).

Everything malformed raises [`RemoteProtocolError`][aiorocket.errors.RemoteProtocolError].
"""

from __future__ import annotations

import dataclasses
import enum
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Final, NamedTuple, Self, TypeVar, dataclass_transform

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    PlainValidator,
    TypeAdapter,
)
from pydantic import ValidationError as _ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import CoreSchema, PydanticUndefined, core_schema

from aiorocket._protocol import fastjson
from aiorocket.errors import LocalProtocolError, MissingHeaderFieldError, RemoteProtocolError
from aiorocket.models import MessageQueue

__all__ = [
    "MQ",
    "BLANK_IS_ABSENT",
    "DECIMAL",
    "OMIT_IF_NONE",
    "Body",
    "Bool",
    "Float",
    "Header",
    "Int32",
    "Int64",
    "MQSet",
    "as_int",
    "as_object",
    "java_enum",
    "java_order",
    "member",
    "message_queue_from_dict",
    "message_queue_to_dict",
    "WireField",
    "WireKind",
    "header_class",
    "wire",
]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class WireKind(enum.Enum):
    """The Java type of a header field, which fixes how its string value is parsed."""

    STR = "String"
    INT = "int"
    LONG = "long"
    BOOL = "boolean"


class WireField(NamedTuple):
    """One declared header field: Python attribute, ``extFields`` key(s), type, mandatory."""

    attr: str
    name: str
    kind: WireKind
    required: bool
    #: the short key of SendMessageRequestHeaderV2 (``a`` ... ``n``); None elsewhere.
    short: str | None


_META_KEY = "aiorocket.wire"


class _WireMeta(NamedTuple):
    name: str
    kind: WireKind | None
    required: bool
    short: str | None


def wire(
    name: str,
    kind: WireKind | None = None,
    *,
    required: bool = False,
    default: Any = dataclasses.MISSING,
    short: str | None = None,
) -> Any:
    """Declare a header field whose ``extFields`` key is ``name``.

    ``kind`` may be left out for ``str`` and ``bool`` attributes (it follows the annotation);
    integer fields must say `WireKind.INT` or `WireKind.LONG`. ``required`` marks
    a field the Java broker declares ``@CFNotNull``; it may still have a Python ``default``
    (a constant such as ``defaultTopic`` = ``TBW102``). Optional fields need a ``default``,
    which `Header.from_ext` uses when the key is absent or empty. ``short`` is the
    alternative key used by the short-name send header.
    """
    meta = {_META_KEY: _WireMeta(name, kind, required, short)}
    return dataclasses.field(default=default, metadata=meta)


_Decoder = Callable[[type[Any], Mapping[str, str]], Any]
_Encoder = Callable[[Any], dict[str, str]]


class Header:
    """Base class of every typed header: immutable, compared and hashed by value.

    Subclasses are declared with `header_class` and `wire`; the decorator compiles
    each class's decoder and encoder once. The API is `from_ext`, `to_ext` and
    `wire_fields`.
    """

    __slots__ = ()

    _wire_fields: ClassVar[tuple[WireField, ...]] = ()
    _decoder: ClassVar[_Decoder]
    _encoder: ClassVar[_Encoder]
    # The same under the short keys; only the send header declares them.
    _short_decoder: ClassVar[_Decoder]
    _short_encoder: ClassVar[_Encoder]

    @classmethod
    def wire_fields(cls) -> tuple[WireField, ...]:
        """The declared fields, in declaration order."""
        return cls._wire_fields

    @classmethod
    def from_ext(cls, ext: Mapping[str, str]) -> Self:
        """Parse ``extFields`` (string values, as `RemotingCommand` holds them).

        Raises:
            MissingHeaderFieldError: a mandatory field is absent, empty or not a number.
        """
        return cls._decoder(cls, ext)  # type: ignore[no-any-return]

    def to_ext(self) -> dict[str, str]:
        """Render as ``extFields``: strings only, optional fields that are ``None`` left out.

        Raises:
            LocalProtocolError: an integer does not fit its Java int/long field.
        """
        return self._encoder()


def _parse_int(raw: str, lo: int, hi: int) -> int | None:
    """Integer.parseInt / Long.parseLong: an optional sign, then ASCII digits, within range."""
    digits = raw[1:] if raw[0] in "+-" else raw
    # int() alone would also take spaces, "_" separators and non-ASCII digits.
    if not (digits.isascii() and digits.isdigit()):
        return None
    try:
        value = int(raw)
    except ValueError:  # over the interpreter's digit limit: certainly out of range
        return None
    return value if lo <= value <= hi else None


def _overflow(name: str, value: int, kind: str) -> None:
    raise LocalProtocolError(f"{name}={value} does not fit a Java {kind}")


_H = TypeVar("_H", bound=Header)
_T = TypeVar("_T")

_KIND_TYPES = {WireKind.STR: str, WireKind.INT: int, WireKind.LONG: int, WireKind.BOOL: bool}
# kind -> (min, max, longest digit string that cannot overflow)
_RANGES = {
    WireKind.INT: (_INT_MIN, _INT_MAX, 9),
    WireKind.LONG: (_LONG_MIN, _LONG_MAX, 18),
}


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(wire,))
def header_class(cls: type[_H]) -> type[_H]:
    """Make ``cls`` a frozen, slotted, keyword-only dataclass and compile its wire codec.

    Raises:
        TypeError: a field lacks `wire`, its kind disagrees with its annotation, an
            optional field has no default, or the class defines ``__post_init__`` (the
            decoder fills the slots directly and would skip it).
    """
    if "__post_init__" in cls.__dict__:
        raise TypeError(f"{cls.__name__}: headers cannot have __post_init__")
    dc = dataclasses.dataclass(frozen=True, slots=True, kw_only=True)(cls)
    hints = typing.get_type_hints(dc)
    declared: list[WireField] = []
    defaults: dict[str, Any] = {}
    for f in dataclasses.fields(typing.cast(Any, dc)):
        meta = f.metadata.get(_META_KEY)
        if not isinstance(meta, _WireMeta):
            raise TypeError(f"{dc.__name__}.{f.name} is not declared with wire()")
        base, nullable = _split_optional(hints[f.name])
        kind = meta.kind
        if kind is None:
            if base is int:
                raise TypeError(f"{dc.__name__}.{f.name}: an int field must say INT or LONG")
            kind = WireKind.BOOL if base is bool else WireKind.STR
        if _KIND_TYPES[kind] is not base:
            raise TypeError(f"{dc.__name__}.{f.name}: {kind.value} field annotated {base}")
        has_default = f.default is not dataclasses.MISSING
        if not meta.required and not has_default:
            raise TypeError(f"{dc.__name__}.{f.name}: an optional field needs a default")
        if nullable and not (has_default and f.default is None):
            raise TypeError(f"{dc.__name__}.{f.name}: a nullable field must default to None")
        declared.append(WireField(f.name, meta.name, kind, meta.required, meta.short))
        defaults[f.name] = f.default
    dc._wire_fields = tuple(declared)
    # Plain functions: read through the class they stay unbound, through an instance the
    # encoder binds to it.
    dc._decoder = _compile_decoder(dc, declared, defaults, short=False)
    dc._encoder = _compile_encoder(declared, short=False)
    if any(w.short is not None for w in declared):
        dc._short_decoder = _compile_decoder(dc, declared, defaults, short=True)
        dc._short_encoder = _compile_encoder(declared, short=True)
    return dc


def _split_optional(hint: Any) -> tuple[Any, bool]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _key(w: WireField, short: bool) -> str:
    return w.short if short and w.short is not None else w.name


# The codecs are generated as straight-line Python, the way ``dataclasses`` builds __init__:
# a loop over a field table costs about twice as much, and pull/send run these per request.


def _compile_decoder(
    cls: type[Header], declared: list[WireField], defaults: dict[str, Any], *, short: bool
) -> _Decoder:
    ns: dict[str, Any] = {
        "_new": object.__new__,
        "_Missing": MissingHeaderFieldError,
        "_parse_int": _parse_int,
    }
    lines = ["def decode(cls, ext):", "    get = ext.get", "    self = _new(cls)"]
    for i, w in enumerate(declared):
        key = repr(_key(w, short))
        ns[f"_set{i}"] = getattr(cls, w.attr).__set__  # the slot's member descriptor
        ns[f"_d{i}"] = defaults[w.attr]
        lines.append(f"    v = get({key})")
        if w.required:
            lines.append(f"    if not v: raise _Missing({key})")
        if w.kind is WireKind.STR:
            value = "v" if w.required else f"v if v else _d{i}"
        elif w.kind is WireKind.BOOL:
            # Boolean.parseBoolean: "true" in any case is true, anything else false.
            value = "v.lower() == 'true'" if w.required else f"v.lower() == 'true' if v else _d{i}"
        else:
            lo, hi, safe = _RANGES[w.kind]
            if not w.required:
                lines.append("    if v:")
            pad = "    " if w.required else "        "
            # Fast path: few enough plain digits cannot overflow.
            lines.append(f"{pad}if len(v) <= {safe} and v.isascii() and v.isdigit(): n = int(v)")
            lines.append(f"{pad}else: n = _parse_int(v, {lo}, {hi})")
            if w.required:
                lines.append(f"    if n is None: raise _Missing({key}, 'is not a number')")
                value = "n"
            else:
                # Java logs a malformed optional number and leaves the field unset.
                lines.append("    else: n = None")
                value = f"_d{i} if n is None else n"
        lines.append(f"    _set{i}(self, {value})")
    lines.append("    return self")
    return typing.cast(_Decoder, _exec("decode", lines, ns))


def _compile_encoder(declared: list[WireField], *, short: bool) -> _Encoder:
    ns: dict[str, Any] = {"_overflow": _overflow, "_repr": int.__repr__}
    lines = ["def encode(self):", "    out = {}"]
    for w in declared:
        key = repr(_key(w, short))
        lines.append(f"    v = self.{w.attr}")
        pad = "    "
        if not w.required:
            lines.append("    if v is not None:")
            pad = "        "
        if w.kind is WireKind.STR:
            lines.append(f"{pad}out[{key}] = v")
        elif w.kind is WireKind.BOOL:
            lines.append(f"{pad}out[{key}] = 'true' if v else 'false'")
        else:
            lo, hi, _ = _RANGES[w.kind]
            lines.append(f"{pad}if not {lo} <= v <= {hi}: _overflow({key}, v, {w.kind.value!r})")
            # int.__repr__ keeps IntFlag values (sysFlag) decimal on every Python version.
            lines.append(f"{pad}out[{key}] = _repr(v)")
    lines.append("    return out")
    return typing.cast(_Encoder, _exec("encode", lines, ns))


def _exec(name: str, lines: list[str], ns: dict[str, Any]) -> object:
    # The source holds only identifiers and repr()s of the declared keys.
    exec("\n".join(lines), ns)
    return ns[name]


# ============================================================================================
# JSON bodies

_INT32_BITS = 32
_INT64_BITS = 64
DECIMAL: Final = re.compile(r"[+-]?[0-9]{1,20}")  # what Java's Long.parseLong accepts, bounded


def _expected(what: str, value: Any) -> ValueError:
    return ValueError(f"expected {what}, got {type(value).__name__}")


def as_object(value: Any, where: str) -> dict[Any, Any]:
    """``value`` if it is a decoded JSON object.

    Raises:
        RemoteProtocolError: it is not.
    """
    return _checked(value, dict, "a JSON object", where)


def _checked(value: Any, kind: type[_T], what: str, where: str) -> _T:
    if not isinstance(value, kind):
        raise RemoteProtocolError(f"{where}: expected {what}, got {type(value).__name__}")
    return value


def _int(value: Any, bits: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and DECIMAL.fullmatch(value):
        number = int(value)
    else:
        raise _expected("an integer", value)
    limit = 1 << (bits - 1)
    if not -limit <= number < limit:
        raise ValueError(f"{number} does not fit a {bits}-bit integer")
    return number


def as_int(value: Any, where: str, bits: int = _INT64_BITS) -> int:
    """A Java int or long: an integer, or a decimal string (Go, C++), within ``bits``.

    Raises:
        RemoteProtocolError: it is neither, or out of range.
    """
    try:
        return _int(value, bits)
    except ValueError as exc:
        raise RemoteProtocolError(f"{where}: {exc}") from None


def _int32(value: Any) -> int:
    return _int(value, _INT32_BITS)


def _int64(value: Any) -> int:
    return _int(value, _INT64_BITS)


def _bool(value: Any) -> bool:
    # fastjson's castToBoolean also takes 0/1 and the strings "true"/"false"/"1"/"0".
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return value == 1
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise _expected("a boolean", value)


def _float(value: Any) -> float:
    if isinstance(value, bool):
        raise _expected("a number", value)
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            raise _expected("a number", value) from None
    else:
        raise _expected("a number", value)
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not a finite number")
    return number


#: A Java ``int`` member (numeric strings accepted).
Int32 = Annotated[int, PlainValidator(_int32)]
#: A Java ``long`` member (numeric strings accepted).
Int64 = Annotated[int, PlainValidator(_int64)]
#: A Java ``boolean`` member (``0``/``1`` and ``"true"``/``"false"`` accepted).
Bool = Annotated[bool, PlainValidator(_bool)]
#: A Java ``double`` member: finite, numeric strings accepted; written as 0.0 when not finite.
Float = Annotated[float, PlainValidator(_float)]


def java_enum(names: tuple[str, ...]) -> Any:
    """The reader of a Java enum member with the constants ``names`` in ordinal order.

    A name passes as it is (unknown names too, for newer peers); an ordinal (C++) becomes
    its name. Use as ``Annotated[str, java_enum(NAMES)]``; pair it with
    `BLANK_IS_ABSENT`, as fastjson reads ``""`` as a null enum.
    """

    def read(value: Any) -> str:
        if isinstance(value, str) and not DECIMAL.fullmatch(value):
            return value
        index = _int(value, _INT32_BITS)
        if not 0 <= index < len(names):
            raise ValueError(f"no constant with ordinal {index}")
        return names[index]

    return PlainValidator(read)


def message_queue_to_dict(mq: MessageQueue) -> dict[str, Any]:
    """Return ``mq`` as fastjson writes a ``MessageQueue`` bean."""
    return {"brokerName": mq.broker_name, "queueId": mq.queue_id, "topic": mq.topic}


def message_queue_from_dict(value: Any, where: str = "MessageQueue") -> MessageQueue:
    """Read a ``MessageQueue`` from a decoded JSON object or an object key.

    Raises:
        RemoteProtocolError: ``value`` is not an object with ``topic`` and ``brokerName``
            strings and an int32 ``queueId``.
    """
    if isinstance(value, fastjson.ObjectKey):
        value = value.to_dict()
    obj = as_object(value, where)
    topic, broker = obj.get("topic"), obj.get("brokerName")
    if topic is None or broker is None:
        raise RemoteProtocolError(
            f"{where}.{'topic' if topic is None else 'brokerName'} is missing"
        )
    queue_id = obj.get("queueId")
    return MessageQueue(
        topic=_checked(topic, str, "a string", f"{where}.topic"),
        broker_name=_checked(broker, str, "a string", f"{where}.brokerName"),
        queue_id=0 if queue_id is None else as_int(queue_id, f"{where}.queueId", _INT32_BITS),
    )


def _unique(queues: tuple[MessageQueue, ...]) -> tuple[MessageQueue, ...]:
    # Java holds these in a HashSet: drop duplicates, keep the first-seen order.
    return tuple(dict.fromkeys(queues))


#: A ``MessageQueue`` bean, or an object key standing for one.
MQ = Annotated[MessageQueue, PlainValidator(message_queue_from_dict)]
#: A ``Set<MessageQueue>``: duplicates dropped, first-seen order kept.
MQSet = Annotated[tuple[MQ, ...], AfterValidator(_unique)]


class _Flag(NamedTuple):
    name: str


#: Field metadata: the member is left out when the field is ``None`` (fastjson omits nulls).
OMIT_IF_NONE: Final = _Flag("omit if none")
#: Field metadata: an empty string reads as absent (takes the decoding default).
BLANK_IS_ABSENT: Final = _Flag("blank is absent")


def member(name: str | None = None, *, default: Any = PydanticUndefined) -> Any:
    """Field metadata for `Body` fields: the wire ``name`` when it is not the camelCase
    of the attribute (``clientID``, ``droped``), and the ``default`` decoding uses for an
    absent member when the constructor has no default (``Annotated[int, member(default=0)]``).
    """
    return Field(alias=name, default=default)


class _Member(NamedTuple):
    attr: str
    key: str
    omit_if_none: bool
    blank_is_absent: bool


def _members(cls: type[Body]) -> tuple[_Member, ...]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in dataclasses.fields(typing.cast(Any, cls)):
        meta = getattr(hints[f.name], "__metadata__", ())
        alias = next((m.alias for m in meta if getattr(m, "alias", None)), None)
        out.append(
            _Member(
                f.name, alias or to_camel(f.name), OMIT_IF_NONE in meta, BLANK_IS_ABSENT in meta
            )
        )
    return tuple(sorted(out, key=lambda m: java_order(m.key)))


def java_order(text: str) -> bytes:
    """A sort key in Java's ``String.compareTo`` order (UTF-16 code units)."""
    return text.encode("utf-16-be", "surrogatepass")


_SCALARS = frozenset((str, int, bool))


def _write(value: Any) -> Any:
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Body):
        return value.to_dict()
    if isinstance(value, MessageQueue):
        return message_queue_to_dict(value)
    if isinstance(value, tuple | list):
        return [_write(v) for v in value]
    if isinstance(value, dict):
        # Maps are written sorted, as Java's TreeMaps iterate (and for stable bytes).
        return {k: _write(value[k]) for k in sorted(value)}
    if isinstance(value, float) and not math.isfinite(value):
        return 0.0  # fastjson writes NaN/Infinity as null, which a Java reader turns into 0
    return value


class Body:
    """Base of the JSON bodies: a frozen, slotted dataclass whose fields are the bean's members.

    Subclasses declare fields with the readers of this module; ``_constants`` holds members
    written with a fixed value and ignored on reading (``filterServerTable``).
    """

    __slots__ = ()

    __pydantic_config__: ClassVar[ConfigDict] = ConfigDict(alias_generator=to_camel)
    _constants: ClassVar[dict[str, Any]] = {}

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """Read ``null`` (and ``""`` where declared) members as absent before validation."""
        schema = handler(source)
        blank = {m.key for m in _members(cls) if m.blank_is_absent}

        def drop_unset(value: Any) -> Any:
            if not isinstance(value, dict):
                raise _expected("a JSON object", value)
            return {
                k: v for k, v in value.items() if v is not None and not (v == "" and k in blank)
            }

        return core_schema.no_info_before_validator_function(drop_unset, schema)

    @classmethod
    def _adapter(cls) -> TypeAdapter[Self]:
        adapter = cls.__dict__.get("_pydantic_adapter")
        if adapter is None:
            adapter = TypeAdapter(cls)
            cls._pydantic_adapter = adapter  # type: ignore[attr-defined]
            cls._layout = _members(cls)  # type: ignore[attr-defined]
        return typing.cast("TypeAdapter[Self]", adapter)

    @classmethod
    def from_dict(cls, value: Any, where: str | None = None) -> Self:
        """Read the bean from decoded JSON (``where`` names it in error messages).

        Raises:
            RemoteProtocolError: a mandatory member is missing or a member is malformed.
        """
        return cls._read(value, where)

    @classmethod
    def _read(cls, value: Any, where: str | None) -> Self:
        # from_dict's work, for subclasses that override it to read some value first.
        try:
            return cls._adapter().validate_python(value)
        except _ValidationError as exc:
            raise _protocol_error(exc, where or cls.__name__) from None

    @classmethod
    def from_json(cls, data: bytes | str) -> Self:
        """Decode the body.

        Raises:
            RemoteProtocolError: the body is not JSON or not a valid bean.
        """
        return cls.from_dict(fastjson.loads(data))

    def to_dict(self) -> dict[str, Any]:
        """Return the bean as fastjson writes it: members in alphabetical order."""
        cls = type(self)
        if "_layout" not in cls.__dict__:
            cls._adapter()
        layout: tuple[_Member, ...] = cls._layout  # type: ignore[attr-defined]
        out: dict[str, Any] = {}
        constants = self._constants
        for m in layout:
            value = getattr(self, m.attr)
            if value is None and m.omit_if_none:
                continue
            out[m.key] = _write(value)
        if constants:
            out.update(constants)
            out = {k: out[k] for k in sorted(out, key=java_order)}
        return out

    def to_json(self) -> bytes:
        """Encode the body."""
        return fastjson.dumps(self.to_dict())


def _protocol_error(exc: _ValidationError, where: str) -> RemoteProtocolError:
    error = exc.errors(include_url=False)[0]
    path = where
    for part in error["loc"]:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    if error["type"] == "missing":
        return RemoteProtocolError(f"{path} is missing")
    message = error["msg"].removeprefix("Value error, ")
    return RemoteProtocolError(f"{path}: {message}")
