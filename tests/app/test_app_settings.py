"""App settings: every per-group consumer setting taken by ``App(...)``, by
``@app.subscriber(...)`` and from ``AIOROCKET_<NAME>``, with keyword arguments over the
environment; unknown names refused at once, naming them and the closest valid one."""

from __future__ import annotations

import pytest

from aiorocket import App, Message, Producer
from aiorocket.app.settings import GROUP_SETTINGS, AppSettings, load_app_settings
from aiorocket.embedded import EmbeddedBroker
from aiorocket.errors import ConfigurationError
from aiorocket.settings import ClientSettings, ConsumerSettings
from tests._harness.wait import wait_for

FAST = {
    "rebalance_interval": 0.5,
    "offset_persist_interval": 0.2,
    "pull_suspend_timeout": 0.5,
    "shutdown_grace": 1.0,
}
TOPIC = "settingsT"


# A broker that answers "no offset" to a new group: consume_from decides where it starts
# (a young broker would answer 0 to every new group: docs/concepts/start-offsets.md).
pytestmark = pytest.mark.broker(new_group_offset_zero=False)


async def produce(addr: str, *bodies: str) -> None:
    async with Producer(namesrv=addr, group="settingsP") as p:
        for body in bodies:
            await p.send(Message(TOPIC, body))


def test_every_per_group_consumer_setting_is_an_app_setting() -> None:
    own = set(ConsumerSettings.model_fields) - set(ClientSettings.model_fields)
    # the App sets these four from its subscribers
    assert own - set(GROUP_SETTINGS) == {"group", "orderly", "order_by", "consume_batch_size"}
    for name in GROUP_SETTINGS:
        # declared once: the App's field is the consumer's (same type, default and limits)
        field = AppSettings.model_fields[name]
        assert field.annotation == ConsumerSettings.model_fields[name].annotation
        assert field.get_default(call_default_factory=True) == ConsumerSettings.model_fields[
            name
        ].get_default(call_default_factory=True)
        # and given alone, it reaches the app's consumer settings
        value = field.get_default(call_default_factory=True)
        if value is not None:  # None: not given
            assert load_app_settings({name: value}).consumer == {name: value}


async def test_consume_from_as_argument_subscriber_option_and_environment(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    await produce(broker.address, "old-1", "old-2")
    monkeypatch.setenv("AIOROCKET_CONSUME_FROM", "first")
    monkeypatch.setenv("AIOROCKET_MAX_RECONSUME_TIMES", "3")
    env_app = App(namesrv=broker.address, **FAST)
    kwarg_app = App(namesrv=broker.address, consume_from="last", **FAST)  # over the env
    dict_app = App(namesrv=broker.address, consumer={"consume_from": "last", **FAST})
    got: dict[str, list[str]] = {"env": [], "sub": [], "kwarg": [], "dict": []}

    @env_app.subscriber(TOPIC, group="g-env")
    async def from_env(body: str) -> None:
        got["env"].append(body)

    @env_app.subscriber(TOPIC, group="g-sub", consume_from="last", max_reconsume_times=5)
    async def from_subscriber(body: str) -> None:
        got["sub"].append(body)

    @kwarg_app.subscriber(TOPIC, group="g-kwarg")
    async def from_kwarg(body: str) -> None:
        got["kwarg"].append(body)

    @dict_app.subscriber(TOPIC, group="g-dict")
    async def from_dict(body: str) -> None:
        got["dict"].append(body)

    async with env_app, kwarg_app, dict_app:
        consumers = env_app.consumers()
        assert consumers["g-env"].settings.consume_from == "first"
        assert consumers["g-env"].settings.max_reconsume_times == 3
        assert consumers["g-sub"].settings.consume_from == "last"
        assert consumers["g-sub"].settings.max_reconsume_times == 5
        assert kwarg_app.consumers()["g-kwarg"].settings.consume_from == "last"
        await produce(broker.address, "new")
        await wait_for(
            lambda: all("new" in v for v in got.values()), timeout=20.0, what="'new' everywhere"
        )
        await wait_for(lambda: len(got["env"]) == 3, timeout=20.0, what="the old messages")
    assert sorted(got["env"]) == ["new", "old-1", "old-2"]
    assert got["sub"] == got["kwarg"] == got["dict"] == ["new"]


def test_unknown_names_fail_at_once_with_a_suggestion(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError, match=r"'consume_form' \(did you mean 'consume_from'"):
        App(consume_form="first")
    with pytest.raises(ConfigurationError, match=r"'pull_batch' \(did you mean 'pull_batch_size'"):
        App(consumer={"pull_batch": 4})
    with pytest.raises(ConfigurationError, match=r"'orderly' is set by @app\.subscriber"):
        App(consumer={"orderly": True})
    with pytest.raises(ConfigurationError, match="'consume_from' given both"):
        App(consume_from="first", consumer={"consume_from": "last"})
    with pytest.raises(ConfigurationError, match="consume_from"):
        App(consume_from="yesterday")
    app = App()
    with pytest.raises(ConfigurationError, match=r"'max_reconsume' \(did you mean"):
        app.subscriber("t", group="g", max_reconsume=3)
    with pytest.raises(ConfigurationError, match="request_timeout"):
        app.subscriber("t", group="g", request_timeout=3)  # a client setting: the app's
    with pytest.raises(ConfigurationError, match="pull_timeout must exceed"):
        app.subscriber("t", group="g", pull_timeout=1, pull_suspend_timeout=2)

    @app.subscriber("t", group="g", consume_from="first")
    async def one(body: bytes) -> None: ...

    with pytest.raises(ConfigurationError, match="consume_from='last' but another"):

        @app.subscriber("u", group="g", consume_from="last")
        async def two(body: bytes) -> None: ...

    monkeypatch.setenv("AIOROCKET_CONSUME_FORM", "first")
    with pytest.raises(
        ConfigurationError,
        match=r"AIOROCKET_CONSUME_FORM names no setting \(did you mean 'AIOROCKET_CONSUME_FROM'",
    ):
        App()
