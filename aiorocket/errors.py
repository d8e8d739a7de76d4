"""The exceptions aiorocket raises.

Everything the library raises on purpose derives from [`RocketError`][aiorocket.errors.RocketError]:

```text
RocketError
├── ConfigurationError            bad settings or arguments, found before any I/O
│   ├── InvalidNameError          a topic or group name RocketMQ would refuse
│   ├── SubscriptionConflictError a pull consumer asked to both subscribe and assign
│   ├── InvalidSelectorError      an SQL92 filter expression that does not compile
│   ├── UnsupportedFeatureError   the broker's release cannot do what was asked (a timer
│   │                             message to a 4.x broker)
│   └── NotANameServerError       a proxy's address given where a name server is needed
├── MessageTooLargeError          a body or a batch over the size cap, refused before sending
├── ClientClosedError             the producer / consumer / connection was closed by its owner
├── ReplyTimeoutError             a request was sent but no reply came back in time
├── NotARequestError              a reply was asked for a message that is no request
├── QueueNotAssignedError         a pull consumer was asked to act on a queue it does not own
├── OffsetOutOfRangeError         a seek outside the offsets the queue stores
├── InvalidReceiptHandleError     a simple consumer was given a message it did not receive
│   └── ReceiptHandleExpiredError a receipt handle whose invisible time has passed
├── ProtocolError                 the rules of the remoting protocol were broken
│   ├── LocalProtocolError        ... by us: we were asked to encode something invalid
│   └── RemoteProtocolError       ... by the peer: malformed bytes; the connection is poisoned
│       ├── FrameTooLargeError    a length prefix over the frame cap (or negative)
│       └── MissingHeaderFieldError  a mandatory extFields entry is absent or malformed
├── TransportError                the connection failed
│   ├── ConnectError              could not connect
│   ├── ConnectionClosedError     the connection died with the request in flight
│   └── RequestTimeoutError       no response within the request timeout
└── BrokerError                   a broker or name server answered with a non-success code
    ├── BrokerSystemError (1)
    │   └── AccessDeniedError     the broker's ACL refused the request (4.x: code 1 +
    │                             AclException; 5.x ACL 2.0: code 16 + its refusal)
    ├── SystemBusyError (2), RequestCodeNotSupportedError (3),
    ├── FlushDiskTimeoutError (10), SlaveNotAvailableError (11), FlushSlaveTimeoutError (12),
    ├── MessageIllegalError (13)
    │   └── TopicMessageTypeError a 5.x proxy refused a message of another kind than its topic's
    ├── ServiceNotAvailableError (14), VersionNotSupportedError (15),
    ├── NoPermissionError (16), TopicNotExistError (17), TopicExistAlreadyError (18),
    ├── PullNotFoundError (19), PullRetryImmediatelyError (20), PullOffsetMovedError (21),
    ├── QueryNotFoundError (22), SubscriptionParseFailedError (23),
    ├── SubscriptionNotExistError (24), SubscriptionNotLatestError (25),
    ├── SubscriptionGroupNotExistError (26), FilterDataNotExistError (27),
    ├── FilterDataNotLatestError (28), TransactionShouldCommitError (200),
    ├── TransactionShouldRollbackError (201), TransactionStateUnknownError (202),
    ├── TransactionStateGroupWrongError (203), NoBuyerIdError (204),
    ├── NotInCurrentUnitError (205), ConsumerNotOnlineError (206),
    ├── ConsumeMessageTimeoutError (207), NoMessageError (208), FlowControlError (215),
    ├── IllegalOperationError (604)
    └── (any other code: BrokerError itself, with ``code`` set)
```

Broker errors carry ``retriable`` (a producer may try again, following the Java 4.9 sync
producer's retry set 1, 14, 16, 17, 204, 205 plus 2) and ``refresh_route`` (the route may be
stale). [`broker_error`][aiorocket.errors.broker_error] turns a response code and remark into the
matching instance.

Outcomes of a user's handler (asking for a redelivery, suspending an orderly queue) are not
errors of the library and live outside this tree.
"""

from __future__ import annotations

import re
from typing import ClassVar

