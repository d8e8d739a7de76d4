"""aiorocket against the real Apache RocketMQ broker with ACL on: ACL 1.0 on 4.9.x, ACL 2.0 on
5.x (which replaced it: a 5.3 broker ignores ``aclEnable`` and ``plain_acl.yml``).

* With the right keys the producer sends and a push consumer consumes: its heartbeat, the
  consumer-list query rebalance makes, pulls, a send-back (``CONSUMER_SEND_MSG_BACK``) and its
  offset commits are all signed and accepted (consumption needs every one of them).
* A wrong secret key, an unknown access key and a topic the account may not use are refused,
  raised as :class:`~aiorocket.errors.AccessDeniedError`, not retriable, with the broker's
  reason. A 4.x broker has no response code for that: the validator's ``AclException``
  becomes SYSTEM_ERROR (1) with ``exceptionSimpleDesc`` as the remark. A 5.x broker answers
  NO_PERMISSION (16) with the authentication or authorization exception's message.

4.9.x: the broker's ``plain_acl.yml`` (read by ``PlainPermissionManager``) has no global white
addresses and no per-account ``whiteRemoteAddress``: a white-listed address skips the
signature check (``PlainPermissionManager.validate`` returns before it), so an empty list is
what makes every request's HMAC-SHA1 signature really checked (docs/protocol.md §8).

5.x: authentication and authorization on, with the broker's own providers
(``DefaultAuthenticationProvider`` checks the same signature, ``DefaultAuthorizationProvider``
decides by the user's policies); the users and policies come from ``java5/AuthMemory.java``
instead of the stock RocksDB store, loaded from a file this module writes: the account may
publish, subscribe and read offsets (``Get``, what the queue reader's GET_MAX_OFFSET needs) on
every topic and group but :data:`DENIED_TOPIC`, the admin is a super user.

``mqadmin`` does not sign its requests here (it would read ``tools.yml`` from the install's own
directory), so these tests check the broker's state with a signed
:class:`~aiorocket.QueueReader` instead.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import aiorocket as rmq
from aiorocket.errors import AccessDeniedError, BrokerSystemError
from tests._harness.wait import wait_for
from tests.interop.apache.cluster import JavaCluster
from tests.interop.apache.conftest import DEFAULT_BROKER_CONF
from tests.interop.apache.install import JAVA5_SOURCES, Install, compile_java, install
from tests.interop.harness import unique_name

_found = install()
#: whether the install is 5.x, so ACL 2.0 (known at import: the modules are collected only
#: with an install)
V5 = _found is not None and _found.v5

#: the account the tests use; every topic but :data:`DENIED_TOPIC` is allowed
ACCESS_KEY = "aiorocket-ak"
SECRET_KEY = "aiorocket-sk-0123"
#: an admin account (``admin: true`` without resource rules may use every topic and group)
ADMIN_KEY = "aiorocket-admin"
ADMIN_SECRET = "aiorocket-admin-sk"
#: the topic the account has ``DENY`` on (``topicPerms``)
DENIED_TOPIC = unique_name("AclDenied")

#: ACL 1.0 (4.9.x)
ACL1_CONF = {"aclEnable": "true"}
ACL1_FILES = {
    "plain_acl.yml": f"""\
globalWhiteRemoteAddresses: []

accounts:
  - accessKey: {ACCESS_KEY}
    secretKey: {SECRET_KEY}
    admin: false
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: PUB|SUB
    topicPerms:
      - {DENIED_TOPIC}=DENY
  - accessKey: {ADMIN_KEY}
    secretKey: {ADMIN_SECRET}
    admin: true
