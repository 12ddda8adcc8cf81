"""A `count` request in the worker: how many prompt tokens a generation of the same input would feed the engine.

The input is rendered and tokenized by the scheduler's own `PromptBuilder` (the chat template or the family's,
with its tools and thinking switch), so the count is the `prompt_tokens` a generation reports. Nothing is decoded
and the KV cache is not touched: the worker answers at once, between two engine steps, with a `counted` frame (or
`failed`, as a generation's input error would fail).
"""

import logging
from typing import Protocol

from cirrus.runtime.frames import Frame
from cirrus.runtime.params import GenerationInput
from cirrus.runtime.prompts import InputError

log = logging.getLogger(__name__)


class PromptTokens(Protocol):
    """What a count needs of the `PromptBuilder`."""

    def tokens(self, inputs: GenerationInput) -> list[int]: ...


def counted(prompts: PromptTokens, frame: Frame) -> Frame:
    """The answer to one `count` frame."""
    request_id = str(frame["id"])
    try:
        tokens = prompts.tokens(GenerationInput.from_frame(frame["input"]))
    except InputError as exc:
        return _failed(request_id, "invalid_input", str(exc), exc.param)
    except Exception as exc:  # reported to this request alone, as a generation's start-up failure is
        log.exception("could not count request %s", request_id, extra={"request_id": request_id})
        return _failed(request_id, "internal", f"{type(exc).__name__}: {exc}", None)
    return {"type": "counted", "id": request_id, "prompt_tokens": len(tokens)}


def _failed(request_id: str, kind: str, message: str, param: str | None) -> Frame:
    return {"type": "failed", "id": request_id, "kind": kind, "message": message, "param": param}
