"""The configuration requests of ``mqadmin`` and the dashboard (``AdminBrokerProcessor``):
topics and subscription groups, created, listed and deleted.

* topics: UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG
  (21), GET_TOPIC_CONFIG (5.x);
* subscription groups: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200),
  GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201), DELETE_SUBSCRIPTIONGROUP (207).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from aiorocket._names import now_ms
from aiorocket._protocol import fastjson
from aiorocket._protocol.admin_bodies import (
    DataVersion,
    SubscriptionGroupConfig,
    SubscriptionGroupWrapper,
    TopicConfigBody,
    TopicConfigSerializeWrapper,
)
from aiorocket._protocol.attributes import (
    GROUP_ATTRIBUTES,
    TOPIC_ATTRIBUTE_RULES,
    TOPIC_ATTRIBUTES,
    InvalidAttributesError,
    alter_attributes,
    parse_changes,
)
from aiorocket._protocol.codes import Perm, RequestCode, ResponseCode
from aiorocket._protocol.command import RemotingCommand
from aiorocket._protocol.headers import (
    CreateTopicRequestHeader,
    DeleteSubscriptionGroupRequestHeader,
    DeleteTopicRequestHeader,
    GetTopicConfigRequestHeader,
)
from aiorocket._remoting import Connection
from aiorocket.embedded.context import Processor, handles, illegal_name, peer_address
from aiorocket.embedded.topics import (
    NOT_ALLOWED_SEND_TOPICS,
    TopicConfig,
    is_valid_name,
)

__all__ = ["ConfigAdmin"]

log = logging.getLogger("aiorocket.embedded")

_SYSTEM_TOPIC_REMARK = "The topic[{}] is conflict with system topic."


class ConfigAdmin(Processor):
    """Handlers of the topic and subscription-group configuration requests.

    Args:
        ctx: the broker's tables (topics, store, groups, offsets, subscription groups).
    """

    # -- topics -------------------------------------------------------------------------------

    @handles(RequestCode.UPDATE_AND_CREATE_TOPIC)
    async def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """UPDATE_AND_CREATE_TOPIC: create or update a topic with explicit queue counts.

        Raises:
            MissingHeaderFieldError: a mandatory header field is absent or malformed.
            OSError: the topic table cannot be written.
        """
        h = CreateTopicRequestHeader.from_ext(cmd.ext_fields)
        if not is_valid_name(h.topic):
            return illegal_name(cmd, "topic", h.topic)
        if h.topic in NOT_ALLOWED_SEND_TOPICS or self._topics.is_system(h.topic):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                remark=f"the topic[{h.topic}] is conflict with system topic.",
            )
        if not (1 <= h.read_queue_nums <= 1024 and 1 <= h.write_queue_nums <= 1024):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark="queue counts must be 1..1024"
            )
        old = self._topics.get(h.topic)
        try:
            # TopicConfigManager.updateTopicConfig: the header's attribute changes (5.x)
            attributes = alter_attributes(
                {} if old is None else old.attributes,
                parse_changes(h.attributes),
                create=old is None,
                allowed=TOPIC_ATTRIBUTES,
                rules=TOPIC_ATTRIBUTE_RULES,
            )
        except InvalidAttributesError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        self._topics.put(
            TopicConfig(
                name=h.topic,
                read_queue_nums=h.read_queue_nums,
                write_queue_nums=h.write_queue_nums,
                perm=h.perm & int(Perm.READ | Perm.WRITE | Perm.INHERIT),
                topic_filter_type=h.topic_filter_type,
                topic_sys_flag=h.topic_sys_flag or 0,
                order=h.order,
                attributes=attributes,
            )
        )
        return cmd.make_response(ResponseCode.SUCCESS)

    @handles(RequestCode.DELETE_TOPIC_IN_BROKER)
    async def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """DELETE_TOPIC_IN_BROKER: drop the topic's configuration and queues (``mqadmin
        deleteTopic``); its offsets stay, as in 4.9.8.

        Raises:
            MissingHeaderFieldError: no ``topic``.
            OSError: the topic table or an index file could not be changed.
        """
        h = DeleteTopicRequestHeader.from_ext(cmd.ext_fields)
        if not is_valid_name(h.topic):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"The specified topic[{h.topic}] is illegal"
            )
        if self._topics.is_system(h.topic):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=_SYSTEM_TOPIC_REMARK.format(h.topic)
            )
        self._topics.delete(h.topic)
        self._store.delete_topic(h.topic)
        log.info("topic %s deleted by %s", h.topic, peer_address(conn))
        return cmd.make_response(ResponseCode.SUCCESS)

    @handles(RequestCode.GET_ALL_TOPIC_CONFIG)
    async def all_topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_ALL_TOPIC_CONFIG: a `TopicConfigSerializeWrapper`."""
        table = {t.name: _topic_body(t) for t in self._topics.all()}
        body = TopicConfigSerializeWrapper(table, DataVersion(self._ctx.stats.boot_ms, len(table)))
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    @handles(RequestCode.GET_TOPIC_CONFIG)
    async def topic_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        """GET_TOPIC_CONFIG (5.x): the topic's ``TopicConfigAndQueueMapping``, which is its
        ``TopicConfig`` (this broker has no static topics, so no ``mappingDetail``), or code 17
        with 5.x's remark.

        Raises:
            MissingHeaderFieldError: no ``topic``.
        """
        h = GetTopicConfigRequestHeader.from_ext(cmd.ext_fields)
        cfg = self._topics.get(h.topic)
        if cfg is None:
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST, remark=f"No topic in this broker. topic: {h.topic}"
            )
        body = fastjson.dumps(_topic_body(cfg).to_dict())
        return cmd.make_response(ResponseCode.SUCCESS, body=body)

    # -- subscription groups ------------------------------------------------------------------

    def subscription_groups(self) -> dict[str, SubscriptionGroupConfig]:
        """Configured groups, plus every group online or with offsets at Java's defaults."""
        known = {g: SubscriptionGroupConfig(g) for g in self._groups.consumer_groups()}
        for g in self._offsets.groups():
            known.setdefault(g, SubscriptionGroupConfig(g))
        known.update(self._ctx.subscriptions.all())
        return known

    @handles(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP)
    async def update_subscription_group(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: store the group's settings (``mqadmin
        updateSubGroup``).

        Raises:
            RemoteProtocolError: the body is not a subscription group config.
            OSError: the table cannot be written.
        """
        cfg = SubscriptionGroupConfig.from_json(cmd.body)
        if not is_valid_name(cfg.group_name):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR, remark=f"the group[{cfg.group_name}] is illegal"
            )
        old = self._ctx.subscriptions.get(cfg.group_name)
        try:
            # SubscriptionGroupManager.updateSubscriptionGroupConfig: the body's attribute
            # changes applied to the group's current attributes (5.x)
            attributes = alter_attributes(
                {} if old is None else old.attributes or {},
                cfg.attributes or {},
                create=old is None,
                allowed=GROUP_ATTRIBUTES,
            )
        except InvalidAttributesError as exc:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, remark=str(exc))
        cfg = replace(cfg, attributes=attributes or None)
        self._ctx.subscriptions.put(cfg, now_ms=now_ms())
        return cmd.make_response(ResponseCode.SUCCESS)

    @handles(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    async def all_subscription_groups(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """GET_ALL_SUBSCRIPTIONGROUP_CONFIG: a `SubscriptionGroupWrapper`."""
        body = SubscriptionGroupWrapper(
            self.subscription_groups(), self._ctx.subscriptions.data_version
        )
        return cmd.make_response(ResponseCode.SUCCESS, body=body.to_json())

    @handles(RequestCode.DELETE_SUBSCRIPTIONGROUP)
    async def delete_subscription_group(
        self, conn: Connection, cmd: RemotingCommand
    ) -> RemotingCommand:
        """DELETE_SUBSCRIPTIONGROUP: forget the group's settings, and its offsets with
        ``removeOffset`` (``mqadmin deleteSubGroup``).

        Raises:
            MissingHeaderFieldError: no ``groupName``.
            OSError: the table cannot be written.
        """
        h = DeleteSubscriptionGroupRequestHeader.from_ext(cmd.ext_fields)
        self._ctx.subscriptions.delete(h.group_name, now_ms=now_ms())
        if h.remove_offset:
            self._offsets.remove_group(h.group_name)
        return cmd.make_response(ResponseCode.SUCCESS)


def _topic_body(t: TopicConfig) -> TopicConfigBody:
    return TopicConfigBody(
        topic_name=t.name,
        read_queue_nums=t.read_queue_nums,
        write_queue_nums=t.write_queue_nums,
        perm=t.perm,
        topic_filter_type=t.topic_filter_type,
        topic_sys_flag=t.topic_sys_flag,
        order=t.order,
        attributes=dict(t.attributes) or None,
    )
