"""What a consumer subscribes to: a topic with a tag expression or an SQL92 expression
(Java ``SubscriptionData``), and the check of ``subscribe``'s arguments."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass

from aiorocket._protocol.bodies import SubscriptionData
from aiorocket._protocol.sql92 import (
    EXPRESSION_TYPE_SQL92,
    EXPRESSION_TYPE_TAG,
    compile_sql92,
)
from aiorocket._protocol.tags import TagFilter, parse_tag_expression
from aiorocket.errors import ConfigurationError, IgnoredSelectorTextWarning

__all__ = ["Subscription", "check_selector"]


def check_selector(expression: str | None, sql: str | None) -> None:
    """Check the arguments of ``subscribe``: a tag expression or ``sql=``, not both (Java's
    ``MessageSelector`` is one or the other), and an SQL92 expression that compiles.

    Text after the SQL92 expression (``region = 'eu' garbage``) is accepted, as RocketMQ's
    parser accepts it (and the broker filters by the expression alone), with an
    [`IgnoredSelectorTextWarning`][aiorocket.errors.IgnoredSelectorTextWarning] naming the ignored
    text, at the caller of ``subscribe``.

    Raises:
        ConfigurationError: both were given, or ``sql`` is not a string.
        InvalidSelectorError: ``sql`` does not compile (the message gives the position).
    """
    if sql is None:
        return
    if not isinstance(sql, str):
        raise ConfigurationError(f"sql must be a string, not {type(sql).__name__}")
    if expression is not None and expression.strip() not in ("", "*"):
        raise ConfigurationError(
            "subscribe takes a tag expression or sql=..., not both "
            f"(got expression {expression!r} and sql {sql!r})"
        )
    selector = compile_sql92(sql)
    if selector.ignored:
        effective = sql[: selector.end].strip()
        warnings.warn(
            f"SQL92 selector {sql!r}: {selector.ignored!r} after the expression is ignored "
            f"(RocketMQ's parser ignores it too); messages are filtered by {effective!r}",
            IgnoredSelectorTextWarning,
            stacklevel=3,  # the caller of subscribe()
        )


@dataclass(frozen=True, slots=True)
class Subscription:
    """One subscribed topic (wire name, namespace applied) and its tag filter, or its SQL92
    expression (``sql``; the tag filter is then match-all: the broker filters, and the Java
    client re-checks nothing for SQL92 either)."""

    topic: str
    filter: TagFilter
    sub_version: int
    sql: str | None = None

    @classmethod
    def create(cls, topic: str, expression: str | None, sql: str | None = None) -> Subscription:
        """Parse ``expression`` (or compile ``sql``); the version is the creation time in ms,
        as in Java.

        Raises:
            InvalidSelectorError: ``sql`` does not compile.
        """
        version = int(time.time() * 1000)
        if sql is not None:
            compile_sql92(sql)
            return cls(topic, parse_tag_expression(None), version, sql)
        return cls(topic, parse_tag_expression(expression), version)

    @property
    def expression(self) -> str:
        """The ``subString`` sent to brokers."""
        return self.sql if self.sql is not None else self.filter.expression

    @property
    def expression_type(self) -> str:
        """``TAG`` or ``SQL92``: the ``expressionType`` of heartbeats and pulls."""
        return EXPRESSION_TYPE_SQL92 if self.sql is not None else EXPRESSION_TYPE_TAG

    def data(self) -> SubscriptionData:
        """The heartbeat form (``SubscriptionData`` with sorted tags and their hashes)."""
        if self.sql is not None:
            return SubscriptionData(
                topic=self.topic,
                sub_string=self.sql,
                tags_set=(),
                code_set=(),
                sub_version=self.sub_version,
                expression_type=EXPRESSION_TYPE_SQL92,
            )
        tags = tuple(sorted(self.filter.tags))
        return SubscriptionData(
            topic=self.topic,
            sub_string=self.filter.expression,
            tags_set=tags,
            code_set=tuple(sorted(self.filter.codes)),
            sub_version=self.sub_version,
        )
