"""ACL request signatures: docs/protocol.md §8 vectors and the C++ client's captured frames."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiorocket._protocol.acl import content_to_sign, sign, signed_ext_fields, verify
from aiorocket.errors import AccessDeniedError, BrokerSystemError, NoPermissionError, broker_error

DATA = Path(__file__).parent.parent / "data"

# §8 test vectors: (ext fields before signing, body, signed bytes, signature).
VECTORS = [
    ({"topic": "TopicTest"}, b"", b"rocketmq2TopicTest", "GeeGoP9mRvDhoVp4PD5omX0prgE="),
    (
        {"consumerGroup": "GID_demo"},
        b"abc",
        b"rocketmq2GID_demoabc",
        "51ZG2nRJ95OyBAJFFYKKRKXB7DY=",
    ),
]


@pytest.mark.parametrize(("fields", "body", "content", "signature"), VECTORS)
def test_vectors_of_section_8(
    fields: dict[str, str], body: bytes, content: bytes, signature: str
) -> None:
    with_key = {**fields, "AccessKey": "rocketmq2"}
    assert content_to_sign(with_key, body) == content
    assert sign(with_key, body, secret_key="12345678") == signature
    signed = signed_ext_fields(fields, body, access_key="rocketmq2", secret_key="12345678")
    assert signed == {**with_key, "Signature": signature}
    assert verify(signed, body, secret_key="12345678")


def test_signed_ext_fields_copies_and_replaces_an_old_signature() -> None:
    fields = {"topic": "TopicTest", "Signature": "stale"}
    signed = signed_ext_fields(fields, access_key="rocketmq2", secret_key="12345678")
    assert fields == {"topic": "TopicTest", "Signature": "stale"}
    assert signed["Signature"] == "GeeGoP9mRvDhoVp4PD5omX0prgE="


def test_security_token_is_added_and_signed() -> None:
    signed = signed_ext_fields(
        {"topic": "T"}, b"x", access_key="ak", secret_key="sk", security_token="tok"
    )
    assert signed["SecurityToken"] == "tok"
    # Order: AccessKey, SecurityToken, (Signature skipped), topic; then the body.
    assert content_to_sign(signed, b"x") == b"aktokTx"
    assert verify(signed, b"x", secret_key="sk")
    assert not verify({**signed, "SecurityToken": "other"}, b"x", secret_key="sk")


def test_verify_rejects_tampering_and_missing_signatures() -> None:
    signed = signed_ext_fields({"topic": "T"}, b"body", access_key="ak", secret_key="sk")
    assert verify(signed, b"body", secret_key="sk")
    assert not verify(signed, b"Body", secret_key="sk")
    assert not verify(signed, b"body", secret_key="other")
    assert not verify({**signed, "topic": "U"}, b"body", secret_key="sk")
    assert not verify(
        {k: v for k, v in signed.items() if k != "Signature"}, b"body", secret_key="sk"
    )
    assert not verify({**signed, "Signature": "été"}, b"body", secret_key="sk")


def test_keys_sort_in_java_string_order() -> None:
    # Upper case before lower case, and UTF-16 code units: U+10000 (D800 DC00) < U+FFFF.
    fields = {"b": "2", "B": "1", "\uffff": "4", "\U00010000": "3", "a": "0"}
    assert content_to_sign(fields) == b"10234"


def test_lone_surrogates_are_signed_as_java_would() -> None:
    # String.getBytes(UTF_8) writes '?' for an unpaired surrogate.
    assert content_to_sign({"k": "a\ud800b"}) == b"a?b"
    assert sign({"k": "a\ud800b"}, secret_key="s") == sign({"k": "a?b"}, secret_key="s")


def _ext_as_strings(raw: dict[str, Any]) -> dict[str, str]:
    # C++ sends some values as JSON numbers; it signs their decimal text (§1.8, §8).
    out = {}
    for key, value in raw.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        else:
            out[key] = value if isinstance(value, str) else str(value)
    return out


def test_cpp_client_captures_verify_with_an_empty_secret() -> None:
    # The C++ client always signs, with an empty AccessKey and secret when ACL is off.
    checked = 0
    for line in (DATA / "captures" / "cpp-client-1.x.jsonl").read_text().splitlines():
        record = json.loads(line)
        frame = bytes.fromhex(record["frame_hex"])
        header_length = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
        body = frame[8 + header_length :]
        fields = _ext_as_strings(record["header"]["extFields"])
        assert verify(fields, body, secret_key=""), record["code"]
        assert sign(fields, body, secret_key="") == fields["Signature"]
        checked += 1
    assert checked >= 10


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=6),
    st.binary(max_size=32),
    st.text(max_size=8),
    st.text(max_size=8),
    st.none() | st.text(max_size=8),
)
def test_signed_fields_always_verify(
    fields: dict[str, str], body: bytes, ak: str, sk: str, token: str | None
) -> None:
    signed = signed_ext_fields(fields, body, access_key=ak, secret_key=sk, security_token=token)
    assert verify(signed, body, secret_key=sk)
    assert verify(signed, body + b"!", secret_key=sk) is False


# What a Java 4.9.8 broker answers (SYSTEM_ERROR, RemotingHelper.exceptionSimpleDesc of the
# AclException), captured from the interop tests, and the reason aiorocket reports.
JAVA_REFUSALS = [
    (
        "org.apache.rocketmq.acl.common.AclException: Check signature failed for accessKey=ak1, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.validate"
        "(PlainPermissionManager.java:684)",
        "Check signature failed for accessKey=ak1",
    ),
    (
        "org.apache.rocketmq.acl.common.AclException: No default permission for topic:T, "
        "org.apache.rocketmq.acl.plain.PlainPermissionManager.checkPerm"
        "(PlainPermissionManager.java:611)",
        "No default permission for topic:T",
    ),
    (
        # a reason with a comma of its own keeps it; a frame without a line number goes
        "org.apache.rocketmq.acl.common.AclException: Need admin permission for request "
        "code=17, but accessKey=ak1 is not, org.apache.rocketmq.acl.plain."
        "PlainPermissionManager.checkPerm(Unknown Source)",
        "Need admin permission for request code=17, but accessKey=ak1 is not",
    ),
    # the embedded broker's (no stack frame)
    (
        "org.apache.rocketmq.acl.common.AclException: No acl config for nobody",
        "No acl config for nobody",
    ),
]


@pytest.mark.parametrize(("remark", "reason"), JAVA_REFUSALS)
def test_acl_refusals_raise_access_denied(remark: str, reason: str) -> None:
    exc = broker_error(1, remark)
    assert isinstance(exc, AccessDeniedError)
    assert isinstance(exc, BrokerSystemError)
    assert exc.reason == reason
    assert exc.remark == remark
    assert str(exc) == f"[code 1] access denied by the broker's ACL: {reason}"
    assert not exc.retriable


def test_other_system_errors_stay_system_errors() -> None:
    for remark in ("the custom field <topic> is null", None, "AclExceptional day"):
        exc = broker_error(1, remark)
        assert type(exc) is BrokerSystemError
        assert exc.retriable
    # the ACL text under another code is not how a 4.x broker refuses
    assert not isinstance(broker_error(16, JAVA_REFUSALS[0][0]), AccessDeniedError)


#: how a 5.x broker's ACL 2.0 refuses (NO_PERMISSION with the exception's message)
ACL2_REFUSALS = [
    "User:nobody is not found.",
    "check signature failed.",
    "User:ak is disabled.",
    "User:ak has no permission to access Topic:Denied from 127.0.0.1, "
    "the decision resource is Topic:Denied, the decision result is Deny.",
    "Authentication failed. Please verify the credentials and try again.",
]


@pytest.mark.parametrize("remark", ACL2_REFUSALS)
def test_acl2_refusals_raise_access_denied(remark: str) -> None:
    exc = broker_error(16, remark)
    assert isinstance(exc, AccessDeniedError)
    assert exc.code == 16
    assert exc.reason == remark
    assert str(exc) == f"[code 16] access denied by the broker's ACL: {remark}"
    assert not exc.retriable


def test_a_forbidden_broker_is_no_acl_refusal() -> None:
    # the broker's own NO_PERMISSION (write or read perm off) stays retriable with a route refresh
    for remark in ("the broker[broker-a] sending message is forbidden", None, "check signature"):
        exc = broker_error(16, remark)
        assert type(exc) is NoPermissionError
        assert exc.retriable
