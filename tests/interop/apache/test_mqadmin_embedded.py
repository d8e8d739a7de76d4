"""The operators' tool ``mqadmin`` 4.9.8 against the embedded broker, beside the same commands
against the real Java broker: same columns, same numbers for the same state.

On each broker: a 4-queue topic created with ``mqadmin updateTopic``, 46 messages, an
aiorocket consumer group whose handler holds one message (so that message's queue has a known
lag: the held message and the five sent after it to the same queue) and a Java 4.9.8 push
consumer group that consumes everything. Then ``mqadmin`` reads both brokers:
``clusterList``, ``brokerStatus``, ``topicList``, ``topicRoute``, ``topicStatus``,
``consumerProgress`` (per group and for all groups), ``consumerConnection``,
``consumerStatus``, ``queryMsgByKey``, ``queryMsgById``, ``queryMsgByUniqueKey``,
``queryMsgByOffset``, ``updateSubGroup``/``deleteSubGroup``, ``deleteTopic`` and
``resetOffsetByTime`` (the Java consumer consumes everything again on both), and ``aiorocket
admin lag`` agrees with ``consumerProgress`` on both.

``mqadmin`` starts a JVM per call, which takes seconds on a loaded machine: the commands run in
batches, one JVM per broker and batch (``java/AdminBatch.java`` calls the tools'
``MQAdminStartup.main0`` once per command), the two brokers' batches concurrently, in worker
threads so the event loop keeps serving the embedded broker and our consumers meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ConsumerNotOnlineError
from tests._harness.wait import wait_for
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import Install, InstallError, run_java, tools_home
from tests.interop.apache.java_client import JavaClient

pytestmark = pytest.mark.slow

TOPIC = "OpsT"
DEL_TOPIC = "OpsDel"
AIO_GROUP = "OpsAio"
JAVA_GROUP = "OpsJava"
SUB_GROUP = "OpsSub"
QUEUES = 4
FIRST = 40  # messages before the held one: 10 per queue
AFTER = 5  # messages after the held one, to its queue
TIMEOUT = 90.0
FAST: dict[str, Any] = {
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.3,
    "pull_suspend_timeout": 2.0,
    "shutdown_grace": 1.0,
}
#: mqadmin errors that are the loaded machine, not the broker: the command runs again
_TRANSIENT = ("RemotingTimeoutException", "RemotingConnectException", "RemotingSendRequest")


def run_batch(
    classes: Path, namesrv: str, commands: Sequence[Sequence[str]], tmp: Path
) -> list[str]:
    """Run ``commands`` in one ``AdminBatch`` JVM; the output of each."""
    argv = [str(tools_home(tmp)), namesrv]
    for i, cmd in enumerate(commands):
        argv += [*(["--"] if i else []), *cmd]
    proc = run_java("AdminBatch", *argv, classpath=[classes], tmp=tmp, timeout=300)
    if proc.returncode != 0:
        raise InstallError(f"AdminBatch exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    parts = re.split(r"^@@@ .*$", proc.stdout, flags=re.M)
    # parts: [before, out1, "", out2, "", ...]: each command's text sits between its two markers
    outs = parts[1::2]
    if len(outs) != len(commands):
        raise InstallError(
            f"AdminBatch printed {len(outs)} outputs for {len(commands)}:\n{proc.stdout}"
        )
    return [o.strip("\n") for o in outs]


def admin_batch(
    classes: Path, namesrv: str, commands: Sequence[Sequence[str]], tmp: Path
) -> list[str]:
    """:func:`run_batch`, running again (once) the commands that hit a client timeout."""
    outs = run_batch(classes, namesrv, commands, tmp)
    again = [i for i, o in enumerate(outs) if any(t in o for t in _TRANSIENT)]
    if again:
        redo = run_batch(classes, namesrv, [commands[i] for i in again], tmp)
        for i, o in zip(again, redo, strict=True):
            outs[i] = o
    return outs


def table(output: str, header: str) -> list[list[str]]:
    """Rows (split on whitespace) under the line starting with ``header``, to a blank line."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    assert start is not None, f"no {header!r} in:\n{output}"
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def line_value(output: str, prefix: str) -> str:
    for line in output.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip().removeprefix(":").strip()
    raise AssertionError(f"no {prefix!r} line in:\n{output}")


