"""Frames and the two header dialects of the remoting protocol (docs/protocol.md §1.2–1.8).

Rules of this module, in the manner of h11:

* `FrameDecoder.feed` only buffers; `FrameDecoder.next_command` returns one
  `RemotingCommand` or the `NEED_DATA` sentinel. No I/O, no clock.
* The length prefix is checked against the frame cap before anything is buffered for the frame
  or allocated for it; a bad prefix, a header that overruns its frame, an unknown serialize type
  or a malformed header raise [`RemoteProtocolError`][aiorocket.errors.RemoteProtocolError], and the
  decoder stays poisoned: every later call raises the same error (the stream position can no longer
      be trusted).
* Encoding returns bytes (or a list of buffers for ``writelines``) in the dialect recorded in
  ``command.serialize_type``; a response is built in the dialect of its request.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Final

from aiorocket._protocol import accel
from aiorocket._protocol.codes import LanguageCode, SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket.errors import FrameTooLargeError, LocalProtocolError, RemoteProtocolError

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "NEED_DATA",
    "FrameDecoder",
    "NeedData",
    "RequestTemplate",
    "TemplateBase",
    "decode_frame",
    "encode_command",
    "encode_command_parts",
]

#: ``com.rocketmq.remoting.frameMaxLength`` default: 16 MiB (§1.2).
DEFAULT_MAX_FRAME_SIZE: Final = 16 * 1024 * 1024


class NeedData(enum.Enum):
    """Type of `NEED_DATA`: the decoder needs more bytes before the next command."""

    NEED_DATA = "NEED_DATA"

    def __repr__(self) -> str:
        return "NEED_DATA"


#: Returned by `FrameDecoder.next_command` when no whole frame is buffered.
NEED_DATA: Final = NeedData.NEED_DATA

_INT32 = struct.Struct(">i")
_PREFIX = struct.Struct(">iI")  # frameLength, headerWord
_BIN_FIXED = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remarkLength
_I16 = struct.Struct(">h")
_U16 = struct.Struct(">H")
_I32 = struct.Struct(">i")
_HEADER_LEN_MASK = 0xFFFFFF
# Receive buffer: its first size, the free space offered to each read, and the size above
# which an emptied buffer is replaced by a first-size one.
_INITIAL_CAPACITY = 64 * 1024
_MIN_FREE = 16 * 1024
_SHRINK_ABOVE = 1024 * 1024
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

_LANG_BY_ORDINAL: Final = {m.value: m.name for m in LanguageCode}
_ORDINAL_BY_LANG: Final = {m.name: m.value for m in LanguageCode}
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# What _COMPACT quotes text with (ensure_ascii=False), and json.loads's decoder.
_json_str: Final = json.encoder.encode_basestring
_JSON_DECODER: Final = json.JSONDecoder()
_JSON_RAW_DECODE: Final = _JSON_DECODER.raw_decode


class FrameDecoder:
    """Incremental decoder of a byte stream into `RemotingCommand` objects.

    Bytes arrive either through `feed` (a copy) or, from an ``asyncio.BufferedProtocol``,
    straight into the decoder's own buffer: `get_buffer`, the transport's ``recv_into``,
    then `buffer_updated`. The second way allocates nothing per read (a plain
    ``Protocol`` gets a fresh 256 KiB ``bytes`` from every ``recv``).

    Args:
        max_frame_size: largest accepted ``frameLength``; larger (or negative) prefixes raise
            [`FrameTooLargeError`][aiorocket.errors.FrameTooLargeError] as soon as the 4-byte prefix
            is buffered.
    """

    __slots__ = ("_buf", "_end", "_error", "_max", "_pos", "_view")

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 8:
            raise ValueError("max_frame_size must be at least 8")
        self._max = max_frame_size
        self._error: RemoteProtocolError | None = None
        # Unparsed bytes are _buf[_pos:_end]. The buffer is never resized in place (a view of
        # it may be lent to a transport): it is replaced when it must grow or shrink.
        self._buf = bytearray()  # allocated by the first read or feed
        self._view = memoryview(self._buf)
        self._pos = 0
        self._end = 0

    @property
    def buffered(self) -> int:
        """Bytes fed but not yet returned as commands."""
        return self._end - self._pos

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes; never parses, never raises."""
        k = len(data)
        if k > len(self._buf) - self._end:
            self._make_room(k)
        end = self._end
        self._buf[end : end + k] = data
        self._end = end + k

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """A writable view of free buffer space for the next read (``BufferedProtocol``).

        At least `_MIN_FREE` bytes, and room for the rest of a frame whose length prefix
        is already buffered, so a large frame is received in place instead of piecewise.
        """
        need = _MIN_FREE if sizehint <= _MIN_FREE else sizehint
        if not self._buf:
            need = max(need, _INITIAL_CAPACITY)
        pos, end = self._pos, self._end
        if end - pos >= 4:
            (length,) = _INT32.unpack_from(self._buf, pos)
            # An invalid prefix gets no room: next_command raises for it.
            if 4 <= length <= self._max and pos + 4 + length - end > need:
                need = pos + 4 + length - end
        if need > len(self._buf) - end:
            self._make_room(need)
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        """Record that the last `get_buffer` view received ``nbytes`` bytes."""
        self._end += nbytes

    def _make_room(self, need: int) -> None:
        """Make ``need`` bytes free after the unparsed ones: move them to the front of the
        buffer, or into a larger one."""
        pos, end = self._pos, self._end
        held = end - pos
        cap = len(self._buf)
        if held + need <= cap and pos:
            # bytes() first: the two regions may overlap.
            self._buf[:held] = bytes(self._view[pos:end])
        else:
            new_cap = max(cap * 2, held + need)
            buf = bytearray(new_cap)
            buf[:held] = self._view[pos:end]
            self._buf = buf
            self._view = memoryview(buf)
        self._pos = 0
        self._end = held

    def next_command(self) -> RemotingCommand | NeedData:
        """Return the next whole command, or `NEED_DATA`.

        Raises:
            FrameTooLargeError: the length prefix is negative, below 4 or over the cap.
            RemoteProtocolError: the frame is malformed; the decoder is poisoned.
        """
        if self._error is not None:
            raise self._error
        buf, pos, n = self._buf, self._pos, self._end
        avail = n - pos
        if avail < 8:
            # No frame (at least 4 + 4 bytes) is whole yet, but a bad prefix fails at once.
            if avail >= 4:
                (length,) = _INT32.unpack_from(buf, pos)
                if length < 4 or length > self._max:
                    self._error = FrameTooLargeError(length, self._max)
                    raise self._error
            elif avail == 0:
                self._reset()
            return NEED_DATA
        # The length prefix and the header word in one unpack: the per-frame hot path.
        length, word = _PREFIX.unpack_from(buf, pos)
        if length < 4 or length > self._max:
            self._error = FrameTooLargeError(length, self._max)
            raise self._error
        end = pos + 4 + length
        if end > n:
            return NEED_DATA
        self._pos = end
        hlen = word & _HEADER_LEN_MASK
        view = self._view
        try:
            if hlen > length - 4:
                raise RemoteProtocolError(f"header length {hlen} exceeds frame length {length}")
            hend = pos + 8 + hlen
            # One copy each, straight from the receive buffer.
            body = bytes(view[hend:end]) if hend < end else b""
            stype = word >> 24
            if stype == 1:
                cmd = _decode_binary_header_impl(bytes(view[pos + 8 : hend]), body)
            elif stype == 0:
                cmd = _decode_json_header(bytes(view[pos + 8 : hend]), body)
            else:
                raise RemoteProtocolError(f"unknown serialize type {stype}")
        except RemoteProtocolError as exc:
            self._error = exc
            raise
        if end == n:
            self._reset()
        return cmd

    def _reset(self) -> None:
        # Everything parsed: the next read starts at the front again. A buffer grown for a
        # large frame is given back.
        self._pos = self._end = 0
        if len(self._buf) > _SHRINK_ABOVE:
            self._buf = bytearray()
            self._view = memoryview(self._buf)


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode exactly one whole frame (length prefix included).

    Raises:
        RemoteProtocolError: the bytes are not exactly one valid frame.
    """
    decoder = FrameDecoder(max_frame_size=max(8, len(frame)))
    decoder.feed(frame)
    cmd = decoder.next_command()
    if cmd is NEED_DATA or decoder.buffered:
        raise RemoteProtocolError("not exactly one whole frame")
    return cmd


def _as_int(value: Any, name: str, lo: int = _INT32_MIN, hi: int = _INT32_MAX) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise RemoteProtocolError(f"header field {name!r} is not an integer")
    try:
        n = int(value)
    except ValueError:
        raise RemoteProtocolError(f"header field {name!r} is not an integer") from None
    if not lo <= n <= hi:
        raise RemoteProtocolError(f"header field {name!r} out of range")
    return n


def _ext_value(value: Any) -> str | None:
    # docs/protocol.md §1.8: C++ and ali-ons send numbers and booleans raw; Java reads every value
    # as text, so coerce them to the text Java would have seen.
    if isinstance(value, str):
        return value
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return None
    if isinstance(value, int | float):
        return str(value)
    raise RemoteProtocolError("extFields values must be scalars")


def _load_json(raw: bytes) -> Any:
    """``json.loads(raw)``, without its detours for the usual header.

    ``json.loads`` on bytes first guesses the encoding (``json.detect_encoding``): bytes that
    start with ``{`` and a non-zero byte are UTF-8 to it, decoded with ``surrogatepass``. Such a
    header is decoded the same way here and scanned directly when nothing follows the object;
    anything else takes the ``json.loads`` path, so results and errors are the same.
    """
    if raw[:1] == b"{" and raw[1:2] != b"\x00":
        text = raw.decode("utf-8", "surrogatepass")
        obj, end = _JSON_RAW_DECODE(text)
        if end == len(text):
            return obj
        return _JSON_DECODER.decode(text)  # trailing whitespace, or "Extra data"
    return json.loads(raw)


def _decode_json_header(raw: bytes, body: bytes) -> RemotingCommand:
    """The command of a JSON header (§1.4) and its body.

    Raises:
        RemoteProtocolError: the header is not valid JSON or a field has the wrong type.
    """
    try:
        obj = _load_json(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError
        raise RemoteProtocolError(f"invalid JSON header: {exc}") from None
    if not isinstance(obj, dict):
        raise RemoteProtocolError("JSON header is not an object")
    if "code" not in obj:
        raise RemoteProtocolError("JSON header has no code")
    get = obj.get
    language = get("language", "JAVA")
    if not isinstance(language, str):
        language = _LANG_BY_ORDINAL.get(_as_int(language, "language"), "OTHER")
    remark = get("remark")
    if remark is not None and not isinstance(remark, str):
        raise RemoteProtocolError("header field 'remark' is not a string")
    raw_ext = get("extFields")
    ext: dict[str, str] = {}
    if raw_ext is not None:
        if not isinstance(raw_ext, dict):
            raise RemoteProtocolError("header field 'extFields' is not an object")
        for k, v in raw_ext.items():
            sv = v if type(v) is str else _ext_value(v)
            if sv is not None:
                ext[k] = sv
    # Plain ints in range pass as they are; anything else goes through _as_int (which
    # converts numeric text and raises for the rest), in the order code, opaque, flag, version.
    code = obj["code"]
    if type(code) is not int or not _INT32_MIN <= code <= _INT32_MAX:
        code = _as_int(code, "code")
    opaque = get("opaque", 0)
    if type(opaque) is not int or not _INT32_MIN <= opaque <= _INT32_MAX:
        opaque = _as_int(opaque, "opaque")
    flag = get("flag", 0)
    if type(flag) is not int or not _INT32_MIN <= flag <= _INT32_MAX:
        flag = _as_int(flag, "flag")
    version = get("version", 0)
    if type(version) is not int or not _INT32_MIN <= version <= _INT32_MAX:
        version = _as_int(version, "version")
    return RemotingCommand(
        code, opaque, flag, language, version, remark, ext, body, SerializeType.JSON
    )


def _decode_binary_header(raw: bytes, body: bytes) -> RemotingCommand:
    """The command of a binary (ROCKETMQ) header (§1.5) and its body.

    Raises:
        RemoteProtocolError: a length overruns the header, or a string is not UTF-8.
    """
    n = len(raw)
    if n < 21:
        raise RemoteProtocolError("binary header shorter than 21 bytes")
    code, lang, version, opaque, flag, rlen = _BIN_FIXED.unpack_from(raw, 0)
    # Lengths count bytes; decoding the whole header as latin-1 maps bytes to characters one
    # to one, so slices of the text line up with the byte offsets. Non-ASCII strings (rare)
    # are re-decoded as UTF-8 below.
    text = raw.decode("latin-1")
    ascii_only = raw.isascii()
    unpack_i32 = _I32.unpack_from
    pos = 17
    if rlen < 0 or pos + rlen + 4 > n:
        raise RemoteProtocolError("binary header remark overruns the header")
    try:
        # Java turns zero-length strings into null (§1.5).
        remark = (
            (text[pos : pos + rlen] if ascii_only else raw[pos : pos + rlen].decode())
            if rlen
            else None
        )
        pos += rlen
        (elen,) = unpack_i32(raw, pos)
        pos += 4
        if elen < 0 or pos + elen != n:
            raise RemoteProtocolError("binary header ext map length does not match the header")
        ext: dict[str, str] = {}
        while pos < n:
            # The int16 key length read from two bytes (cheaper than a struct call; a lone
            # last byte raises IndexError); above 32767 it is negative as Java reads it.
            klen = (raw[pos] << 8) | raw[pos + 1]
            kstart = pos + 2
            kend = kstart + klen
            if klen > 32767 or kend + 4 > n:
                raise RemoteProtocolError("ext key overruns the header")
            (vlen,) = unpack_i32(raw, kend)
            vstart = kend + 4
            pos = vstart + vlen
            if vlen < 0 or pos > n:
                raise RemoteProtocolError("ext value overruns the header")
            if klen and vlen:
                if ascii_only:
                    ext[text[kstart:kend]] = text[vstart:pos]
                else:
                    ext[raw[kstart:kend].decode()] = raw[vstart:pos].decode()
    except IndexError:
        raise RemoteProtocolError("truncated ext key length") from None
    except UnicodeDecodeError:
        raise RemoteProtocolError("binary header string is not UTF-8") from None
    return RemotingCommand(
        code,
        opaque,
        flag,
        _LANG_BY_ORDINAL.get(lang, "OTHER"),
        version,
        remark,
        ext,
        body,
        SerializeType.ROCKETMQ,
    )


# The binary header decoder in use: _decode_binary_header, or its compiled twin (accel.py).
_decode_binary_header_impl: Callable[[bytes, bytes], RemotingCommand] = _decode_binary_header
_next_command_py = FrameDecoder.next_command


def _select(ext: ModuleType | None) -> None:
    """Split frames and decode binary headers with the compiled (``ext``) or the pure-Python
    code (see ``accel.use``)."""
    global _decode_binary_header_impl
    if ext is None:
        _decode_binary_header_impl = _decode_binary_header
        FrameDecoder.next_command = _next_command_py  # type: ignore[method-assign]
    else:
        _decode_binary_header_impl = ext.decode_binary_header
        FrameDecoder.next_command = ext.next_command  # type: ignore[method-assign]


if (_ext := accel.extension()) is not None:
    _ext.configure_frame(
        RemotingCommand,
        _LANG_BY_ORDINAL,
        RemoteProtocolError,
        SerializeType.ROCKETMQ,
        _decode_json_header,
        FrameTooLargeError,
        NEED_DATA,
    )
accel.register(_select)


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    """The JSON header of ``cmd`` as UTF-8 bytes.

    Raises:
        LocalProtocolError: a value JSON or UTF-8 cannot carry.
    """
    # fastjson writes bean properties in alphabetical order and omits nulls (§1.4); keeping
    # that order makes our frames byte-identical to Java's for the same values (§9 V1, V3).
    try:
        text = _json_header_text(cmd)
    except TypeError:
        # Values of other types (an int in extFields, a non-text key...): the general encoder
        # writes or refuses them.
        text = _json_header_text_general(cmd)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise LocalProtocolError(f"cannot encode header: {exc}") from None


def _json_header_text(cmd: RemotingCommand) -> str:
    """The JSON header as text, built directly for the usual types (int fields, text
    everywhere else); exactly what the general encoder writes for them.

    Raises:
        TypeError: a field has another type.
    """
    code, flag, opaque, version = cmd.code, cmd.flag, cmd.opaque, cmd.version
    for n in (code, flag, opaque, version):
        if not isinstance(n, int) or n is True or n is False:
            raise TypeError("not a plain int")
    ext = cmd.ext_fields
    quote = _json_str
    int_text = int.__repr__
    parts = ['{"code":', int_text(code)]
    if ext:
        if not isinstance(ext, dict):
            raise TypeError("extFields is not a dict")
        parts += (
            ',"extFields":{',
            ",".join([quote(k) + ":" + quote(v) for k, v in ext.items()]),
            "}",
        )
    parts += (
        ',"flag":',
        int_text(flag),
        ',"language":',
        quote(cmd.language),
        ',"opaque":',
        int_text(opaque),
    )
    if cmd.remark is not None:
        parts += (',"remark":', quote(cmd.remark))
    parts += (',"serializeTypeCurrentRPC":"JSON","version":', int_text(version), "}")
    return "".join(parts)


def _json_header_text_general(cmd: RemotingCommand) -> str:
    """The JSON header as text through ``json``'s encoder, for any field types.

    Raises:
        LocalProtocolError: a value JSON cannot carry.
    """
    obj: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields:
        obj["extFields"] = cmd.ext_fields
    obj["flag"] = cmd.flag
    obj["language"] = cmd.language
    obj["opaque"] = cmd.opaque
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = cmd.version
    try:
        return _COMPACT.encode(obj)
    except (TypeError, ValueError) as exc:
        raise LocalProtocolError(f"cannot encode header: {exc}") from None


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    lang = _ORDINAL_BY_LANG.get(cmd.language)
    if lang is None:
        raise LocalProtocolError(f"unknown language {cmd.language!r} for a binary header")
    if not -32768 <= cmd.code <= 32767 or not -32768 <= cmd.version <= 32767:
        # The binary dialect carries code and version as int16 (§1.5).
        raise LocalProtocolError("code or version does not fit the binary header's int16")
    try:
        remark = cmd.remark.encode("utf-8") if cmd.remark else b""
        parts: list[bytes] = []
        for key, value in cmd.ext_fields.items():
            if not value:
                continue  # decodes as absent anyway (§1.5)
            kb = key.encode("utf-8")
            vb = value.encode("utf-8")
            if not kb or len(kb) > 32767:
                raise LocalProtocolError(f"ext key {key!r} cannot be carried in a binary header")
            parts += (_U16.pack(len(kb)), kb, _I32.pack(len(vb)), vb)
        ext = b"".join(parts)
        return b"".join(
            (
                _BIN_FIXED.pack(cmd.code, lang, cmd.version, cmd.opaque, cmd.flag, len(remark)),
                remark,
                _I32.pack(len(ext)),
                ext,
            )
        )
    except (struct.error, UnicodeEncodeError) as exc:
        raise LocalProtocolError(f"cannot encode binary header: {exc}") from None


def encode_command_parts(
    cmd: RemotingCommand, body_parts: Sequence[bytes | bytearray | memoryview] | None = None
) -> list[bytes | bytearray | memoryview]:
    """Encode ``cmd`` as a list of buffers suitable for ``transport.writelines``.

    ``body_parts``, when given, replaces ``cmd.body``: the buffers are sent back to back without
    being joined (the embedded broker serves stored records this way, without copying them).

    Raises:
        LocalProtocolError: the command cannot be encoded (header too large, a value that does
            not fit the binary dialect, non-encodable text).
    """
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        header = _encode_binary_header(cmd)
    else:
        header = _encode_json_header(cmd)
    hlen = len(header)
    if hlen > _HEADER_LEN_MASK:
        raise LocalProtocolError("header longer than 16 MiB")
    if body_parts is None:
        blen = len(cmd.body)
        body_parts = (cmd.body,) if blen else ()
    else:
        blen = sum(len(p) for p in body_parts)
    length = 4 + hlen + blen
    if length > _INT32_MAX:
        raise LocalProtocolError("frame longer than 2 GiB")
    prefix = _PREFIX.pack(length, (int(cmd.serialize_type) << 24) | hlen)
    return [prefix + header, *body_parts]


def encode_command(cmd: RemotingCommand) -> bytes:
    """Encode ``cmd`` as one frame (length prefix included).

    Raises:
        LocalProtocolError: as `encode_command_parts`.
    """
    return b"".join(encode_command_parts(cmd))


class TemplateBase:
    """What every request template shares: the request, its variable keys, and the request
    rebuilt with their values (`command`) in the template's dialect."""

    __slots__ = ()

    serialize_type: SerializeType = SerializeType.JSON
    _cmd: RemotingCommand
    _keys: tuple[str, ...]

    @property
    def keys(self) -> tuple[str, ...]:
        """The variable ext keys, in the order `encode` takes their values."""
        return self._keys

    def command(self, values: Sequence[int], opaque: int = 0) -> RemotingCommand:
        """The request with ``values`` filled in, as a `RemotingCommand` in the
        template's dialect."""
        cmd = self._cmd
        ext = dict(cmd.ext_fields)
        for key, value in zip(self._keys, values, strict=True):
            ext[key] = str(value)
        return RemotingCommand(
            cmd.code,
            opaque,
            cmd.flag,
            cmd.language,
            cmd.version,
            cmd.remark,
            ext,
            cmd.body,
            self.serialize_type,
        )


class RequestTemplate(TemplateBase):
    """A request sent again and again with the same fields except a few integer ext fields
    (a queue's PULL_MESSAGE: offset, flag and commit offset change, nine fields do not).

    Its JSON header is rendered once with the general encoder; `encode` fills in the
    integers and the opaque by ``%`` formatting, which writes an int exactly as ``str`` does,
    so the frame is byte-identical to `encode_command_parts` of `command`.

    Args:
        cmd: the request, JSON dialect; its ``opaque`` is replaced at every send.
        variable: the ext keys whose (integer) values change.

    Raises:
        LocalProtocolError: ``cmd`` cannot be encoded.
        ValueError: ``cmd`` is not in the JSON dialect, or a variable key is not in its ext
            fields.
    """

    __slots__ = ("_cmd", "_fmt", "_keys", "_order")

    def __init__(self, cmd: RemotingCommand, variable: Sequence[str]) -> None:
        if cmd.serialize_type != SerializeType.JSON:
            raise ValueError("request templates use the JSON header")
        missing = [k for k in variable if k not in cmd.ext_fields]
        if missing:
            raise ValueError(f"variable keys not in the ext fields: {missing}")
        self._cmd = cmd
        self._keys = tuple(variable)
        # Render with a marker in place of each integer, then turn the markers into %d (after
        # doubling any literal %, which a group or topic name may contain). The markers are
        # built from a character run found nowhere else in the header.
        tag = "@"
        while tag in _json_header_text_general(cmd):
            tag += "@"
        markers = [f"{tag}{i}{tag}" for i in range(len(self._keys) + 1)]
        probe = RemotingCommand(
            cmd.code,
            0,
            cmd.flag,
            cmd.language,
            cmd.version,
            cmd.remark,
            {**cmd.ext_fields, **dict(zip(self._keys, markers, strict=False))},
            b"",
            SerializeType.JSON,
        )
        text = _json_header_text_general(probe).replace("%", "%%")
        text = text.replace('"opaque":0,', '"opaque":' + markers[-1] + ",", 1)
        # The integers go in the order their fields appear in the header.
        order = sorted(range(len(markers)), key=lambda i: text.index(markers[i]))
        self._order = None if order == list(range(len(markers))) else tuple(order)
        for marker in markers:
            text = text.replace(marker, "%d")
        self._fmt = text.encode("utf-8")

    def encode(self, opaque: int, values: Sequence[int]) -> list[bytes | bytearray | memoryview]:
        """The frame with ``values`` (ints, one per variable key) and ``opaque``, as buffers
        for ``writelines``."""
        if self._order is None:
            header = self._fmt % (*values, opaque)
        else:
            args = (*values, opaque)
            header = self._fmt % tuple([args[i] for i in self._order])
        hlen = len(header)
        body = self._cmd.body
        prefix = _PREFIX.pack(4 + hlen + len(body), hlen)
        return [prefix + header, body] if body else [prefix + header]
