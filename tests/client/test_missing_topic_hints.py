"""A missing topic is most often a typo: each place that meets one names the existing topics
closest to it (difflib), and the embedded broker logs each topic it auto-creates, once (a
warning when an existing topic has a close name). Before, a typo'd topic was auto-created
without a word while the consumer waited on the real name."""

from __future__ import annotations

import asyncio
import logging

import pytest

import aiorocket as rmq
from aiorocket.cli import main
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import TopicNotExistError

HINT = "did you mean 'orders'?"


async def make_orders(addr: str) -> None:
    async with rmq.Admin(namesrv=addr) as admin:
        await admin.create_topic("orders", queues=2)
        await admin.create_topic("payments", queues=2)


def lines(caplog: pytest.LogCaptureFixture, logger: str, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger and text in r.getMessage()]


async def test_a_send_to_a_typo_is_auto_created_with_a_word(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    await make_orders(broker.address)
    caplog.set_level(logging.INFO, logger="aiorocket")
    async with rmq.Producer(namesrv=broker.address, group="hintP") as p:
        for _ in range(3):
            await p.send(rmq.Message("ordres", b"x"))
        await p.send(rmq.Message("brandnew", b"x"))
    (created,) = lines(caplog, "aiorocket.embedded", "auto-created topic ordres")
    assert created.levelno == logging.WARNING
    assert HINT in created.getMessage()
    (sent,) = lines(caplog, "aiorocket.producer", "topic ordres does not exist")
    assert sent.levelno == logging.WARNING
    assert HINT in sent.getMessage()
    # a new name close to nothing: logged once, as information
    (fresh,) = lines(caplog, "aiorocket.embedded", "auto-created topic brandnew")
    assert fresh.levelno == logging.INFO
    assert "did you mean" not in fresh.getMessage()


@pytest.mark.broker(auto_create_topics=False)
async def test_a_missing_topic_error_suggests_the_closest(broker: EmbeddedBroker) -> None:
    await make_orders(broker.address)
    async with rmq.Producer(namesrv=broker.address, group="hintP") as p:
        with pytest.raises(TopicNotExistError, match=HINT.replace("?", r"\?")):
            await p.send(rmq.Message("ordrs", b"x"))


async def test_a_consumer_of_a_typo_says_so_at_start(
    broker: EmbeddedBroker, caplog: pytest.LogCaptureFixture
) -> None:
    await make_orders(broker.address)
    consumer = rmq.PushConsumer(group="hintG", namesrv=broker.address, shutdown_grace=0.5)
    consumer.subscribe("ordres")

    @consumer.listener
    async def on(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None: ...

    caplog.set_level(logging.WARNING, logger="aiorocket.consumer")
    async with consumer:
        pass
    (warned,) = lines(caplog, "aiorocket.consumer", "topic ordres has no route yet")
    assert HINT in warned.getMessage()


async def test_admin_names_the_closest_topics(
    broker: EmbeddedBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    await make_orders(broker.address)
    capsys.readouterr()
    code = await asyncio.to_thread(main, ["admin", "route", "ordres", "-n", broker.address])
    _, err = capsys.readouterr()
    assert code == 1
    assert err.startswith("aiorocket admin: topic ordres not found"), err
    assert HINT in err
