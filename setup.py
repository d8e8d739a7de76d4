"""Builds the optional compiled codec; everything else is in pyproject.toml.

Without a working C compiler (or Cython), or with ``AIOROCKET_PURE_PYTHON=1``, the extensions
are skipped with a one-line note and the package installs as pure Python, which behaves the
same, only slower.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

NOTE = "aiorocket: compiled codec not built ({}); installing the pure-Python codec"


def _why(exc: BaseException) -> str:
    # The exception text of a failed compile is the whole compiler command line.
    return f"{type(exc).__name__}: {str(exc)[:80]}"


class OptionalBuildExt(build_ext):
    """build_ext that turns any build failure into a note instead of an error."""

    failed = False

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all, or a broken toolchain
            if not self.failed:  # an editable install then fails to copy what is missing
                print(NOTE.format(_why(exc)), file=sys.stderr)

    def build_extension(self, ext: Any) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self.failed = True
            print(NOTE.format(_why(exc)), file=sys.stderr)


#: Set (to anything but "" or "0") to build without the compiled modules: a pure-Python wheel
#: (``py3-none-any``, for platforms without a manylinux wheel) or a quick editable install.
PURE_ENV = "AIOROCKET_PURE_PYTHON"


def _extensions() -> list[Extension]:
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        print(NOTE.format(f"{PURE_ENV} is set"), file=sys.stderr)
        return []
    try:
        from Cython.Build import cythonize
    except ImportError as exc:
        print(NOTE.format(_why(exc)), file=sys.stderr)
        return []
    ext = Extension(
        "aiorocket._protocol._speedups",
        ["aiorocket/_protocol/_speedups.pyx"],
        extra_compile_args=["-O2"] if sys.platform != "win32" else [],
    )
    store = Extension(
        "aiorocket.embedded._store_speedups",
        ["aiorocket/embedded/_store_speedups.pyx"],
        extra_compile_args=ext.extra_compile_args,
    )
    columns = Extension(  # Spark executors: pull bodies straight into Arrow buffers
        "aiorocket.integrations.spark._columns",
        ["aiorocket/integrations/spark/_columns.pyx"],
        extra_compile_args=ext.extra_compile_args,
    )
    exts = [ext, store, columns]
    return list(cythonize(exts, compiler_directives={"language_level": 3}, quiet=True))


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
