"""Types of the compiled store helpers (``_store_speedups.pyx``); see ``read_plan.use_compiled``.

``collect`` is the compiled twin of ``read_plan.collect_py``: the same signature, stated once.
"""

from aiorocket.embedded.read_plan import collect_py as collect

__all__ = ["collect", "configure", "crc32"]

def configure(
    entry_size: int,
    head_size: int,
    trailer_size: int,
    magic_v1: int,
    magic_v2: int,
    max_gap: int,
    max_span: int,
) -> None: ...
def crc32(data: bytes) -> int: ...
