"""The broker's JSON state files under ``config/`` (topics, offsets, delay progress,
subscription groups, KV config): one table per file, written whole and atomically.

A write goes to a temporary file, is fsynced, renamed over the old one, and the directory is
fsynced, so after a crash a file holds either the old or the new table, never a torn one.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["PersistedTable", "load_document", "read_json", "write_json_atomically"]


def write_json_atomically(path: Path, data: Any, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` as compact JSON, atomically.

    Raises:
        OSError: the file cannot be written or renamed.
    """
    tmp = path.with_name(path.name + ".tmp")
    raw = json.dumps(data, separators=(",", ":"), sort_keys=True).encode()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, raw)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def read_json(path: Path) -> Any:
    """Return the JSON value stored at ``path``, or ``None`` when the file does not exist.

    Raises:
        OSError: the file exists but cannot be read.
        ValueError: the file is not valid JSON (it is never written partially, so this means
            it was edited or damaged by something else).
    """
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    return json.loads(raw)


def load_document(path: Path | None, table: str) -> dict[str, Any] | None:
    """The JSON object stored at ``path``, checked to hold an object under ``table``;
    ``None`` when ``path`` is ``None`` (a table kept in memory only) or the file does not
    exist yet.

    Raises:
        OSError: the file exists but cannot be read.
        ValueError: the file is not valid JSON, or holds no ``table`` object.
    """
    if path is None:
        return None
    data = read_json(path)
    if data is None:
        return None
    if not isinstance(data, dict) or not isinstance(data.get(table), dict):
        raise ValueError(f"{path}: no {table}")
    return data


class PersistedTable:
    """Base of a table kept in one JSON file (Java ``ConfigManager``): `load` reads the
    document and hands it to the subclass's ``_decode``.

    A subclass sets ``_table_key`` (the document's key holding the table) and ``_path`` (the
    file; ``None`` keeps the table in memory only).
    """

    _table_key: ClassVar[str]
    _path: Path | None

    def load(self) -> None:
        """Read the table written by earlier runs (no file: the table stays as it is).

        Raises:
            OSError: the file cannot be read.
            ValueError: the file is malformed.
        """
        data = load_document(self._path, self._table_key)
        if data is not None:
            self._decode(data)

    def _decode(self, data: dict[str, Any]) -> None:
        """Take the table from ``data``, a document holding an object under ``_table_key``.

        Raises:
            ValueError: the table is malformed.
        """
        raise NotImplementedError
