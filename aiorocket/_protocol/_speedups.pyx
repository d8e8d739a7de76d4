# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=False
"""Compiled versions of the codec's hot paths (optional; see ``aiorocket._protocol.accel``).

Each function here does exactly what its pure-Python twin in ``frame.py`` / ``message.py``
does — same results, same errors with the same messages, same order of checks — and the
twins stay the reference: ``tests/protocol`` runs against both. What is faster: fields are
read from the buffer with C loads instead of ``struct``, strings are cut from it without
intermediate slices, and result objects get their slots filled directly instead of through
the dataclass ``__init__``.
"""

from aiorocket._protocol._bigendian cimport u32 as _u32, i32 as _i32, i64 as _i64, u16 as _u16
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.dict cimport PyDict_GetItem, PyDict_SetItem
from cpython.list cimport PyList_Append
from cpython.object cimport PyObject, PyTypeObject
from cpython.ref cimport Py_INCREF, Py_XDECREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memchr

__all__ = [
    "configure_frame",
    "configure_message",
    "decode_binary_header",
    "decode_run",
    "next_command",
]


cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    ctypedef object (*newfunc)(PyTypeObject *, PyObject *, PyObject *)
    object PyUnicode_DecodeLatin1(const char *s, Py_ssize_t size, const char *errors)


# --- filling slotted dataclass instances -------------------------------------------------

cdef class _SlotFiller:
    """Builds instances of a ``slots=True`` dataclass without running its ``__init__``.

    The slot offsets come from the class's member descriptors, so an object built here is
    indistinguishable from one built by ``cls(*fields)``.
    """

    cdef object cls
    cdef Py_ssize_t offsets[24]
    cdef Py_ssize_t count

    def __init__(self, cls, fields):
        self.cls = cls
        self.count = len(fields)
        if self.count > 24:
            raise ValueError("too many fields")
        member_type = type(cls.__dict__[fields[0]])
        for i, name in enumerate(fields):
            descr = cls.__dict__[name]
            if type(descr) is not member_type or member_type.__name__ != "member_descriptor":
                raise TypeError(f"{cls.__name__}.{name} is not a slot")
            self.offsets[i] = (<PyMemberDescrObject *>descr).d_member.offset

    cdef inline object new(self):
        # object.__new__(cls): what the dataclass's own construction starts with.
        cdef newfunc tp_new = <newfunc>(<PyTypeObject *>self.cls).tp_new
        return tp_new(<PyTypeObject *>self.cls, <PyObject *>_EMPTY, NULL)

    cdef inline void put(self, object obj, Py_ssize_t i, object value):
        cdef PyObject **slot = <PyObject **>((<char *><PyObject *>obj) + self.offsets[i])
        Py_INCREF(value)
        Py_XDECREF(slot[0])
        slot[0] = <PyObject *>value


cdef tuple _EMPTY = ()
cdef _SlotFiller _record_filler = None
cdef _SlotFiller _command_filler = None
cdef object _bad = None
cdef object _inflate = None
cdef object _ipv6_text = None
cdef object _ipv4_text = None
cdef dict _ipv4_cache = None
cdef dict _lang_by_ordinal = None
cdef object _protocol_error = None
cdef object _rocketmq_type = None
cdef object _decode_json = None
cdef object _too_large = None
cdef object _need_data = None

_RECORD_FIELDS = (
    "topic", "body", "queue_id", "flag", "queue_offset", "commit_log_offset", "sys_flag",
    "born_timestamp", "born_host", "born_port", "store_timestamp", "store_host", "store_port",
    "reconsume_times", "prepared_transaction_offset", "properties", "body_crc", "store_size",
    "magic",
)
_COMMAND_FIELDS = (
    "code", "opaque", "flag", "language", "version", "remark", "ext_fields", "body",
    "serialize_type",
)


def configure_message(record_cls, bad, inflate, ipv6_text, ipv4_text, dict ipv4_cache):
    """Bind the record class and the helpers of ``message.py`` (called once by it)."""
    global _record_filler, _bad, _inflate, _ipv6_text, _ipv4_text, _ipv4_cache
    _record_filler = _SlotFiller(record_cls, _RECORD_FIELDS)
    _bad, _inflate, _ipv6_text, _ipv4_text, _ipv4_cache = (
        bad, inflate, ipv6_text, ipv4_text, ipv4_cache
    )


