"""Types of the compiled column builder (``_columns.pyx``); see ``columns.py``."""

from collections.abc import Callable
from typing import Any

class ColumnBuilder:
    def __init__(
        self,
        bad: Callable[[int, str], Exception],
        inflate: Callable[[bytes, int, int, int], bytes],
        max_body_size: int,
    ) -> None: ...
    @property
    def rows(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def add(self, buf: bytes, hi: int, tags: frozenset[str] | None) -> int: ...
    def take(self) -> dict[str, Any]: ...
