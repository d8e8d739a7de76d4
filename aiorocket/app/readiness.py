"""Whether a running [`App`][aiorocket.app.App] can reach its cluster: the part of ``/readyz``
that is not about single queues (those are `aiorocket.app.health`).

Every ``readiness_interval`` seconds a `ReadinessProbe` asks the name server for the
route of each of the app's topics (its subscribers' and those it published to) and each
master broker of those routes for the max offset of one queue, each call bounded by
``readiness_timeout``; it also reads each consumer's failed-pull counter. Something failing
without a success in between for ``failing_after`` seconds is a *problem* that makes the app
not ready:

* ``name server``: no name server answered the route lookups (an error answer counts as an
  answer: the name server is there);
* ``broker <name> (<address>)``: the master could not be reached or did not answer in time;
* ``pulls of group <group>``: the consumer's pulls kept failing, with no quiet spell of two
  retry pauses (``2 * pull_retry_max_delay``) in between (a broker that refuses them, a topic
  it lost); a pull blocked by a silent network is caught by the broker check, since a pull
  fails only after its ``pull_timeout``.

The probe uses a client of its own (no heartbeats, nothing registered), so it neither shares
nor disturbs the consumers' connections.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping

import anyio

from aiorocket._client.owner import ClientOwner
from aiorocket._consumer import PushConsumer
from aiorocket._names import CREATE_TOPIC_KEY
from aiorocket.errors import BrokerError, RocketError, TopicNotExistError
from aiorocket.models import MessageQueue
from aiorocket.settings import ClientSettings

__all__ = ["ReadinessProbe"]


class ReadinessProbe(ClientOwner):
    """Checks that the name server and brokers answer; tracks failing pulls (see the module).

    Args:
        settings: the client settings of the app.
        timeout: seconds one check call may take.
        failing_after: seconds of failing before a problem is reported.
        topics: the wire names of the app's topics, read at each check.
        consumers: the app's running consumers by group, read at each check.
        clock: monotonic seconds.
    """

    _what = "readiness probe"

    def __init__(
        self,
        settings: ClientSettings,
        *,
        timeout: float,
        failing_after: float,
        topics: Callable[[], Iterable[str]],
        consumers: Callable[[], Mapping[str, PushConsumer]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(settings)
        self._timeout = timeout
        self._failing_after = failing_after
        self._topics = topics
        self._consumers = consumers
        self._clock = clock
        #: what fails now: since when (clock), and the latest error
        self._failing: dict[str, tuple[float, str]] = {}
        self._pull_errors: dict[str, int] = {}
        self._last_pull_error: dict[str, float] = {}
        self.checks = 0

    def problems(self) -> dict[str, str]:
        """What has failed for ``failing_after`` seconds or more, and why."""
        now = self._clock()
        return {
            what: f"{reason} (failing for {now - since:.1f} s)"
            for what, (since, reason) in sorted(self._failing.items())
            if now - since >= self._failing_after
        }

    def _mark(self, what: str, reason: str | None, now: float) -> None:
        if reason is None:
            self._failing.pop(what, None)
        else:
            since = self._failing.get(what, (now, ""))[0]
            self._failing[what] = (since, reason)

    async def check(self) -> None:
        """One round of checks."""
        client = self._require()
        now = self._clock()
        # With no topic yet, the template topic's route is asked: a name server that does not
        # know it still answers (TOPIC_NOT_EXIST), which shows it is reachable.
        topics = list(dict.fromkeys(self._topics())) or [CREATE_TOPIC_KEY]
        namesrv_error: str | None = None
        for topic in topics:
            try:
                with anyio.fail_after(self._timeout):
                    await client.fetch_route(topic)
            except (TopicNotExistError, BrokerError):
                continue  # an answer: the name server is there
            except (RocketError, OSError, TimeoutError) as exc:
                namesrv_error = f"{';'.join(self.settings.namesrv)}: {_describe(exc)}"
                break  # the next lookups would fail the same way
        self._mark("name server", namesrv_error, now)
        # Brokers: the masters of the last routes known (kept while the name server is away).
        masters: dict[str, tuple[str, MessageQueue]] = {}
        for topic in topics:
            route = client.route(topic)
            for bd in route.broker_datas if route is not None else ():
                addr = bd.broker_addrs.get(0)
                if addr:
                    masters[f"broker {bd.broker_name} ({addr})"] = (
                        addr,
                        MessageQueue(topic, bd.broker_name, 0),
                    )
        results = await asyncio.gather(
            *(self._ping(client_addr, mq) for client_addr, mq in masters.values())
        )
        for what, error in zip(masters, results, strict=True):
            self._mark(what, error, now)
        for what in [w for w in self._failing if w.startswith("broker ") and w not in masters]:
            del self._failing[what]  # no longer in any route
        for group, consumer in self._consumers().items():
            errors = consumer.statistics().pull_errors
            before = self._pull_errors.get(group, errors)
            self._pull_errors[group] = errors
            what = f"pulls of group {group}"
            if errors > before:
                self._last_pull_error[group] = now
                self._mark(what, f"{errors - before} failed pull(s) since the last check", now)
            elif now - self._last_pull_error.get(group, now) > 2 * (
                consumer.settings.pull_retry_max_delay
            ):
                # Quiet for longer than two retry pauses: the pulls succeed again. (A single
                # quiet check proves nothing when checks come faster than the retries.)
                self._mark(what, None, now)
        self.checks += 1

    async def _ping(self, addr: str, mq: MessageQueue) -> str | None:
        try:
            with anyio.fail_after(self._timeout):
                await self._require().get_max_offset(addr, mq)
        except BrokerError:
            return None  # it answered
        except (RocketError, OSError, TimeoutError) as exc:
            return _describe(exc)
        return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError) and not str(exc):
        return "no answer in time"
    return f"{type(exc).__name__}: {exc}"
