"""RocketMQ 4.x "plain ACL" request signatures (docs/protocol.md §8).

The Java client's ``AclClientRPCHook`` signs every request: the values of all ``extFields``
except ``Signature``, in ascending key order, then the body, through HMAC-SHA1 keyed with the
secret key, Base64-encoded. The broker's ``PlainAccessValidator`` recomputes the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

__all__ = [
    "ACCESS_KEY",
    "SECURITY_TOKEN",
    "SIGNATURE",
    "content_to_sign",
    "sign",
    "signed_ext_fields",
    "verify",
]

#: ``SessionCredentials`` ext-field names.
ACCESS_KEY = "AccessKey"
SECURITY_TOKEN = "SecurityToken"
SIGNATURE = "Signature"


def _java_order(key: str) -> bytes:
    # The Java hook sorts keys in a TreeMap: String.compareTo, i.e. UTF-16 code unit order.
    return key.encode("utf-16-be", "surrogatepass")


def _java_utf8(text: str) -> bytes:
    # String.getBytes(UTF_8) turns each unpaired surrogate into '?'.
    return text.encode("utf-8", "replace")


def content_to_sign(ext_fields: Mapping[str, str], body: bytes = b"") -> bytes:
    """Return the bytes that are signed: the sorted ext-field values, then ``body``.

    The ``Signature`` field itself is skipped.
    """
    values = (ext_fields[k] for k in sorted(ext_fields, key=_java_order) if k != SIGNATURE)
    return _java_utf8("".join(values)) + bytes(body)


def sign(ext_fields: Mapping[str, str], body: bytes = b"", *, secret_key: str) -> str:
    """Return the Base64 HMAC-SHA1 signature of ``ext_fields`` and ``body``.

    ``ext_fields`` must already hold ``AccessKey`` (and ``SecurityToken``, if any): they are
    signed like every other field. Never raises for string input.
    """
    digest = hmac.new(
        _java_utf8(secret_key), content_to_sign(ext_fields, body), hashlib.sha1
    ).digest()
    return base64.b64encode(digest).decode("ascii")


def signed_ext_fields(
    ext_fields: Mapping[str, str],
    body: bytes = b"",
    *,
    access_key: str,
    secret_key: str,
    security_token: str | None = None,
) -> dict[str, str]:
    """Return a copy of ``ext_fields`` with ``AccessKey``, ``SecurityToken`` (when given)
    and a fresh ``Signature`` added, as ``AclClientRPCHook.doBeforeRequest`` does.

    A ``Signature`` already present in ``ext_fields`` is replaced. Never raises for string
    input.
    """
    fields = {k: v for k, v in ext_fields.items() if k != SIGNATURE}
    fields[ACCESS_KEY] = access_key
    if security_token is not None:
        fields[SECURITY_TOKEN] = security_token
    fields[SIGNATURE] = sign(fields, body, secret_key=secret_key)
    return fields


def verify(ext_fields: Mapping[str, str], body: bytes = b"", *, secret_key: str) -> bool:
    """Tell whether ``ext_fields["Signature"]`` signs ``ext_fields`` and ``body`` under
    ``secret_key``; ``False`` when the field is absent. The comparison is constant-time.

    Checking that ``AccessKey`` names a known account is the caller's job.
    """
    claimed = ext_fields.get(SIGNATURE)
    if claimed is None:
        return False
    expected = sign(ext_fields, body, secret_key=secret_key)
    return hmac.compare_digest(_java_utf8(claimed), expected.encode("ascii"))