def configure_frame(command_cls, dict lang_by_ordinal, protocol_error, rocketmq_type,
                    decode_json, too_large, need_data):
    """Bind the command class and the constants of ``frame.py`` (called once by it)."""
    global _command_filler, _lang_by_ordinal, _protocol_error, _rocketmq_type
    global _decode_json, _too_large, _need_data
    _command_filler = _SlotFiller(command_cls, _COMMAND_FIELDS)
    _lang_by_ordinal, _protocol_error, _rocketmq_type = (
        lang_by_ordinal, protocol_error, rocketmq_type
    )
    _decode_json, _too_large, _need_data = decode_json, too_large, need_data


# --- message records (message.py: _decode_run) ---------------------------------------------

cdef inline object _host4(uint32_t ip):
    cdef object key = ip
    cdef PyObject *hit = PyDict_GetItem(_ipv4_cache, key)
    if hit != NULL and (<object>hit):
        return <object>hit
    return _ipv4_text(key)


cdef dict _properties(bytes buf, const uint8_t *base, Py_ssize_t start, Py_ssize_t end):
    """string2messageProperties over buf[start:end]: split on 0x02, key up to the first 0x01.

    Both separators are ASCII, so they never occur inside a UTF-8 sequence and each piece
    can be decoded alone; any decoding error is re-raised from decoding the whole text, so
    the exception is the one the pure-Python path raises.
    """
    cdef dict props = {}
    cdef Py_ssize_t i = start, j, k
    cdef const uint8_t *sep
    cdef object key, value
    try:
        while i <= end:
            sep = <const uint8_t *>memchr(base + i, 2, end - i)
            j = end if sep == NULL else sep - base
            # item = buf[i:j]
            sep = <const uint8_t *>memchr(base + i, 1, j - i)
            if sep != NULL:
                k = sep - base
                if k > i and k + 1 < j:
                    key = PyUnicode_DecodeUTF8(<const char *>base + i, k - i, NULL)
                    value = PyUnicode_DecodeUTF8(<const char *>base + k + 1, j - k - 1, NULL)
                    props[key] = value
                else:
                    # An empty key or value is skipped, but its bytes must still be UTF-8.
                    PyUnicode_DecodeUTF8(<const char *>base + i, j - i, NULL)
            else:
                PyUnicode_DecodeUTF8(<const char *>base + i, j - i, NULL)
            i = j + 1
    except UnicodeDecodeError:
        buf[start:end].decode()  # raises the exception of the whole text
        raise
    return props


