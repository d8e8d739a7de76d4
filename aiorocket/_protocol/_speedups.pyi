"""Types of the compiled codec (``_speedups.pyx``); see ``aiorocket._protocol.accel``."""

from collections.abc import Callable
from typing import Any

def configure_message(
    record_cls: type,
    bad: Callable[[int, str], Exception],
    inflate: Callable[[bytes, int, int, int], bytes],
    ipv6_text: Callable[[bytes], str],
    ipv4_text: Callable[[int], str],
    ipv4_cache: dict[int, str],
) -> None: ...
def configure_frame(
    command_cls: type,
    lang_by_ordinal: dict[int, str],
    protocol_error: type[Exception],
    rocketmq_type: Any,
    decode_json: Callable[[bytes, bytes], Any],
    too_large: Callable[[int, int], Exception],
    need_data: Any,
) -> None: ...
def decode_run(
    buf: bytes, pos: int, n: int, decompress: bool, max_body_size: int, single: bool
) -> tuple[list[Any], int]: ...
def decode_binary_header(raw: bytes, body: bytes) -> Any: ...
def next_command(self: Any) -> Any: ...