"""
}

#: ACL 2.0 (5.x): the broker's providers, with the metadata of ``java5/AuthMemory.java``
ACL2_CONF = {
    "authenticationEnabled": "true",
    "authorizationEnabled": "true",
    "authenticationProvider": (
        "org.apache.rocketmq.auth.authentication.provider.DefaultAuthenticationProvider"
    ),
    "authorizationProvider": (
        "org.apache.rocketmq.auth.authorization.provider.DefaultAuthorizationProvider"
    ),
    "authenticationMetadataProvider": "AuthMemory$Users",
    "authorizationMetadataProvider": "AuthMemory$Acls",
}
ACL2_METADATA = f"""\
user {ACCESS_KEY} {SECRET_KEY} Normal
user {ADMIN_KEY} {ADMIN_SECRET} Super
acl {ACCESS_KEY} Allow Topic:* Pub,Sub,Get
acl {ACCESS_KEY} Allow Group:* Sub,Get
acl {ACCESS_KEY} Deny Topic:{DENIED_TOPIC} Pub,Sub
"""


@pytest.fixture(scope="module")
def java_cluster(
    rocketmq: Install, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[JavaCluster]:
    """A Java name server and broker with this version's ACL on."""
    root = tmp_path_factory.mktemp("java-acl-cluster")
    if rocketmq.v5:
        metadata = root / "acl2.txt"
        metadata.write_text(ACL2_METADATA)
        cluster = JavaCluster(
            root / "cluster",
            broker_conf={**DEFAULT_BROKER_CONF, **ACL2_CONF},
            system_properties={"aiorocket.auth.file": str(metadata)},
            broker_classpath=[compile_java(root / "classes", JAVA5_SOURCES)],
            install=rocketmq,
        )
    else:
        cluster = JavaCluster(
            root / "cluster",
            broker_conf={**DEFAULT_BROKER_CONF, **ACL1_CONF},
            files=ACL1_FILES,
            install=rocketmq,
        )
    with cluster:
        yield cluster


#: consumer settings that keep the tests quick (``tests/consumer/conftest.py``'s ``FAST``)
FAST: dict[str, Any] = {
    "rebalance_interval": 1.0,
    "offset_persist_interval": 0.5,
    "shutdown_grace": 5.0,
}
#: seconds to wait for deliveries (two cores shared with other Java brokers)
DELIVERY_TIMEOUT = 60.0

GOOD = {"access_key": ACCESS_KEY, "secret_key": SECRET_KEY}

REFUSED_CREDENTIALS = [
    pytest.param(
        {"access_key": ACCESS_KEY, "secret_key": "not-the-secret-key"},
        "check signature failed." if V5 else f"Check signature failed for accessKey={ACCESS_KEY}",
        id="wrong-secret-key",
    ),
    pytest.param(
        {"access_key": "nobody-we-know", "secret_key": SECRET_KEY},
        "User:nobody-we-know is not found." if V5 else "No acl config for nobody-we-know",
        id="unknown-access-key",
    ),
]


@contextlib.asynccontextmanager
async def producer(cluster: JavaCluster, **keys: str) -> AsyncIterator[rmq.Producer]:
    async with rmq.Producer(namesrv=cluster.namesrv, group=unique_name("AclP"), **keys) as p:
        yield p


def consumer(
    cluster: JavaCluster, topic: str, group: str, handler: Any, **keys: str
) -> rmq.PushConsumer:
    c = rmq.PushConsumer(
        group=group,
        namesrv=cluster.namesrv,
        consume_from="first",
        access_key=keys["access_key"],
        secret_key=keys["secret_key"],
        **FAST,
    )
    c.subscribe(topic)
    c.register_listener(handler)
    return c


async def ignore(msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext) -> None:
    raise AssertionError("a refused consumer must not get messages")


def check_refusal(exc: AccessDeniedError, reason: str) -> None:
    """One line naming the cause (``reason``, or its start ending in "from "); typed so
    callers can tell it from another broker error, and never retried."""
    if reason.endswith(" from "):  # ACL 2.0 names the client's address and the decision next
        assert exc.reason.startswith(reason), exc.reason
        reason = exc.reason
    assert exc.reason == reason
    code = 16 if V5 else 1
    assert str(exc) == f"[code {code}] access denied by the broker's ACL: {reason}"
    assert "\n" not in str(exc)
    assert exc.code == code
    assert isinstance(exc, BrokerSystemError)
    assert not exc.retriable
    if V5:
        # ACL 2.0: NO_PERMISSION with the exception's message as the remark
        assert exc.remark == reason
    else:
        # the raw remark is the Java broker's: AclException.toString() and a stack frame
        assert exc.remark.startswith(f"org.apache.rocketmq.acl.common.AclException: {reason}, ")


