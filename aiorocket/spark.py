"""``aiorocket.spark``: the Spark bridge under its short name.

The same objects as :mod:`aiorocket.integrations.spark` — the ``rocketmq`` data source
(:func:`register`, :class:`RocketMQDataSource`) and :class:`SparkForwarder`. Importing it
without the ``spark`` extra raises ImportError saying ``pip install "aiorocket[spark]"``.
"""

from aiorocket.integrations.spark import (
    ARROW_SCHEMA,
    SCHEMA,
    ForwarderStatistics,
    RocketMQDataSource,
    SparkForwarder,
    arrow_table,
    register,
)

__all__ = [
    "ARROW_SCHEMA",
    "SCHEMA",
    "ForwarderStatistics",
    "RocketMQDataSource",
    "SparkForwarder",
    "arrow_table",
    "register",
]
