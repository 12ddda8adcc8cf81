"""Cirrus: serverless LLM inference on your own machines."""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from cirrus.sdk import Ai, AiError

__all__ = ["Ai", "AiError"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Lazy, so a worker process (which imports cirrus.runtime) does not pay for the SDK's HTTP and schema imports.
    if name in __all__:
        from cirrus import sdk

        return getattr(sdk, name)
    raise AttributeError(f"module 'cirrus' has no attribute {name!r}")
