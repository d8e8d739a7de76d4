"""The embedded broker and name server: one process, one port, durable storage."""

from aiorocket.embedded.broker import EmbeddedBroker
from aiorocket.embedded.config import DEFAULT_DELAY_LEVELS, BrokerConfig, parse_delay_levels

__all__ = ["DEFAULT_DELAY_LEVELS", "BrokerConfig", "EmbeddedBroker", "parse_delay_levels"]
