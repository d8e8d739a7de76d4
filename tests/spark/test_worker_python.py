"""``register(spark)`` checks the Python Spark will start for its workers
(``aiorocket.integrations.spark.worker_python``): the newcomer who runs a job with a
virtualenv's python without activating it gets one clear error at ``register``, not an
ImportError deep in a stage. Fake sessions: no JVM needed."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from aiorocket.errors import ConfigurationError
from aiorocket.integrations.spark import register
from aiorocket.integrations.spark.worker_python import check_worker_python, worker_python


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


class _Sources:
    def __init__(self) -> None:
        self.registered: list[Any] = []

    def register(self, source: Any) -> None:
        self.registered.append(source)


class FakeSpark:
    def __init__(self, **conf: str) -> None:
        self.conf = _Conf({"spark.master": "local[2]", **conf})
        self.dataSource = _Sources()


def fake_python(directory: Path, *, works: bool) -> Path:
    """A ``python3`` that fails to import pyarrow (like a bare system Python), or works."""
    directory.mkdir(parents=True, exist_ok=True)
    exe = directory / "python3"
    if works:
        exe.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    else:
        exe.write_text(
            "#!/bin/sh\necho 'ModuleNotFoundError: No module named '\"'pyarrow'\" >&2\nexit 1\n"
        )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_path_python3_that_cannot_import_the_bridge_fails_at_register(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = fake_python(tmp_path / "bin", works=False)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    spark = FakeSpark()
    assert worker_python(spark) == "python3"
    with pytest.raises(ConfigurationError) as info:
        register(spark)
    message = str(info.value)
    assert str(exe) in message
    assert "No module named 'pyarrow'" in message
    assert f"PYSPARK_PYTHON={sys.executable}" in message
    assert "\n" not in message
    assert spark.dataSource.registered == []
    # the escape hatch, and the fix the message names
    register(spark, check_python=False)
    assert len(spark.dataSource.registered) == 1
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    register(FakeSpark())


def test_the_conf_wins_over_the_environment_and_clusters_are_not_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = fake_python(tmp_path / "good", works=True)
    bad = fake_python(tmp_path / "bad", works=False)
    monkeypatch.setenv("PYSPARK_PYTHON", str(bad))
    check_worker_python(FakeSpark(**{"spark.pyspark.python": str(good)}))
    with pytest.raises(ConfigurationError):
        check_worker_python(FakeSpark())
    check_worker_python(FakeSpark(**{"spark.master": "spark://cluster:7077"}))
    monkeypatch.setenv("PYSPARK_PYTHON", "no-such-python-here")
    with pytest.raises(ConfigurationError, match="not on PATH"):
        check_worker_python(FakeSpark())
