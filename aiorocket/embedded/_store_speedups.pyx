# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: initializedcheck=False, embedsignature=False
"""Compiled twin of ``read_plan.collect_py``, the per-message part of serving a pull (optional).

Same results, same faults, same order of checks as the pure-Python function, which stays the
reference (``tests/embedded/test_store_collect.py`` compares the two). What is faster: index
entries and record heads are read with C loads instead of ``struct``, the trailer CRC is
computed in place (no Python call per record), and nothing is built per entry but the record
slice and its two ints.
"""

__all__ = ["collect", "configure", "crc32"]

from aiorocket._protocol._bigendian cimport u32 as _u32, i32 as _i32, i64 as _i64
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc


# --- CRC-32 (zlib's polynomial), slicing by 8 -----------------------------------------------
# Checking each served record's trailer is most of this module's work; zlib.crc32 costs a
# Python call and a buffer export per record. Tables are built at import.

cdef uint32_t _crc_table[8][256]


cdef void _make_crc_tables() noexcept:
    cdef uint32_t c
    cdef int n, k
    for n in range(256):
        c = n
        for k in range(8):
            c = (c >> 1) ^ (<uint32_t>0xEDB88320) if c & 1 else c >> 1
        _crc_table[0][n] = c
    for n in range(256):
        c = _crc_table[0][n]
        for k in range(1, 8):
            c = _crc_table[0][c & 0xFF] ^ (c >> 8)
            _crc_table[k][n] = c


_make_crc_tables()


cdef inline uint32_t _crc32(const uint8_t *p, Py_ssize_t n) noexcept nogil:
    cdef uint32_t c = ~(<uint32_t>0)
    cdef uint32_t lo, hi
    while n >= 8:
        lo = c ^ ((<uint32_t>p[0]) | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16)
                  | (<uint32_t>p[3] << 24))
        hi = (<uint32_t>p[4]) | (<uint32_t>p[5] << 8) | (<uint32_t>p[6] << 16) | (<uint32_t>p[7] << 24)
        c = (_crc_table[7][lo & 0xFF] ^ _crc_table[6][(lo >> 8) & 0xFF]
             ^ _crc_table[5][(lo >> 16) & 0xFF] ^ _crc_table[4][lo >> 24]
             ^ _crc_table[3][hi & 0xFF] ^ _crc_table[2][(hi >> 8) & 0xFF]
             ^ _crc_table[1][(hi >> 16) & 0xFF] ^ _crc_table[0][hi >> 24])
        p += 8
        n -= 8
    while n > 0:
        c = _crc_table[0][(c ^ p[0]) & 0xFF] ^ (c >> 8)
        p += 1
        n -= 1
    return ~c


def crc32(const uint8_t[::1] data):
    """``zlib.crc32(data)``, computed by this module's own routine (for its tests)."""
    return _crc32(&data[0] if data.shape[0] else NULL, data.shape[0])


# A consume-queue entry: commitLogOffset (q), size (i), tagsCode (q), storeTimestamp (q).
DEF ENTRY_SIZE = 28
# The record head (commit_log.RECORD_HEAD, ">iIIiiqq"): where its fields sit.
DEF HEAD_SIZE = 36
DEF AT_MAGIC = 4
DEF AT_QUEUE_ID = 12
DEF AT_QUEUE_OFFSET = 20
DEF AT_COMMIT_LOG_OFFSET = 28
DEF TRAILER_SIZE = 4

cdef uint32_t _magic_v1 = 0
cdef uint32_t _magic_v2 = 0
cdef int64_t _max_gap = 0
cdef int64_t _max_span = 0


def configure(
    Py_ssize_t entry_size,
    Py_ssize_t head_size,
    Py_ssize_t trailer_size,
    uint32_t magic_v1,
    uint32_t magic_v2,
    int64_t max_gap,
    int64_t max_span,
):
    """Take the store's constants (the read gap and span limits, the record magics) and
    check the layout this module was compiled for against the store's."""
    global _magic_v1, _magic_v2, _max_gap, _max_span
    if (entry_size, head_size, trailer_size) != (ENTRY_SIZE, HEAD_SIZE, TRAILER_SIZE):
        raise RuntimeError("aiorocket: compiled store helpers are out of date; reinstall")
    _magic_v1 = magic_v1
    _magic_v2 = magic_v2
    _max_gap = max_gap
    _max_span = max_span


