"""Every benchmark of docs/performance.md in one run, each beside its peer (``make bench``).

Runs, one after the other and each in its own process (each starts its own embedded broker and
its peers):

* ``codec.py`` (P9), ``broker.py`` (P7), ``producer.py`` (P3, with the C++ ``send_sync`` loop),
  ``consumer.py`` (P1, P2, P5: concurrent batch and per-message drains, orderly drains, the pure
  decode loop, the C++ PushConsumer, the idle cost), ``orderly_keys.py`` (an orderly drain
  with a 10 ms handler ordered by key against ordered by queue), ``request_reply.py`` (the
  request/reply round trip beside a plain send's), ``latency.py`` (P4, with the C++
  PushConsumer), ``backlog.py`` (P6), ``spark_source.py`` (P8) when it is present, and
  ``java_peers.py`` (the Java 4.9.8 push consumer and producer on the embedded and the Java
  broker) when the Apache RocketMQ kit is there, and ``baseline.py`` (pulls served and the
  Spark executor read against a baseline revision checked out from the repository's history);

then reads the JSON each one wrote and:

* prints one table: every figure, its peer, the ratio, the docs/performance.md goal, met or missed;
* writes ``benchmarks/results/run_all-<timestamp>.json``: machine, Python, package versions,
  the command of every benchmark, the load average around each, every figure with its median
  and spread, and the full document of each benchmark;
* renders ``benchmarks/results/latest-throughput.png`` (ratios against peers),
  ``latest-latency.png`` (store→handler latency distribution) and ``latest-backlog.png``
  (consumer RSS and cached messages under a backlog).

    python benchmarks/run_all.py [--quick] [--only codec,latency] [--no-charts] [--markdown]
    python benchmarks/run_all.py --from-json benchmarks/results/run_all-<timestamp>.json

Without ``--quick`` the run takes about 16 minutes on a quiet 2-core machine (each benchmark
is stopped at its time limit, and the whole run within 22 minutes); ``--quick`` shortens every
benchmark to a smoke run (under three minutes) whose figures are only a smoke test.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
_WROTE = re.compile(r"(?:wrote|written to)\s+(\S+\.json)\s*$")

#: name -> (script, JSON file prefix, flags of the full run, flags of the quick run)
BENCHMARKS: dict[str, tuple[str, str, list[str], list[str]]] = {
    "codec": ("codec.py", "codec", [], ["--quick"]),
    "broker": ("broker.py", "broker", [], ["--quick"]),
    "producer": (
        "producer.py",
        "producer",
        [],
        ["--seconds", "2", "--windows", "2", "--latency-samples", "500"],
    ),
    "consumer": ("consumer.py", "consumer", [], ["--quick"]),
    "orderly_keys": ("orderly_keys.py", "orderly_keys", [], ["--quick"]),
    "request_reply": ("request_reply.py", "request_reply", [], ["--quick"]),
    "latency": ("latency.py", "latency", [], ["--quick"]),
    "backlog": ("backlog.py", "backlog", ["--seconds", "120"], ["--quick"]),
    "spark": ("spark_source.py", "spark", [], ["--quick"]),
    "spark_sink": ("spark_sink.py", "spark_sink", [], ["--quick"]),
    "java": ("java_peers.py", "java_peers", [], ["--quick"]),
    "baseline": ("baseline.py", "baseline", [], ["--quick"]),
}
#: a benchmark still running after this many seconds is stopped and reported as failed
#: (about twice what each takes on a quiet 2-core machine)
TIME_LIMITS = {
    "codec": 60.0,
    "broker": 120.0,
    "producer": 120.0,
    "consumer": 300.0,
    "orderly_keys": 90.0,
    "request_reply": 60.0,
    "latency": 150.0,
    "backlog": 240.0,
    "spark": 240.0,
    "spark_sink": 240.0,
    "java": 480.0,
    "baseline": 480.0,
}
#: the whole run stops its last benchmark at this point, so ``make bench`` ends within 23 min
RUN_BUDGET = 22.0 * 60
PACKAGES = (
    "aiorocket",
    "rocketmq",
    "uvloop",
    "pydantic",
    "pyspark",
    "pyarrow",
    "matplotlib",
)


# -- running ------------------------------------------------------------------------------------


def _loadavg() -> list[float]:
    """The 1, 5 and 15 minute load averages."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def _machine() -> dict[str, Any]:
    """What the run ran on."""
    model = ""
    mem_kib = 0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem_kib / 2**20, 1),
        "python": sys.version,
        "python_implementation": platform.python_implementation(),
    }


def _versions() -> dict[str, str | None]:
    """Installed versions of the packages the figures depend on."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


@dataclass
class Outcome:
    """How one benchmark's process went."""

    name: str
    command: list[str]
    status: str = "not run"  # ok | failed | timeout | not available
    seconds: float = 0.0
    json_path: str | None = None
    load_before: list[float] = field(default_factory=list)
    load_after: list[float] = field(default_factory=list)
    error: str | None = None