__all__ = [
    "IgnoredSelectorTextWarning",
    "NeverStartedWarning",
    "AccessDeniedError",
    "BrokerError",
    "BrokerSystemError",
    "ClientClosedError",
    "ConfigurationError",
    "ConnectError",
    "ConnectionClosedError",
    "ConsumeMessageTimeoutError",
    "ConsumerNotOnlineError",
    "FilterDataNotExistError",
    "FilterDataNotLatestError",
    "FlowControlError",
    "FlushDiskTimeoutError",
    "FlushSlaveTimeoutError",
    "FrameTooLargeError",
    "InvalidNameError",
    "InvalidReceiptHandleError",
    "InvalidSelectorError",
    "LocalProtocolError",
    "IllegalOperationError",
    "MessageIllegalError",
    "NotANameServerError",
    "TopicMessageTypeError",
    "MessageTooLargeError",
    "MissingHeaderFieldError",
    "NoBuyerIdError",
    "NoMessageError",
    "NoPermissionError",
    "NotARequestError",
    "NotInCurrentUnitError",
    "OffsetOutOfRangeError",
    "ProtocolError",
    "PullNotFoundError",
    "PullOffsetMovedError",
    "PullRetryImmediatelyError",
    "QueryNotFoundError",
    "QueueNotAssignedError",
    "ReceiptHandleExpiredError",
    "RemoteProtocolError",
    "ReplyTimeoutError",
    "RequestCodeNotSupportedError",
    "RequestTimeoutError",
    "RocketError",
    "ServiceNotAvailableError",
    "SlaveNotAvailableError",
    "SubscriptionConflictError",
    "SubscriptionGroupNotExistError",
    "SubscriptionNotExistError",
    "SubscriptionNotLatestError",
    "SubscriptionParseFailedError",
    "SystemBusyError",
    "TopicExistAlreadyError",
    "TopicNotExistError",
    "TransactionShouldCommitError",
    "TransactionShouldRollbackError",
    "TransactionStateGroupWrongError",
    "TransactionStateUnknownError",
    "TransportError",
    "UnsupportedFeatureError",
    "VersionNotSupportedError",
    "broker_error",
]


class RocketError(Exception):
    """Base class of every exception aiorocket raises on purpose."""


class ConfigurationError(RocketError, ValueError):
    """Settings or arguments are invalid; raised before any I/O happens."""


class InvalidNameError(ConfigurationError):
    """A topic or group name does not match RocketMQ's rule ``^[%|a-zA-Z0-9_-]{1,127}$``."""


class SubscriptionConflictError(ConfigurationError):
    """A pull consumer was asked to ``subscribe`` and to ``assign``: a consumer either shares
    its topics' queues with its group or reads the queues it was given, never both (Java
    ``DefaultLitePullConsumerImpl``: "Subscribe and assign are mutually exclusive")."""


class InvalidSelectorError(ConfigurationError):
    """An SQL92 filter expression that RocketMQ's ``SelectorParser`` would refuse.

    Raised by ``subscribe(topic, sql=...)`` before anything is sent. ``position`` is the
    0-based index into ``expression`` where the problem was found; ``line`` and ``column``
    (1-based) locate it the way the Java parser reports it.
    """

    def __init__(self, message: str, expression: str, position: int) -> None:
        self.expression = expression
        self.position = position
        before = expression[:position]
        self.line = before.count("\n") + 1
        self.column = position - (before.rfind("\n") + 1) + 1
        super().__init__(
            f"{message} at line {self.line}, column {self.column} (position {position}) "
            f"of {expression!r}"
        )


class NotANameServerError(ConfigurationError):
    """The address given as a name server is a RocketMQ 5 proxy's, which serves sending,
    consuming and routes but not the request made (an [`Admin`][aiorocket.Admin] call, or a
    request code the proxy's remoting port does not serve); the message names the request
    and says to give the name server's address."""