@dataclass
class Side:
    """One broker (embedded or Java) and what runs against it."""

    name: str
    namesrv: str
    broker_addr: str
    tmp: Path
    sent: list[rmq.SendResult] = field(default_factory=list)
    seen: list[bytes] = field(default_factory=list)
    java: JavaClient | None = None
    held_queue: int = -1


async def lag_total(namesrv: str, group: str) -> int | None:
    async with rmq.Admin(namesrv=namesrv) as admin:
        try:
            return (await admin.lag(group)).by_topic().get(TOPIC)
        except ConsumerNotOnlineError:
            return None


async def start_side(
    side: Side, stack: AsyncExitStack, classes: Path, release: asyncio.Event
) -> None:
    """Messages, the aiorocket group (holding one message) and the Java group."""
    ns = side.namesrv
    async with rmq.Producer(namesrv=ns, group="OpsP") as p:
        side.sent += [
            await p.send(rmq.Message(TOPIC, f"m{i}", keys=[f"k{i}", "all"])) for i in range(FIRST)
        ]
    consumer = rmq.PushConsumer(group=AIO_GROUP, namesrv=ns, consume_from="first", **FAST)
    consumer.subscribe(TOPIC)

    @consumer.listener
    async def on(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
        for m in msgs:
            if m.body == b"hold":
                await release.wait()
            side.seen.append(m.body)

    await stack.enter_async_context(consumer)
    side.java = await JavaClient.start(
        classes, "JClient", "push", ns, TOPIC, JAVA_GROUP, "concurrent", tmp=side.tmp / "java"
    )
    stack.push_async_callback(side.java.stop)
    await side.java.wait_event("ready", TIMEOUT)
    await wait_for(
        lambda: len(side.seen) >= FIRST,
        timeout=TIMEOUT,
        what=f"{side.name}: the first {FIRST}",
        interval=0.2,
    )
    async with rmq.Producer(namesrv=ns, group="OpsP") as p:
        held = await p.send(rmq.Message(TOPIC, "hold", keys=["held"]), sharding_key="h")
        side.held_queue = held.queue.queue_id
        side.sent.append(held)
        for i in range(AFTER):
            side.sent.append(await p.send(rmq.Message(TOPIC, f"a{i}"), sharding_key="h"))
    java = side.java
    assert java is not None
    await wait_for(
        lambda: len(java.of("msg")) >= FIRST + 1 + AFTER,
        timeout=TIMEOUT,
        what=f"{side.name}: Java group",
        interval=0.2,
    )
    await wait_for(
        lambda: len(side.seen) >= FIRST + AFTER,
        timeout=TIMEOUT,
        what=f"{side.name}: after the held one",
        interval=0.2,
    )

    async def settled() -> bool:
        return (await lag_total(ns, AIO_GROUP)) == 1 + AFTER and (
            await lag_total(ns, JAVA_GROUP)
        ) == 0

    await wait_for(settled, timeout=TIMEOUT, what=f"{side.name}: committed offsets", interval=0.2)


async def both(
    classes: Path, sides: Sequence[Side], commands: Callable[[Side], list[list[str]]]
) -> list[list[str]]:
    """Run each side's batch concurrently in worker threads."""
    return list(
        await asyncio.gather(
            *(
                asyncio.to_thread(admin_batch, classes, s.namesrv, commands(s), s.tmp / "admin")
                for s in sides
            )
        )
    )


def progress_rows(output: str) -> dict[tuple[str, int], tuple[int, int, int]]:
    rows = table(output, "#Topic")
    return {(r[0], int(r[2])): (int(r[3]), int(r[4]), int(r[5])) for r in rows}


async def test_mqadmin_reads_the_embedded_broker_as_it_reads_the_java_broker(
    java_cluster: JavaCluster,
    java_classes: Path,
    broker: EmbeddedBroker,
    tmp_path: Path,
    rocketmq: Install,
) -> None:
    sides = [
        Side("embedded", broker.address, broker.address, tmp_path / "e"),
        Side("java", java_cluster.namesrv, java_cluster.broker_addr("broker-a"), tmp_path / "j"),
    ]
    release = asyncio.Event()
    async with AsyncExitStack() as stack:
        stack.callback(release.set)  # first thing on the way out: the held handler returns
        # -- 1. configuration through mqadmin ---------------------------------------------
        setup = await both(
            java_classes,
            sides,
            lambda s: [
                ["updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "4", "-w", "4"],
                ["updateTopic", "-c", "DefaultCluster", "-t", DEL_TOPIC, "-r", "2", "-w", "2"],
                ["updateSubGroup", "-c", "DefaultCluster", "-g", SUB_GROUP, "-r", "5", "-q", "2"],
            ],
        )
        for outs in setup:
            assert "create topic to" in outs[0], outs[0]
            assert "success" in outs[0], outs[0]
            assert "create subscription group to" in outs[2], outs[2]
        # -- 2. the same state on both -----------------------------------------------------
        await asyncio.gather(*(start_side(s, stack, java_classes, release) for s in sides))
        assert sides[0].held_queue == sides[1].held_queue  # the same sharding-key hash

        def reads(s: Side) -> list[list[str]]:
            return [
                ["clusterList"],
                ["brokerStatus", "-b", s.broker_addr],
                ["topicRoute", "-t", TOPIC],
                ["topicStatus", "-t", TOPIC],
                ["consumerProgress", "-g", AIO_GROUP],
                ["consumerProgress", "-g", JAVA_GROUP],
                ["consumerProgress"],
                ["consumerConnection", "-g", AIO_GROUP],
                ["consumerConnection", "-g", JAVA_GROUP],
                ["consumerStatus", "-g", JAVA_GROUP],
                ["queryMsgByKey", "-t", TOPIC, "-k", "k7"],
                # 5.x's tool requires the topic (it finds the route by it)
                [
                    "queryMsgById",
                    *(["-t", TOPIC] if rocketmq.v5 else []),
                    "-i",
                    s.sent[3].offset_msg_id,
                ],
                ["queryMsgByUniqueKey", "-t", TOPIC, "-i", s.sent[4].msg_id],
                ["queryMsgByOffset", "-t", TOPIC, "-b", "broker-a", "-i", "0", "-o", "2"],
                ["deleteSubGroup", "-c", "DefaultCluster", "-g", SUB_GROUP],
                ["deleteTopic", "-c", "DefaultCluster", "-t", DEL_TOPIC],
                ["topicList"],
            ]

        emb, jav = await both(java_classes, sides, reads)
        # our own lag command, on both, while the state holds
        ours = [
            json.loads(
                (
                    await asyncio.to_thread(
                        subprocess.run,
                        [
                            sys.executable,
                            "-m",
                            "aiorocket",
                            "admin",
                            "lag",
                            AIO_GROUP,
                            "-n",
                            s.namesrv,
                            "--json",
                        ],
                        capture_output=True,
                        text=True,
                        timeout=60,
                        check=True,
                    )
                ).stdout
            )
            for s in sides
        ]
        release.set()
        # -- 3. a reset the brokers push to the Java consumers --------------------------------
        reset = await both(
            java_classes,
            sides,
            lambda s: [["resetOffsetByTime", "-g", JAVA_GROUP, "-t", TOPIC, "-s", "1000"]],
        )
        total = FIRST + 1 + AFTER
        for s in sides:
            java = s.java
            assert java is not None
            await wait_for(
                lambda java=java: len(java.of("msg")) >= 2 * total,  # type: ignore[misc]
                timeout=TIMEOUT,
                what=f"{s.name}: the Java group consumes again after the reset",
                interval=0.2,
            )

    # -- assertions -----------------------------------------------------------------------
    held = sides[0].held_queue
    (
        c_e,
        b_e,
        route_e,
        stat_e,
        pa_e,
        pj_e,
        pall_e,
        ca_e,
        cj_e,
        cs_e,
        key_e,
        id_e,
        uk_e,
        off_e,
        dsg_e,
        dt_e,
        tl_e,
    ) = emb
    (
        c_j,
        b_j,
        route_j,
        stat_j,
        pa_j,
        pj_j,
        pall_j,
        ca_j,
        cj_j,
        cs_j,
        key_j,
        id_j,
        uk_j,
        off_j,
        dsg_j,
        dt_j,
        tl_j,
    ) = jav

    # clusterList: one row, the same columns, this broker's address and version (the embedded
    # broker speaks 4.9.8's protocol); 5.x's tool adds #ACTIVATED, true for both
    for out, s, version in ((c_e, sides[0], "V4_9_8"), (c_j, sides[1], rocketmq.version_name)):
        (row,) = table(out, "#Cluster Name")
        assert row[:5] == ["DefaultCluster", "broker-a", "0", s.broker_addr, version], out
        if rocketmq.v5:
            assert row[-1] == "true", out
    assert table(c_e, "#Cluster Name")[0].__len__() == table(c_j, "#Cluster Name")[0].__len__()

    # brokerStatus: the keys the Java broker of this version reports (to a 5.x tool the
    # embedded broker answers with a 5.x broker's keys)
    def keys(out: str) -> set[str]:
        return {
            line.split(":", 1)[0].strip()
            for line in out.splitlines()
            if ":" in line and not line.startswith("commitLogDiskRatio_")
        }

    # putMessageDistributeTime: Java prints "null" until its store counted a distribution
    assert keys(b_e) == keys(b_j) - {"putMessageDistributeTime"}
    assert line_value(b_e, "msgPutTotalTodayNow") == str(FIRST + 1 + AFTER)

    # topicRoute and topicStatus: 4 queues, the same offsets per queue
    # (fastjson leaves the broker-id keys unquoted, "{0:" or, pretty-printed by 5.5, "{\n\t0:")
    for out in (route_e, route_j):
        quoted = re.sub(r"([{,]\s*)(\d+):", r'\1"\2":', out)
        assert json.loads(quoted)["queueDatas"][0]["readQueueNums"] == 4
    st_e = {int(r[1]): (int(r[2]), int(r[3])) for r in table(stat_e, "#Broker Name")}
    st_j = {int(r[1]): (int(r[2]), int(r[3])) for r in table(stat_j, "#Broker Name")}
    expected_max = {q: FIRST // QUEUES + (1 + AFTER if q == held else 0) for q in range(QUEUES)}
    assert st_e == st_j == {q: (0, m) for q, m in expected_max.items()}

    # consumerProgress -g: the same rows; lag = produced - consumed, all on the held queue
    rows_e, rows_j = progress_rows(pa_e), progress_rows(pa_j)
    assert rows_e == rows_j, f"{pa_e}\n{pa_j}"
    for q in range(QUEUES):
        broker_offset, consumer_offset, diff = rows_e[(TOPIC, q)]
        assert broker_offset == expected_max[q]
        assert diff == (1 + AFTER if q == held else 0)
        assert broker_offset - consumer_offset == diff
    # 5.x's tool says "Consume Diff Total"
    diff_total = "Consume Diff Total:" if rocketmq.v5 else "Diff Total:"
    for out in (pa_e, pa_j):
        assert line_value(out, diff_total) == str(1 + AFTER)
    for out in (pj_e, pj_j):  # the Java group consumed everything
        assert line_value(out, diff_total) == "0"
        assert {k: v for k, v in progress_rows(out).items() if k[0] == TOPIC} == {
            (TOPIC, q): (m, m, 0) for q, m in expected_max.items()
        }
    # consumerProgress without -g: both groups, online, with their totals
    for out in (pall_e, pall_j):
        groups = {r[0]: r for r in table(out, "#Group")}
        assert groups[AIO_GROUP][1] == "1", out  # #Count: members online
        assert groups[AIO_GROUP][-1] == str(1 + AFTER), out  # #Diff Total
        assert groups[JAVA_GROUP][1] == "1", out
        assert groups[JAVA_GROUP][-1] == "0", out
        assert groups[AIO_GROUP][2] == "V4_9_8"

    # aiorocket admin lag agrees with mqadmin consumerProgress, on both brokers
    for got, rows in zip(ours, (rows_e, rows_j), strict=True):
        mine = {
            (q["topic"], q["queue"]): (q["broker_offset"], q["committed_offset"], q["lag"])
            for q in got["queues"]
        }
        assert mine == rows
        assert got["total"] == 1 + AFTER

    # consumerConnection: one member each, our language and version, the subscriptions
    java_member = ["JAVA", rocketmq.version_name]
    for out, who in (
        (ca_e, ["PYTHON", "V4_9_8"]),
        (ca_j, ["PYTHON", "V4_9_8"]),
        (cj_e, java_member),
        (cj_j, java_member),
    ):
        (member,) = table(out, "#ClientId")
        assert member[2:] == who, out
        subs = {r[0]: r[1] for r in table(out, "#Topic")}
        assert subs[TOPIC] == "*"
        assert "ConsumeType: CONSUME_PASSIVELY" in out
        assert "MessageModel: CLUSTERING" in out
    # consumerStatus: the broker forwards GET_CONSUMER_RUNNING_INFO to the Java client
    for out in (cs_e, cs_j):
        assert len(table(out, "#Index")) == 1, out
        assert "Same subscription in the same group of consumer" in out
        assert "Rebalance OK" in out

    # message queries
    for out, s in ((key_e, sides[0]), (key_j, sides[1])):
        (row,) = table(out, "#Message ID")
        assert row[0] == s.sent[7].msg_id
        assert int(row[1]) == s.sent[7].queue.queue_id
    for out, s in ((id_e, sides[0]), (id_j, sides[1])):
        assert line_value(out, "OffsetID:") == s.sent[3].offset_msg_id
        assert line_value(out, "Keys:") == "[k3 all]"
        assert line_value(out, "Topic:") == TOPIC
    for out, s in ((uk_e, sides[0]), (uk_j, sides[1])):
        assert line_value(out, "Keys:") == "[k4 all]", out
        assert line_value(out, "Queue Offset:") == str(s.sent[4].queue_offset)
    for out in (off_e, off_j):
        assert line_value(out, "Queue ID:") == "0", out
        assert line_value(out, "Queue Offset:") == "2"

    # configuration changes: the same success lines, and the topic is gone from the list
    assert dsg_e.replace(sides[0].broker_addr, "B") == dsg_j.replace(sides[1].broker_addr, "B")
    if not rocketmq.v5:  # 5.x's tool deletes the group's retry topic without a word
        assert f"delete topic [%RETRY%{SUB_GROUP}]" in dsg_e
    assert dt_e == dt_j, f"{dt_e}\n{dt_j}"
    for out in (tl_e, tl_j):
        assert TOPIC in out.split()
        assert DEL_TOPIC not in out.split()
        assert f"%RETRY%{SUB_GROUP}" not in out.split()

    # resetOffsetByTime: every queue back to 0 on both
    for (out,) in reset:
        reset_rows = table(out, "#brokerName")
        assert sorted(int(r[1]) for r in reset_rows) == list(range(QUEUES)), out
        assert {r[2] for r in reset_rows} == {"0"}