def decode_run(bytes buf, Py_ssize_t pos, Py_ssize_t n, bint decompress, max_body_size,
               bint single):
    """``message._decode_run``: the records from ``pos`` up to ``n`` and the end offset."""
    cdef list out = []
    cdef const uint8_t *b = <const uint8_t *>PyBytes_AS_STRING(buf)
    cdef const uint8_t *h
    cdef Py_ssize_t size, end, p, q, t, body_len, topic_len, props_len, head_size
    cdef Py_ssize_t born_w, store_w, o
    cdef uint32_t magic, crc
    cdef int32_t sys_flag, topic_len_size
    cdef object born_host, store_host, body, topic, properties, rec
    cdef _SlotFiller f = _record_filler
    if n > PyBytes_GET_SIZE(buf):
        raise ValueError("n beyond the buffer")
    while pos < n:
        if n - pos < 91:  # _MIN_RECORD
            raise _bad(pos, f"{n - pos} trailing bytes are not a whole record")
        h = b + pos
        size = _i32(h)
        magic = _u32(h + 4)
        if size < 91 or size > n - pos:
            raise _bad(pos, f"storeSize {size} with {n - pos} bytes left")
        end = pos + size
        if magic == 0xDAA320A7:
            topic_len_size = 1
        elif magic == 0xDAA320AB:
            topic_len_size = 2
        else:
            raise _bad(pos, f"unknown magic code 0x{magic:08X}")
        sys_flag = _i32(h + 36)
        born_w = 16 if sys_flag & 0x10 else 4
        store_w = 16 if sys_flag & 0x20 else 4
        head_size = 80 + born_w + store_w
        if sys_flag & 0x30:
            if head_size + topic_len_size + 2 > size:
                raise _bad(pos, f"storeSize {size} too small for IPv6 hosts")
            born_host = (
                _ipv6_text(PyBytes_FromStringAndSize(<const char *>h + 48, 16))
                if sys_flag & 0x10 else _host4(_u32(h + 48))
            )
            o = 60 + born_w
            store_host = (
                _ipv6_text(PyBytes_FromStringAndSize(<const char *>h + o, 16))
                if sys_flag & 0x20 else _host4(_u32(h + o))
            )
        else:
            born_host = _host4(_u32(h + 48))
            store_host = _host4(_u32(h + 64))
        o = born_w + store_w - 8  # shift of the fields after the hosts
        body_len = _i32(h + 84 + o)
        p = pos + head_size
        if body_len < 0 or p + body_len + topic_len_size + 2 > end:
            raise _bad(pos, f"bodyLength {body_len} overruns the record")
        q = p + body_len
        body = PyBytes_FromStringAndSize(<const char *>b + p, body_len)
        if topic_len_size == 1:
            topic_len = b[q]
            if topic_len > 127:
                raise _bad(pos, f"topic length byte {topic_len} is negative as a Java byte")
            q += 1
        else:
            topic_len = _u16(b + q)
            if topic_len > 32767:
                raise _bad(pos, "topic length is negative as a Java short")
            q += 2
        t = q + topic_len
        if t + 2 > end:
            raise _bad(pos, f"topic length {topic_len} overruns the record")
        props_len = _u16(b + t)
        if t + 2 + props_len != end or props_len > 32767:
            raise _bad(pos, f"propertiesLength {props_len} disagrees with storeSize {size}")
        try:
            topic = PyUnicode_DecodeUTF8(<const char *>b + q, topic_len, NULL)
            properties = _properties(buf, b, t + 2, end) if props_len else {}
        except UnicodeDecodeError as exc:
            raise _bad(pos, f"topic or properties are not UTF-8: {exc}") from None

        if sys_flag & 0x1 and decompress:
            body = _inflate(body, sys_flag, max_body_size, pos)

        rec = f.new()
        f.put(rec, 0, topic)
        f.put(rec, 1, body)
        f.put(rec, 2, _i32(h + 12))
        f.put(rec, 3, _i32(h + 16))
        f.put(rec, 4, _i64(h + 20))
        f.put(rec, 5, _i64(h + 28))
        f.put(rec, 6, sys_flag)
        f.put(rec, 7, _i64(h + 40))
        f.put(rec, 8, born_host)
        f.put(rec, 9, _i32(h + 48 + born_w))
        f.put(rec, 10, _i64(h + 52 + born_w))
        f.put(rec, 11, store_host)
        f.put(rec, 12, _i32(h + 60 + born_w + store_w))
        f.put(rec, 13, _i32(h + 72 + o))
        f.put(rec, 14, _i64(h + 76 + o))
        f.put(rec, 15, properties)
        f.put(rec, 16, _u32(h + 8))
        f.put(rec, 17, size)
        f.put(rec, 18, magic)
        PyList_Append(out, rec)
        pos = end
        if single:
            break
    return out, pos


# --- binary headers (frame.py: _decode_binary_header) -------------------------------------

cdef inline object _text(const uint8_t *p, Py_ssize_t k):
    return PyUnicode_DecodeUTF8(<const char *>p, k, NULL)


