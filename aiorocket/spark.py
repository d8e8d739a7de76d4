"""``aiorocket.spark``: the Spark bridge under its short name.

The same objects as [`aiorocket.integrations.spark`][aiorocket.integrations.spark] — the
``rocketmq`` data source and sink ([`register`][aiorocket.integrations.spark.register],
[`RocketMQDataSource`][aiorocket.integrations.spark.RocketMQDataSource]) and
[`SparkForwarder`][aiorocket.integrations.spark.SparkForwarder]. Importing it without the ``spark``
extra raises ImportError saying ``pip install "aiorocketmq[spark]"``.
"""

from aiorocket.integrations.spark import ARROW_SCHEMA as ARROW_SCHEMA
from aiorocket.integrations.spark import ROCKETMQ_SPARK_SCHEMA as ROCKETMQ_SPARK_SCHEMA
from aiorocket.integrations.spark import SCHEMA as SCHEMA
from aiorocket.integrations.spark import ForwarderStatistics as ForwarderStatistics
from aiorocket.integrations.spark import RocketMQDataSource as RocketMQDataSource
from aiorocket.integrations.spark import SparkForwarder as SparkForwarder
from aiorocket.integrations.spark import __all__ as __all__
from aiorocket.integrations.spark import arrow_table as arrow_table
from aiorocket.integrations.spark import register as register
