"""SQL92 filtering against the real Apache RocketMQ 4.9.8 (broker started with
``enablePropertyFilter=true``).

* The verdicts of aiorocket's parser and evaluator equal those of the broker's own filter
  module (``org.apache.rocketmq.filter``, driven by ``java/JSqlEval.java``) on thousands of
  generated expressions and property sets: refused, TRUE, FALSE, unknown, or failed.
* aiorocket push consumers subscribed with ``sql=`` get exactly the same messages from the
  Java broker as from the embedded broker, for the same expressions and produced messages,
  and exactly the ones the expressions select.
* The Java client (``DefaultMQPushConsumer`` with ``MessageSelector.bySql``,
  ``java/JSqlConsumer.java``) filtering on the embedded broker gets the same sets.
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket._protocol.sql92 import Sql92EvaluationError, compile_sql92
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import InvalidSelectorError
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.install import run_java
from tests.interop.apache.java_client import JavaClient
from tests.interop.harness import unique_name

JAVA_BROKER_CONF = {"enablePropertyFilter": "true"}

#: aiorocket consumer settings: rebalance every second, short holds at a queue's end
PY_CONSUMER: dict[str, Any] = {
    "consume_from": "first",
    "rebalance_interval": 1.0,
    "pull_suspend_timeout": 1.0,
    "shutdown_grace": 2.0,
}

#: The expressions both brokers serve: NULL handling (IS NULL, the asymmetric '<>' of a
#: literal and a missing property), BETWEEN, IN, NOT (and its tight binding), precedence,
#: numbers vs strings (a non-numeric amount fails the evaluation), TAGS, decimals, negatives.
EXPRESSIONS = (
    "region = 'eu' AND amount > 100",
    "region IS NULL",
    "region IS NOT NULL AND NOT (region IN ('eu', 'us'))",
    "amount BETWEEN -50 AND 50",
    "amount NOT BETWEEN -50 AND 50",
    "region = 'us' OR region = 'eu' AND amount < 0",
    "(region = 'us' OR region = 'eu') AND amount < 0",
    "TAGS IN ('A', 'C') AND price >= 5.5",
    "price > 10.25 OR amount = -93",
    "amount > -10 AND region <> 'eu'",
    "'eu' <> region",
    "flag = TRUE",
    "NOT region = 'eu'",
    "price = 2.5 OR price = 0.25",
    "TAGS = 'B' AND NOT (amount >= 0)",
)

N_MESSAGES = 50


def message_props(i: int) -> dict[str, str]:
    """Varied user properties of message ``i``."""
    props: dict[str, str] = {}
    region = ("eu", "us", "apac", None)[i % 4]
    if region is not None:
        props["region"] = region
    props["amount"] = "n/a" if i % 10 == 9 else str(i * 7 - 100)
    props["price"] = f"{i / 4:.2f}"
    if i % 3 != 2:
        props["flag"] = "TRUE" if i % 2 else "false"
    return props


def message_tag(i: int) -> str | None:
    return None if i % 7 == 6 else "ABC"[i % 3]


def expected(expression: str) -> set[str]:
    """The bodies an expression selects, by aiorocket's evaluator (the test checks both
    brokers against it and against each other)."""
    f = compile_sql92(expression)
    out = set()
    for i in range(N_MESSAGES):
        props = message_props(i)
        tag = message_tag(i)
        if tag is not None:
            props["TAGS"] = tag
        if f.matches(props):
            out.add(f"m{i}")
    return out


async def produce(namesrv: str, topic: str) -> None:
    async with rmq.Producer(namesrv=namesrv, group=unique_name("sqlp")) as producer:
        for i in range(N_MESSAGES):
            await producer.send(
                rmq.Message(
                    topic, f"m{i}".encode(), tags=message_tag(i), properties=message_props(i)
                )
            )


async def consume_all(namesrv: str, topic: str, prefix: str) -> dict[str, list[str]]:
    """One aiorocket push consumer per expression, all at once; returns what each got once
    every one has at least its expected count (plus a short grace for extras)."""
    got: dict[str, list[str]] = {e: [] for e in EXPRESSIONS}
    want = {e: len(expected(e)) for e in EXPRESSIONS}
    consumers = []
    for k, expression in enumerate(EXPRESSIONS):
        c = rmq.PushConsumer(group=f"{prefix}{k}", namesrv=namesrv, **PY_CONSUMER)
        c.subscribe(topic, sql=expression)

        async def handle(
            msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext, e: str = expression
        ) -> None:
            got[e].extend(m.body.decode() for m in msgs)

        c.register_listener(handle)
        consumers.append(c)
    await asyncio.gather(*(c.start() for c in consumers))
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while any(len(got[e]) < want[e] for e in EXPRESSIONS) and loop.time() < deadline:
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)
    finally:
        await asyncio.gather(*(c.close() for c in consumers))
    return got


# -- the evaluator against the Java filter module --------------------------------------------

_NAMES = ("a", "b", "c", "TAGS", "m")
_VALUES = (
    "1", "5", "-3", "2.5", "abc", "true", "TRUE", " 7", "1e3", "NaN", "2147483648", "0x10p0",
    "", "eu", "10", "5.0", "-0.0", "0", "Infinity", "3000000000", "+4", "1f", "x'y",
)  # fmt: skip
_LITERALS = (
    "1", "5", "0", "10", "2.5", "5.0", "1e3", ".5", "3.", "2147483648", "2147483647", "10L",
    "'eu'", "'abc'", "'5'", "'true'", "''", "'x''y'", "TRUE", "FALSE", "NULL", "0.0", "1e400",
    "9223372036854775808",
)  # fmt: skip
_TAILS = (" )", " b", " !", " 'x", " NOT", " IS", " = ", "5", " NOT IN", " -- x", " /* ")


def _atom(r: random.Random) -> str:
    k = r.random()
    if k < 0.45:
        return r.choice(_NAMES)
    if k < 0.85:
        return r.choice(_LITERALS)
    return "-" + _atom(r)


def _expr(r: random.Random, depth: int) -> str:
    if depth <= 0:
        return _atom(r)
    k = r.random()

    def sub() -> str:
        return _expr(r, depth - 1)

    def name() -> str:
        return r.choice(_NAMES) if r.random() < 0.85 else _atom(r)

    if k < 0.30:
        op = r.choice(("=", "<>", ">", ">=", "<", "<="))
        return f"{name()} {op} {_atom(r) if r.random() < 0.8 else sub()}"
    if k < 0.45:
        return f"({sub()}) {r.choice(('AND', 'OR', 'and', 'Or'))} ({sub()})"
    if k < 0.52:
        return f"NOT ({sub()})"
    if k < 0.60:
        return f"{name()} {r.choice(('', 'NOT '))}BETWEEN {_atom(r)} AND {_atom(r)}"
    if k < 0.68:
        pool = ("'eu'", "'5'", "'abc'", "'1'", "'true'", "''", "5")
        items = ", ".join(r.choice(pool) for _ in range(r.randint(1, 6)))
        return f"{name()} {r.choice(('', 'NOT '))}IN ({items})"
    if k < 0.74:
        return f"{name()} IS {r.choice(('', 'NOT '))}NULL"
    if k < 0.80:
        return f"{sub()} {r.choice(('AND', 'OR'))} {sub()}"
    if k < 0.85:
        return f"NOT {sub()}"
    if k < 0.90:
        return f"{sub()} = {sub()}"
    return _atom(r)


def generated_cases(seed: int, n: int) -> list[dict[str, Any]]:
    r = random.Random(seed)
    cases = []
    for _ in range(n):
        e = _expr(r, r.randint(0, 3))
        if r.random() < 0.1:
            e += r.choice(_TAILS)
        props = {k: r.choice(_VALUES) for k in _NAMES[:4] if r.random() < 0.7}
        cases.append({"e": e, "p": props})
    return cases


def python_verdict(case: dict[str, Any]) -> str:
    try:
        f = compile_sql92(case["e"])
    except InvalidSelectorError:
        return "P"
    try:
        v = f.evaluate(case["p"])
    except Sql92EvaluationError:
        return "X"
    return "N" if v is None else "T" if v else "F"


def test_verdicts_equal_the_java_filter_module(java_classes: Path, tmp_path: Path) -> None:
    cases = generated_cases(20240, 6000)
    proc = run_java(
        "JSqlEval",
        classpath=[java_classes],
        tmp=tmp_path,
        input="".join(json.dumps(c) + "\n" for c in cases),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    java = [line for line in proc.stdout.split() if line in ("P", "T", "F", "N", "X")]
    assert len(java) == len(cases), proc.stderr[-2000:]
    kinds = {v: java.count(v) for v in "PTFNX"}
    assert all(kinds[v] > 100 for v in "PTFNX"), kinds  # every outcome is exercised
    mismatches = [
        (c["e"], c["p"], j, p)
        for c, j in zip(cases, java, strict=True)
        if (p := python_verdict(c)) != j
    ]
    assert not mismatches, mismatches[:20]


# -- the same messages from both brokers -----------------------------------------------------


@pytest.mark.broker(default_queues=4, enable_property_filter=True)
async def test_consumers_get_the_same_messages_from_the_java_and_the_embedded_broker(
    java_cluster: JavaCluster, broker: EmbeddedBroker
) -> None:
    java_topic, embedded_topic = unique_name("SqlJ"), unique_name("SqlE")
    await asyncio.gather(
        produce(java_cluster.namesrv, java_topic), produce(broker.address, embedded_topic)
    )
    from_java, from_embedded = await asyncio.gather(
        consume_all(java_cluster.namesrv, java_topic, unique_name("sqlj") + "_"),
        consume_all(broker.address, embedded_topic, unique_name("sqle") + "_"),
    )
    for e in EXPRESSIONS:
        assert len(from_java[e]) == len(set(from_java[e])), e
        assert set(from_java[e]) == set(from_embedded[e]), e
        assert set(from_java[e]) == expected(e), e
    assert sum(len(expected(e)) > 0 for e in EXPRESSIONS) >= 12  # not a test of empty sets


@pytest.mark.broker(default_queues=4, enable_property_filter=True)
async def test_java_consumers_filter_by_sql_on_the_embedded_broker(
    java_classes: Path, broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = unique_name("SqlJc")
    await produce(broker.address, topic)
    client = await JavaClient.start(
        java_classes,
        "JSqlConsumer",
        broker.address,
        topic,
        unique_name("sqljc") + "_",
        "60",
        *EXPRESSIONS,
        tmp=tmp_path / "java",
    )
    want = {i: expected(e) for i, e in enumerate(EXPRESSIONS)}
    try:
        await client.wait_until(
            lambda c: all(
                len([m for m in c.of("msg") if m["i"] == i]) >= len(want[i]) for i in want
            ),
            timeout=60,
            what="every consumer's matching messages",
        )
        await asyncio.sleep(0.5)
    finally:
        await client.stop()
    assert not client.of("refused"), client.of("refused")
    for i, e in enumerate(EXPRESSIONS):
        got = [m["body"] for m in client.of("msg") if m["i"] == i]
        assert sorted(got) == sorted(want[i]), e
