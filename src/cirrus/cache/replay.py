"""A stored answer replayed as the events of a live generation.

A replayed answer yields the same event types as a live generation (text pieces, then one `Finished`), so the
routes' writers serve a hit and a fresh answer the same way.
"""

from collections.abc import AsyncIterator

from cirrus.cache.answer import CachedAnswer
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta

DEFAULT_CHUNK_CHARS = 32


async def replay(
    answer: CachedAnswer, chunk_chars: int = DEFAULT_CHUNK_CHARS
) -> AsyncIterator[GenerationEvent]:
    """A cached answer as a live generation's event stream; ValueError when chunk_chars is below 1."""
    if chunk_chars < 1:
        raise ValueError("chunk_chars must be at least 1")
    text = answer.text
    for start in range(0, len(text), chunk_chars):
        yield TextDelta(text[start : start + chunk_chars])
    yield Finished(answer.finish_reason, answer.usage, answer.stop_sequence)
