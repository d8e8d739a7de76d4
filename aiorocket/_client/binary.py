"""A request template of the binary (ROCKETMQ) header dialect: the twin of
`RequestTemplate` for clients set to
``serialize_type="rocketmq"``.

The binary header (docs/protocol.md §1.5) is a fixed 21-byte part, the remark and a map of
length-prefixed keys and values. Receivers must not depend on the order of the map's entries
(Java writes them in ``HashMap`` order), so the constant entries are encoded once, first, and
the integers that change from one send to the next (a pull's offset, flag and commit offset)
are appended after them: a send packs the fixed part with the opaque and the new lengths, and
formats the integers.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

from aiorocket._protocol.codes import LanguageCode, SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import TemplateBase
from aiorocket.errors import LocalProtocolError

__all__ = ["BinaryRequestTemplate"]

_I32: Final = struct.Struct(">i")
_U16: Final = struct.Struct(">H")
_INT32_MAX: Final = 2**31 - 1


class BinaryRequestTemplate(TemplateBase):
    """A request sent again and again with the same fields except a few integer ext fields,
    in the binary header dialect.

    `encode` writes the same command as `encode_command`
    of `command` (the ext entries in another order, which the dialect leaves free).

    Args:
        cmd: the request; its ``opaque`` is replaced at every send and its dialect ignored.
        variable: the ext keys whose (integer) values change.

    Raises:
        LocalProtocolError: ``cmd`` cannot be carried in a binary header (code or version
            beyond int16, an unknown language, an empty or over-long key).
        ValueError: a variable key is not in its ext fields.
    """

    __slots__ = (
        "_body",
        "_cmd",
        "_const_ext",
        "_const_len",
        "_ext_base",
        "_fixed_a",
        "_fixed_b",
        "_keys",
        "_structs",
        "_var_keys",
    )

    serialize_type = SerializeType.ROCKETMQ

    def __init__(self, cmd: RemotingCommand, variable: Sequence[str]) -> None:
        missing = [k for k in variable if k not in cmd.ext_fields]
        if missing:
            raise ValueError(f"variable keys not in the ext fields: {missing}")
        try:
            lang = LanguageCode[cmd.language].value
        except KeyError:
            raise LocalProtocolError(
                f"unknown language {cmd.language!r} for a binary header"
            ) from None
        if not -32768 <= cmd.code <= 32767 or not -32768 <= cmd.version <= 32767:
            raise LocalProtocolError("code or version does not fit the binary header's int16")
        self._cmd = cmd
        self._keys = tuple(variable)
        try:
            remark = cmd.remark.encode("utf-8") if cmd.remark else b""
            const: list[bytes] = []
            for key, value in cmd.ext_fields.items():
                if key in self._keys or not value:
                    continue  # an empty value decodes as absent anyway (§1.5)
                const += (_key_bytes(key), _I32.pack(len(vb := value.encode())), vb)
            self._var_keys = tuple(_key_bytes(k) for k in self._keys)
        except UnicodeEncodeError as exc:
            raise LocalProtocolError(f"cannot encode binary header: {exc}") from None
        const_ext = b"".join(const)
        rlen = len(remark)
        # Everything but the length prefix, the header word, the opaque, the ext map's length
        # and the variable entries' value lengths and values is constant: two runs of bytes
        # around the opaque and one key (with its length) before each variable value.
        self._fixed_a = struct.pack(">hBh", cmd.code, lang, cmd.version)
        self._fixed_b = struct.pack(">ii", cmd.flag, rlen) + remark
        self._const_ext = const_ext
        self._const_len = 21 + rlen + len(const_ext) + sum(len(k) + 4 for k in self._var_keys)
        self._ext_base = self._const_len - 21 - rlen
        if self._const_len + 20 * len(self._var_keys) > 0xFFFFFF:
            # (an int64 has at most 20 characters: encode needs no length check per send)
            raise LocalProtocolError("header longer than 16 MiB")
        self._body = cmd.body
        #: one struct per combination of the value lengths (offsets grow a digit rarely)
        self._structs: dict[object, struct.Struct] = {}

    def _struct(self, lens: tuple[int, ...], key: object) -> struct.Struct:
        """The struct of the whole frame for values of these lengths, cached under ``key``."""
        fmt = [f">iI5si{len(self._fixed_b)}si{len(self._const_ext)}s"]
        for k, n in zip(self._var_keys, lens, strict=True):
            fmt.append(f"{len(k)}si{n}s")
        if len(self._structs) > 64:
            self._structs.clear()
        st = self._structs[key] = struct.Struct("".join(fmt))
        return st

    def encode(self, opaque: int, values: Sequence[int]) -> list[bytes | bytearray | memoryview]:
        """The frame with ``values`` (ints, one per variable key) and ``opaque``, as buffers
        for ``writelines``."""
        var_keys = self._var_keys
        body = self._body
        if len(var_keys) == 3 and not body:
            # A pull's three integers, unrolled: this runs once per pull.
            v0, v1, v2 = values
            a = b"%d" % v0
            b = b"%d" % v1
            c = b"%d" % v2
            la = len(a)
            lb = len(b)
            lc = len(c)
            key = (la << 16) | (lb << 8) | lc  # an int key hashes faster than a tuple
            st = self._structs.get(key) or self._struct((la, lb, lc), key)
            var = la + lb + lc
            hlen = self._const_len + var
            k0, k1, k2 = var_keys
            return [
                st.pack(
                    4 + hlen,
                    0x1000000 | hlen,  # serialize type 1 (ROCKETMQ) in the top byte
                    self._fixed_a,
                    opaque,
                    self._fixed_b,
                    self._ext_base + var,
                    self._const_ext,
                    k0,
                    la,
                    a,
                    k1,
                    lb,
                    b,
                    k2,
                    lc,
                    c,
                )
            ]
        vbs = tuple(map(b"%d".__mod__, values))
        lens = tuple(map(len, vbs))
        if len(lens) != len(var_keys):
            raise ValueError("one value per variable key")
        st = self._structs.get(lens) or self._struct(lens, lens)
        var = sum(lens)
        hlen = self._const_len + var
        length = 4 + hlen + len(body)
        if length > _INT32_MAX or hlen > 0xFFFFFF:
            raise LocalProtocolError("frame longer than 2 GiB or header longer than 16 MiB")
        entries: list[object] = []
        for k, n, vb in zip(var_keys, lens, vbs, strict=True):
            entries += (k, n, vb)
        frame = st.pack(
            length,
            0x1000000 | hlen,
            self._fixed_a,
            opaque,
            self._fixed_b,
            self._ext_base + var,
            self._const_ext,
            *entries,
        )
        return [frame, body] if body else [frame]


def _key_bytes(key: str) -> bytes:
    """An ext key with its int16 length prefix."""
    kb = key.encode("utf-8")
    if not kb or len(kb) > 32767:
        raise LocalProtocolError(f"ext key {key!r} cannot be carried in a binary header")
    return _U16.pack(len(kb)) + kb
