"""Frames on the wire between the server and a worker: a 4-byte big-endian length, then UTF-8 JSON."""

import json
import struct
from typing import Any

Frame = dict[str, Any]
HEADER = struct.Struct(">I")
MAX_FRAME_BYTES = 64 * 1024 * 1024


class FrameError(ValueError):
    pass


def encode(frame: Frame) -> bytes:
    body = json.dumps(frame, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return HEADER.pack(len(body)) + body


def frame_length(header: bytes) -> int:
    (length,) = HEADER.unpack(header)
    if length > MAX_FRAME_BYTES:
        raise FrameError(f"frame of {length} bytes exceeds the {MAX_FRAME_BYTES} byte limit")
    return int(length)


def decode(body: bytes) -> Frame:
    frame = json.loads(body)
    if not isinstance(frame, dict) or "type" not in frame:
        raise FrameError("a frame is a JSON object with a 'type'")
    return frame
