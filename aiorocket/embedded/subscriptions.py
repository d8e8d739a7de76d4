"""Subscription-group configurations (``SubscriptionGroupManager``) and the name server's KV
configuration (``KVConfigManager``), both persisted under ``config/`` like the topic table.

Subscription groups: ``mqadmin updateSubGroup`` stores a group's settings here,
``deleteSubGroup`` removes them, and GET_ALL_SUBSCRIPTIONGROUP_CONFIG lists them together with
the groups the broker knows otherwise (online consumers, stored offsets) at Java's defaults,
as a 4.9.8 broker with ``autoCreateSubscriptionGroup=true`` creates a config for every group
that heartbeats or commits. The embedded broker reports these settings; it does not enforce
``consumeEnable`` or ``retryMaxTimes`` (clients send their own ``maxReconsumeTimes``).

KV config: namespace → key → value, as the name server keeps it (``ORDER_TOPIC_CONFIG`` holds
the ``orderConf`` of ordered topics that ``mqadmin updateTopic -o true`` puts there).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from aiorocket._protocol.admin_bodies import DataVersion, SubscriptionGroupConfig
from aiorocket.embedded.files import PersistedTable, write_json_atomically
from aiorocket.embedded.topics import is_valid_name

__all__ = ["KVConfig", "SubscriptionGroups"]

log = logging.getLogger("aiorocket.embedded")


class SubscriptionGroups(PersistedTable):
    """Explicitly configured subscription groups, persisted to ``path``.

    Args:
        path: ``subscriptionGroup.json``; ``None`` keeps them in memory only.
        now_ms: returns wall-clock milliseconds (the data version's timestamp).
    """

    _table_key = "subscriptionGroupTable"

    def __init__(self, path: Path | None, *, now_ms: int = 0) -> None:
        self._path = path
        self._table: dict[str, SubscriptionGroupConfig] = {}
        self._version = DataVersion(now_ms, 0)

    @property
    def data_version(self) -> DataVersion:
        """Bumped by every change."""
        return self._version

    def _decode(self, data: dict[str, Any]) -> None:
        for name, raw in data["subscriptionGroupTable"].items():
            cfg = SubscriptionGroupConfig.from_dict(raw, f"{self._path}[{name}]")
            if not is_valid_name(cfg.group_name):
                raise ValueError(f"{self._path}: malformed group {name!r}")
            self._table[cfg.group_name] = cfg
        version = DataVersion.from_dict(data.get("dataVersion"))
        self._version = version

    def _persist(self) -> None:
        if self._path is None:
            return
        data: dict[str, Any] = {
            "dataVersion": self._version.to_dict(),
            "subscriptionGroupTable": {k: self._table[k].to_dict() for k in sorted(self._table)},
        }
        write_json_atomically(self._path, data)

    def _bump(self, now_ms: int) -> None:
        self._version = DataVersion(now_ms, self._version.counter + 1)

    def get(self, group: str) -> SubscriptionGroupConfig | None:
        """The group's explicit configuration, or ``None``."""
        return self._table.get(group)

    def all(self) -> dict[str, SubscriptionGroupConfig]:
        """Every explicitly configured group."""
        return dict(self._table)

    def put(self, cfg: SubscriptionGroupConfig, *, now_ms: int) -> None:
        """Create or replace a group's configuration and persist it.

        Raises:
            ValueError: an invalid group name.
            OSError: the table cannot be written.
        """
        if not is_valid_name(cfg.group_name):
            raise ValueError(f"invalid group name {cfg.group_name!r}")
        old = self._table.get(cfg.group_name)
        self._table[cfg.group_name] = cfg
        self._bump(now_ms)
        try:
            self._persist()
        except BaseException:
            if old is None:
                del self._table[cfg.group_name]
            else:
                self._table[cfg.group_name] = old
            raise
        log.info("subscription group %s configured", cfg.group_name)

    def delete(self, group: str, *, now_ms: int) -> bool:
        """Remove a group's configuration; returns whether there was one.

        Raises:
            OSError: the table cannot be written.
        """
        old = self._table.pop(group, None)
        if old is None:
            return False
        self._bump(now_ms)
        try:
            self._persist()
        except BaseException:
            self._table[group] = old
            raise
        log.info("subscription group %s deleted", group)
        return True


class KVConfig(PersistedTable):
    """The name server's namespaced key-value table, persisted to ``path``.

    Args:
        path: ``kvConfig.json``; ``None`` keeps it in memory only.
    """

    _table_key = "configTable"

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._table: dict[str, dict[str, str]] = {}

    def _decode(self, data: dict[str, Any]) -> None:
        table: dict[str, Any] = data["configTable"]
        if not all(isinstance(v, dict) for v in table.values()):
            raise ValueError(f"{self._path}: no configTable")
        self._table = {str(ns): {str(k): str(v) for k, v in kv.items()} for ns, kv in table.items()}

    def _persist(self) -> None:
        if self._path is not None:
            write_json_atomically(self._path, {"configTable": self._table})

    def get(self, namespace: str, key: str) -> str | None:
        """The value, or ``None``."""
        return self._table.get(namespace, {}).get(key)

    def namespace(self, namespace: str) -> dict[str, str]:
        """Every key of ``namespace`` (empty if unknown)."""
        return dict(self._table.get(namespace, {}))

    def put(self, namespace: str, key: str, value: str) -> None:
        """Set a value and persist the table.

        Raises:
            OSError: the table cannot be written.
        """
        self._table.setdefault(namespace, {})[key] = value
        self._persist()

    def delete(self, namespace: str, key: str) -> None:
        """Remove a value (absent is fine) and persist the table.

        Raises:
            OSError: the table cannot be written.
        """
        kv = self._table.get(namespace)
        if kv is None or kv.pop(key, None) is None:
            return
        if not kv:
            del self._table[namespace]
        self._persist()
