"""The fast retry delays of the suite's embedded brokers, defined once."""

from __future__ import annotations

from aiorocket.embedded import parse_delay_levels
from aiorocket.testing.plugin import FIXTURE_DELAY

__all__ = ["FAST_DELAYS"]

#: Every delay level as short as the ``embedded_broker`` fixture's, so retries (level 3 +
#: reconsume times) come back fast.
FAST_DELAYS = parse_delay_levels(" ".join([FIXTURE_DELAY] * 18))
