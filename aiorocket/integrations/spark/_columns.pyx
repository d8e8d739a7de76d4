# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=False
"""Pull bodies straight into Arrow column buffers (optional; see ``columns.py``).

:class:`ColumnBuilder` walks the stored records of a pull body (docs/protocol.md §4.1) and
appends each record's fields to growing C buffers laid out as Arrow wants them (offsets, data,
validity), so an executor builds no Python object per row. It checks each record exactly as
``message._decode_run`` does (same order of checks, same errors) and gives the same values
as the reference path (records → ``ReceivedMessage`` → ``source._record_batch``), which
``tests/spark/test_columns.py`` compares on real and mutated bodies.
"""

from aiorocket._protocol._bigendian cimport u32 as _u32, i32 as _i32, i64 as _i64, u16 as _u16
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memchr, memcmp, memcpy, memset

__all__ = ["ColumnBuilder"]


# --- growable buffers ---------------------------------------------------------------------

cdef struct Buf:
    char *p
    Py_ssize_t n
    Py_ssize_t cap


cdef int _grow(Buf *b, Py_ssize_t need) except -1:
    cdef Py_ssize_t cap = b.cap * 2 if b.cap else 4096
    cdef char *p
    while cap < b.n + need:
        cap *= 2
    p = <char *>PyMem_Realloc(b.p, cap)
    if p == NULL:
        raise MemoryError()
    b.p = p
    b.cap = cap
    return 0


cdef inline int _put(Buf *b, const void *src, Py_ssize_t k) except -1:
    if b.n + k > b.cap:
        _grow(b, k)
    memcpy(b.p + b.n, src, k)
    b.n += k
    return 0


cdef inline int _i32put(Buf *b, int32_t v) except -1:
    return _put(b, &v, 4)


cdef inline int _i64put(Buf *b, int64_t v) except -1:
    return _put(b, &v, 8)


cdef inline bytes _take(Buf *b):
    cdef bytes out = PyBytes_FromStringAndSize(b.p, b.n)
    b.n = 0
    return out


# --- text helpers ---------------------------------------------------------------------------

cdef inline bint _ascii(const uint8_t *p, Py_ssize_t k) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(k):
        if p[i] & 0x80:
            return False
    return True


cdef inline bint _space(uint8_t c) noexcept nogil:
    # str.isspace() of the ASCII range: what str.split() splits KEYS on.
    return c == 32 or 9 <= c <= 13 or 28 <= c <= 31


cdef struct Entry:
    Py_ssize_t k   # key start in the body
    Py_ssize_t kn
    Py_ssize_t v   # value start
    Py_ssize_t vn


cdef const char *_HEX = b"0123456789ABCDEF"

# The column buffers, by index.
cdef enum:
    B_QUEUE_OFFSET
    B_BORN
    B_STORE
    B_RECONSUME
    B_BODY_OFF
    B_BODY
    B_ID_OFF
    B_IDS
    B_TAG_OFF
    B_TAGS
    B_TAG_VALID
    B_KEY_LIST_OFF
    B_KEY_OFF
    B_KEYS
    B_PROP_OFF
    B_PK_OFF
    B_PKS
    B_PV_OFF
    B_PVS
    NBUF

_NAMES = ("queue_offset", "born", "store", "reconsume", "body_off", "body", "id_off", "ids", "tag_off", "tags", "tag_valid", "key_list_off", "key_off", "keys", "prop_off", "pk_off", "pks", "pv_off", "pvs")