def _newest(prefix: str, since: float) -> Path | None:
    """The newest ``<prefix>-*.json`` in the results directory written after ``since``."""
    found = [
        p
        for p in RESULTS.glob(f"{prefix}-*.json")
        if p.stat().st_mtime >= since and re.fullmatch(rf"{prefix}-\d{{8}}-\d{{6}}", p.stem)
    ]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def run_one(name: str, quick: bool, budget: float) -> tuple[Outcome, dict[str, Any] | None]:
    """Run one benchmark script, echoing its output; return the outcome and its JSON.

    The script is stopped after its time limit or ``budget`` seconds, whichever comes first.
    """
    script, prefix, full, short = BENCHMARKS[name]
    path = HERE / script
    cmd = [sys.executable, str(path), *(short if quick else full)]
    outcome = Outcome(name, [Path(c).name if c == str(path) else c for c in cmd])
    limit = min(TIME_LIMITS[name] * (0.6 if quick else 1.0), budget)
    if limit < 5:
        outcome.status = "not run"
        outcome.error = "the run's time budget is spent"
        print(f"== {name}: not run (time budget spent)", flush=True)
        return outcome, None
    if not path.exists():
        outcome.status = "not available"
        outcome.error = f"{script} is not present"
        print(f"== {name}: not available ({script} is not present)", flush=True)
        return outcome, None
    print(f"== {name}: {' '.join(outcome.command)}", flush=True)
    outcome.load_before = _loadavg()
    started = time.time()
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=HERE.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    assert proc.stdout is not None
    tail: list[str] = []
    wrote: list[str] = []
    timer = threading.Timer(limit, _stop_group, (proc,))
    timer.start()
    try:
        for line in proc.stdout:
            print(f"   {name} | {line.rstrip()[:160]}", flush=True)
            tail = [*tail[-30:], line.rstrip()]
            if m := _WROTE.search(line.strip()):
                wrote.append(m.group(1))
        code = proc.wait()
    finally:
        timer.cancel()
    outcome.seconds = time.perf_counter() - t0
    outcome.load_after = _loadavg()
    found = Path(wrote[-1]) if wrote else _newest(prefix, started)
    if code != 0 or found is None or not found.exists():
        outcome.status = "timeout" if code in (-9, -15) else "failed"
        outcome.error = f"exit code {code}: " + " / ".join(tail[-5:])
        print(f"== {name}: {outcome.status} ({outcome.error})", flush=True)
        return outcome, None
    outcome.status = "ok"
    outcome.json_path = str(found.relative_to(HERE.parent) if found.is_absolute() else found)
    print(f"== {name}: done in {outcome.seconds:.0f} s", flush=True)
    data: dict[str, Any] = json.loads(found.read_text())
    return outcome, data


def _stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop a benchmark that overran its time limit (its whole process group)."""
    try:
        os.killpg(proc.pid, 15)
        time.sleep(10)
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass


# -- the table ----------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table: a figure, its peer and its goal."""

    goal: str  # "P1".."P9", or "-" for a figure shown for context
    figure: str
    value: float | None
    unit: str
    spread_pct: float | None = None
    peer: str | None = None
    peer_value: float | None = None
    ratio: float | None = None
    target: str = "-"
    met: bool | None = None
    note: str = ""


def _get(doc: dict[str, Any] | None, *path: str | int) -> Any:
    """``doc[path[0]][path[1]]...``, or None where anything is missing."""
    cur: Any = doc
    for key in path:
        in_dict = isinstance(cur, dict) and key in cur
        in_list = isinstance(cur, list) and isinstance(key, int) and -len(cur) <= key < len(cur)
        if not (in_dict or in_list):
            return None
        cur = cur[key]
    return cur


def _ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None when either is missing or b is zero."""
    if a is None or b is None or b == 0 or math.isnan(a) or math.isnan(b):
        return None
    return a / b


def _spread(values: list[float]) -> float | None:
    """(max - min) / median in percent."""
    if not values:
        return None
    vs = sorted(values)
    med = vs[len(vs) // 2] if len(vs) % 2 else (vs[len(vs) // 2 - 1] + vs[len(vs) // 2]) / 2
    return (vs[-1] - vs[0]) / med * 100 if med else None


def _median(values: list[float]) -> float | None:
    """The median, None for no values."""
    if not values:
        return None
    vs = sorted(values)
    n = len(vs)
    return vs[n // 2] if n % 2 else (vs[n // 2 - 1] + vs[n // 2]) / 2


def _missing(goal: str, figure: str, target: str, why: str) -> Row:
    """A goal's row when its benchmark produced nothing."""
    return Row(goal, figure, None, "", target=target, note=why)


def codec_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """P9: frame split + binary header decode, and message decode at 128 B."""
    rows = []
    for key, figure in (
        ("frame split + binary header decode", "frame split + binary header decode"),
        ("message decode, 128 B bodies (32/pull)", "message decode, 128 B body"),
    ):
        found = [r for r in (_get(doc, "rows") or []) if r["name"] == key]
        limit = 1.0
        if not found:
            rows.append(_missing("P9", figure, f"<= {limit:g} us", why))
            continue
        r = found[0]
        value = r["us_per_unit_median"]
        rows.append(
            Row(
                "P9",
                figure,
                value,
                "us",
                r["spread_pct"],
                ratio=value / limit,
                target=f"<= {limit:g} us",
                met=value <= limit,
                note="ratio = measured / target",
            )
        )
    rows.extend(
        Row("-", r["name"], r["us_per_unit_median"], "us", r["spread_pct"])
        for r in _get(doc, "rows") or []
        if r["name"] == "frame split + JSON header decode"
    )
    return rows


