"""Which wire protocol a path speaks, so one error is rendered the way that protocol's clients expect."""

from enum import Enum


class WireProtocol(Enum):
    WORKERS_AI = "workers-ai"
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


def protocol_for(path: str) -> WireProtocol:
    if path == "/v1/messages" or path.startswith("/v1/messages/"):
        return WireProtocol.ANTHROPIC
    if path.startswith("/v1/") or "/ai/v1/" in path:
        return WireProtocol.OPENAI
    return WireProtocol.WORKERS_AI