cdef class ColumnBuilder:
    """Appends the records of pull bodies to Arrow column buffers; :meth:`take` hands them
    over and starts again.

    Args:
        bad: ``message._bad`` (position, text) → the error of a malformed record.
        inflate: ``message._inflate`` for COMPRESSED bodies (zlib; its errors as in decoding).
        max_body_size: the cap on an inflated body.
    """

    cdef Buf b[NBUF]
    cdef Entry *entries
    cdef Py_ssize_t entries_cap
    cdef Py_ssize_t rows, key_count, prop_count
    cdef object bad, inflate
    cdef Py_ssize_t max_body_size

    def __cinit__(self):
        memset(self.b, 0, sizeof(self.b))
        self.entries = NULL
        self.entries_cap = 0

    def __init__(self, bad, inflate, Py_ssize_t max_body_size):
        self.bad = bad
        self.inflate = inflate
        self.max_body_size = max_body_size
        self._start()

    def __dealloc__(self):
        cdef int i
        for i in range(NBUF):
            PyMem_Free(self.b[i].p)
            self.b[i].p = NULL
        PyMem_Free(self.entries)

    cdef int _start(self) except -1:
        # Every offsets buffer starts with the 0 of row 0.
        self.rows = 0
        self.key_count = 0
        self.prop_count = 0
        cdef int i
        for i in range(NBUF):
            self.b[i].n = 0
        for i in (B_BODY_OFF, B_ID_OFF, B_TAG_OFF, B_KEY_LIST_OFF, B_KEY_OFF, B_PROP_OFF,
                  B_PK_OFF, B_PV_OFF):
            _i32put(&self.b[i], 0)
        return 0

    @property
    def rows(self):
        """Rows appended since the last :meth:`take`."""
        return self.rows

    @property
    def nbytes(self):
        """The largest data buffer (bodies, most of the time), in bytes: Arrow's 32-bit
        offsets need a batch to stay under 2 GiB."""
        return max(self.b[B_BODY].n, self.b[B_PKS].n + self.b[B_PVS].n, self.b[B_IDS].n)

    cdef int _entries_room(self, Py_ssize_t k) except -1:
        cdef Entry *e
        cdef Py_ssize_t cap
        if k < self.entries_cap:
            return 0
        cap = max(16, self.entries_cap * 2, k + 1)
        e = <Entry *>PyMem_Realloc(self.entries, cap * sizeof(Entry))
        if e == NULL:
            raise MemoryError()
        self.entries = e
        self.entries_cap = cap
        return 0

    cdef int _string(self, Buf *off, Buf *data, const uint8_t *p, Py_ssize_t k) except -1:
        _put(data, p, k)
        if data.n > 0x7FFFFFFF:
            raise OverflowError("an Arrow string column of one batch would exceed 2 GiB")
        return _i32put(off, <int32_t>data.n)

    cdef int _keys(self, const uint8_t *p, Py_ssize_t k) except -1:
        """KEYS split as ``str.split()`` splits it."""
        cdef Py_ssize_t i = 0, j
        cdef object piece
        cdef bytes enc
        if _ascii(p, k):
            while True:
                while i < k and _space(p[i]):
                    i += 1
                if i >= k:
                    break
                j = i
                while j < k and not _space(p[j]):
                    j += 1
                self._string(&self.b[B_KEY_OFF], &self.b[B_KEYS], p + i, j - i)
                self.key_count += 1
                i = j
        else:
            # Unicode whitespace (U+00A0, U+2000…) splits too: let str.split() decide.
            for piece in PyUnicode_DecodeUTF8(<const char *>p, k, NULL).split():
                enc = piece.encode()
                self._string(&self.b[B_KEY_OFF], &self.b[B_KEYS], <const uint8_t *>PyBytes_AS_STRING(enc),
                             PyBytes_GET_SIZE(enc))
                self.key_count += 1
        return _i32put(&self.b[B_KEY_LIST_OFF], <int32_t>self.key_count)

    def add(self, bytes buf, int64_t hi, tags):
        """Append the records of the pull body ``buf`` whose queue offset is below ``hi`` and,
        when ``tags`` (a set of tag strings) is given, whose TAGS is one of them.

        Returns the number of rows appended.

        Raises:
            RemoteProtocolError: a malformed record (as ``decode_messages`` raises it); no
                row of this body is kept then.
        """
        cdef const uint8_t *b = <const uint8_t *>PyBytes_AS_STRING(buf)
        cdef const uint8_t *h
        cdef Py_ssize_t n = PyBytes_GET_SIZE(buf), pos = 0, size, end, p, q, t
        cdef Py_ssize_t body_len, topic_len, props_len, head_size, born_w, store_w, o
        cdef Py_ssize_t i, j, k, m, count, ent, tag_i, key_i, uid_i
        cdef uint32_t magic
        cdef int32_t sys_flag, topic_len_size, port
        cdef int64_t queue_offset, commit_offset
        cdef object body, tag_text
        cdef bytes inflated
        cdef const uint8_t *sep
        cdef const uint8_t *ip
        cdef Py_ssize_t ip_len
        cdef Entry *e
        cdef char hexbuf[56]
        cdef uint8_t raw[28]
        cdef Py_ssize_t start_rows = self.rows
        cdef bint keep
        # Snapshot of every buffer's length, to drop this body's rows if a record is bad.
        cdef Py_ssize_t marks[NBUF]
        cdef Py_ssize_t mark_keys = self.key_count, mark_props = self.prop_count
        for i in range(NBUF):
            marks[i] = self.b[i].n
        try:
            while pos < n:
                # -- the checks of message._decode_run, in its order --------------------------
                if n - pos < 91:
                    raise self.bad(pos, f"{n - pos} trailing bytes are not a whole record")
                h = b + pos
                size = _i32(h)
                magic = _u32(h + 4)
                if size < 91 or size > n - pos:
                    raise self.bad(pos, f"storeSize {size} with {n - pos} bytes left")
                end = pos + size
                if magic == 0xDAA320A7:
                    topic_len_size = 1
                elif magic == 0xDAA320AB:
                    topic_len_size = 2
                else:
                    raise self.bad(pos, f"unknown magic code 0x{magic:08X}")
                sys_flag = _i32(h + 36)
                born_w = 16 if sys_flag & 0x10 else 4
                store_w = 16 if sys_flag & 0x20 else 4
                head_size = 80 + born_w + store_w
                if sys_flag & 0x30 and head_size + topic_len_size + 2 > size:
                    raise self.bad(pos, f"storeSize {size} too small for IPv6 hosts")
                o = born_w + store_w - 8
                body_len = _i32(h + 84 + o)
                p = pos + head_size
                if body_len < 0 or p + body_len + topic_len_size + 2 > end:
                    raise self.bad(pos, f"bodyLength {body_len} overruns the record")
                q = p + body_len
                if topic_len_size == 1:
                    topic_len = b[q]
                    if topic_len > 127:
                        raise self.bad(
                            pos, f"topic length byte {topic_len} is negative as a Java byte"
                        )
                    q += 1
                else:
                    topic_len = _u16(b + q)
                    if topic_len > 32767:
                        raise self.bad(pos, "topic length is negative as a Java short")
                    q += 2
                t = q + topic_len
                if t + 2 > end:
                    raise self.bad(pos, f"topic length {topic_len} overruns the record")
                props_len = _u16(b + t)
                if t + 2 + props_len != end or props_len > 32767:
                    raise self.bad(
                        pos, f"propertiesLength {props_len} disagrees with storeSize {size}"
                    )
                # Topic and properties must be UTF-8 (the reference decodes them).
                if not _ascii(b + q, topic_len) or not _ascii(b + t + 2, props_len):
                    try:
                        PyUnicode_DecodeUTF8(<const char *>b + q, topic_len, NULL)
                        PyUnicode_DecodeUTF8(<const char *>b + t + 2, props_len, NULL)
                    except UnicodeDecodeError as exc:
                        raise self.bad(pos, f"topic or properties are not UTF-8: {exc}") from None

                # -- properties: string2messageProperties, later duplicates win ----------------
                count = 0
                tag_i = key_i = uid_i = -1
                i = t + 2
                if props_len:
                    while i <= end:
                        sep = <const uint8_t *>memchr(b + i, 2, end - i)
                        j = end if sep == NULL else sep - b
                        sep = <const uint8_t *>memchr(b + i, 1, j - i)
                        if sep != NULL:
                            k = sep - b
                            if k > i and k + 1 < j:
                                # An earlier entry with the same key keeps its place and
                                # takes the new value (a dict store).
                                ent = -1
                                for m in range(count):
                                    e = &self.entries[m]
                                    if e.kn == k - i and memcmp(b + e.k, b + i, k - i) == 0:
                                        ent = m
                                        break
                                if ent < 0:
                                    self._entries_room(count)
                                    ent = count
                                    count += 1
                                    e = &self.entries[ent]
                                    e.k = i
                                    e.kn = k - i
                                    if e.kn == 4 and memcmp(b + i, b"TAGS", 4) == 0:
                                        tag_i = ent
                                    elif e.kn == 4 and memcmp(b + i, b"KEYS", 4) == 0:
                                        key_i = ent
                                    elif e.kn == 8 and memcmp(b + i, b"UNIQ_KEY", 8) == 0:
                                        uid_i = ent
                                e = &self.entries[ent]
                                e.v = k + 1
                                e.vn = j - k - 1
                        i = j + 1

                body = None
                if sys_flag & 0x1:
                    body = self.inflate(
                        PyBytes_FromStringAndSize(<const char *>b + p, body_len),
                        sys_flag, self.max_body_size, pos,
                    )

                # -- which records are rows -------------------------------------------------
                queue_offset = _i64(h + 20)
                keep = queue_offset < hi
                if keep and tags is not None:
                    if tag_i < 0:
                        keep = False
                    else:
                        e = &self.entries[tag_i]
                        tag_text = PyUnicode_DecodeUTF8(<const char *>b + e.v, e.vn, NULL)
                        keep = tag_text in tags
                if not keep:
                    pos = end
                    continue

                # -- the row --------------------------------------------------------------
                _i64put(&self.b[B_QUEUE_OFFSET], queue_offset)
                _i64put(&self.b[B_BORN], _i64(h + 40))
                _i64put(&self.b[B_STORE], _i64(h + 52 + born_w))
                _i32put(&self.b[B_RECONSUME], _i32(h + 72 + o))
                if body is None:
                    self._string(&self.b[B_BODY_OFF], &self.b[B_BODY], b + p, body_len)
                else:
                    inflated = body
                    self._string(&self.b[B_BODY_OFF], &self.b[B_BODY],
                                 <const uint8_t *>PyBytes_AS_STRING(inflated),
                                 PyBytes_GET_SIZE(inflated))
                if uid_i >= 0:
                    e = &self.entries[uid_i]
                    self._string(&self.b[B_ID_OFF], &self.b[B_IDS], b + e.v, e.vn)
                else:
                    # MessageDecoder.createMessageId: store IP, port, commit-log offset.
                    ip = h + 60 + born_w
                    ip_len = store_w
                    port = _i32(ip + ip_len)
                    commit_offset = _i64(h + 28)
                    # (port and offset as unsigned, as ReceivedMessage.offset_msg_id does)
                    memcpy(raw, ip, ip_len)
                    for m in range(4):
                        raw[ip_len + m] = (port >> (24 - 8 * m)) & 255
                    for m in range(8):
                        raw[ip_len + 4 + m] = (commit_offset >> (56 - 8 * m)) & 255
                    for m in range(ip_len + 12):
                        hexbuf[2 * m] = _HEX[raw[m] >> 4]
                        hexbuf[2 * m + 1] = _HEX[raw[m] & 15]
                    self._string(&self.b[B_ID_OFF], &self.b[B_IDS], <const uint8_t *>hexbuf,
                                 2 * (ip_len + 12))
                if tag_i >= 0:
                    e = &self.entries[tag_i]
                    self._string(&self.b[B_TAG_OFF], &self.b[B_TAGS], b + e.v, e.vn)
                else:
                    _i32put(&self.b[B_TAG_OFF], <int32_t>self.b[B_TAGS].n)
                if self.rows % 8 == 0:
                    _put(&self.b[B_TAG_VALID], b"\0", 1)
                # Set or clear: a byte kept after a failed body may hold bits of its rows.
                if tag_i >= 0:
                    self.b[B_TAG_VALID].p[self.rows >> 3] |= 1 << (self.rows & 7)
                else:
                    self.b[B_TAG_VALID].p[self.rows >> 3] &= ~(1 << (self.rows & 7))
                if key_i >= 0:
                    e = &self.entries[key_i]
                    self._keys(b + e.v, e.vn)
                else:
                    _i32put(&self.b[B_KEY_LIST_OFF], <int32_t>self.key_count)
                for m in range(count):
                    e = &self.entries[m]
                    self._string(&self.b[B_PK_OFF], &self.b[B_PKS], b + e.k, e.kn)
                    self._string(&self.b[B_PV_OFF], &self.b[B_PVS], b + e.v, e.vn)
                self.prop_count += count
                _i32put(&self.b[B_PROP_OFF], <int32_t>self.prop_count)
                self.rows += 1
                pos = end
        except BaseException:
            for i in range(NBUF):
                self.b[i].n = marks[i]
            self.rows = start_rows
            self.key_count = mark_keys
            self.prop_count = mark_props
            raise
        return self.rows - start_rows

    def take(self):
        """The buffers of the rows so far, as a dict of ``bytes`` (offsets are int32 and
        numbers int64/int32, native byte order; ``tag_valid`` is a bitmap), and ``rows``;
        the builder starts again empty."""
        cdef int i
        out = {"rows": self.rows}
        for i in range(NBUF):
            out[_NAMES[i]] = _take(&self.b[i])
        self._start()
        return out