cdef object _binary_header(const uint8_t *raw, Py_ssize_t n, object body):
    cdef Py_ssize_t pos, rlen, elen, klen, kstart, kend, vlen, vstart
    cdef dict ext = {}
    cdef object remark, cmd, key, value
    cdef PyObject *lang_name
    cdef _SlotFiller f = _command_filler
    if n < 21:
        raise _protocol_error("binary header shorter than 21 bytes")
    rlen = _i32(raw + 13)
    pos = 17
    if rlen < 0 or pos + rlen + 4 > n:
        raise _protocol_error("binary header remark overruns the header")
    try:
        remark = _text(raw + pos, rlen) if rlen else None
        pos += rlen
        elen = _i32(raw + pos)
        pos += 4
        if elen < 0 or pos + elen != n:
            raise _protocol_error("binary header ext map length does not match the header")
        while pos < n:
            if pos + 1 >= n:
                raise _protocol_error("truncated ext key length")
            klen = _u16(raw + pos)
            kstart = pos + 2
            kend = kstart + klen
            if klen > 32767 or kend + 4 > n:
                raise _protocol_error("ext key overruns the header")
            vlen = _i32(raw + kend)
            vstart = kend + 4
            pos = vstart + vlen
            if vlen < 0 or pos > n:
                raise _protocol_error("ext value overruns the header")
            if klen and vlen:
                value = _text(raw + vstart, vlen)
                key = _text(raw + kstart, klen)
                ext[key] = value
    except UnicodeDecodeError:
        raise _protocol_error("binary header string is not UTF-8") from None
    lang_name = PyDict_GetItem(_lang_by_ordinal, raw[2])
    cmd = f.new()
    f.put(cmd, 0, <int16_t>_u16(raw))
    f.put(cmd, 1, _i32(raw + 5))
    f.put(cmd, 2, _i32(raw + 9))
    f.put(cmd, 3, "OTHER" if lang_name == NULL else <object>lang_name)
    f.put(cmd, 4, <int16_t>_u16(raw + 3))
    f.put(cmd, 5, remark)
    f.put(cmd, 6, ext)
    f.put(cmd, 7, body)
    f.put(cmd, 8, _rocketmq_type)
    return cmd


def decode_binary_header(bytes raw, bytes body):
    """``frame._decode_binary_header``: the command of a binary header and its body."""
    return _binary_header(<const uint8_t *>PyBytes_AS_STRING(raw), PyBytes_GET_SIZE(raw), body)


# --- frame split (frame.py: FrameDecoder.next_command) -------------------------------------

def next_command(self):
    """``FrameDecoder.next_command``: the next whole command, or ``NEED_DATA``.

    Installed as the method of ``FrameDecoder`` (a Cython function binds like a Python one);
    it reads the decoder's slots and decodes a binary header straight from the buffer.
    """
    if self._error is not None:
        raise self._error
    cdef bytearray buf = self._buf
    cdef Py_ssize_t pos = self._pos, n = self._end, avail = n - pos
    cdef Py_ssize_t max_size = self._max, length, end, hlen, hend
    cdef uint32_t word, stype
    cdef const uint8_t *b
    cdef object body, cmd
    if n > PyByteArray_GET_SIZE(buf) or pos < 0:
        raise ValueError("decoder state beyond its buffer")
    b = <const uint8_t *>PyByteArray_AS_STRING(buf)
    if avail < 8:
        if avail >= 4:
            length = _i32(b + pos)
            if length < 4 or length > max_size:
                self._error = _too_large(length, max_size)
                raise self._error
        elif avail == 0:
            self._reset()
        return _need_data
    length = _i32(b + pos)
    word = _u32(b + pos + 4)
    if length < 4 or length > max_size:
        self._error = _too_large(length, max_size)
        raise self._error
    end = pos + 4 + length
    if end > n:
        return _need_data
    self._pos = end
    hlen = word & 0xFFFFFF
    try:
        if hlen > length - 4:
            raise _protocol_error(f"header length {hlen} exceeds frame length {length}")
        hend = pos + 8 + hlen
        body = PyBytes_FromStringAndSize(<const char *>b + hend, end - hend) if hend < end else b""
        stype = word >> 24
        if stype == 1:
            cmd = _binary_header(b + pos + 8, hlen, body)
        elif stype == 0:
            cmd = _decode_json(PyBytes_FromStringAndSize(<const char *>b + pos + 8, hlen), body)
        else:
            raise _protocol_error(f"unknown serialize type {stype}")
    except BaseException as exc:
        if isinstance(exc, _protocol_error):
            self._error = exc
        raise
    if end == n:
        self._reset()
    return cmd
