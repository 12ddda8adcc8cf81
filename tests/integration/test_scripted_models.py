"""Scripted checkpoints through the real llama.cpp: greedy decoding after the family's chat prompt writes the
script token by token, then ends, and the family's output parsers split it into reasoning, answer and tool call.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from cirrus.families import family, parse_output
from cirrus.runtime.llama import ContextShape, LlamaModel, Sampler
from cirrus.runtime.params import SamplingParams
from cirrus.testing.scripted import (
    ANSWER,
    REASONING,
    SCRIPTS,
    TOOL_REASONING,
    WEATHER_CALL,
    WEATHER_TOOL,
    write_scripted,
)

pytestmark = pytest.mark.integration

# (architecture, family whose template and script it carries)
MODELS = [("glm4moe", "glm45"), ("deepseek2", "kimi_k2"), ("deepseek2-glm", "glm47"), ("glm4", "glm45")]
CASES = [(arch, name, kind) for arch, name in MODELS for kind in ("answer", "tool_call")]
MESSAGES = [{"role": "user", "content": "What is the weather like in Paris?"}]
SLACK = 4  # tokens decoded past the script's length, to see that it really stopped


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    directory = tmp_path_factory.mktemp("scripted")
    return {
        (arch, kind): write_scripted(
            arch,
            directory / f"{arch}-{kind}.gguf",
            template=family(name).template(),
            script=SCRIPTS[name][kind],
        )
        for arch, name, kind in CASES
    }


@contextmanager
def loaded(path: Path) -> Iterator[LlamaModel]:
    model = LlamaModel(str(path), ContextShape(kv_cells=512, sequences=1, threads=2))
    try:
        yield model
    finally:
        model.close()


def greedy(engine: LlamaModel, prompt: str, limit: int) -> list[int]:
    """Greedy decoding until an end-of-generation token (included) or `limit` tokens."""
    tokens = engine.tokenize(prompt, add_special=True)
    assert engine.decode([(token, i, 0, i == len(tokens) - 1) for i, token in enumerate(tokens)]) == 0
    sampler = Sampler(SamplingParams(temperature=0.0), engine.n_vocab)
    written: list[int] = []
    try:
        while len(written) < limit:
            written.append(engine.sample(sampler, -1))
            if engine.is_end(written[-1]):
                break
            assert engine.decode([(written[-1], len(tokens) + len(written) - 1, 0, True)]) == 0
    finally:
        sampler.close()
    return written


def run(path: Path, name: str, kind: str, enable_thinking: bool | None = None) -> tuple[list[str], bool]:
    """The pieces written (special tokens rendered) and whether the last one ends generation."""
    tools = [WEATHER_TOOL] if kind == "tool_call" else None
    prompt = family(name).render(MESSAGES, tools, enable_thinking)
    with loaded(path) as engine:
        written = greedy(engine, prompt, len(SCRIPTS[name][kind]) + SLACK)
        return [engine.piece(token).decode("utf-8") for token in written], engine.is_end(written[-1])


@pytest.mark.parametrize(("arch", "name", "kind"), CASES)
def test_greedy_decoding_writes_the_script_then_ends(
    arch: str, name: str, kind: str, checkpoints: dict[tuple[str, str], Path]
) -> None:
    pieces, ended = run(checkpoints[arch, kind], name, kind)
    assert pieces == list(SCRIPTS[name][kind])
    assert ended
    output = parse_output(family(name).output_parser([WEATHER_TOOL]), "".join(pieces[:-1]))
    if kind == "answer":
        assert (output.reasoning, output.content, output.tool_calls) == (REASONING, ANSWER, ())
    else:
        assert (output.reasoning, output.content, output.malformed) == (TOOL_REASONING, "", False)
        assert [(call.name, call.arguments) for call in output.tool_calls] == [
            (WEATHER_CALL[0], '{"city": "Paris"}')
        ]


@pytest.mark.parametrize(("arch", "name"), [("glm4moe", "glm45"), ("deepseek2-glm", "glm47")])
def test_with_thinking_off_glm_answers_without_reasoning(
    arch: str, name: str, checkpoints: dict[tuple[str, str], Path]
) -> None:
    script = SCRIPTS[name]["answer"]
    pieces, ended = run(checkpoints[arch, "answer"], name, "answer", enable_thinking=False)
    assert pieces == list(script[script.index("</think>") + 1 :])
    assert ended
    output = parse_output(family(name).output_parser(enable_thinking=False), "".join(pieces[:-1]))
    assert (output.reasoning, output.content) == ("", ANSWER)