def broker_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """P7: batched produce, pulls served, cold start."""
    if doc is None:
        return [
            _missing("P7", "embedded broker: produce, batched 128 B", ">= 50,000 msg/s", why),
            _missing("P7", "embedded broker: pulls served", ">= 200,000 msg/s", why),
            _missing("P7", "embedded broker: cold start", "< 1000 ms", why),
        ]
    p, pull, cs = doc["produce"], doc["pull"], doc["cold_start"]
    produce = p["msgs_per_s_median"]
    served = pull["msgs_per_s"]
    cold = cs["in_process_ms_median"]
    return [
        Row(
            "P7",
            "embedded broker: produce, batched 128 B",
            produce,
            "msg/s",
            _spread([w["msgs_per_s"] for w in p["windows"][1:-1]]),
            ratio=produce / 50_000,
            target=">= 50,000 msg/s",
            met=produce >= 50_000,
            note=f"broker CPU {p['broker_cpu_us_per_msg_median']:.1f} us/msg; ratio = / target",
        ),
        Row(
            "P7",
            "embedded broker: pulls served",
            served,
            "msg/s",
            ratio=served / 200_000,
            target=">= 200,000 msg/s",
            met=served >= 200_000,
            note=f"{pull['pull_loops']} pull loops, broker CPU "
            f"{pull['broker_cpu_us_per_msg']:.1f} us/msg",
        ),
        Row(
            "P7",
            "embedded broker: cold start (in process)",
            cold,
            "ms",
            ratio=cold / 1000,
            target="< 1000 ms",
            met=cold < 1000,
            note=f"CLI exec to listening {cs['cli_exec_to_listening_ms']:.0f} ms",
        ),
        Row(
            "-",
            "held-pull wake-up p99",
            doc["wake_up"]["p99_ms"],
            "ms",
            note=f"p50 {doc['wake_up']['p50_ms']:.2f} ms",
        ),
    ]


def producer_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """P3: pipelined sends against the C++ ``send_sync`` loop."""
    if doc is None:
        return [_missing("P3", "producer, pipelined send 128 B", ">= 2x C++", why)]
    ours = doc["aiorocket_pipelined_msgs_per_s"]
    cpp = doc["cpp_send_sync_msgs_per_s"]
    med, cmed = _median(ours), _median(cpp)
    ratio = _ratio(med, cmed)
    return [
        Row(
            "P3",
            "producer, pipelined send 128 B",
            med,
            "msg/s",
            _spread(ours),
            "C++ send_sync loop",
            cmed,
            ratio,
            ">= 2x C++",
            None if ratio is None else ratio >= 2,
            f"CPU {_median(doc['aiorocket_cpu_us_per_msg']) or 0:.1f} us/msg"
            + ("" if cmed else "; C++ client did not run"),
        ),
        Row(
            "-",
            "producer, one in flight, p99",
            doc["latency_ms_p99"],
            "ms",
            note=f"p50 {doc['latency_ms_p50']:.2f} ms",
        ),
    ]


def consumer_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """P1, P2, P5, and the orderly and 256-per-pull drains for context."""
    if doc is None:
        return [
            _missing("P1", "drain, batch handler", ">= 0.6x pure decode loop", why),
            _missing("P2", "drain, per-message handler", ">= 3x C++", why),
            _missing("P5", "idle consumer, 64 queues", "<= 1 % of a core", why),
        ]
    dec = doc["decode_loop"]
    cpp = doc.get("cpp_push_consumer")
    cpp_rate = cpp["msgs_per_s"] if cpp else None

    def fig(key: str) -> tuple[float | None, float | None, float | None]:
        r = doc.get(key)
        return (r["msgs_per_s"], r.get("spread_pct"), r["cpu_us_per_msg"]) if r else (None,) * 3

    rows = []
    v, s, c = fig("batch_handler")
    ratio = _ratio(v, dec["msgs_per_s"])
    rows.append(
        Row(
            "P1",
            "drain, batch handler (32/pull)",
            v,
            "msg/s",
            s,
            "pure decode loop",
            dec["msgs_per_s"],
            ratio,
            ">= 0.6x pure decode loop",
            None if ratio is None else ratio >= 0.6,
            f"CPU {c:.2f} vs {dec['cpu_us_per_msg']:.2f} us/msg"
            f" (CPU ratio {dec['cpu_us_per_msg'] / c:.2f})"
            if c
            else "",
        )
    )
    comp = doc.get("decode_loop_compiled")
    if comp:
        rows.append(
            Row(
                "-",
                "compiled decode loop (the consumer's codec)",
                comp["msgs_per_s"],
                "msg/s",
                comp.get("spread_pct"),
                "pure decode loop",
                dec["msgs_per_s"],
                _ratio(comp["msgs_per_s"], dec["msgs_per_s"]),
                note=f"CPU {comp['cpu_us_per_msg']:.2f} vs {dec['cpu_us_per_msg']:.2f} us/msg",
            )
        )
    if c:
        # The same comparison in CPU time: what the consumer's own code costs, whatever the
        # broker process and the rest of the machine took from the cores meanwhile.
        rows.append(
            Row(
                "-",
                "drain, batch handler: CPU per message",
                c,
                "us",
                None,
                "pure decode loop",
                dec["cpu_us_per_msg"],
                dec["cpu_us_per_msg"] / c,
                note="ratio = decode loop CPU / consumer CPU (the P1 ratio in CPU time)",
            )
        )
    v, s, c = fig("per_message_handler")
    ratio = _ratio(v, cpp_rate)
    rows.append(
        Row(
            "P2",
            "drain, per-message handler (32/pull)",
            v,
            "msg/s",
            s,
            "C++ PushConsumer",
            cpp_rate,
            ratio,
            ">= 3x C++",
            None if ratio is None else ratio >= 3,
            (f"CPU {c:.2f} vs C++ {cpp['cpu_us_per_msg']:.2f} us/msg" if c and cpp else "")
            + ("" if cpp else "; C++ client did not run"),
        )
    )
    if c and cpp:
        rows.append(
            Row(
                "-",
                "drain, per-message handler: CPU per message",
                c,
                "us",
                None,
                "C++ PushConsumer",
                cpp["cpu_us_per_msg"],
                cpp["cpu_us_per_msg"] / c,
                note="ratio = C++ CPU / aiorocket CPU (the P2 ratio in CPU time)",
            )
        )
    for key, figure, peer, peer_rate in (
        ("batch_handler_256", "drain, batch handler (256/pull)", "pure decode loop", None),
        ("per_message_handler_256", "drain, per-message handler (256/pull)", "C++", cpp_rate),
        ("orderly_batch_handler", "drain, orderly batch handler", "pure decode loop", None),
        ("orderly_per_message_handler", "drain, orderly per-message handler", "C++", cpp_rate),
        ("batch_handler_uvloop", "drain, batch handler, uvloop", "pure decode loop", None),
        ("per_message_handler_uvloop", "drain, per-message handler, uvloop", "C++", cpp_rate),
    ):
        v, s, c = fig(key)
        if v is None:
            continue
        base = dec["msgs_per_s"] if peer_rate is None else peer_rate
        rows.append(
            Row(
                "-",
                figure,
                v,
                "msg/s",
                s,
                peer if peer_rate is None else "C++ PushConsumer",
                base,
                _ratio(v, base),
                note=f"CPU {c:.2f} us/msg" if c else "",
            )
        )
    # The application-driven reads, beside the push consumer's drains of the same run.
    for key, figure, push_key, push_name in (
        ("pull_poll_batch", "PullConsumer drain, poll(32)", "batch_handler", "push, batch handler"),
        (
            "pull_async_for",
            "PullConsumer drain, async for",
            "per_message_handler",
            "push, per-message handler",
        ),
    ):
        v, s, c = fig(key)
        if v is None:
            continue
        base = fig(push_key)[0]
        rows.append(
            Row(
                "-",
                figure,
                v,
                "msg/s",
                s,
                push_name,
                base,
                _ratio(v, base),
                note=f"CPU {c:.2f} us/msg" if c else "",
            )
        )
    idle = doc["idle_64_queues"]
    one_each = idle["outstanding_pulls"] <= idle["queues"] + 1
    rows.append(
        Row(
            "P5",
            f"idle consumer, {idle['queues']} queues",
            idle["cpu_percent"],
            "% core",
            ratio=idle["cpu_percent"] / 1.0,
            target="<= 1 %; 1 poll/queue",
            met=idle["cpu_percent"] <= 1.0 and one_each,
            note=f"{idle['outstanding_pulls']} outstanding pulls for {idle['queues']} queues"
            " + the retry queue",
        )
    )
    return rows


