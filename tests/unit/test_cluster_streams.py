"""The pure parts of the cluster's data path: a node agent's stream registry, and the gateway's reading of a
node's batches (no Ray: the batches and calls are plain callables here)."""

import asyncio
from collections.abc import AsyncIterator

import pytest

from cirrus.cluster.remote import NodeLost, RemoteGeneration, first_events
from cirrus.cluster.streams import Streams
from cirrus.cluster.wire import Batch, Failed, Opened, Tally
from cirrus.errors import RequestTimeout, WorkerCrashed
from cirrus.runtime.events import Finished, TextDelta
from cirrus.runtime.params import Usage
from cirrus.runtime.progress import Progress

USAGE_SO_FAR = Usage(5, 1)
OPENED = Opened("node-a", "inst-1", cold_start=True, queue_s=0.25, cold_start_phases={"load_s": 0.5})


async def closing_with(usage: Usage, delay_s: float = 0.0) -> Usage:
    await asyncio.sleep(delay_s)
    return usage


async def test_a_close_stops_a_running_stream_and_returns_its_usage() -> None:
    streams = Streams()
    began = asyncio.Event()

    async def work() -> None:
        began.set()
        try:
            await asyncio.sleep(60)
        finally:
            await streams.end("k", closing_with(Usage(12, 3)))

    task = streams.open("k", work)
    assert task is not None and streams.running == 1
    await began.wait()
    assert await streams.close("k") == Usage(12, 3)
    await asyncio.wait({task}, timeout=1)
    assert task.cancelled() and streams.running == 0


async def test_a_close_while_the_stream_ends_waits_for_its_usage_without_cutting_it_short() -> None:
    streams = Streams()

    async def work() -> None:
        await streams.end("k", closing_with(Usage(30, 20), delay_s=0.05))

    task = streams.open("k", work)
    await asyncio.sleep(0)
    assert await streams.close("k") == Usage(30, 20)
    assert task is not None
    await task


async def test_a_close_before_the_stream_began_refuses_the_stream() -> None:
    streams = Streams()
    assert await streams.close("k") is None  # nothing known: the gateway keeps its own figures
    started = []

    async def work() -> None:
        started.append(True)

    assert streams.open("k", work) is None
    await asyncio.sleep(0)
    assert started == [] and streams.running == 0


async def test_a_close_just_after_the_end_returns_the_final_usage() -> None:
    streams = Streams()

    async def work() -> None:
        await streams.end("k", closing_with(Usage(7, 9)))

    task = streams.open("k", work)
    assert task is not None
    await task
    assert await streams.close("k") == Usage(7, 9)


async def test_a_closing_that_fails_leaves_the_usage_unknown() -> None:
    streams = Streams()

    async def broken() -> Usage:
        raise RuntimeError("the worker's exit path failed")

    async def work() -> None:
        await streams.end("k", broken())

    task = streams.open("k", work)
    assert task is not None
    await task
    assert await streams.close("k") is None


def test_first_events_raise_the_nodes_error_with_what_it_processed() -> None:
    progress = Progress()
    failed = Failed(RequestTimeout("too slow"), Usage(40, 2), started=True)
    with pytest.raises(RequestTimeout):
        first_events([failed], progress)
    assert progress.started and progress.usage() == Usage(40, 2)


def _generation(
    batches: list[Batch | Exception],
    progress: Progress,
    closes: list[str],
    close_answer: Usage | Exception | None = USAGE_SO_FAR,
) -> RemoteGeneration:
    opening = batches.pop(0)
    assert isinstance(opening, list)
    opened, events = first_events(opening, progress)

    async def next_batch() -> Batch | None:
        item = batches.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    async def close_remote() -> Usage | None:
        closes.append("close")
        if isinstance(close_answer, Exception):
            raise close_answer
        return close_answer

    return RemoteGeneration(opened, events, next_batch, close_remote, progress)


async def _texts(events: AsyncIterator[object]) -> list[str]:
    return [event.text async for event in events if isinstance(event, TextDelta)]


async def test_a_finished_stream_needs_no_close_on_the_node() -> None:
    progress, closes = Progress(), list[str]()
    batches: list[Batch | Exception] = [
        [OPENED, TextDelta("a"), Tally(Usage(5, 1), final=False)],
        [TextDelta("b"), Finished("stop", Usage(5, 2)), Tally(Usage(5, 2), final=True)],
    ]
    generation = _generation(batches, progress, closes)
    assert generation.cold_start and generation.queue_s == 0.25
    assert generation.cold_start_phases() == {"load_s": 0.5}
    assert await _texts(generation.__aiter__()) == ["a", "b"]
    assert closes == [] and generation.processed_usage() == Usage(5, 2)


async def test_a_lost_node_mid_stream_is_a_worker_crash_billed_with_the_last_tally() -> None:
    progress, closes = Progress(), list[str]()
    batches: list[Batch | Exception] = [
        [OPENED, TextDelta("a"), Tally(Usage(5, 1), final=False)],
        NodeLost("gone"),
    ]
    generation = _generation(batches, progress, closes)
    with pytest.raises(WorkerCrashed, match="went away"):
        await _texts(generation.__aiter__())
    assert closes == []  # a node that is gone is not asked: the error frame goes out at once
    assert generation.processed_usage() == Usage(5, 1)


async def test_an_error_the_node_sent_mid_stream_is_final_and_needs_no_close() -> None:
    progress, closes = Progress(), list[str]()
    failed = Failed(RequestTimeout("too slow"), Usage(5, 4), started=True)
    batches: list[Batch | Exception] = [[OPENED, TextDelta("a"), Tally(Usage(5, 1), final=False)], [failed]]
    generation = _generation(batches, progress, closes)
    with pytest.raises(RequestTimeout):
        await _texts(generation.__aiter__())
    assert closes == [] and generation.processed_usage() == Usage(5, 4)


async def test_closing_early_asks_the_node_for_its_count() -> None:
    progress, closes = Progress(), list[str]()
    batches: list[Batch | Exception] = [[OPENED, TextDelta("a"), Tally(Usage(5, 1), final=False)]]
    generation = _generation(batches, progress, closes, close_answer=Usage(5, 3))
    await generation.aclose()
    await generation.aclose()
    assert closes == ["close"] and generation.processed_usage() == Usage(5, 3)


async def test_a_node_that_forgot_the_stream_leaves_the_last_tally_as_the_bill() -> None:
    progress, closes = Progress(), list[str]()
    batches: list[Batch | Exception] = [[OPENED, TextDelta("a"), Tally(Usage(5, 2), final=False)]]
    generation = _generation(batches, progress, closes, close_answer=None)
    await generation.aclose()
    assert closes == ["close"] and generation.processed_usage() == Usage(5, 2)
