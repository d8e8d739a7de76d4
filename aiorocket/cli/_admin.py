"""``aiorocket admin``: the operators' commands on [`Admin`][aiorocket.Admin] (no Java).

```text
aiorocket admin topics                        every topic the name server knows
aiorocket admin route TOPIC                   brokers and queue counts of a topic
aiorocket admin lag GROUP                     per queue: broker max offset, committed
                                              offset, lag, last consumed store time
aiorocket admin reset-offset GROUP TOPIC --to earliest|latest|TIME
aiorocket admin message ID [--topic T]        a message by offset id (or client id + topic)
aiorocket admin message --key K --topic T     messages by key
aiorocket admin trace ID [--topic TRACE_TOPIC]  a message's trace (queryMsgTraceById)
aiorocket admin create-topic TOPIC [--queues N] [--type FIFO|DELAY|...]
aiorocket admin delete-topic TOPIC
aiorocket admin dlq GROUP [--resend [--dry-run]]  a group's dead letters, with reasons;
                                              resend them to their original topics
```

Every command takes ``-n/--namesrv`` (default ``$AIOROCKET_NAMESRV``, else 127.0.0.1:9876) and
``--json``; output is a plain table on a terminal, JSON for scripts. Errors are one line on
stderr: exit 1 when the server refuses or cannot be reached (a missing topic or group is named),
2 for bad input. ``--help`` shows every option's default.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime as dt
import json
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

from aiorocket import Admin, GroupLag, ReceivedMessage, TopicMessageType
from aiorocket._admin.dlq import DEFAULT_MAX_RECONSUME_TIMES, DlqEntry, ResendOutcome
from aiorocket._names import RETRY_PREFIX
from aiorocket.cli import HelpFormatter
from aiorocket.errors import (
    BrokerError,
    ConfigurationError,
    RocketError,
    SubscriptionGroupNotExistError,
    TopicNotExistError,
    TransportError,
)

__all__ = ["add_admin_parser", "parse_time", "render_table", "run_admin"]

_DEFAULT_NAMESRV = "127.0.0.1:9876"


def add_admin_parser(sub: Any) -> None:
    """Add the ``admin`` subcommand (and its own subcommands) to a subparsers object."""
    p: argparse.ArgumentParser = sub.add_parser(
        "admin",
        help="inspect and administer a cluster: topics, routes, lag, offsets, messages, "
        "dead letters",
        description="Operate a RocketMQ cluster (embedded or Java) from Python.",
    )
    leaf = _common_options()
    sub = p.add_subparsers(dest="admin_command", required=True, metavar="COMMAND")

    def command(name: str, help: str) -> argparse.ArgumentParser:
        # argparse %-formats a subcommand's help (not its description): %DLQ% must be escaped.
        parser: argparse.ArgumentParser = sub.add_parser(
            name,
            parents=[leaf],
            help=help.replace("%", "%%"),
            description=help,
            formatter_class=HelpFormatter,
        )
        return parser

    _add_lookups(command)
    _add_topic_commands(command)
    _add_dlq(command)


_Command = Callable[[str, str], argparse.ArgumentParser]


def _common_options() -> argparse.ArgumentParser:
    """The options every command takes: where, how to connect, how to print."""
    leaf = argparse.ArgumentParser(add_help=False)
    leaf.add_argument(
        "-n",
        "--namesrv",
        default=os.environ.get("AIOROCKET_NAMESRV", _DEFAULT_NAMESRV),
        help="name server address(es), host:port;host:port (default $AIOROCKET_NAMESRV "
        f"or {_DEFAULT_NAMESRV})",
    )
    leaf.add_argument("--json", action="store_true", help="print JSON instead of a table")
    leaf.add_argument("--timeout", type=float, default=5.0, help="seconds per request")
    leaf.add_argument("--access-key", default=None, help="ACL access key")
    leaf.add_argument("--secret-key", default=None, help="ACL secret key")
    leaf.add_argument("--tls", action="store_true", help="connect over TLS (verifying)")
    leaf.add_argument("--tls-ca", default=None, help="also trust this CA (PEM); implies --tls")
    leaf.add_argument(
        "--tls-insecure",
        action="store_true",
        help="TLS without certificate checks (test clusters only); implies --tls",
    )
    return leaf


def _add_lookups(command: _Command) -> None:
    command("topics", "list every topic")
    r = command("route", "where a topic's queues live")
    r.add_argument("topic")
    lag = command("lag", "a consumer group's lag per queue")
    lag.add_argument("group")
    rs = command("reset-offset", "move a group's offsets of a topic")
    rs.add_argument("group")
    rs.add_argument("topic")
    rs.add_argument(
        "--to",
        required=True,
        help="earliest, latest, epoch milliseconds, or an ISO time (2024-05-01T12:00:00+00:00; "
        "local time without an offset)",
    )
    m = command("message", "look a message up by id or key")
    m.add_argument("id", nargs="?", help="offset message id, or client id with --topic")
    m.add_argument("--key", default=None, help="look up by key (needs --topic)")
    m.add_argument("--topic", default=None, help="the topic (for --key and client ids)")
    m.add_argument("--max", type=int, default=64, help="most messages by key")
    tr = command("trace", "a message's trace (queryMsgTraceById)")
    tr.add_argument("id", help="the message's client id (UNIQ_KEY)")
    tr.add_argument("--topic", default="RMQ_SYS_TRACE_TOPIC", help="the trace topic")
    tr.add_argument("--max", type=int, default=64, help="most trace messages")


def _add_topic_commands(command: _Command) -> None:
    c = command("create-topic", "create or update a topic")
    c.add_argument("topic")
    c.add_argument("--queues", type=int, default=8, help="read and write queues")
    c.add_argument("--cluster", default=None, help="only this cluster's brokers")
    c.add_argument("--order", action="store_true", help="mark the topic ordered")
    c.add_argument(
        "--type",
        dest="message_type",
        choices=[t.value for t in TopicMessageType],
        default=None,
        help="the kind of messages it takes (RocketMQ 5: a proxy checks every message)",
    )
    d = command("delete-topic", "delete a topic")
    d.add_argument("topic")
    d.add_argument("--cluster", default=None, help="only this cluster's brokers")
    sc = command(
        "set-consume-mode", "switch a group between pull and POP on a topic (RocketMQ 5.x)"
    )
    sc.add_argument("group")
    sc.add_argument("topic")
    sc.add_argument("mode", choices=["pull", "pop"])
    sc.add_argument(
        "--pop-share-queue-num",
        type=int,
        default=0,
        help="POP: also read this many neighbours' queues (0: every client reads every queue)",
    )
    sc.add_argument("--cluster", default=None, help="only this cluster's brokers")


def _add_dlq(command: _Command) -> None:
    dl = command(
        "dlq",
        "a consumer group's dead letters (%DLQ%GROUP) with their original topic and reason; "
        "--resend sends them back to their original topics, each once",
    )
    dl.add_argument("group", help="the consumer group (without namespace)")
    dl.add_argument("--namespace", default=None, help="the group's client namespace")
    dl.add_argument(
        "--resend",
        action="store_true",
        help="publish each dead letter not resent before to its original topic (every group "
        "of that topic receives it); a consumer-group marker (AIOROCKET_DLQ_RESEND offsets on "
        "the DLQ) keeps a second run from sending it again",
    )
    dl.add_argument("--dry-run", action="store_true", help="with --resend: only list what would go")
    dl.add_argument(
        "--max-reconsume-times",
        type=int,
        default=DEFAULT_MAX_RECONSUME_TIMES,
        help="the group's retry limit, which the reasons are told against",
    )
    dl.add_argument("--limit", type=int, default=1000, help="most dead letters read")


def parse_time(text: str) -> Literal["earliest", "latest"] | int | dt.datetime:
    """``earliest``/``latest``, epoch milliseconds, or an ISO-8601 time (a time without an
    offset is local time).

    Raises:
        ConfigurationError: none of those.
    """
    if text == "earliest":
        return "earliest"
    if text == "latest":
        return "latest"
    if text.isdigit():
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ConfigurationError(
            f"--to must be earliest, latest, epoch milliseconds or an ISO time, not {text!r}"
        ) from None
    return when if when.tzinfo is not None else when.astimezone()


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned text columns, two spaces apart; numbers right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = max(widths[i], len(c))
    numeric = [
        all(isinstance(row[i], int | float) for row in rows) and bool(rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(widths[i]) if numeric[i] else v.ljust(widths[i]) for i, v in enumerate(values)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in cells)])


def _time(ms: int) -> str:
    if ms <= 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _lag_json(lag: GroupLag) -> dict[str, Any]:
    return {
        "group": lag.group,
        "total": lag.total,
        "by_topic": lag.by_topic(),
        "consume_tps": lag.consume_tps,
        "queues": [
            {
                "topic": q.queue.topic,
                "broker": q.queue.broker_name,
                "queue": q.queue.queue_id,
                "broker_offset": q.broker_offset,
                "committed_offset": q.committed_offset,
                "lag": q.lag,
                "last_timestamp": q.last_timestamp,
            }
            for q in lag.queues
        ],
    }


def _message_json(m: ReceivedMessage) -> dict[str, Any]:
    try:
        body: str | None = m.body.decode()
    except UnicodeDecodeError:
        body = None
    return {
        "msg_id": m.msg_id,
        "offset_msg_id": m.offset_msg_id,
        "topic": m.topic,
        "queue": m.queue.queue_id,
        "queue_offset": m.queue_offset,
        "tags": m.tags,
        "keys": list(m.keys),
        "store_timestamp": m.store_timestamp,
        "born_timestamp": m.born_timestamp,
        "reconsume_times": m.reconsume_times,
        "properties": dict(m.properties),
        "body": body,
        "body_size": len(m.body),
    }


def _dlq_json(e: DlqEntry) -> dict[str, Any]:
    return {
        "msg_id": e.msg_id,
        "offset_msg_id": e.message.offset_msg_id,
        "queue": e.message.queue_id,
        "queue_offset": e.message.queue_offset,
        "origin_topic": e.origin_topic,
        "origin_msg_id": e.origin_msg_id,
        "reconsume_times": e.reconsume_times,
        "store_timestamp": e.store_timestamp,
        "keys": e.keys,
        "tags": e.message.tags,
        "reason": e.reason,
        "resent": e.resent,
    }


def _dlq_table(entries: Sequence[DlqEntry]) -> str:
    rows = [
        [
            e.msg_id,
            e.origin_topic or "?",
            e.reconsume_times,
            _time(e.store_timestamp),
            " ".join(e.keys),
            "yes" if e.resent else "no",
            e.reason,
        ]
        for e in entries
    ]
    headers = ["MSG ID", "TOPIC", "RECONSUMED", "STORED", "KEYS", "RESENT", "REASON"]
    return render_table(headers, rows)


def _resend_text(group: str, outcomes: Sequence[ResendOutcome], dry_run: bool) -> str:
    if not outcomes:
        return f"nothing to resend for {group}"
    if dry_run:
        return f"would resend {len(outcomes)}:\n" + _dlq_table([o.entry for o in outcomes])
    rows = [
        [o.entry.msg_id, o.entry.origin_topic or "?", o.new_msg_id or "-", o.error or "resent"]
        for o in outcomes
    ]
    sent = sum(1 for o in outcomes if o.new_msg_id)
    table = render_table(["MSG ID", "TOPIC", "NEW OFFSET ID", "RESULT"], rows)
    return f"{table}\n\nresent {sent} of {len(outcomes)} dead letters of {group}"


async def _dlq(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    if args.resend:
        outcomes = await admin.resend_dead_letters(
            args.group, namespace=args.namespace, dry_run=args.dry_run, limit=args.limit
        )
        value = [
            {**_dlq_json(o.entry), "new_offset_msg_id": o.new_msg_id, "error": o.error}
            for o in outcomes
        ]
        return value, _resend_text(args.group, outcomes, args.dry_run)
    entries = await admin.dead_letters(
        args.group,
        namespace=args.namespace,
        max_reconsume_times=args.max_reconsume_times,
        limit=args.limit,
    )
    text = _dlq_table(entries) if entries else f"no dead letters for {args.group}"
    return [_dlq_json(e) for e in entries], text


async def _topics(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    topics = await admin.topics()
    return topics, "\n".join(topics)


async def _route(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    route = await admin.route(args.topic)
    rows = []
    for name in sorted(route.brokers):
        read, write, perm = route.queues.get(name, (0, 0, 0))
        for bid, addr in sorted(route.brokers[name].items()):
            rows.append([name, bid, addr, read, write, perm])
    value = {
        "topic": route.topic,
        "brokers": {n: {str(i): a for i, a in b.items()} for n, b in route.brokers.items()},
        "queues": {n: {"read": r, "write": w, "perm": p} for n, (r, w, p) in route.queues.items()},
    }
    headers = ["BROKER", "ID", "ADDRESS", "READ", "WRITE", "PERM"]
    return value, render_table(headers, rows)


async def _lag(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    lag = await admin.lag(args.group)
    rows = [
        [
            q.queue.topic,
            q.queue.broker_name,
            q.queue.queue_id,
            q.broker_offset,
            q.committed_offset,
            q.lag,
            _time(q.last_timestamp),
        ]
        for q in lag.queues
    ]
    headers = ["TOPIC", "BROKER", "QUEUE", "BROKER OFFSET", "COMMITTED", "LAG", "LAST"]
    totals = " ".join(f"{t}={n}" for t, n in sorted(lag.by_topic().items()))
    text = (
        render_table(headers, rows)
        + f"\n\ntotal lag {lag.total} ({totals}); consume tps {lag.consume_tps:.2f}"
    )
    return _lag_json(lag), text


async def _reset_offset(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    offsets = await admin.reset_offset(args.group, args.topic, parse_time(args.to))
    rows = [[mq.topic, mq.broker_name, mq.queue_id, o] for mq, o in offsets.items()]
    value = [
        {"topic": mq.topic, "broker": mq.broker_name, "queue": mq.queue_id, "offset": o}
        for mq, o in offsets.items()
    ]
    return value, render_table(["TOPIC", "BROKER", "QUEUE", "OFFSET"], rows)


async def _message(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    if args.key is not None:
        msgs = await admin.messages_by_key(args.topic, args.key, max_num=args.max)
    else:
        msgs = [await admin.message(args.id, topic=args.topic)]
    rows = [
        [
            m.msg_id,
            m.topic,
            m.queue.queue_id,
            m.queue_offset,
            m.tags or "",
            " ".join(m.keys),
            _time(m.store_timestamp),
            len(m.body),
        ]
        for m in msgs
    ]
    headers = ["MSG ID", "TOPIC", "QUEUE", "OFFSET", "TAGS", "KEYS", "STORED", "BYTES"]
    value: Any = [_message_json(m) for m in msgs]
    if args.id is not None:
        value = value[0]
    return value, render_table(headers, rows) if rows else "no message"


async def _trace(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    entries = await admin.trace(args.id, trace_topic=args.topic, max_num=args.max)
    rows = [
        [
            e.type,
            _time(e.timestamp),
            e.group,
            e.client_host,
            e.topic,
            e.keys,
            e.cost_ms,
            str(e.success).lower(),
            e.status,
        ]
        for e in entries
    ]
    headers = ["TYPE", "TIME", "GROUP", "CLIENT HOST", "TOPIC", "KEYS", "COST MS"]
    value = [dataclasses.asdict(e) for e in entries]
    text = render_table([*headers, "SUCCESS", "STATUS"], rows)
    return value, text if rows else f"no trace of {args.id}"


async def _create_topic(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    brokers = await admin.create_topic(
        args.topic,
        queues=args.queues,
        cluster=args.cluster,
        order=args.order,
        message_type=args.message_type,
    )
    value = {
        "topic": args.topic,
        "queues": args.queues,
        "message_type": args.message_type,
        "brokers": brokers,
    }
    kind = f", {args.message_type}" if args.message_type else ""
    return value, f"topic {args.topic} ({args.queues} queues{kind}) on {', '.join(brokers)}"


async def _delete_topic(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    brokers = await admin.delete_topic(args.topic, cluster=args.cluster)
    value = {"topic": args.topic, "brokers": brokers}
    return value, f"topic {args.topic} deleted from {', '.join(brokers)}"


async def _set_consume_mode(admin: Admin, args: argparse.Namespace) -> tuple[Any, str]:
    brokers = await admin.set_consume_mode(
        args.group,
        args.topic,
        args.mode,
        pop_share_queue_num=args.pop_share_queue_num,
        cluster=args.cluster,
    )
    value = {"group": args.group, "topic": args.topic, "mode": args.mode, "brokers": brokers}
    return value, f"{args.group} reads {args.topic} by {args.mode} on {', '.join(brokers)}"


#: each command: ``(json value, table text)`` from a connected `Admin`
_COMMANDS: dict[str, Callable[[Admin, argparse.Namespace], Awaitable[tuple[Any, str]]]] = {
    "topics": _topics,
    "route": _route,
    "lag": _lag,
    "reset-offset": _reset_offset,
    "message": _message,
    "trace": _trace,
    "create-topic": _create_topic,
    "delete-topic": _delete_topic,
    "dlq": _dlq,
    "set-consume-mode": _set_consume_mode,
}


def _check(args: argparse.Namespace) -> None:
    """Bad input fails before connecting."""
    cmd = args.admin_command
    if cmd == "reset-offset":
        parse_time(args.to)
    if cmd == "message" and (args.key is None) == (args.id is None):
        raise ConfigurationError("give a message id, or --key with --topic")
    if cmd == "message" and args.key is not None and args.topic is None:
        raise ConfigurationError("--key needs --topic")
    if cmd == "dlq" and args.dry_run and not args.resend:
        raise ConfigurationError("--dry-run goes with --resend")


async def _run(args: argparse.Namespace) -> tuple[Any, str]:
    """Run the command; returns ``(json value, table text)``."""
    settings: dict[str, Any] = {
        "request_timeout": args.timeout,
        "connect_timeout": args.timeout,
    }
    if args.access_key or args.secret_key:
        settings.update(access_key=args.access_key, secret_key=args.secret_key)
    if args.tls or args.tls_ca or args.tls_insecure:
        settings.update(tls=True, tls_ca=args.tls_ca, tls_verify=not args.tls_insecure)
    command = _COMMANDS.get(args.admin_command)
    if command is None:  # pragma: no cover
        raise ConfigurationError(f"unknown admin command {args.admin_command!r}")
    _check(args)
    async with Admin(namesrv=args.namesrv, **settings) as admin:
        return await command(admin, args)


def _first_line(exc: BaseException) -> str:
    # A Java name server's remark ends with a FAQ link on a second line.
    return str(exc).strip().split("\n", 1)[0]


def _missing(args: argparse.Namespace, exc: BrokerError) -> str:
    """The one-line error for a topic or group the cluster does not know."""
    group = getattr(args, "group", None)
    if args.admin_command == "lag" or isinstance(exc, SubscriptionGroupNotExistError):
        # examineConsumeStats starts from the route of %RETRY%<group>, which only a member's
        # heartbeat creates: no route means no broker has seen the group.
        return (
            f"consumer group {group} not found: no broker knows it "
            f"(no route for {RETRY_PREFIX}{group}; {_first_line(exc)})"
        )
    topic = getattr(args, "topic", None)
    return f"topic {topic} not found ({_first_line(exc)})"


def run_admin(args: argparse.Namespace) -> int:
    """Entry point of ``aiorocket admin``; returns the exit code."""
    try:
        value, text = asyncio.run(_run(args))
    except ConfigurationError as exc:
        print(f"aiorocket admin: {exc}", file=sys.stderr)
        return 2
    except TransportError as exc:
        print(f"aiorocket admin: cannot reach {args.namesrv}: {exc}", file=sys.stderr)
        return 1
    except (TopicNotExistError, SubscriptionGroupNotExistError) as exc:
        print(f"aiorocket admin: {_missing(args, exc)}", file=sys.stderr)
        return 1
    except RocketError as exc:
        print(f"aiorocket admin: {type(exc).__name__}: {_first_line(exc)}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"aiorocket admin: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(value, indent=2, sort_keys=True))
    else:
        print(text)
    return 0
