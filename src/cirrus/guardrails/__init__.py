"""Guardrails: checks on a generation's input before inference, and filters on its output."""

from cirrus.guardrails.input import InputGuard
from cirrus.guardrails.output import MAX_HOLD_BACK, OutputFilter, StreamRedactor

__all__ = ["MAX_HOLD_BACK", "InputGuard", "OutputFilter", "StreamRedactor"]