class UnsupportedFeatureError(ConfigurationError):
    """The broker a request would go to runs a release without the feature it needs, so it is
    not sent: a timer message (``deliver_at`` / ``deliver_after``) for a broker older than
    RocketMQ 5.0, which would deliver it at once instead of at its time.

    A broker's release is the ``version`` it stamps on its responses (docs/protocol.md §0.3).
    ``broker`` is its address, ``version`` that ordinal (409 for 4.9.8), ``needed`` the lowest
    that has the feature (412, V5_0_0_SNAPSHOT). Not retriable: send to a 5.x cluster, or use a
    delay level.
    """

    def __init__(self, message: str, *, broker: str, version: int, needed: int) -> None:
        super().__init__(message)
        self.broker = broker
        self.version = version
        self.needed = needed


class QueueNotAssignedError(RocketError, LookupError):
    """A pull consumer was asked to seek, pause, resume or commit a queue it does not own
    (never assigned, or taken away by a rebalance)."""

    def __init__(self, queue: object, detail: str = "is not assigned to this consumer") -> None:
        super().__init__(f"queue {queue} {detail}")
        self.queue = queue


class OffsetOutOfRangeError(RocketError, ValueError):
    """A seek to an offset below the queue's smallest stored offset or above its next offset
    to be written (Java ``DefaultLitePullConsumerImpl.seek``: "Seek offset illegal").

    Attributes:
        queue: the queue.
        offset: the offset asked for.
        min_offset, max_offset: the legal range, both ends included, as the broker reported it.
    """

    def __init__(self, queue: object, offset: int, min_offset: int, max_offset: int) -> None:
        super().__init__(
            f"offset {offset} of {queue} is outside the stored range {min_offset}..{max_offset}"
        )
        self.queue = queue
        self.offset = offset
        self.min_offset = min_offset
        self.max_offset = max_offset


class MessageTooLargeError(RocketError, ValueError):
    """A message body (or a batch) exceeds the maximum size and was not sent."""


class ClientClosedError(RocketError):
    """The object was closed by its owner and cannot be used any more."""


class ReplyTimeoutError(RocketError, TimeoutError):
    """A request ([Producer.request][aiorocket.Producer.request]) was stored by the broker
    but no reply reached the requester within its timeout: no responder answered, or not in
    time (Java's ``RequestTimeoutException``). A reply arriving later is dropped and counted.

    Attributes:
        topic: the topic the request was sent to.
        correlation_id: the request's ``CORRELATION_ID``.
    """

    def __init__(self, message: str, *, topic: str = "", correlation_id: str = "") -> None:
        super().__init__(message)
        self.topic = topic
        self.correlation_id = correlation_id


class NotARequestError(RocketError, ValueError):
    """A reply was asked for a message that carries no request (its ``CLUSTER``,
    ``REPLY_TO_CLIENT`` or ``CORRELATION_ID`` property is missing), as Java's
    ``MessageUtil.createReplyMessage`` refuses it."""


class InvalidReceiptHandleError(RocketError, ValueError):
    """A message given to a simple consumer's ``ack`` or ``change_invisible_duration`` was
    not received by that consumer (the 5.x proxy's INVALID_RECEIPT_HANDLE)."""


class ReceiptHandleExpiredError(InvalidReceiptHandleError):
    """The receipt handle's invisible time has passed: the broker may deliver the message
    again, so acking it now could ack another delivery (the 5.x proxy refuses such a handle
    as expired)."""


class ProtocolError(RocketError):
    """The remoting protocol's rules were broken."""


class LocalProtocolError(ProtocolError):
    """We were asked to put something on the wire that the protocol cannot carry."""


class RemoteProtocolError(ProtocolError):
    """The peer sent bytes that are not a valid frame, header, body or message record.

    A connection that raised this is poisoned: the stream can no longer be trusted.
    """


class FrameTooLargeError(RemoteProtocolError):
    """A frame's length prefix is negative, too small, or over the configured cap."""

    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"frame length {length} outside [4, {limit}]")
        self.length = length
        self.limit = limit


class MissingHeaderFieldError(RemoteProtocolError):
    """A mandatory ``extFields`` entry is absent or cannot be parsed as its declared type.

    The Java broker answers such requests with SYSTEM_ERROR and the remark
    ``the custom field <name> is null``; `field` holds the wire name.
    """

    def __init__(self, field: str, detail: str = "is null") -> None:
        super().__init__(f"the custom field <{field}> {detail}")
        self.field = field


