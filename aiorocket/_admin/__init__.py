"""The operators' client: topics, routes, consumer lag, offset resets, message lookups and
topic administration over the remoting protocol, against any RocketMQ 4.x cluster (Java
``DefaultMQAdminExt``, the library behind ``mqadmin``)."""

from aiorocket._admin.admin import Admin, GroupLag, QueueLag, TopicRoute
from aiorocket._admin.trace import TraceEntry

__all__ = ["Admin", "GroupLag", "QueueLag", "TopicRoute", "TraceEntry"]