cdef struct _Plan:
    int64_t clo
    int64_t code
    int64_t qo
    int32_t size


def collect(
    bytes raw,
    int64_t offset,
    Py_ssize_t max_msgs,
    int64_t max_bytes,
    int64_t log_min,
    object matches,
    int32_t queue_id,
    object read_span,
    list messages,
    list codes,
    list offsets,
    list faults,
):
    """See ``read_plan.collect_py``."""
    cdef const uint8_t *e = <const uint8_t *>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t entries = PyBytes_GET_SIZE(raw) // ENTRY_SIZE
    cdef Py_ssize_t scanned = 0, count = 0, idx
    cdef int outcome = 0
    cdef int64_t total = 0, clo, code
    cdef int32_t size
    cdef _Plan *plan = <_Plan *>malloc(max(entries, 1) * sizeof(_Plan))
    if plan == NULL:
        raise MemoryError()
    try:
        for idx in range(entries):
            clo = _i64(e)
            size = _i32(e + 8)
            code = _i64(e + 12)
            e += ENTRY_SIZE
            # DefaultMessageStore.isTheBatchFull runs before the filter, as here.
            if count and (count >= max_msgs or total + size > max_bytes):
                break
            scanned += 1
            if matches is not None and not matches(code):
                if not count:
                    outcome = 0
                continue
            if size <= 0 or clo < log_min:
                if not count:
                    outcome = 1
                continue
            plan[count].clo = clo
            plan[count].size = size
            plan[count].code = code
            plan[count].qo = offset + scanned - 1
            count += 1
            total += size
        if not count:
            return scanned, outcome
        _read(plan, count, queue_id, read_span, messages, codes, offsets, faults)
        return scanned, 2
    finally:
        free(plan)


cdef int _read(
    _Plan *plan,
    Py_ssize_t n,
    int32_t queue_id,
    object read_span,
    list messages,
    list codes,
    list offsets,
    list faults,
) except -1:
    cdef Py_ssize_t i = 0, j, k, blen
    cdef int64_t start, end, clo, nxt, p
    cdef int32_t size
    cdef uint32_t magic
    cdef const uint8_t *b
    cdef object buf
    cdef bytes record
    while i < n:
        start = plan[i].clo
        end = start + plan[i].size + TRAILER_SIZE
        j = i + 1
        while j < n:
            clo = plan[j].clo
            nxt = clo + plan[j].size + TRAILER_SIZE
            if clo < end or clo - end > _max_gap or nxt - start > _max_span:
                break
            end = nxt
            j += 1
        buf = read_span(start, end - start)
        if buf is None:
            faults.append((0, start, end - start))
            i = j
            continue
        b = <const uint8_t *>PyBytes_AS_STRING(buf)
        blen = PyBytes_GET_SIZE(buf)
        for k in range(i, j):
            clo = plan[k].clo
            size = plan[k].size
            p = clo - start
            if p + HEAD_SIZE > blen or p + size + TRAILER_SIZE > blen:
                # struct.unpack_from would raise here: a span shorter than asked for
                raise ValueError("log span shorter than its index entries")
            magic = _u32(b + p + AT_MAGIC)
            if (
                _i32(b + p) != size
                or _i64(b + p + AT_COMMIT_LOG_OFFSET) != clo
                or (
                    queue_id >= 0
                    and (
                        _i64(b + p + AT_QUEUE_OFFSET) != plan[k].qo
                        or _i32(b + p + AT_QUEUE_ID) != queue_id
                    )
                )
                or (magic != _magic_v1 and magic != _magic_v2)
                or _crc32(b + p, size) != _u32(b + p + size)
            ):
                faults.append((1, clo, plan[k].qo))
                continue
            record = PyBytes_FromStringAndSize(<const char *>(b + p), size)
            PyList_Append(messages, record)
            PyList_Append(codes, plan[k].code)
            PyList_Append(offsets, plan[k].qo)
        i = j
    return 0
