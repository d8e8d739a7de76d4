"""The read planner of a pull: which index entries a ``MessageStore.get`` returns, and
reading their records from the commit log with as few reads as possible.

`collect_py` is the reference; ``_store_speedups.collect`` (optional, compiled like the
codec) is its twin with the same results and faults, chosen by `use_compiled`.
"""

from __future__ import annotations

import contextlib
import importlib
import zlib
from collections.abc import Callable
from typing import Final

from aiorocket._protocol import accel
from aiorocket._protocol.message import MAGIC_V1, MAGIC_V2
from aiorocket.embedded.commit_log import RECORD_HEAD, TRAILER, TRAILER_SIZE
from aiorocket.embedded.consume_queue import ENTRY

__all__ = [
    "INVALID",
    "NO_MATCH",
    "PLANNED",
    "REMOVING",
    "UNREADABLE",
    "collect",
    "collect_py",
    "use_compiled",
]

# Neighbouring records are read with one pread when at most this many foreign bytes lie
# between them, up to this much in one read.
_MAX_READ_GAP: Final = 16 * 1024
_MAX_READ_SPAN: Final = 1024 * 1024
_MAGICS: Final = frozenset({MAGIC_V1, MAGIC_V2})

# What collect reports: nothing matched / the first candidate was removed / records were
# planned (and read, unless they failed validation); and the faults it met.
NO_MATCH: Final = 0
REMOVING: Final = 1
PLANNED: Final = 2
UNREADABLE: Final = 0
INVALID: Final = 1


def collect_py(
    raw: bytes,
    offset: int,
    max_msgs: int,
    max_bytes: int,
    log_min: int,
    matches: Callable[[int], bool] | None,
    queue_id: int,
    read_span: Callable[[int, int], bytes | None],
    messages: list[bytes],
    codes: list[int],
    offsets: list[int],
    faults: list[tuple[int, int, int]],
) -> tuple[int, int]:
    """The body of ``MessageStore.get`` after the index read: pick the entries of ``raw``
    (consume-queue entries from queue offset ``offset``) to return, read their records from
    the log and append the valid ones to ``messages``/``codes``/``offsets``.

    A record is valid when its size, magic, commit-log offset and trailer CRC are right and,
    unless ``queue_id`` is -1 (a lite topic's queue, whose records name their own topic's
    queue and offset, docs/protocol.md §12.8), its queue id and queue offset too.

    Returns ``(entries scanned, outcome)``, outcome being ``NO_MATCH``, ``REMOVING`` or
    ``PLANNED``. Unreadable spans (``(UNREADABLE, start, length)``) and records failing
    validation (``(INVALID, commit-log offset, queue offset)``) go to ``faults``.
    ``_store_speedups.collect`` is the compiled twin: same results, same faults.
    """
    outcome = NO_MATCH
    scanned = count = total = 0
    plan: list[tuple[int, int, int, int]] = []
    for clo, size, code, _ts in ENTRY.iter_unpack(raw):
        # DefaultMessageStore.isTheBatchFull runs before the filter, as here.
        if count and (count >= max_msgs or total + size > max_bytes):
            break
        scanned += 1
        if matches is not None and not matches(code):
            if not count:
                outcome = NO_MATCH
            continue
        if size <= 0 or clo < log_min:
            if not count:
                outcome = REMOVING
            continue
        plan.append((clo, size, code, offset + scanned - 1))
        count += 1
        total += size
    if not plan:
        return scanned, outcome
    # Entries written in a burst sit back to back in the log, and a queue fed round-robin
    # has its records a few others apart: read each such run with one pread (a pread costs
    # about as much as copying 16 KiB), then validate every record (size, magic, its own
    # offsets, trailer CRC).
    head = RECORD_HEAD.unpack_from
    trailer = TRAILER.unpack_from
    crc32 = zlib.crc32
    magics = _MAGICS
    n = len(plan)
    i = 0
    while i < n:
        start = plan[i][0]
        end = start + plan[i][1] + TRAILER_SIZE
        j = i + 1
        while j < n:
            clo = plan[j][0]
            nxt = clo + plan[j][1] + TRAILER_SIZE
            if clo < end or clo - end > _MAX_READ_GAP or nxt - start > _MAX_READ_SPAN:
                break
            end = nxt
            j += 1
        buf = read_span(start, end - start)
        if buf is None:
            faults.append((UNREADABLE, start, end - start))
            i = j
            continue
        for k in range(i, j):
            clo, size, code, qo = plan[k]
            p = clo - start
            rsize, magic, _crc, rqid, _flag, rqo, rclo = head(buf, p)
            record = buf[p : p + size]
            if (
                rsize != size
                or rclo != clo
                or (queue_id >= 0 and (rqo != qo or rqid != queue_id))
                or magic not in magics
                or crc32(record) != trailer(buf, p + size)[0]
            ):
                faults.append((INVALID, clo, qo))
                continue
            messages.append(record)
            codes.append(code)
            offsets.append(qo)
        i = j
    return scanned, PLANNED


#: the active implementation (`use_compiled` picks it)
collect = collect_py


def use_compiled(compiled: bool) -> None:
    """Read pulls with the compiled ``_store_speedups.collect`` or with `collect_py`.

    For tests and benchmarks that compare the two; the choice made at import follows the
    codec's (``AIOROCKET_NO_EXTENSIONS``).

    Raises:
        RuntimeError: ``compiled`` is asked for and the extension is not built.
    """
    global collect
    if not compiled:
        collect = collect_py
        return
    try:
        # By name: static import tools cannot see a compiled module and would count a
        # ``from aiorocket.embedded import`` as a cycle through the package.
        speedups = importlib.import_module("aiorocket.embedded._store_speedups")
    except ImportError as exc:
        raise RuntimeError(f"aiorocket: compiled store helpers not built ({exc})") from None
    speedups.configure(
        ENTRY.size,
        RECORD_HEAD.size,
        TRAILER_SIZE,
        MAGIC_V1,
        MAGIC_V2,
        _MAX_READ_GAP,
        _MAX_READ_SPAN,
    )
    collect = speedups.collect


with contextlib.suppress(RuntimeError):
    use_compiled(accel.ACTIVE)