def latency_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """P4: store→handler p99 and max at 1k msg/s, beside the C++ PushConsumer."""
    ours = _get(doc, "aiorocket")
    if ours is None:
        return [
            _missing("P4", "store→handler latency p99 @1k/s", "<= 10 ms", why),
            _missing("P4", "store→handler latency max @1k/s", "<= 150 ms", why),
        ]
    cpp = _get(doc, "cpp")
    s = ours["store_to_handler_ms"]
    cs = cpp["store_to_handler_ms"] if cpp else {}
    return [
        Row(
            "P4",
            "store→handler latency p99 @1k/s",
            s["p99"],
            "ms",
            s["p99_window_spread_pct"],
            "C++ PushConsumer",
            cs.get("p99"),
            _ratio(s["p99"], cs.get("p99")),
            "<= 10 ms",
            s["p99"] <= 10,
            f"p50 {s['p50']:.2f} ms (C++ {cs.get('p50', float('nan')):.2f}); consumer CPU "
            f"{ours['consumer_cpu_us_per_msg']:.0f} us/msg (C++ "
            f"{cpp['consumer_cpu_us_per_msg'] if cpp else float('nan'):.0f})",
        ),
        Row(
            "P4",
            "store→handler latency max @1k/s",
            s["max"],
            "ms",
            None,
            "C++ PushConsumer",
            cs.get("max"),
            _ratio(s["max"], cs.get("max")),
            "<= 150 ms",
            s["max"] <= 150,
            f"{ours['messages']} messages measured",
        ),
    ]


def orderly_keys_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """Orderly drain with a 10 ms handler, ordered by key against ordered by queue."""
    figure = "orderly drain, 10 ms handler, ordered by key"
    if doc is None:
        return [_missing("-", figure, "-", why)]
    q, k = doc["queue_ordered"], doc["key_ordered"]
    ok = all(d["every_key_in_order"] and d["max_calls_of_one_key_at_once"] == 1 for d in (q, k))
    return [
        Row(
            "-",
            figure,
            k["msgs_per_s"],
            "msg/s",
            peer="ordered by queue",
            peer_value=q["msgs_per_s"],
            ratio=doc["speedup"],
            note=f"{doc['keys']} keys x {doc['per_key']} in one queue, {doc['handler_ms']:g} ms "
            f"handler: {k['seconds']:.2f} s vs {q['seconds']:.2f} s"
            + ("" if ok else "; ORDER BROKEN"),
        )
    ]


def request_reply_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """Request/reply round trip at one in flight against a plain send's, p50 and p99."""
    rows = []
    for pct in ("p50", "p99"):
        figure = f"request/reply round trip, 1 in flight, {pct}"
        if doc is None:
            rows.append(_missing("-", figure, "-", why))
            continue
        r, s = doc["request_ms"], doc["send_ms"]
        rows.append(
            Row(
                "-",
                figure,
                r[pct],
                "ms",
                peer=f"plain send {pct}",
                peer_value=s[pct],
                ratio=r[pct] / s[pct],
                note=f"{doc['requests']} calls each, embedded broker, responder in process",
            )
        )
    return rows


def backlog_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """P6: the consumer's RSS under a backlog."""
    if doc is None:
        return [_missing("P6", "backlog: consumer RSS slope, last half", "flat, bounded", why)]
    return [
        Row(
            "P6",
            "backlog: consumer RSS slope, last half",
            doc["last_half_slope_mib_per_min"],
            "MiB/min",
            target="flat, bounded",
            met=doc["met"],
            note=(
                f"RSS {doc['idle_rss_mib']:.0f} -> {doc['last_half_rss_median_mib']:.0f} MiB; "
                f"max cached {doc['max_queue_cached_messages']}/queue "
                f"(bound {doc['cached_bound_per_queue']})"
            ),
        )
    ]


