"""What the gateway hands a route: the events of a live generation or of a cached answer, after the output
filters, with a hook that runs once when they end (metering, cache store, limits)."""

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from cirrus.errors import CirrusError
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.service import Completion, collect

EndHook = Callable[[Finished | None, CirrusError | None, str], None]


@dataclass
class Answer:
    """Iterate once (or call `collect`); `aclose` releases what the answer holds, even mid-stream."""

    _events: AsyncIterator[GenerationEvent]
    _close: Callable[[], Awaitable[None]]
    cold_start: bool = False
    queue_s: float = 0.0
    _closed: bool = field(default=False)

    async def __aiter__(self) -> AsyncIterator[GenerationEvent]:
        try:
            async for event in self._events:
                yield event
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Closing the events first runs their end hook (metering, the in-flight cache entry) even for an answer
        that was never iterated to its end; then what the answer holds (its lease) is released."""
        if not self._closed:
            self._closed = True
            try:
                if isinstance(self._events, AsyncGenerator):
                    await self._events.aclose()
            finally:
                await self._close()

    async def collect(self) -> Completion:
        try:
            return await collect(self, self.cold_start, self.queue_s)
        finally:
            await self.aclose()


async def observed(
    events: AsyncIterator[GenerationEvent], on_text: Callable[[], None], on_end: EndHook
) -> AsyncIterator[GenerationEvent]:
    """Pass events through, calling `on_end` exactly once: with the finish event, the error, or neither when
    the consumer stopped early (a client that left)."""
    parts: list[str] = []
    ended = False
    try:
        async for event in events:
            if isinstance(event, TextDelta):
                on_text()
                parts.append(event.text)
            else:
                ended = True
                on_end(event, None, "".join(parts))
            yield event
    except CirrusError as error:
        ended = True
        on_end(None, error, "".join(parts))
        raise
    finally:
        if not ended:
            on_end(None, None, "".join(parts))
