"""aiorocket: an asyncio-native Apache RocketMQ framework.

The public API grows here as it lands; everything not listed in ``__all__`` is private.
"""

from aiorocket.errors import RocketError
from aiorocket.models import MessageQueue

__version__ = "0.1.0.dev0"

__all__ = ["MessageQueue", "RocketError", "__version__"]