class TransportError(RocketError):
    """The connection to a peer failed."""


class ConnectError(TransportError):
    """A TCP connection could not be established."""


class ConnectionClosedError(TransportError):
    """The connection closed while a request was waiting for its response."""


class RequestTimeoutError(TransportError, TimeoutError):
    """No response arrived within the request timeout."""


class BrokerError(RocketError):
    """A broker or name server answered with a response code other than SUCCESS.

    Attributes:
        code: the response code on the wire.
        remark: the peer's remark (error text), possibly empty.
        retriable: whether a producer may send again (possibly to another broker).
        refresh_route: whether the route that led here may be stale.
    """

    code: int = -1
    retriable: ClassVar[bool] = False
    refresh_route: ClassVar[bool] = False

    def __init__(self, remark: str = "", *, code: int | None = None) -> None:
        if code is not None:
            self.code = code
        self.remark = remark
        super().__init__(f"[code {self.code}] {remark}" if remark else f"[code {self.code}]")


_BY_CODE: dict[int, type[BrokerError]] = {}

# Retriable set: the Java 4.9 DefaultMQProducerImpl retries on 1, 14, 16, 17, 204, 205; we add
# SYSTEM_BUSY (2) and FLOW_CONTROL (215) because they are transient by definition.


class BrokerSystemError(BrokerError):
    """SYSTEM_ERROR (1): the peer failed to process the request."""

    code = 1
    retriable = True


class AccessDeniedError(BrokerSystemError):
    """The broker's ACL refused the request: an unknown access key (user), a signature that
    does not verify (wrong secret key), or no permission on a topic or group.

    A Java 4.x broker (ACL 1.0, plain ACL) has no response code for it:
    ``PlainAccessValidator`` throws an ``AclException`` in the RPC hook, and
    ``NettyRemotingAbstract.processRequestCommand`` answers SYSTEM_ERROR (1) with
    ``RemotingHelper.exceptionSimpleDesc`` as the remark
    (``org.apache.rocketmq.acl.common.AclException: <reason>, <stack frame>``). A 5.x broker
    (ACL 2.0) answers NO_PERMISSION (16) with the authentication or authorization exception's
    message as the remark (``User:ak is not found.``, ``check signature failed.``, ``User:ak
    has no permission to access Topic:t from ...``); ``code`` is then 16.
    [`broker_error`][aiorocket.errors.broker_error]
    recognises both. Not retriable: the same credentials are refused again, on every broker.

    Attributes:
        reason: the broker's reason, e.g. ``Check signature failed for accessKey=ak``.
    """

    retriable = False

    def __init__(self, remark: str = "", *, code: int | None = None) -> None:
        super().__init__(remark, code=code)
        self.reason = _acl_reason(remark) or remark
        self.args = (f"[code {self.code}] access denied by the broker's ACL: {self.reason}",)


#: how a Java broker's remark names the ACL exception (``Throwable.toString`` of it)
_ACL_EXCEPTION = re.compile(r"(?:^|[\s.])AclException: ")
#: the stack frame ``exceptionSimpleDesc`` appends: ``, pkg.Class.method(File.java:123)``
_STACK_FRAME = re.compile(r", [\w$.<>]+\([^()]*\)$")
#: how a 5.x broker's ACL 2.0 words the refusals it answers with NO_PERMISSION (16): the
#: messages of ``DefaultAuthenticationHandler``, ``DefaultAuthenticationContextBuilder``,
#: ``UserAuthorizationHandler``, ``AclAuthorizationHandler`` and the strategies' wrappers
#: (the broker's own NO_PERMISSION, a forbidden topic or broker, reads "... is forbidden")
_ACL2_REFUSAL = re.compile(
    r"User:\S* (?:is not found|is disabled|not found)\.?"
    r"|check signature failed\."
    r"|\S+ has no permission to access .*"
    r"|(?:Authentication|Authorization) failed\. .*"
    r"|username cannot be null\."
    r"|authentication header is incorrect\."
    r"|datetime is null\.",
    re.S,
)