async def test_signed_producer_and_push_consumer_are_accepted(java_cluster: JavaCluster) -> None:
    topic, group = unique_name("AclOk"), unique_name("AclOkG")
    count = 8
    async with producer(java_cluster, **GOOD) as p:
        sent = [await p.send(rmq.Message(topic, f"acl-{i}".encode())) for i in range(count)]
    queues = {r.queue for r in sent}

    got: list[rmq.ReceivedMessage] = []

    async def handle(
        msgs: list[rmq.ReceivedMessage], ctx: rmq.ConcurrentContext
    ) -> rmq.ConsumeStatus:
        got.extend(msgs)
        # The first delivery of acl-0 fails: the consumer sends it back to the broker
        # (CONSUMER_SEND_MSG_BACK, signed, which ACL checks against the group's retry
        # topic) and it comes again from %RETRY%<group>.
        if msgs[0].body == b"acl-0" and msgs[0].reconsume_times == 0:
            return rmq.ConsumeStatus.RECONSUME_LATER
        return rmq.ConsumeStatus.CONSUME_SUCCESS

    c = consumer(java_cluster, topic, group, handle, **GOOD)
    async with c:
        await wait_for(
            lambda: any(m.body == b"acl-0" and m.reconsume_times == 1 for m in got),
            timeout=DELIVERY_TIMEOUT,
            what="every message and the retried one",
            interval=0.05,
        )
        await wait_for(
            lambda: len({m.body for m in got}) == count,
            timeout=DELIVERY_TIMEOUT,
            what="every message",
            interval=0.05,
        )
        stats = c.statistics()
        # the send-back itself was accepted (a refused one is resent by the client instead)
        assert stats.send_back_failures == 0
        assert stats.pull_errors == 0
    assert sorted(m.body for m in got if m.reconsume_times == 0) == sorted(
        f"acl-{i}".encode() for i in range(count)
    )

    # Closing flushed the offsets (UPDATE_CONSUMER_OFFSET, signed); a signed query shows the
    # broker stored them: the consumer's commits were accepted, not just sent.
    async with rmq.QueueReader(namesrv=java_cluster.namesrv, **GOOD) as reader:
        for mq in queues:
            assert await reader.committed_offset(group, mq) == await reader.max_offset(mq)


@pytest.mark.parametrize(("keys", "reason"), REFUSED_CREDENTIALS)
async def test_bad_credentials_are_refused_with_a_typed_error(
    java_cluster: JavaCluster, keys: dict[str, str], reason: str
) -> None:
    topic = unique_name("AclBad")
    # the topic exists (sent with the right keys), so the consumer finds its broker
    async with producer(java_cluster, **GOOD) as p:
        await p.send(rmq.Message(topic, b"exists"))

    async with producer(java_cluster, **keys) as p:
        with pytest.raises(AccessDeniedError) as sending:
            await p.send(rmq.Message(topic, b"refused"))
    check_refusal(sending.value, reason)

    c = consumer(java_cluster, topic, unique_name("AclBadG"), ignore, **keys)
    # start() returns after the first heartbeat; the broker refuses it
    with pytest.raises(AccessDeniedError) as starting:
        await c.start()
    check_refusal(starting.value, reason)
    await c.close()

    # nothing was stored by the refused producer
    async with rmq.QueueReader(namesrv=java_cluster.namesrv, **GOOD) as reader:
        totals = await reader.max_offsets(await reader.queues(topic))
    assert sum(totals.values()) == 1


async def test_topic_without_permission_is_refused(java_cluster: JavaCluster) -> None:
    # The admin account creates the denied topic, so it has a route: the refusal below is the
    # ACL's, not a missing topic.
    async with producer(java_cluster, access_key=ADMIN_KEY, secret_key=ADMIN_SECRET) as p:
        await p.send(rmq.Message(DENIED_TOPIC, b"by the admin"))

    # 4.9.x: PlainPermissionManager.checkPerm, the account's topicPerms say DENY for this
    # topic; 5.x: AclAuthorizationHandler, the literal Deny outranks the Allow of Topic:*
    if V5:
        reason = f"User:{ACCESS_KEY} has no permission to access Topic:{DENIED_TOPIC} from "
    else:
        reason = f"No default permission for topic:{DENIED_TOPIC}"
    async with producer(java_cluster, **GOOD) as p:
        with pytest.raises(AccessDeniedError) as sending:
            await p.send(rmq.Message(DENIED_TOPIC, b"refused"))
        check_refusal(sending.value, reason)
        # the same account may still use other topics: the refusal is per resource
        allowed = await p.send(rmq.Message(unique_name("AclAllowed"), b"fine"))
        assert allowed.status is rmq.SendStatus.SEND_OK

    # a heartbeat names the subscribed topics, which need SUB permission
    c = consumer(java_cluster, DENIED_TOPIC, unique_name("AclDeniedG"), ignore, **GOOD)
    with pytest.raises(AccessDeniedError) as starting:
        await c.start()
    check_refusal(starting.value, reason)
    await c.close()
