"""Output guardrails over a stream of events: text passes through the model's filters piece by piece (holding
back only what could still become part of a match), and the rest is flushed before the finish event."""

from collections.abc import AsyncIterable, AsyncIterator

from cirrus.guardrails import OutputFilter
from cirrus.runtime.events import GenerationEvent, TextDelta


async def filtered(
    events: AsyncIterable[GenerationEvent], output_filter: OutputFilter | None
) -> AsyncIterator[GenerationEvent]:
    if output_filter is None:
        async for event in events:
            yield event
        return
    redactor = output_filter.stream()
    async for event in events:
        if isinstance(event, TextDelta):
            text = redactor.feed(event.text)
            if text:
                yield TextDelta(text)
            continue
        tail = redactor.flush()
        if tail:
            yield TextDelta(tail)
        yield event