def _acl_reason(remark: str | None) -> str | None:
    """The reason of an ACL refusal's remark (without the exception class and the stack
    frame), or ``None`` when the remark is not an ``AclException``'s."""
    match = _ACL_EXCEPTION.search(remark or "")
    if match is None or remark is None:
        return None
    return _STACK_FRAME.sub("", remark[match.end() :]).strip()


class SystemBusyError(BrokerError):
    """SYSTEM_BUSY (2): the peer is overloaded."""

    code = 2
    retriable = True


class RequestCodeNotSupportedError(BrokerError):
    """REQUEST_CODE_NOT_SUPPORTED (3)."""

    code = 3


class FlushDiskTimeoutError(BrokerError):
    """FLUSH_DISK_TIMEOUT (10): stored, flush timed out."""

    code = 10


class SlaveNotAvailableError(BrokerError):
    """SLAVE_NOT_AVAILABLE (11)."""

    code = 11


class FlushSlaveTimeoutError(BrokerError):
    """FLUSH_SLAVE_TIMEOUT (12)."""

    code = 12


class MessageIllegalError(BrokerError):
    """MESSAGE_ILLEGAL (13): too large or malformed."""

    code = 13


class TopicMessageTypeError(MessageIllegalError):
    """MESSAGE_ILLEGAL (13) from a RocketMQ 5 proxy: the message's kind is not its topic's
    ``message.type`` (a message with a sharding key is ``FIFO`` and needs a ``FIFO`` or
    ``MIXED`` topic). The message says which kind the topic needs."""

    def __init__(self, remark: str = "", *, code: int | None = None) -> None:
        found = _MESSAGE_TYPE_REFUSAL.search(remark)
        if found is not None and found.group(1) == "UNSPECIFIED":
            # TopicMessageType of a topic the proxy's metadata does not know
            remark += (
                " (the topic does not exist and a proxy creates none: create it; for message "
                "trace, RMQ_SYS_TRACE_TOPIC, or set the brokers' traceTopicEnable=true)"
            )
        elif found is not None:
            topic_type, message_type = found.groups()
            remark += (
                f" (the topic takes {topic_type} messages, this one is {message_type}: create "
                f"the topic with message_type={message_type} or MIXED, e.g. "
                f"`aiorocket admin create-topic TOPIC --type {message_type}`)"
            )
        super().__init__(remark, code=code)


# The proxy's TopicMessageTypeValidator refusal (MESSAGE_PROPERTY_CONFLICT_WITH_TYPE).
_MESSAGE_TYPE_REFUSAL = re.compile(
    r"TopicMessageType validate failed, the expected type is (\w+), but actual type is (\w+)"
)


class ServiceNotAvailableError(BrokerError):
    """SERVICE_NOT_AVAILABLE (14)."""

    code = 14
    retriable = True
    refresh_route = True


class VersionNotSupportedError(BrokerError):
    """VERSION_NOT_SUPPORTED (15)."""

    code = 15


class NoPermissionError(BrokerError):
    """NO_PERMISSION (16)."""

    code = 16
    retriable = True
    refresh_route = True


class TopicNotExistError(BrokerError):
    """TOPIC_NOT_EXIST (17)."""

    code = 17
    retriable = True
    refresh_route = True


class TopicExistAlreadyError(BrokerError):
    """TOPIC_EXIST_ALREADY (18)."""

    code = 18


class PullNotFoundError(BrokerError):
    """PULL_NOT_FOUND (19)."""

    code = 19


class PullRetryImmediatelyError(BrokerError):
    """PULL_RETRY_IMMEDIATELY (20)."""

    code = 20


class PullOffsetMovedError(BrokerError):
    """PULL_OFFSET_MOVED (21)."""

    code = 21


class QueryNotFoundError(BrokerError):
    """QUERY_NOT_FOUND (22)."""

    code = 22


class SubscriptionParseFailedError(BrokerError):
    """SUBSCRIPTION_PARSE_FAILED (23)."""

    code = 23


class SubscriptionNotExistError(BrokerError):
    """SUBSCRIPTION_NOT_EXIST (24)."""

    code = 24


