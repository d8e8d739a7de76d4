"""Codec micro-benchmarks (docs/performance.md P9).

Prints µs per frame for split + header decode in both dialects, µs per message for pull-body
decode at 128 B and 1 KiB, and the encode side, each as the median of several windows with the
spread. Writes the figures to ``benchmarks/results/codec-<timestamp>.json``.

    python benchmarks/codec.py [--windows 7] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aiorocket._protocol.codes import SerializeType
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.frame import NEED_DATA, FrameDecoder, encode_command
from aiorocket._protocol.headers import PullMessageResponseHeader
from aiorocket._protocol.message import MessageRecord, decode_messages, encode_message

RESULTS = Path(__file__).parent / "results"


def _pull_response(stype: SerializeType, body: bytes) -> bytes:
    header = PullMessageResponseHeader(
        suggest_which_broker_id=0, next_begin_offset=33, min_offset=0, max_offset=1000
    )
    cmd = RemotingCommand(
        code=0,
        opaque=7,
        flag=1,
        remark="FOUND",
        ext_fields=header.to_ext(),
        body=body,
        serialize_type=stype,
    )
    return encode_command(cmd)


def _records(n: int, size: int) -> bytes:
    out = []
    for i in range(n):
        rec = MessageRecord(
            topic="BenchTopic",
            body=bytes([i % 251]) * size,
            queue_id=3,
            flag=0,
            queue_offset=i,
            commit_log_offset=4096 * i,
            sys_flag=0,
            born_timestamp=1_700_000_000_000 + i,
            born_host="10.0.0.1",
            born_port=52000,
            store_timestamp=1_700_000_000_100 + i,
            store_host="10.0.0.2",
            store_port=10911,
            reconsume_times=0,
            prepared_transaction_offset=0,
            properties={
                "TAGS": "created",
                "KEYS": f"order-{i}",
                "UNIQ_KEY": f"0A00000130391234567805F5E1{i:06X}",
                "CLUSTER": "DefaultCluster",
            },
        )
        out.append(encode_message(rec))
    return b"".join(out)


def _measure(fn: Callable[[], int], windows: int, min_time: float) -> tuple[float, float]:
    """Run ``fn`` (which returns how many units it processed) in windows; µs/unit median, spread."""
    fn()  # warm-up
    per_unit = []
    for _ in range(windows):
        units, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < min_time:
            units += fn()
        per_unit.append(elapsed / units * 1e6)
    med = statistics.median(per_unit)
    return med, (max(per_unit) - min(per_unit)) / med * 100


def main() -> int:
    """Run the codec benchmarks and print the table."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--windows", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="short windows, for a smoke run")
    args = ap.parse_args()
    min_time = 0.05 if args.quick else 0.3

    rows: list[tuple[str, float, float, str]] = []
    frames_per_stream = 1000
    for stype, name in ((SerializeType.ROCKETMQ, "binary"), (SerializeType.JSON, "JSON")):
        stream = _pull_response(stype, b"") * frames_per_stream

        def split(stream: bytes = stream) -> int:
            dec = FrameDecoder()
            dec.feed(stream)
            n = 0
            while dec.next_command() is not NEED_DATA:
                n += 1
            return n

        goal = "<= 1 us (P9)" if stype == SerializeType.ROCKETMQ else "-"
        rows.append(
            (f"frame split + {name} header decode", *_measure(split, args.windows, min_time), goal)
        )

    for size in (128, 1024):
        body = _records(32, size)

        def decode(body: bytes = body) -> int:
            return len(decode_messages(body))

        goal = "<= 2 us (P9)" if size == 128 else "-"
        rows.append(
            (
                f"message decode, {size} B bodies (32/pull)",
                *_measure(decode, args.windows, min_time),
                goal,
            )
        )

    cmd = RemotingCommand(code=310, ext_fields={"a": "PID", "b": "T", "e": "1"}, body=b"x" * 128)

    def encode() -> int:
        for _ in range(100):
            encode_command(cmd)
        return 100

    rows.append(
        ("frame encode, JSON header, 128 B body", *_measure(encode, args.windows, min_time), "-")
    )

    print(f"{'benchmark':<44} {'us/unit':>9} {'spread':>8}  goal")
    for name, med, spread, goal in rows:
        print(f"{name:<44} {med:>9.3f} {spread:>7.1f}%  {goal}")

    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"codec-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(
        json.dumps(
            {
                "benchmark": "codec",
                "python": sys.version,
                "machine": platform.machine(),
                "platform": platform.platform(),
                "windows": args.windows,
                "rows": [
                    {"name": n, "us_per_unit_median": m, "spread_pct": s, "goal": g}
                    for n, m, s, g in rows
                ],
            },
            indent=2,
        )
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
