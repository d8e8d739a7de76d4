"""The Apache RocketMQ kit's presence rules: skip with one line locally, fail under CI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.interop.apache import kit


@pytest.fixture
def missing_kit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Point the kit lookup at an empty directory (the cached answer is reset around it)."""
    monkeypatch.setenv("AIOROCKET_ROCKETMQ_KIT", str(tmp_path / "nowhere"))
    kit.kit_problem.cache_clear()
    yield tmp_path / "nowhere"
    kit.kit_problem.cache_clear()


def test_missing_kit_skips_with_one_line(
    missing_kit: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception) as info:
        kit.require_kit()
    message = str(info.value)
    assert "\n" not in message
    assert str(missing_kit) in message
    assert "AIOROCKET_ROCKETMQ_KIT" in message


def test_missing_kit_fails_under_ci(missing_kit: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI must run the interop tests"):
        kit.require_kit()


def test_kit_found_through_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "kit"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "rmq").write_text("#!/bin/sh\n")
    monkeypatch.setenv("AIOROCKET_ROCKETMQ_KIT", str(fake))
    kit.kit_problem.cache_clear()
    try:
        assert kit.kit_dir() == fake.resolve()
        problem = kit.kit_problem()
        # with a JDK on PATH the fake kit is accepted; without one the JDK is what is missing
        assert problem is None or "JDK" in problem
    finally:
        kit.kit_problem.cache_clear()


def test_free_port_leaves_room_for_a_broker() -> None:
    import socket

    port = kit.free_port((-2, -1, 0, 1))
    for d in (-2, -1, 0, 1):
        with socket.socket() as s:
            s.bind(("0.0.0.0", port + d))