class SubscriptionNotLatestError(BrokerError):
    """SUBSCRIPTION_NOT_LATEST (25)."""

    code = 25


class SubscriptionGroupNotExistError(BrokerError):
    """SUBSCRIPTION_GROUP_NOT_EXIST (26)."""

    code = 26


class FilterDataNotExistError(BrokerError):
    """FILTER_DATA_NOT_EXIST (27)."""

    code = 27


class FilterDataNotLatestError(BrokerError):
    """FILTER_DATA_NOT_LATEST (28)."""

    code = 28


class TransactionShouldCommitError(BrokerError):
    """TRANSACTION_SHOULD_COMMIT (200)."""

    code = 200


class TransactionShouldRollbackError(BrokerError):
    """TRANSACTION_SHOULD_ROLLBACK (201)."""

    code = 201


class TransactionStateUnknownError(BrokerError):
    """TRANSACTION_STATE_UNKNOW (202)."""

    code = 202


class TransactionStateGroupWrongError(BrokerError):
    """TRANSACTION_STATE_GROUP_WRONG (203)."""

    code = 203


class NoBuyerIdError(BrokerError):
    """NO_BUYER_ID (204)."""

    code = 204
    retriable = True


class NotInCurrentUnitError(BrokerError):
    """NOT_IN_CURRENT_UNIT (205)."""

    code = 205
    retriable = True


class ConsumerNotOnlineError(BrokerError):
    """CONSUMER_NOT_ONLINE (206)."""

    code = 206


class ConsumeMessageTimeoutError(BrokerError):
    """CONSUME_MSG_TIMEOUT (207)."""

    code = 207


class NoMessageError(BrokerError):
    """NO_MESSAGE (208)."""

    code = 208


class IllegalOperationError(BrokerError):
    """ILLEGAL_OPERATION (604, RocketMQ 5.x): the broker refuses what its state does not allow,
    such as recalling a message that is already due."""

    code = 604


class FlowControlError(BrokerError):
    """FLOW_CONTROL (215): retry after a short pause."""

    code = 215
    retriable = True


for _cls in BrokerError.__subclasses__():
    _BY_CODE[_cls.code] = _cls
del _cls


def broker_error(code: int, remark: str | None = None) -> BrokerError:
    """Return the exception instance for a non-success response ``code``.

    Unknown codes give a plain [`BrokerError`][aiorocket.errors.BrokerError] whose ``code``
    attribute is set; a SYSTEM_ERROR whose remark is an ACL 1.0 refusal (4.x) and a NO_PERMISSION
    whose remark is an ACL 2.0 refusal (5.x) give
    [`AccessDeniedError`][aiorocket.errors.AccessDeniedError].
    """
    if code == BrokerSystemError.code and _acl_reason(remark) is not None:
        return AccessDeniedError(remark or "")
    if code == NoPermissionError.code and remark and _ACL2_REFUSAL.fullmatch(remark):
        return AccessDeniedError(remark, code=code)
    if code == MessageIllegalError.code and remark and _MESSAGE_TYPE_REFUSAL.search(remark):
        return TopicMessageTypeError(remark)
    cls = _BY_CODE.get(code)
    if cls is None:
        return BrokerError(remark or "", code=code)
    return cls(remark or "")


class IgnoredSelectorTextWarning(UserWarning):
    """An SQL92 selector has text after the expression that RocketMQ's parser ignores
    (``region = 'eu' garbage`` filters by ``region = 'eu'``); issued by ``subscribe``, which
    still accepts the selector as a Java client and broker do. Filter it with
    ``warnings.simplefilter("ignore", IgnoredSelectorTextWarning)`` or make it an error with
    ``"error"``."""


class NeverStartedWarning(RuntimeWarning):
    """A client (producer, consumer, app) was garbage-collected without having been started:
    it consumed or sent nothing, which is almost always a missing ``async with client:`` or
    ``await client.start()``. A ``RuntimeWarning``, shown by default as asyncio's "coroutine
    was never awaited" is; ``warnings.simplefilter("ignore", NeverStartedWarning)`` hides it."""
