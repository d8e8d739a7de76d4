"""``aiorocket run`` as a subprocess."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from aiorocket import Message, Producer
from aiorocket.embedded import EmbeddedBroker

ROOT = Path(__file__).resolve().parents[2]


def _env(namesrv: str, log: Path) -> dict[str, str]:
    return {
        **os.environ,
        "AIOROCKET_NAMESRV": namesrv,
        "AIOROCKET_CONSUMER": '{"rebalance_interval": 0.5, "pull_suspend_timeout": 1, '
        '"offset_persist_interval": 0.5, "consume_from": "first"}',
        "WORKER_LOG": str(log),
        "WORKER_TOPIC": "work",
        "WORKER_GROUP": "workers",
        "PYTHONPATH": str(ROOT),
    }


async def _start_worker(env: dict[str, str]) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "aiorocket",
        "run",
        "examples.worker:app",
        "--status-interval",
        "0.5",
        cwd=ROOT,
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )


async def _wait_lines(path: Path, n: int, timeout: float = 20) -> list[str]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n or asyncio.get_running_loop().time() > deadline:
            return lines
        await asyncio.sleep(0.05)


@pytest.mark.slow
async def test_worker_consumes_drains_on_sigterm_and_restarts_without_duplicates(
    broker: EmbeddedBroker,
    tmp_path: Path,
) -> None:
    log = tmp_path / "handled.txt"
    env = _env(broker.address, log)
    worker = await _start_worker(env)
    try:
        async with Producer(namesrv=broker.address, group="pg") as producer:
            ids = {(await producer.send(Message("work", f"m{i}"))).msg_id for i in range(200)}
        lines = await _wait_lines(log, 200)
        assert {line.split()[0] for line in lines} == ids
        worker.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(worker.communicate(), 30)
    finally:
        if worker.returncode is None:
            worker.kill()
    assert worker.returncode == 0, err.decode()
    assert b"draining" in err
    assert b"stopped" in err
    # A restart resumes from the flushed offsets: nothing is handled twice.
    again = await _start_worker(env)
    try:
        async with Producer(namesrv=broker.address, group="pg") as producer:
            last = (await producer.send(Message("work", "after-restart"))).msg_id
        lines = await _wait_lines(log, 201)
        await asyncio.sleep(1.0)
        lines = log.read_text().splitlines()
    finally:
        again.send_signal(signal.SIGTERM)
        await asyncio.wait_for(again.communicate(), 30)
    handled = [line.split()[0] for line in lines]
    assert len(handled) == len(set(handled)) == 201
    assert handled[-1] == last


def test_bad_target_exits_non_zero_with_one_line() -> None:
    for target in ("no_such_module:app", "examples.worker:nope", "json"):
        out = subprocess.run(
            [sys.executable, "-m", "aiorocket", "run", target],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode != 0
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert lines[0].startswith("aiorocket run:")


def test_unreachable_name_server_exits_non_zero_with_one_line(tmp_path: Path) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = {
        **_env(f"127.0.0.1:{port}", tmp_path / "x"),
        "AIOROCKET_CONSUMER": '{"connect_timeout": 1}',
    }
    out = subprocess.run(
        [sys.executable, "-m", "aiorocket", "run", "examples.worker:app"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(
        "aiorocket worker could not start: no name server reachable within 3 s: cannot connect "
        "to 127.0.0.1:"
    ), lines[0]
