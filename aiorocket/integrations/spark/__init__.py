"""Spark integration: the ``rocketmq`` data source and a consumer-to-Spark forwarder.

```python
from aiorocket.integrations.spark import register

register(spark)
df = (
    spark.readStream.format("rocketmq")
    .option("namesrv", "127.0.0.1:9876")
    .option("topic", "orders")
    .load()
)
```

Needs pyspark >= 4.0 (Python Data Source API) and pyarrow: ``pip install "aiorocketmq[spark]"``.

The sink is at least once, or exactly once with ``option("exactlyOnce", "true")``
(RocketMQ transactional messages committed with Spark's commit); jobs written for Apache
rocketmq-spark run with its option names and rows (``ROCKETMQ_SPARK_SCHEMA``). The options
and the delivery contract: docs/how-to/spark.md.
"""

from aiorocket.integrations._extras import missing_extra

try:
    import pyarrow  # noqa: F401
    import pyspark.sql.datasource  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise missing_extra(__name__, "pyspark >= 4.0 and pyarrow", "spark") from exc

from aiorocket.integrations.spark.compat import ROCKETMQ_SPARK_SCHEMA
from aiorocket.integrations.spark.forwarder import ForwarderStatistics, SparkForwarder
from aiorocket.integrations.spark.rows import ARROW_SCHEMA, SCHEMA, arrow_table
from aiorocket.integrations.spark.source import RocketMQDataSource, register

__all__ = [
    "ARROW_SCHEMA",
    "ROCKETMQ_SPARK_SCHEMA",
    "SCHEMA",
    "ForwarderStatistics",
    "RocketMQDataSource",
    "SparkForwarder",
    "arrow_table",
    "register",
]
