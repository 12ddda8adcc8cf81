"""OpenAI-compatible API under /v1: chat completions, completions, models."""
