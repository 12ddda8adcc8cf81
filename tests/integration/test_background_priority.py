"""Batch work yields the engine's steps to an interactive prompt, on the real engine: while an interactive
request's prompt is evaluated, a running background sequence writes nothing; it goes on afterwards."""

from collections.abc import Iterator

import pytest

from cirrus.runtime.params import GenerationInput, SamplingParams
from tests.integration.inprocess_engine import Engine, smollm_engine

pytestmark = pytest.mark.integration

LONG_QUESTION = "Explain, step by step and with examples, how a bicycle's gears work. " * 40  # several steps


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with smollm_engine(tmp_path_factory.mktemp("priority"), slots=2) as running:
        yield running


def request(text: str, max_tokens: int, background: bool) -> GenerationInput:
    sampling = SamplingParams(max_tokens=max_tokens, temperature=0)
    return GenerationInput(
        messages=({"role": "user", "content": text},), sampling=sampling, background=background
    )


def test_a_background_sequence_sits_out_the_steps_of_an_interactive_prompt(engine: Engine) -> None:
    engine.frames.clear()
    engine.submit("batch", request("Count from 1 to 200.", 120, background=True))
    while not any(f["id"] == "batch" and f["type"] == "text" for f in engine.frames):
        engine.scheduler.step()  # the background answer is under way
    engine.submit("user", request(LONG_QUESTION, 4, background=False))
    steps = 0
    while not any(f["id"] == "user" and f["type"] == "text" for f in engine.frames):
        engine.scheduler.step()
        steps += 1
    while engine.scheduler.busy:
        engine.scheduler.step()
    order = [(f["id"], f["type"]) for f in engine.frames if f["type"] in ("started", "text")]
    started = order.index(("user", "started"))
    first_text = order.index(("user", "text"))
    assert steps > 1  # the interactive prompt took several steps...
    assert ("batch", "text") not in order[started:first_text]  # ...and the background sequence sat them out
    assert order.count(("batch", "text")) > order[:started].count(("batch", "text"))  # then it went on
