"""The optional compiled codec: whether it is there, and switching between it and pure Python.

``aiorocket._protocol._speedups`` is a C extension built from ``_speedups.pyx`` when the
package is installed on a machine with a C compiler. It replaces the codec's hot paths
(stored-record decoding, binary header decoding); the pure-Python functions stay the
reference and the fallback. ``AIOROCKET_NO_EXTENSIONS=1`` (any value but empty or ``0``)
makes the process use pure Python even when the extension is built.

The modules with compiled twins (``frame``, ``message``) `register` a selector here when
they are imported; this module imports none of them, so the codec has no import cycle.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Final

__all__ = ["ACTIVE", "AVAILABLE", "Selector", "describe", "extension", "register", "use"]

#: Installs a module's implementation: the compiled module, or ``None`` for pure Python.
Selector = Callable[[ModuleType | None], None]


def _import() -> tuple[ModuleType | None, str]:
    try:
        from aiorocket._protocol import _speedups
    except ImportError as exc:
        return None, f"not built ({exc})"
    return _speedups, "built"


_EXT, _STATUS = _import()
_DISABLED: Final = os.environ.get("AIOROCKET_NO_EXTENSIONS", "") not in ("", "0")

#: The compiled extension can be imported (whether or not it is in use).
AVAILABLE: Final = _EXT is not None
#: The codec starts out compiled: built, and not disabled by ``AIOROCKET_NO_EXTENSIONS``.
ACTIVE: Final = AVAILABLE and not _DISABLED


_selectors: list[Selector] = []
_compiled: bool = ACTIVE  # the current choice, which use() changes


def extension() -> ModuleType | None:
    """The compiled module if it is built, whether or not it is in use (``None`` otherwise)."""
    return _EXT


def describe() -> str:
    """One line saying which codec this process uses, and why."""
    if ACTIVE:
        return "aiorocket: compiled codec in use"
    if AVAILABLE:
        return "aiorocket: pure-Python codec (AIOROCKET_NO_EXTENSIONS is set)"
    return f"aiorocket: pure-Python codec (compiled extension {_STATUS})"


def use(compiled: bool) -> None:
    """Switch the codec of this process between the compiled and the pure-Python functions.

    For tests and benchmarks that compare the two; applications leave the choice made at
    import time.

    Raises:
        RuntimeError: ``compiled`` is asked for and the extension is not built.
    """
    if compiled and _EXT is None:
        raise RuntimeError(describe())
    global _compiled
    _compiled = compiled
    for select in _selectors:
        select(_EXT if compiled else None)


def register(select: Selector) -> None:
    """Add a module's implementation switch and apply the current choice to it at once.

    A module with a compiled twin calls this at import, after configuring the extension.
    """
    _selectors.append(select)
    select(_EXT if _compiled else None)
