"""Types of the compiled store helpers (``_store_speedups.pyx``); see ``read_plan.use_compiled``."""

from collections.abc import Callable

def configure(
    entry_size: int,
    head_size: int,
    trailer_size: int,
    magic_v1: int,
    magic_v2: int,
    max_gap: int,
    max_span: int,
) -> None: ...
def collect(
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
) -> tuple[int, int]: ...
def crc32(data: bytes) -> int: ...