def spark_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """P8: Arrow path against the row path, and planning time per micro-batch."""
    ratio = _get(doc, "P8_arrow_vs_rows")
    plan = _get(doc, "P8_planning_ms")
    rows = []
    if ratio is None:
        rows.append(_missing("P8", "Spark source: Arrow path (conversion)", ">= 8x rows", why))
    else:
        conv = doc["conversion"] if doc else {}
        rows.append(
            Row(
                "P8",
                "Spark source: Arrow path (conversion)",
                _get(conv, "arrow", "rows_per_s"),
                "rows/s",
                _get(conv, "arrow", "spread_pct"),
                "row-tuple path",
                _get(conv, "rows", "rows_per_s"),
                ratio,
                ">= 8x rows",
                ratio >= 8,
                "conversion stage",
            )
        )
        ex = _get(doc, "executor_read")
        if _get(ex, "arrow_messages") and _get(ex, "compiled_builder"):
            ratio_ex = _ratio(_get(ex, "arrow", "rows_per_s"), ex["arrow_messages"]["rows_per_s"])
            rows.append(
                Row(
                    "-",
                    "Spark executor read: compiled columns vs through messages",
                    _get(ex, "arrow", "rows_per_s"),
                    "rows/s",
                    _get(ex, "arrow", "spread_pct"),
                    "through messages",
                    ex["arrow_messages"]["rows_per_s"],
                    ratio_ex,
                    "-",
                    None,
                    f"CPU {ex['arrow']['cpu_us_per_row']:.2f} vs "
                    f"{ex['arrow_messages']['cpu_us_per_row']:.2f} us/row; both with the same "
                    "read loop (the goal row against the baseline revision is G below)",
                )
            )
        for stage in ("executor_read", "spark"):
            r = _get(doc, stage)
            if r:
                rows.append(
                    Row(
                        "-",
                        f"Spark source: Arrow path ({stage.replace('_', ' ')})",
                        _get(r, "arrow", "rows_per_s"),
                        "rows/s",
                        _get(r, "arrow", "spread_pct"),
                        "row-tuple path",
                        _get(r, "rows", "rows_per_s"),
                        r.get("ratio"),
                    )
                )
    if plan is None:
        rows.append(_missing("P8", "Spark source: planning per micro-batch", "<= 200 ms", why))
    else:
        rows.append(
            Row(
                "P8",
                "Spark source: planning per micro-batch",
                plan,
                "ms",
                ratio=plan / 200,
                target="<= 200 ms",
                met=plan <= 200,
                note="median; ratio = / target",
            )
        )
    return rows


#: (figure, goal ratio) of this revision against the baseline revision, same run
BASELINE_GOALS: dict[str, tuple[str, float]] = {
    "pulls_served": ("embedded broker: pulls served vs the baseline revision", 2.0),
    "spark_executor_read": ("Spark executor read vs the baseline revision", 3.0),
}


def baseline_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """G: pulls served and the Spark executor read against the baseline revision."""
    rows = []
    for key, (figure, target) in BASELINE_GOALS.items():
        d = _get(doc, key)
        if not d:
            rows.append(_missing("G", figure, f">= {target:g}x", why))
            continue
        this = [f["per_s"] for f in d["this"]]
        before = [f["cpu_us"] for f in d["baseline"] if f["cpu_us"]]
        cpu = f"CPU {statistics.median(f['cpu_us'] for f in d['this']):.2f}"
        cpu += f" vs {statistics.median(before):.2f} us" if before else " us"
        rows.append(
            Row(
                "G",
                figure,
                d["this_per_s"],
                "rows/s" if "spark" in key else "msg/s",
                _spread(this),
                f"revision {str(_get(doc, 'baseline_rev'))[:7]}",
                d["baseline_per_s"],
                d["ratio"],
                f">= {target:g}x",
                d["ratio"] >= target,
                f"{cpu} per {'row' if 'spark' in key else 'message'}; "
                f"{len(this)} runs each, alternating",
            )
        )
    return rows


def spark_sink_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """P12: the exactly-once sink against the at-least-once sink, rows/s per executor core;
    the sink against the pipelined producer for context."""
    once = _get(doc, "spark_exactly_once", "rows_per_s", "median")
    least = _get(doc, "spark", "rows_per_s", "median")
    if once is None or least is None:
        return [_missing("P12", "Spark sink exactly once, per executor core", ">= 0.5x", why)]
    ratio = _ratio(once, least)
    return [
        Row(
            "P12",
            "Spark sink exactly once, per executor core",
            once,
            "rows/s",
            _get(doc, "spark_exactly_once", "rows_per_s", "spread_pct"),
            "at-least-once sink",
            least,
            ratio,
            ">= 0.5x",
            None if ratio is None else ratio >= 0.5,
            "df.write in local[1]; half messages, the driver's decision, the coordinator's "
            "commits; the write ends when they are committed",
        ),
        Row(
            "-",
            "Spark sink at least once, per executor core",
            least,
            "rows/s",
            _get(doc, "spark", "rows_per_s", "spread_pct"),
            "pipelined producer",
            _get(doc, "producer", "rows_per_s", "median"),
            _get(doc, "ratio_spark_vs_producer"),
            ">= 0.7x",
            None
            if _get(doc, "ratio_spark_vs_producer") is None
            else doc is not None and doc["ratio_spark_vs_producer"] >= 0.7,
        ),
    ]


#: goal ratios against the Java DefaultMQPushConsumer on the embedded broker
JAVA_GOALS: dict[str, float] = {"aiorocket_per_message": 2.0, "aiorocket_batch": 2.5}


