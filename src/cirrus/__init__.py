"""Cirrus: serverless LLM inference on your own machines."""

from cirrus.sdk import Ai, AiError

__all__ = ["Ai", "AiError"]
__version__ = "0.1.0"
