"""LoRA adapters in the worker's scheduler, on the real engine with adapters trained here: each sequence gets its
own adapter (or none) even when sequences of several adapters run at once, and the prefix cache never hands one
adapter's cells to another."""

from collections.abc import Iterator

import pytest

from cirrus.runtime.params import GenerationInput, SamplingParams
from tests.integration.inprocess_engine import Engine, smollm_engine
from tests.integration.lora import UNSEEN_PROMPTS, LoraAdapter, cached_adapter

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    with smollm_engine(tmp_path_factory.mktemp("lora"), slots=8) as running:
        yield running


@pytest.fixture(scope="module")
def robot() -> LoraAdapter:
    return cached_adapter("robot")


def ask(question: str, adapter: LoraAdapter | None) -> GenerationInput:
    return GenerationInput(
        messages=({"role": "user", "content": question},),
        sampling=SamplingParams(max_tokens=8, temperature=0),
        adapter=str(adapter.gguf) if adapter is not None else None,
    )


def test_each_sequence_of_a_mixed_batch_answers_with_its_own_adapter(
    engine: Engine, smollm2_lora: LoraAdapter, robot: LoraAdapter
) -> None:
    requests = {
        f"{name}-{index}": ask(question, adapter)
        for index, question in enumerate(UNSEEN_PROMPTS)
        for name, adapter in (("pirate", smollm2_lora), ("robot", robot), ("base", None))
    }
    answers = engine.run(requests)  # all nine at once: three adapters' sequences take turns
    for request_id, (text, finished) in answers.items():
        assert finished["type"] == "finished", finished
        if request_id.startswith("pirate"):
            assert text.startswith(smollm2_lora.marker), (request_id, text)
        elif request_id.startswith("robot"):
            assert text.startswith(robot.marker), (request_id, text)
        else:
            assert smollm2_lora.marker not in text and robot.marker not in text, (request_id, text)


def test_cells_computed_under_an_adapter_serve_only_that_adapter(
    engine: Engine, smollm2_lora: LoraAdapter, robot: LoraAdapter
) -> None:
    question = "Describe a lighthouse at night in one sentence, please."

    def cached(adapter: LoraAdapter | None) -> int:
        [(_, finished)] = engine.run({"probe": ask(question, adapter)}).values()
        return int(finished["cached_tokens"])

    cached(smollm2_lora)
    prompt_tokens = int(engine.frames[-1]["prompt_tokens"])
    assert (
        cached(smollm2_lora) == prompt_tokens - 1
    )  # all but the last token, which is evaluated for its logits
    # Another adapter, or none, reuses at most the chat template's opening from its own earlier runs: never the
    # question's 12 tokens that only the pirate adapter's runs have written.
    assert cached(robot) < prompt_tokens - 8
    assert cached(None) < prompt_tokens - 8


def test_an_adapter_llama_cpp_cannot_load_fails_its_request_alone(
    engine: Engine, tmp_path_factory: pytest.TempPathFactory
) -> None:
    broken = tmp_path_factory.mktemp("broken") / "adapter.gguf"
    broken.write_bytes(b"GGUF but not really")
    bad = GenerationInput(
        messages=({"role": "user", "content": "Hello"},),
        sampling=SamplingParams(max_tokens=4, temperature=0),
        adapter=str(broken),
    )
    answers = engine.run({"bad": bad, "good": ask("Hello", None)})
    failed = answers["bad"][1]
    assert (failed["type"], failed["kind"], failed["param"]) == ("failed", "invalid_input", "lora")
    assert "LoRA adapter" in str(failed["message"])
    assert answers["good"][1]["type"] == "finished"
