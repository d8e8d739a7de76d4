"""A RocketMQ peer driven by the Apache C++ client (PyPI ``rocketmq``), run as a subprocess.

Usage::

    python tests/interop/cpp_peer.py produce --namesrv HOST:PORT --topic T --count N ...
    python tests/interop/cpp_peer.py consume --namesrv HOST:PORT --topic T --group G ...

The C++ library runs native threads that can crash or hang their process, so tests never load
it in-process: they start this script and read its events. Every event is one JSON object on
one stdout line, prefixed with ``@@ ``. The script moves file descriptor 1 to stderr before the
library loads, so anything native code prints cannot interleave with the events.

This file must stay importable without the ``rocketmq`` package (the harness shares its
constants and message builder); the library is imported inside the mode functions.

Exit codes: 0 success, 1 a send failed or an error occurred, 2 bad arguments or the client
could not start, 3 ``consume`` stopped (idle or timeout) before ``--expect`` ids were accepted.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = [
    "EVENT_PREFIX",
    "EXIT_ERROR",
    "EXIT_INCOMPLETE",
    "EXIT_OK",
    "EXIT_USAGE",
    "ID_PROPERTY",
    "SYSTEM_PROPERTIES",
    "USER_PROPERTIES",
    "build_message",
    "emit",
    "main",
]

#: prefix of every event line; readers ignore any other line
EVENT_PREFIX = "@@ "
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_INCOMPLETE = 3

# ``CConsumeStatus`` of the C API
CONSUME_SUCCESS = 0
CONSUME_RECONSUME_LATER = 1

#: the user property that carries a message's unique test id
ID_PROPERTY = "mid"
#: user properties set by ``produce`` and read back by ``consume`` by default
USER_PROPERTIES = ("mid", "seq", "okey", "kseq", "run_id")
#: broker/client properties ``consume`` reports when present (the C API cannot list them)
SYSTEM_PROPERTIES = (
    "UNIQ_KEY",
    "KEYS",
    "TAGS",
    "DELAY",
    "REAL_TOPIC",
    "REAL_QID",
    "RETRY_TOPIC",
    "ORIGIN_MESSAGE_ID",
    "RECONSUME_TIME",
    "MAX_OFFSET",
    "MIN_OFFSET",
    "CLUSTER",
    "WAIT",
)
# Non-ASCII text in bodies and properties: a codec that mangles bytes shows up as a mismatch.
_NOTE = "ünïcødé ✓"

_out_lock = threading.Lock()
_out: TextIO = sys.stdout


def _redirect_native_stdout() -> None:
    """Keep fd 1 for events only: native ``printf`` output goes to stderr instead."""
    global _out
    sys.stdout.flush()
    events_fd = os.dup(1)
    os.dup2(2, 1)
    _out = open(events_fd, "w", encoding="utf-8", buffering=1)  # noqa: SIM115 - process-wide


def emit(event: str, **fields: Any) -> None:
    """Write one event line and flush it at once (callbacks run on several native threads)."""
    record = {"event": event, **fields}
    line = EVENT_PREFIX + json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
    with _out_lock:
        _out.write(line)
        _out.flush()


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so no peer outlives a test run."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() == 1:  # the parent is already gone
        os._exit(EXIT_ERROR)


def build_message(
    run_id: str,
    index: int,
    *,
    key_count: int,
    tag_prefix: str = "Tag",
    tag_count: int = 4,
    body_size: int = 0,
) -> dict[str, Any]:
    """Describe message ``index`` of a run: what ``produce`` sends and ``consume`` must see.

    Messages cycle over ``key_count`` order keys; ``kseq`` numbers the messages of one key
    0, 1, 2, ... in send order, which is what an orderly consumer must preserve.

    Returns:
        ``id``, ``index``, ``key``, ``key_index``, ``kseq``, ``tags``, ``keys`` (the
        space-joined KEYS string), ``properties`` (user properties) and ``body`` (text).
    """
    key_index = index % key_count
    kseq = index // key_count
    mid = f"{run_id}-{index}"
    key = f"{run_id}-k{key_index}"
    body = json.dumps(
        {"id": mid, "i": index, "key": key, "kseq": kseq, "note": _NOTE},
        ensure_ascii=False,
        separators=(",", ":"),
    )
    if body_size > len(body):
        # Deterministic but poorly compressible filler, so large bodies really are large.
        filler: list[str] = []
        seed = zlib.crc32(mid.encode())
        need = body_size - len(body)
        while 8 * len(filler) < need:
            seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
            filler.append(f"{seed:08x}")
        body = body + "".join(filler)[:need]
    return {
        "id": mid,
        "index": index,
        "key": key,
        "key_index": key_index,
        "kseq": kseq,
        "tags": f"{tag_prefix}{index % tag_count}",
        "keys": f"{mid} {key}",
        "properties": {
            "mid": mid,
            "seq": str(index),
            "okey": key,
            "kseq": str(kseq),
            "run_id": f"{run_id} {_NOTE}",
        },
        "body": body,
    }


# -- produce ------------------------------------------------------------------------------------


def _produce(args: argparse.Namespace) -> int:
    from rocketmq.client import Message, Producer

    run_id = args.run_id or uuid.uuid4().hex[:10]
    group = args.group or f"PG_{run_id}"
    producer = Producer(group, timeout=args.send_timeout_ms)
    producer.set_namesrv_addr(args.namesrv)
    try:
        producer.start()
    except Exception as exc:
        emit("error", stage="start", error=f"{type(exc).__name__}: {exc}")
        return EXIT_USAGE
    emit("started", mode=args.mode, run_id=run_id, group=group, pid=os.getpid())

    chosen: dict[str, int] = {}

    def selector(mq_size: int, _msg: Any, arg: Any) -> int:
        # The binding passes a ``void*`` to a C int: the key index picks the queue, so every
        # message of one key goes to the same queue (what orderly consumption relies on).
        value = ctypes.cast(arg, ctypes.POINTER(ctypes.c_int))[0]
        queue = int(value) % mq_size
        chosen["queue"], chosen["queues"] = queue, mq_size
        return queue

    stop = threading.Event()

    def on_signal(_signum: int, _frame: Any) -> None:
        # Finish the send in progress, then report and shut down cleanly.
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    failures = sent = 0
    batch: list[tuple[dict[str, Any], Any]] = []
    started = time.monotonic()
    for index in range(args.start, args.start + args.count):
        if stop.is_set():
            break
        spec = build_message(
            run_id,
            index,
            key_count=args.key_count,
            tag_prefix=args.tag_prefix,
            body_size=args.body_size,
        )
        msg = Message(args.topic)
        msg.set_body(spec["body"])
        msg.set_tags(spec["tags"])
        msg.set_keys(spec["keys"])
        for name, value in spec["properties"].items():
            msg.set_property(name, value)
        if args.delay_level:
            msg.set_delay_time_level(args.delay_level)
        if args.mode == "batch":
            # Collected and sent below, once a batch is full or the run ends.
            batch.append((spec, msg))
            if len(batch) >= args.batch_size or index == args.start + args.count - 1:
                ok, failed = _send_batch(producer, args.topic, batch)
                sent, failures, batch = sent + ok, failures + failed, []
            continue
        sent_at = time.time()
        ack: dict[str, Any] = {}
        try:
            if args.mode == "sync":
                result = producer.send_sync(msg)
                ack = {
                    "status": int(result.status),
                    "msg_id": result.msg_id,
                    "offset": result.offset,
                }
            elif args.mode == "orderly":
                chosen.clear()
                result = producer.send_orderly(msg, spec["key_index"], queue_selector=selector)
                ack = {
                    "status": int(result.status),
                    "msg_id": result.msg_id,
                    "offset": result.offset,
                    "queue": chosen.get("queue"),
                    "queues": chosen.get("queues"),
                }
            else:
                producer.send_oneway(msg)
        except Exception as exc:
            failures += 1
            emit("send_error", id=spec["id"], error=f"{type(exc).__name__}: {exc}")
            if failures >= args.max_failures:
                break
            continue
        sent += 1
        emit("sent", topic=args.topic, sent_at=sent_at, delay_level=args.delay_level, **spec, **ack)
        if args.rate > 0:
            stop.wait(1.0 / args.rate)
    elapsed = time.monotonic() - started
    if args.mode == "oneway" and args.linger > 0:
        # Oneway sends return once queued locally; give the socket time to drain before the
        # client tears its connections down.
        time.sleep(args.linger)
    emit(
        "summary",
        mode=args.mode,
        topic=args.topic,
        sent=sent,
        failed=failures,
        interrupted=stop.is_set(),
        elapsed=round(elapsed, 3),
    )
    _shutdown(producer.shutdown, args.shutdown_timeout)
    return EXIT_ERROR if failures else EXIT_OK


def _send_batch(
    producer: Any, topic: str, batch: list[tuple[dict[str, Any], Any]]
) -> tuple[int, int]:
    """Send one batch; report each message as sent (the result covers the whole batch).

    Returns:
        (messages acknowledged, messages failed)
    """
    sent_at = time.time()
    try:
        result = producer.send_batch([msg for _spec, msg in batch])
    except Exception as exc:
        for spec, _msg in batch:
            emit("send_error", id=spec["id"], error=f"{type(exc).__name__}: {exc}")
        return 0, len(batch)
    for position, (spec, _msg) in enumerate(batch):
        emit(
            "sent",
            topic=topic,
            sent_at=sent_at,
            delay_level=0,
            **spec,
            status=int(result.status),
            batch_msg_id=result.msg_id,
            batch_offset=result.offset,
            batch_position=position,
        )
    return len(batch), 0


# -- consume ------------------------------------------------------------------------------------


def _text(value: bytes | str | None) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return value.decode("utf-8", errors="backslashreplace")


def _consume(args: argparse.Namespace) -> int:
    from rocketmq.client import MessageModel, PushConsumer, RecvMessage
    from rocketmq.ffi import MSG_CALLBACK_FUNC, dll

    model = MessageModel.BROADCASTING if args.broadcast else MessageModel.CLUSTERING
    consumer = PushConsumer(args.group, orderly=args.orderly, message_model=model)
    consumer.set_namesrv_addr(args.namesrv)
    if args.threads:
        consumer.set_thread_count(args.threads)
    if args.batch_max_size:
        consumer.set_message_batch_max_size(args.batch_max_size)

    prop_names = tuple(dict.fromkeys([*USER_PROPERTIES, *args.prop, *SYSTEM_PROPERTIES]))
    delivered: set[str] = set()
    accepted: set[str] = set()
    state = {"deliveries": 0, "last": time.monotonic(), "errors": 0}
    done = threading.Event()
    lock = threading.Lock()

    def on_message(_consumer: Any, handle: Any) -> int:
        # Never raise: the status returned here is all the client must see.
        try:
            msg = RecvMessage(handle)
            delivered_at = time.time()
            body = msg.body
            try:
                body_text: str | None = body.decode("utf-8")
                body_hex = None
            except UnicodeDecodeError:
                body_text, body_hex = None, body.hex()
            props = {}
            for name in prop_names:
                value = _text(msg.get_property(name))
                if value:  # the C API answers "" for an absent property
                    props[name] = value
            mid = props.get(args.id_property) or _text(msg.id) or ""
            seq = props.get("seq", "")
            # --reject-every N: the first delivery of every N-th message is refused, so the
            # client sends it back (concurrent) or retries it locally (orderly).
            reject = bool(args.reject_every and seq.isdigit() and int(seq) % args.reject_every == 0)
            with lock:
                first = mid not in delivered
                delivered.add(mid)
                reject = reject and first
                if not reject:
                    accepted.add(mid)
                state["deliveries"] += 1
                state["last"] = time.monotonic()
                distinct = len(accepted)
            emit(
                "msg",
                id=mid,
                first=first,
                accepted=not reject,
                topic=_text(msg.topic),
                tags=_text(msg.tags),
                keys=_text(msg.keys),
                body=body_text,
                body_hex=body_hex,
                body_len=len(body),
                properties=props,
                queue=msg.queue_id,
                offset=msg.queue_offset,
                msg_id=_text(msg.id),
                reconsume_times=msg.reconsume_times,
                delay_level=msg.delay_time_level,
                born_ts=msg.born_timestamp,
                store_ts=msg.store_timestamp,
                delivered_at=delivered_at,
                thread=threading.current_thread().name,
                tid=threading.get_native_id(),
            )
            if args.expect and distinct >= args.expect:
                done.set()
            return CONSUME_RECONSUME_LATER if reject else CONSUME_SUCCESS
        except Exception as exc:
            with lock:
                state["errors"] += 1
            emit("callback_error", error=f"{type(exc).__name__}: {exc}")
            return CONSUME_SUCCESS

    for topic in args.topic:
        consumer.subscribe(topic, lambda _msg: None, args.expression)
    # The binding's own wrapper signals a refusal by re-raising inside the ctypes callback,
    # whose return value is then undefined. Register a callback that returns the status
    # itself instead (the C API keeps the last one registered).
    native_callback = MSG_CALLBACK_FUNC(on_message)
    register = dll.RegisterMessageCallbackOrderly if args.orderly else dll.RegisterMessageCallback
    if register(consumer._handle, native_callback) != 0:
        emit("error", stage="register", error="registering the message callback failed")
        return EXIT_USAGE

    stop_reason: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        stop_reason.append(signal.Signals(signum).name)
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    try:
        consumer.start()
    except Exception as exc:
        emit("error", stage="start", error=f"{type(exc).__name__}: {exc}")
        return EXIT_USAGE
    started = time.monotonic()
    emit(
        "started",
        group=args.group,
        topics=args.topic,
        orderly=args.orderly,
        broadcast=args.broadcast,
        pid=os.getpid(),
    )

    reason = "expect"
    while not done.wait(0.1):
        now = time.monotonic()
        with lock:
            idle = now - state["last"]
            have_any = state["deliveries"] > 0
        if args.timeout and now - started >= args.timeout:
            reason = "timeout"
            break
        if args.idle_exit and have_any and idle >= args.idle_exit:
            reason = "idle"
            break
    if stop_reason:
        reason = stop_reason[0]
    with lock:
        distinct, deliveries, errors = len(accepted), state["deliveries"], state["errors"]
    complete = not args.expect or distinct >= args.expect
    emit(
        "summary",
        reason=reason,
        distinct=distinct,
        deliveries=deliveries,
        errors=errors,
        expect=args.expect,
        elapsed=round(time.monotonic() - started, 3),
    )
    _shutdown(consumer.shutdown, args.shutdown_timeout)
    if errors:
        return EXIT_ERROR
    return EXIT_OK if complete else EXIT_INCOMPLETE


def _shutdown(stop: Callable[[], None], timeout: float) -> None:
    """Shut the client down, but never let a hung native shutdown keep the process alive."""

    def watchdog() -> None:
        emit("shutdown_timeout", seconds=timeout)
        _out.flush()
        os._exit(EXIT_ERROR)

    timer = threading.Timer(timeout, watchdog)
    timer.daemon = True
    timer.start()
    try:
        stop()
        emit("stopped")
    except Exception as exc:
        emit("shutdown_error", error=f"{type(exc).__name__}: {exc}")
    finally:
        timer.cancel()


# -- command line -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)

    prod = sub.add_parser("produce", help="send numbered messages with the C++ Producer")
    prod.add_argument("--namesrv", required=True)
    prod.add_argument("--topic", required=True)
    prod.add_argument("--count", type=int, required=True)
    prod.add_argument("--mode", choices=("sync", "orderly", "oneway", "batch"), default="sync")
    # The bundled librocketmq sends a batch as code 10 with batch="1", which a 4.x broker
    # parses as false (Boolean.parseBoolean), storing the batch as one message: this mode
    # shows that behaviour; it is not expected to deliver the messages one by one.
    prod.add_argument("--batch-size", type=int, default=32, help="batch mode: messages per send")
    prod.add_argument(
        "--key-count",
        "--keys-per-order",
        dest="key_count",
        type=int,
        default=10,
        help="number of distinct order keys; message i has key i %% K",
    )
    prod.add_argument("--delay-level", type=int, default=0)
    prod.add_argument("--tag-prefix", default="Tag")
    prod.add_argument("--run-id", default="", help="prefix of message ids (default: random)")
    prod.add_argument("--start", type=int, default=0, help="index of the first message")
    prod.add_argument("--group", default="")
    prod.add_argument("--body-size", type=int, default=0, help="pad bodies to this many chars")
    prod.add_argument("--rate", type=float, default=0.0, help="messages per second (0: no cap)")
    prod.add_argument("--send-timeout-ms", type=int, default=5000)
    prod.add_argument("--max-failures", type=int, default=10, help="give up after this many")
    prod.add_argument("--linger", type=float, default=0.5, help="oneway: wait before shutdown")
    prod.add_argument("--shutdown-timeout", type=float, default=10.0)

    cons = sub.add_parser("consume", help="receive messages with the C++ PushConsumer")
    cons.add_argument("--namesrv", required=True)
    cons.add_argument("--topic", required=True, action="append", help="repeat to subscribe more")
    cons.add_argument("--group", required=True)
    cons.add_argument("--orderly", action="store_true")
    cons.add_argument("--broadcast", action="store_true")
    cons.add_argument("--expression", default="*")
    cons.add_argument(
        "--expect", type=int, default=0, help="exit 0 once this many distinct ids were accepted"
    )
    cons.add_argument(
        "--reject-every",
        type=int,
        default=0,
        # The C API's listener answers for the whole pulled batch: after a refusal it skips
        # the rest of the batch and the client sends every message of it back.
        help="refuse the first delivery of messages whose seq property is a multiple of N",
    )
    cons.add_argument("--timeout", type=float, default=120.0, help="give up after (0: never)")
    cons.add_argument("--idle-exit", type=float, default=0.0, help="stop this long after the last")
    cons.add_argument("--id-property", default=ID_PROPERTY)
    cons.add_argument("--prop", action="append", default=[], help="extra property to report")
    cons.add_argument("--threads", type=int, default=0)
    cons.add_argument("--batch-max-size", type=int, default=0)
    cons.add_argument("--shutdown-timeout", type=float, default=15.0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, run one mode and return the exit code."""
    args = _parser().parse_args(argv)
    _die_with_parent()
    _redirect_native_stdout()
    try:
        if args.command == "produce":
            return _produce(args)
        return _consume(args)
    except Exception as exc:
        emit("error", stage="run", error=f"{type(exc).__name__}: {exc}")
        return EXIT_ERROR


if __name__ == "__main__":
    code = main()
    _out.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: the binding's destructors call into native code again
    # (shutdown twice, destroy) and can crash or hang at exit.
    os._exit(code)
