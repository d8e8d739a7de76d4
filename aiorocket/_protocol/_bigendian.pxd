# cython: language_level=3
"""Big-endian field loads shared by the compiled modules (``_speedups``, the store helpers,
the Spark column builder): RocketMQ writes every integer of a frame and of a stored record in
network byte order (docs/protocol.md §1, §4.1)."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef inline uint32_t u32(const uint8_t *p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]


cdef inline int32_t i32(const uint8_t *p) noexcept nogil:
    return <int32_t>u32(p)


cdef inline int64_t i64(const uint8_t *p) noexcept nogil:
    return <int64_t>((<uint64_t>u32(p) << 32) | u32(p + 4))


cdef inline int32_t u16(const uint8_t *p) noexcept nogil:
    return (<int32_t>p[0] << 8) | p[1]