def java_rows(doc: dict[str, Any] | None, why: str) -> list[Row]:
    """The Java 4.9.8 client beside aiorocket, on the embedded broker and on the Java broker."""
    if doc is None:
        return [
            _missing(
                "J", "embedded broker: per-message handler vs Java batch 1", ">= 2x Java", why
            ),
            _missing(
                "J", "embedded broker: batch handler (32) vs Java batch 32", ">= 2.5x Java", why
            ),
        ]
    rows = []
    for side, label in (("embedded", "embedded broker"), ("java_broker", "Java broker")):
        d = doc[side]
        for ours, java, figure in (
            ("aiorocket_per_message", "java_batch_1", "per-message handler vs Java batch 1"),
            ("aiorocket_batch", "java_batch_32", "batch handler (32) vs Java batch 32"),
            ("aiorocket_producer_sync", "java_producer_sync", "sync send loop vs Java"),
            ("aiorocket_producer_pipelined", "java_producer_sync", "pipelined send vs Java sync"),
            # Context: the same drains by two member processes of one group (--workers 2).
            (
                "aiorocket_per_message_2_members",
                "java_batch_1",
                "2 member processes, per-message handler vs Java batch 1",
            ),
            (
                "aiorocket_batch_2_members",
                "java_batch_32",
                "2 member processes, batch handler (32) vs Java batch 32",
            ),
        ):
            if ours not in d:
                continue  # (java_peers.py --members 1, or a result from before the option)
            o, j = d[ours], d[java]
            ratio = _ratio(o["msgs_per_s"], j["msgs_per_s"])
            # The goals: twice the Java push consumer per message, 2.5x with batches of 32,
            # on the same embedded broker in the same run.
            target = JAVA_GOALS.get(ours) if side == "embedded" else None
            rows.append(
                Row(
                    "J" if target else "-",
                    f"{label}: {figure}",
                    o["msgs_per_s"],
                    "msg/s",
                    o.get("spread_pct"),
                    "Java 4.9.8 client",
                    j["msgs_per_s"],
                    ratio,
                    f">= {target:g}x Java" if target else "-",
                    None if not target or ratio is None else ratio >= target,
                    note=f"CPU {o['cpu_us_per_msg']:.2f} vs Java {j['cpu_us_per_msg']:.2f} us/msg"
                    f" ({d['messages']:,} messages, 20 Java consume threads)"
                    if "java_batch" in java
                    else f"CPU {o['cpu_us_per_msg']:.1f} vs Java {j['cpu_us_per_msg']:.1f} us/msg",
                )
            )
    return rows


#: in the order of the goals they report (P1, P2, P5 | P3 | P4 | P6 | P7 | P8 | P12 | P9);
#: context rows ("-") follow the goal rows they explain
ROW_BUILDERS: dict[str, Callable[[dict[str, Any] | None, str], list[Row]]] = {
    "consumer": consumer_rows,
    "orderly_keys": orderly_keys_rows,
    "request_reply": request_reply_rows,
    "producer": producer_rows,
    "latency": latency_rows,
    "backlog": backlog_rows,
    "broker": broker_rows,
    "spark": spark_rows,
    "spark_sink": spark_sink_rows,
    "codec": codec_rows,
    "java": java_rows,
    "baseline": baseline_rows,
}


