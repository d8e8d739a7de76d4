"""The embedded broker and name server: one process, one port, durable storage."""

from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.embedded.clock import Clock, ManualClock
from aiorocket.embedded.config import DEFAULT_DELAY_LEVELS, BrokerConfig, parse_delay_levels

__all__ = [
    "DEFAULT_DELAY_LEVELS",
    "BrokerConfig",
    "Clock",
    "EmbeddedBroker",
    "ManualClock",
    "parse_delay_levels",
]
