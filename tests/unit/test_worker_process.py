"""The server's side of a worker (runtime/process.py) over a scripted engine: deadlines that stop the worker,
cancels confirmed or punished, heartbeats, and the usage each way of ending leaves for billing."""

import asyncio
import signal
from collections.abc import AsyncIterator

import pytest

from cirrus.errors import RequestTimeout, WorkerCrashed
from cirrus.runtime.embedding import EmbeddingInput
from cirrus.runtime.events import Finished, GenerationEvent, TextDelta
from cirrus.runtime.params import GenerationInput, SamplingParams, Usage
from cirrus.runtime.progress import Progress
from tests.unit.fake_engine import CACHED_TOKENS, OPTIONS, PROMPT_TOKENS, Script, idle_worker, loaded_worker

INPUTS = GenerationInput(prompt="count", sampling=SamplingParams(max_tokens=1000))


def soon(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


async def drain(events: AsyncIterator[GenerationEvent]) -> list[GenerationEvent]:
    return [event async for event in events]


async def test_a_generation_that_finishes_reports_the_workers_usage() -> None:
    worker, _, _ = await loaded_worker(Script(tokens=3))
    progress = Progress()
    events = [event async for event in worker.generate("r1", INPUTS, soon(5), progress)]
    assert [type(e) for e in events] == [TextDelta, TextDelta, TextDelta, Finished]
    assert progress.started and progress.sent
    assert progress.usage() == Usage(PROMPT_TOKENS, 3, CACHED_TOKENS)
    assert isinstance(events[-1], Finished) and events[-1].usage == progress.usage()


async def test_the_deadline_raises_408_and_the_worker_confirms_the_cancel_with_its_count() -> None:
    worker, transport, process = await loaded_worker(Script(tokens=1000, step_s=0.01))
    progress = Progress()
    seen: list[GenerationEvent] = []
    with pytest.raises(RequestTimeout):
        async for event in worker.generate("r1", INPUTS, soon(0.1), progress):
            seen.append(event)
    await asyncio.wait_for(worker.settled(), 2)
    assert "cancel" in transport.sent_types()
    assert progress.final is not None, "the cancel's confirmation carries the real count"
    assert 1 <= progress.final.completion_tokens < 1000
    assert progress.final.completion_tokens >= len(seen)
    assert worker.alive and process.signals == []


async def test_the_deadline_stops_the_worker_even_while_the_caller_reads_nothing() -> None:
    worker, transport, _ = await loaded_worker(Script(tokens=1000, step_s=0.01))
    events = aiter(worker.generate("r1", INPUTS, soon(0.1)))
    await anext(events)
    await asyncio.sleep(0.3)  # a slow client: the generator is not resumed past the deadline
    assert "cancel" in transport.sent_types()
    assert not worker._busy(), "the worker confirmed; nothing runs for the caller that stopped reading"
    with pytest.raises(RequestTimeout):
        while True:
            await anext(events)


async def test_a_worker_that_does_not_confirm_the_cancel_is_killed_and_its_exit_path_runs() -> None:
    worker, _, process = await loaded_worker(Script(tokens=1000, confirms_cancel=False))
    worker.cancel_grace_s = 0.1
    exits: list[bool] = []
    worker.on_exit(lambda: exits.append(True))
    with pytest.raises(RequestTimeout):
        async for _ in worker.generate("r1", INPUTS, soon(0.05)):
            pass
    await asyncio.wait_for(worker.settled(), 2)
    assert process.signals == [signal.SIGKILL]
    assert not worker.alive and exits == [True]


async def test_other_requests_on_a_killed_worker_fail_as_crashed() -> None:
    worker, _, _ = await loaded_worker(Script(tokens=1000, confirms_cancel=False))
    worker.cancel_grace_s = 0.1
    other = aiter(worker.generate("other", INPUTS, soon(30)))
    await anext(other)
    with pytest.raises(RequestTimeout):
        async for _ in worker.generate("late", INPUTS, soon(0.05)):
            pass
    with pytest.raises(WorkerCrashed):
        while True:
            await anext(other)


async def test_a_client_that_leaves_is_billed_what_the_worker_confirmed() -> None:
    worker, transport, _ = await loaded_worker(Script(tokens=1000, step_s=0.01))
    progress = Progress()
    stream = worker.generate("r1", INPUTS, soon(30), progress)
    async for event in stream:
        if isinstance(event, TextDelta) and event.text == "t2 ":
            break
    await stream.aclose()  # type: ignore[attr-defined]
    await asyncio.wait_for(worker.settled(), 2)
    assert transport.sent_types().count("cancel") == 1
    assert progress.final is not None and progress.final.completion_tokens >= 2
    assert progress.usage().prompt_tokens == PROMPT_TOKENS


async def test_a_crash_leaves_the_prompt_and_the_tokens_streamed_so_far() -> None:
    worker, transport, _ = await loaded_worker(Script(tokens=1000, step_s=0.01))
    progress = Progress()
    texts = 0
    with pytest.raises(WorkerCrashed):
        async for event in worker.generate("r1", INPUTS, soon(30), progress):
            texts += isinstance(event, TextDelta)
            if texts == 2:
                transport.die()  # as if the process were SIGKILLed
    assert progress.final is None
    assert progress.usage() == Usage(PROMPT_TOKENS, 2, CACHED_TOKENS)


async def test_a_worker_that_exited_takes_no_request_and_says_it_never_got_it() -> None:
    worker, _, process = await loaded_worker()
    process.returncode = -9  # the exit is known; its connection's end not yet read
    assert not worker.alive and not worker.responsive
    progress = Progress()
    with pytest.raises(WorkerCrashed):
        async for _ in worker.generate("r1", INPUTS, soon(5), progress):
            pass
    assert not progress.sent and not progress.started


async def test_heartbeats_keep_a_worker_responsive_and_a_stopped_one_is_condemned() -> None:
    worker, transport, _ = await loaded_worker()
    worker.set_watchdog(timeout_s=0.1, stall_s=10)
    for _ in range(3):
        assert worker.watch() is None
        await asyncio.sleep(0.06)
        assert worker.responsive
    assert transport.sent_types().count("ping") == 3
    transport.script.frozen = True
    verdicts = []
    for _ in range(4):
        verdicts.append(worker.watch())
        await asyncio.sleep(0.06)
    assert not worker.responsive
    reasons = [v for v in verdicts if v is not None]
    assert len(reasons) == 1 and "heartbeat" in reasons[0], "condemned once, then left to be killed"


async def test_a_busy_worker_that_answers_pings_but_makes_no_progress_is_condemned() -> None:
    worker, transport, _ = await loaded_worker(Script(tokens=1000, step_s=0.01))
    worker.set_watchdog(timeout_s=10, stall_s=0.15)
    events = aiter(worker.generate("r1", INPUTS, soon(30)))
    await anext(events)
    transport.script.stuck = True
    verdicts = []
    for _ in range(6):
        verdicts.append(worker.watch())
        await asyncio.sleep(0.05)
    reasons = [v for v in verdicts if v is not None]
    assert len(reasons) == 1 and "engine step" in reasons[0], "its reader answers, but nothing progresses"
    assert not worker.responsive
    transport.script.stuck = False
    await events.aclose()  # type: ignore[attr-defined]


async def test_embeddings_past_the_deadline_still_count_what_the_worker_read() -> None:
    worker, transport, _ = await loaded_worker(Script(step_s=0.2))
    progress = Progress()
    with pytest.raises(RequestTimeout):
        await worker.embed("e1", EmbeddingInput(("a text",)), soon(0.05), progress)
    await asyncio.wait_for(worker.settled(), 2)
    assert "cancel" in transport.sent_types()
    assert progress.usage() == Usage(7, 0)


# -- review findings on issue 12 -------------------------------------------------------------------------------


async def test_a_request_that_cannot_be_written_still_gets_its_408_and_the_worker_is_killed() -> None:
    """A stopped worker's socket buffer is full: writing the request waits no longer than its time limit."""
    worker, transport, process = await loaded_worker()
    worker.cancel_grace_s = 0.1
    transport.script.sends_block = True
    progress = Progress()
    with pytest.raises(RequestTimeout):
        await asyncio.wait_for(drain(worker.generate("r1", INPUTS, soon(0.1), progress)), 2)
    await asyncio.wait_for(worker.settled(), 2)
    assert process.signals == [signal.SIGKILL], (
        "its cancel could not be written either: killed after the grace"
    )
    assert not progress.sent


async def test_a_cancel_that_cannot_be_written_counts_against_the_grace() -> None:
    worker, transport, process = await loaded_worker(Script(tokens=1000))
    worker.cancel_grace_s = 0.1
    events = aiter(worker.generate("r1", INPUTS, soon(0.2)))
    await anext(events)
    transport.script.sends_block = True  # the worker stopped reading its socket
    with pytest.raises(RequestTimeout):
        while True:
            await asyncio.wait_for(anext(events), 2)
    await asyncio.wait_for(worker.settled(), 2)
    assert process.signals == [signal.SIGKILL] and not worker.alive


async def test_two_requests_with_the_same_id_on_one_worker_each_get_their_own_stream() -> None:
    worker, transport, process = await loaded_worker(Script(tokens=3))
    both = await asyncio.wait_for(
        asyncio.gather(
            drain(worker.generate("same", INPUTS, soon(5))), drain(worker.generate("same", INPUTS, soon(5)))
        ),
        2,
    )
    for events in both:
        assert [type(e) for e in events] == [TextDelta, TextDelta, TextDelta, Finished]
    wire_ids = {frame["id"] for frame in transport.sent if frame["type"] == "generate"}
    assert len(wire_ids) == 2, "the worker sees two requests, not one id twice"
    assert worker.alive and process.signals == []


async def test_a_client_reusing_another_requests_id_cannot_get_the_worker_killed() -> None:
    worker, _, process = await loaded_worker(Script(tokens=20, step_s=0.01))
    worker.cancel_grace_s = 0.2
    other = asyncio.create_task(drain(worker.generate("same", INPUTS, soon(5))))
    with pytest.raises(RequestTimeout):
        await drain(worker.generate("same", INPUTS, soon(0.05)))
    await asyncio.wait_for(worker.settled(), 2)
    events = await asyncio.wait_for(other, 2)
    assert isinstance(events[-1], Finished) and events[-1].finish_reason == "length"
    assert worker.alive and process.signals == []


async def test_a_cold_start_cancelled_while_loading_kills_the_half_loaded_process() -> None:
    worker, _, process = idle_worker(Script(loads=False))
    loading = asyncio.create_task(worker.load(OPTIONS, timeout_s=30))
    await asyncio.sleep(0.05)
    loading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(loading, 2)
    assert process.signals == [signal.SIGKILL] and not worker.alive


async def test_a_cancel_pending_on_one_stream_does_not_hold_another_with_the_same_caller_id() -> None:
    worker, _, process = await loaded_worker(Script(tokens=20, step_s=0.01))
    worker.cancel_grace_s = 0.2
    mine, theirs = Progress(), Progress()
    other = asyncio.create_task(drain(worker.generate("same", INPUTS, soon(5), theirs)))
    with pytest.raises(RequestTimeout):
        await drain(worker.generate("same", INPUTS, soon(0.05), mine))
    assert mine.wire_id and theirs.wire_id and mine.wire_id != theirs.wire_id
    assert worker.cancelling(mine.wire_id)  # its confirmation comes at the worker's next step
    assert not worker.cancelling(theirs.wire_id)
    await asyncio.wait_for(worker.settled(mine.wire_id), 2)
    await asyncio.wait_for(other, 2)
    assert worker.alive and process.signals == []