def _fmt(value: float | None, unit: str = "") -> str:
    """A number for the table: thousands separators for rates, 2-3 significant decimals else."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if unit in ("msg/s", "rows/s") or abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _fmt_ratio(ratio: float | None) -> str:
    """A ratio: two decimals, or two significant digits below 0.1."""
    if ratio is None or math.isnan(ratio):
        return "-"
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def render_table(rows: list[Row]) -> str:
    """The table as text (also used in BENCHMARKS.md, so Markdown)."""
    lines = [
        "| goal | figure | aiorocket | spread | peer | peer value | ratio | target | verdict |",
        "|---|---|---:|---:|---|---:|---:|---|---|",
    ]
    for r in rows:
        verdict = "met" if r.met else "missed" if r.met is False else "-"
        if r.goal != "-" and r.value is None:
            verdict = "not measured"
        spread = f"{r.spread_pct:.0f} %" if r.spread_pct is not None else "-"
        lines.append(
            f"| {r.goal} | {r.figure} | {_fmt(r.value, r.unit)} {r.unit} | {spread} | "
            f"{r.peer or '-'} | {_fmt(r.peer_value, r.unit)} | "
            f"{_fmt_ratio(r.ratio)} | {r.target} | {verdict} |"
        )
    notes = [f"* {r.goal}, {r.figure}: {r.note}" for r in rows if r.note]
    if notes:
        lines += ["", "Notes:", "", *notes]
    return "\n".join(lines)


def print_table(rows: list[Row]) -> None:
    """Print the table for a terminal, with notes under it."""
    header = (
        f"{'goal':<5}{'figure':<46}{'aiorocket':>18}{'spread':>8}  {'peer':<20}"
        f"{'peer value':>12}{'ratio':>8}  {'target':<22}verdict"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        verdict = "met" if r.met else "MISSED" if r.met is False else "-"
        if r.goal != "-" and r.value is None:
            verdict = "not measured"
        spread = f"{r.spread_pct:.0f}%" if r.spread_pct is not None else "-"
        value = f"{_fmt(r.value, r.unit)} {r.unit}"
        ratio = _fmt_ratio(r.ratio)
        print(
            f"{r.goal:<5}{r.figure[:45]:<46}{value:>18}{spread:>8}  {(r.peer or '-')[:19]:<20}"
            f"{_fmt(r.peer_value, r.unit):>12}{ratio:>8}  {r.target:<22}{verdict}"
        )
    print()
    for r in rows:
        if r.note:
            print(f"  {r.goal:<3} {r.figure}: {r.note}")


# -- charts -------------------------------------------------------------------------------------


def _goal_ratio(target: str | None) -> float | None:
    """The ratio of a target such as ">= 2.5x Java" (None for absolute targets)."""
    m = re.match(r">= ([0-9.]+)x", target or "")
    return float(m.group(1)) if m else None


def render_charts(docs: dict[str, dict[str, Any] | None], rows: list[Row]) -> list[str]:
    """Write the PNG charts; return their paths (none when matplotlib is missing)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("charts: matplotlib is not installed (pip install matplotlib)", file=sys.stderr)
        return []
    written = []

    # 1. Throughput ratios against peers.
    bars = [
        r
        for r in rows
        if r.ratio is not None and r.peer is not None and r.unit in ("msg/s", "rows/s")
    ]
    if bars:
        goals = {r.figure: _goal_ratio(r.target) for r in bars if r.goal != "-"}
        fig, ax = plt.subplots(figsize=(10, 0.55 * len(bars) + 1.6), dpi=110)
        labels = [
            (f"{r.goal}: " if r.goal != "-" else "") + f"{r.figure}\nvs {r.peer}" for r in bars
        ]
        values = [r.ratio or 0.0 for r in bars]
        colours = ["#2e7d32" if r.met else "#c62828" if r.met is False else "#78909c" for r in bars]
        ys = list(range(len(bars)))[::-1]
        ax.barh(ys, values, color=colours, height=0.6)
        for y, r, v in zip(ys, bars, values, strict=True):
            g = goals.get(r.figure)
            # Beside the bar, unless the goal marker is just right of it.
            at = v if g is None or v >= g or g / max(v, 1e-9) > 2.5 else g
            ax.text(at * 1.12, y, f"{v:.2f}x", va="center", fontsize=9)
            if g is not None:
                ax.plot([g, g], [y - 0.38, y + 0.38], color="black", linewidth=2)
                ax.text(g, y + 0.4, f"goal {g:g}x", fontsize=7, ha="center")
        ax.axvline(1.0, color="#555555", linestyle=":", linewidth=1)
        ax.set_xscale("log")
        ax.set_yticks(ys)
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xlabel("ratio to the peer, same run (log scale; right of 1 = aiorocket faster)")
        ax.set_title(
            "aiorocket throughput against its peers (green: goal met, red: missed, grey: context)",
            fontsize=10,
        )
        ax.set_xlim(min(0.1, min(values) / 2), max(values) * 2.5)
        fig.tight_layout()
        out = RESULTS / "latest-throughput.png"
        fig.savefig(out)
        plt.close(fig)
        written.append(str(out))

    # 2. Latency distribution: CDF (left) and latency by percentile, for the tail (right).
    lat = docs.get("latency")
    if lat and lat.get("aiorocket"):
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 5), dpi=110)
        for name, label, colour in (
            ("aiorocket", "aiorocket PushConsumer", "#1565c0"),
            ("cpp", "C++ PushConsumer (rocketmq 0.4.4)", "#ef6c00"),
        ):
            one = lat.get(name)
            if not one:
                continue
            curve = one["curve"]
            ms = [max(x, 0.05) for x in curve["store_to_handler_ms"]]
            qs = curve["quantiles"]
            s = one["store_to_handler_ms"]
            ax.plot(
                ms,
                qs,
                color=colour,
                label=f"{label}\np50 {s['p50']:.1f}, p99 {s['p99']:.1f}, max {s['max']:.0f} ms",
            )
            # 1 / (1 - q): 2 at the median, 100 at p99; the maximum is drawn at 2000.
            ax2.plot([1 / (1 - q) if q < 1 else 2000 for q in qs], ms, color=colour)
        for a in (ax, ax2):
            a.grid(True, which="both", alpha=0.25)
        ax.axvline(10, color="#c62828", linestyle="--", linewidth=1)
        ax.text(10.8, 0.45, "P4: p99 <= 10 ms", color="#c62828", fontsize=8, rotation=90)
        ax.axvline(150, color="#6a1b9a", linestyle="--", linewidth=1)
        ax.text(162, 0.45, "P4: max <= 150 ms", color="#6a1b9a", fontsize=8, rotation=90)
        ax.set_xscale("log")
        ax.set_xlim(0.1, 1000)
        ax.set_ylim(0, 1.005)
        ax.set_xlabel("store→handler latency, ms (log scale)")
        ax.set_ylabel("fraction of messages (CDF)")
        ax.legend(loc="lower right", fontsize=8)
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        ax2.set_xticks([2, 10, 100, 1000, 2000])
        ax2.set_xticklabels(["p50", "p90", "p99", "p99.9", "max"])
        ax2.minorticks_off()
        ax2.set_xlim(1.5, 2600)
        ax2.axhline(10, color="#c62828", linestyle="--", linewidth=1)
        ax2.text(1.6, 11, "P4: p99 <= 10 ms", color="#c62828", fontsize=8)
        ax2.axhline(150, color="#6a1b9a", linestyle="--", linewidth=1)
        ax2.text(1.6, 162, "P4: max <= 150 ms", color="#6a1b9a", fontsize=8)
        ax2.set_ylim(0.1, 1000)
        ax2.set_xlabel("percentile")
        ax2.set_ylabel("store→handler latency, ms (log scale)")
        settings = lat.get("settings", {})
        how = "one after the other" if settings.get("sequential") else "side by side"
        fig.suptitle(
            f"Store→handler latency at a steady {settings.get('rate', 1000):.0f} msg/s, "
            f"{settings.get('seconds', 0):.0f} s measured, both clients {how} on one broker "
            "(store timestamps are whole ms)",
            fontsize=10,
        )
        fig.tight_layout()
        out = RESULTS / "latest-latency.png"
        fig.savefig(out)
        plt.close(fig)
        written.append(str(out))

    # 3. Backlog: consumer RSS and cached messages over time.
    bl = docs.get("backlog")
    if bl and bl.get("samples"):
        fig, (ax, ax2) = plt.subplots(2, 1, figsize=(9, 6), dpi=110, sharex=True)
        cfg = bl["settings"]
        samples = bl["samples"]
        ax.plot([p["t"] for p in samples], [p["rss_mib"] for p in samples], color="#1565c0")
        ax.axhline(bl["idle_rss_mib"], color="#888888", linestyle=":", linewidth=1)
        ax.text(0, bl["idle_rss_mib"] * 0.9, "idle consumer", color="#666666", fontsize=8)
        ax.set_ylabel("consumer RSS, MiB")
        ax.set_ylim(0, max(p["rss_mib"] for p in samples) * 1.25)
        ax.set_title(
            f"Backlog: {cfg['rate']:.0f} msg/s of {cfg['body_bytes']} B produced, handler "
            f"{cfg['handler_ms']:.0f} ms x {cfg['concurrency']} at once\n"
            f"P6 {'met' if bl['met'] else 'missed'}: RSS slope over the last half "
            f"{bl['last_half_slope_mib_per_min']:+.2f} MiB/min",
            fontsize=10,
        )
        st = bl["statuses"]
        ax2.plot([p["t"] for p in st], [p["cached_count"] for p in st], color="#ef6c00")
        bound = bl["cached_bound_per_queue"] * cfg["queues"]
        ax2.axhline(bound, color="#c62828", linestyle="--", linewidth=1)
        ax2.text(
            0,
            bound * 1.04,
            f"flow-control bound: {cfg['queues']} queues x "
            f"({cfg['pull_threshold_for_queue']} + one pull of {cfg['pull_batch_size']})",
            color="#c62828",
            fontsize=8,
        )
        ax2.set_ylabel("messages cached")
        ax2.set_ylim(0, bound * 1.25)
        ax2.set_xlabel("seconds since production started")
        for a in (ax, ax2):
            a.axvline(cfg["seconds"] / 2, color="#888888", linestyle=":", linewidth=1)
            a.grid(True, alpha=0.25)
        fig.tight_layout()
        out = RESULTS / "latest-backlog.png"
        fig.savefig(out)
        plt.close(fig)
        written.append(str(out))
    return written


