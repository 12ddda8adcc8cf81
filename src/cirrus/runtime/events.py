"""What a generation yields, as it runs."""

from dataclasses import dataclass

from cirrus.runtime.params import Usage


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class Finished:
    finish_reason: str
    usage: Usage
    stop_sequence: str | None = None  # the stop string that ended the answer, if one did


GenerationEvent = TextDelta | Finished
