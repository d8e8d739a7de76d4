"""The broker process of ``test_pop_durability.py``'s crash test.

Run as ``python -m tests.embedded.pop_broker DATA_DIR``: starts an embedded broker on the data
directory, prints ``listening <ip:port>`` and serves until killed. Its offsets are written
only every minute, so a SIGKILL loses them and the restart has to rebuild the POP state from
the revive log alone.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from aiorocket.embedded import EmbeddedBroker
from tests.embedded.test_broker_kit import fast_config


def crash_config() -> dict[str, float]:
    """The settings both runs of the crash test use."""
    return {"pop_revive_interval": 0.02, "offsets_flush_interval": 60.0}


async def _main(data_dir: Path) -> None:
    async with EmbeddedBroker(data_dir=data_dir, config=fast_config(**crash_config())) as b:
        print(f"listening {b.address}", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_main(Path(sys.argv[1])))
