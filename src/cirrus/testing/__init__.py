"""Helpers for tests and docs: tiny synthetic checkpoints that exercise llama.cpp without real weights."""

from cirrus.testing.synthetic import UnknownArchitecture, write_synthetic

__all__ = ["UnknownArchitecture", "write_synthetic"]
