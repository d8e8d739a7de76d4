"""Which Python Spark's workers will run, and whether it can import the bridge.

The newcomer's pitfall: a job started with a virtualenv's ``python`` that was not activated
runs the driver in the virtualenv, but Spark starts its Python workers with ``python3`` from
``PATH`` (PySpark's default when neither ``spark.pyspark.python`` nor ``PYSPARK_PYTHON`` is
set), which cannot import pyarrow or aiorocket: the job then fails with an ImportError deep in
a stage. `check_worker_python` finds that out at ``register(spark)`` and says how to fix
it. Only local masters are checked (the workers of a cluster run elsewhere).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from typing import Any

from aiorocket.errors import ConfigurationError

__all__ = ["check_worker_python", "worker_python"]

#: what a worker must be able to import to run the data source and the forwarder
_PROBE = "import pyarrow, aiorocket"


def worker_python(spark: Any) -> str:
    """The executable Spark's Python workers will run: ``spark.pyspark.python``, else
    ``PYSPARK_PYTHON``, else ``python3`` (PySpark's order)."""
    conf_value = None
    try:
        conf_value = spark.conf.get("spark.pyspark.python", None)
    except Exception:  # a conf that cannot be read: fall back to the environment
        conf_value = None
    return str(conf_value or os.environ.get("PYSPARK_PYTHON") or "python3")


def _is_local(spark: Any) -> bool:
    try:
        master = str(spark.conf.get("spark.master", "local"))
    except Exception:
        return True
    return master.startswith("local")


@functools.cache
def _probe(path: str) -> str | None:
    # None when ``path`` imports what the workers need, else the reason it does not.
    try:
        proc = subprocess.run(
            [path, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if proc.returncode == 0:
        return None
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"exit status {proc.returncode}"


def check_worker_python(spark: Any) -> None:
    """Raise if Spark's local Python workers cannot import pyarrow and aiorocket.

    Raises:
        ConfigurationError: one line naming the worker Python, what failed, and the fix.
    """
    if not _is_local(spark):
        return
    configured = worker_python(spark)
    path = shutil.which(configured)
    if path is None:
        raise ConfigurationError(
            f"Spark's Python workers would run {configured!r}, which is not on PATH; set "
            f"PYSPARK_PYTHON={sys.executable} (or spark.pyspark.python) before creating the "
            "SparkSession, or activate the virtualenv"
        )
    if os.path.realpath(path) == os.path.realpath(sys.executable):
        return
    problem = _probe(path)
    if problem is not None:
        raise ConfigurationError(
            f"Spark's Python workers would run {path} ({configured!r}: PYSPARK_PYTHON and "
            f"spark.pyspark.python unset means python3 from PATH), which cannot import pyarrow "
            f"and aiorocket ({problem}); set PYSPARK_PYTHON={sys.executable} (or "
            "spark.pyspark.python) before creating the SparkSession, or activate the virtualenv"
        )