# -- main ---------------------------------------------------------------------------------------


def main() -> int:
    """Run the selected benchmarks, print the table, write the JSON and the charts."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="short smoke runs of every benchmark")
    ap.add_argument("--only", default="", help="comma-separated subset, e.g. codec,latency")
    ap.add_argument("--no-charts", action="store_true", help="do not render the PNGs")
    ap.add_argument(
        "--from-json",
        type=Path,
        help="rebuild the table and charts from an earlier run_all JSON, running nothing",
    )
    ap.add_argument(
        "--markdown", action="store_true", help="also print the table as Markdown (BENCHMARKS.md)"
    )
    args = ap.parse_args()
    RESULTS.mkdir(exist_ok=True)

    docs: dict[str, dict[str, Any] | None] = {}
    outcomes: dict[str, Outcome] = {}
    if args.from_json:
        earlier = json.loads(args.from_json.read_text())
        for name, entry in earlier["benchmarks"].items():
            docs[name] = entry.get("data")
            outcomes[name] = Outcome(**{k: v for k, v in entry.items() if k != "data"})
        report: dict[str, Any] = {k: v for k, v in earlier.items() if k != "table"}
    else:
        names = [n for n in BENCHMARKS if not args.only or n in args.only.split(",")]
        t0 = time.perf_counter()
        report = {
            "benchmark": "run_all",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "quick": args.quick,
            "machine": _machine(),
            "packages": _versions(),
            "pinning": "none: each benchmark runs its broker, client and peers as separate "
            "processes and leaves placement to the scheduler",
        }
        for name in names:
            outcome, doc = run_one(name, args.quick, RUN_BUDGET - (time.perf_counter() - t0))
            outcomes[name], docs[name] = outcome, doc
        report["duration_s"] = time.perf_counter() - t0
        report["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")

    rows: list[Row] = []
    for name, build in ROW_BUILDERS.items():
        if name not in outcomes:
            continue
        o = outcomes[name]
        why = f"{name}: {o.status}" + (f" ({o.error})" if o.error else "")
        rows += build(docs.get(name), why)

    print()
    print_table(rows)
    met = sum(1 for r in rows if r.met)
    missed = sum(1 for r in rows if r.met is False)
    print(f"\ngoals: {met} rows met, {missed} missed")
    print("\nbenchmark     status          seconds   load average (1 min) before -> after")
    for o in outcomes.values():
        load = (
            f"{o.load_before[0]:.2f} -> {o.load_after[0]:.2f}"
            if o.load_before and o.load_after
            else "-"
        )
        print(f"{o.name:<14}{o.status:<16}{o.seconds:>7.0f}   {load}")
    if "duration_s" in report:
        print(f"run time: {report['duration_s'] / 60:.1f} min")

    report["benchmarks"] = {
        name: {**asdict(o), "data": docs.get(name)} for name, o in outcomes.items()
    }
    report["table"] = [asdict(r) for r in rows]
    report["table_markdown"] = render_table(rows)
    if args.markdown:
        print()
        print(report["table_markdown"])
    if not args.no_charts:
        report["charts"] = render_charts(docs, rows)
        for c in report["charts"]:
            print(f"chart: {c}")
    if not args.from_json:
        out = RESULTS / f"run_all-{time.strftime('%Y%m%d-%H%M%S')}.json"
        out.write_text(json.dumps(report, indent=2, default=str))
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
