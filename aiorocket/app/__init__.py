"""The app layer: typed ``async def`` subscribers, a shared producer, FastAPI and worker glue."""

from aiorocket.app.app import App
from aiorocket.app.declarations import SubscriberStatistics
from aiorocket.app.health import QueueHealth
from aiorocket.app.settings import AppSettings
from aiorocket.app.signals import DeadLetter, ReconsumeLater, RetryPolicy

__all__ = [
    "App",
    "AppSettings",
    "DeadLetter",
    "QueueHealth",
    "ReconsumeLater",
    "RetryPolicy",
    "SubscriberStatistics",
]
