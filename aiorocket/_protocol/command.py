"""The remoting command: one frame's header and body, independent of the header dialect."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiorocket._protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, VERSION_V4_9_8, SerializeType

__all__ = ["RemotingCommand"]


@dataclass(slots=True, eq=True)
class RemotingCommand:
    """A request or response as it travels in one frame (docs/protocol.md §1.2–1.6).

    ``ext_fields`` values are always strings: numbers and booleans that real clients send raw
    are coerced on receive (§1.8). ``remark`` is ``None`` when absent. ``code`` stays a plain
    ``int`` so codes unknown to this library survive a round trip. ``serialize_type`` records
    the header dialect the frame used; responses must be written in the request's dialect.
    """

    code: int
    opaque: int = 0
    flag: int = 0
    #: our own LanguageCode: the Java 4.9.8 broker treats PYTHON clients like JAVA ones
    #: (it only branches on CPP, for reset-offset bodies), so we say who we are
    language: str = "PYTHON"
    version: int = VERSION_V4_9_8
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON

    @property
    def is_response(self) -> bool:
        """Flag bit 0: the frame answers a request with the same opaque."""
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        """Flag bit 1: the sender expects no response."""
        return bool(self.flag & FLAG_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
        remark: str | None = None,
    ) -> RemotingCommand:
        """Build a request; the connection assigns ``opaque`` when it sends it."""
        return cls(
            code=code,
            flag=FLAG_ONEWAY if oneway else 0,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
        )

    def make_response(
        self,
        code: int,
        *,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """Build the response to this request: same opaque and dialect, flag bit 0 set (§1.7)."""
        return RemotingCommand(
            code=code,
            opaque=self.opaque,
            flag=FLAG_RESPONSE,
            remark=remark,
            ext_fields=ext_fields if ext_fields is not None else {},
            body=body,
            serialize_type=self.serialize_type,
        )
