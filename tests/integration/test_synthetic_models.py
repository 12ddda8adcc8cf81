"""Tiny synthetic GLM and Kimi checkpoints (random weights) through the real llama.cpp and a real `cirrus serve`.

They prove the plumbing for each architecture: llama.cpp loads it, the family's chat prompt tokenizes with its
markers as single control tokens, it decodes and samples, and the server answers a chat completion. The text
they generate is random, by design.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import llama_cpp
import numpy as np
import pytest

from cirrus.families import Family, family
from cirrus.runtime.llama import ContextShape, LlamaModel, Sampler
from cirrus.runtime.params import SamplingParams
from cirrus.testing import write_synthetic
from cirrus.testing.architectures import ARCHITECTURES
from tests.integration.server import Server, running_server, write_catalog

pytestmark = pytest.mark.integration

SEED = 7
# synthetic checkpoint -> the family whose chat template it carries
CASES = {
    "glm4": "glm45",
    "glm4moe": "glm45",
    "chatglm": "glm45",
    "glmedge": "glm45",
    "deepseek2": "kimi_k2",
    "deepseek2-lite": "kimi_k2",
    "deepseek2-glm": "glm47",
}
MESSAGES = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather like in Paris?"},
]
GLM_MARKERS = ("[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>")
MARKERS = {
    "glm45": GLM_MARKERS,
    "glm47": (*GLM_MARKERS, "<think>"),
    "kimi_k2": ("<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"),
}
# tokens that must end a turn, by the token family a checkpoint speaks (as llama.cpp's converter marks them)
ENDS = {
    "glm": ("<|endoftext|>", "<|user|>", "<|observation|>"),
    "chatglm": ("<|endoftext|>", "<|user|>"),
    "kimi": ("<|im_end|>",),
}
ASSISTANT = {"glm45": "<|assistant|>", "glm47": "<|assistant|>", "kimi_k2": "<|im_assistant|>"}
GENERATED_TOKENS = 8


def model_id(arch: str) -> str:
    return f"@cf/cirrus-synthetic/{arch}"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("synthetic")
    return {
        arch: write_synthetic(arch, directory / f"{arch}.gguf", template=family(name).template(), seed=SEED)
        for arch, name in CASES.items()
    }


@contextmanager
def loaded(path: Path) -> Iterator[LlamaModel]:
    model = LlamaModel(str(path), ContextShape(kv_cells=256, sequences=2, threads=2))
    try:
        yield model
    finally:
        model.close()


def token_id(model: LlamaModel, text: str) -> int:
    tokens = model.tokenize(text, add_special=False)
    assert len(tokens) == 1, f"{text!r} is not one token: {tokens}"
    return tokens[0]


@pytest.mark.parametrize("arch", list(CASES))
def test_the_family_prompt_tokenizes_with_whole_control_tokens(
    arch: str, checkpoints: dict[str, Path]
) -> None:
    chat = family(CASES[arch])
    with loaded(checkpoints[arch]) as engine:
        assert_prompt_tokens(engine, chat)
        assert all(engine.is_end(token_id(engine, end)) for end in ENDS[ARCHITECTURES[arch].tokens])
        assert not engine.is_end(token_id(engine, ASSISTANT[chat.name]))


def assert_prompt_tokens(engine: LlamaModel, chat: Family) -> None:
    assert engine.metadata("tokenizer.chat_template") == chat.template()
    prompt = chat.render(MESSAGES)
    pieces = [engine.token_text(token) for token in engine.tokenize(prompt, add_special=True)]
    for marker in MARKERS[chat.name]:
        assert marker in prompt
        assert marker in pieces, f"{marker!r} was split: {pieces}"
    assert "Paris" in "".join(pieces).replace("Ġ", " ")  # ordinary text survives as byte-level pieces


@pytest.mark.parametrize("arch", list(CASES))
def test_two_sequences_decode_and_sample(arch: str, checkpoints: dict[str, Path]) -> None:
    with loaded(checkpoints[arch]) as engine:
        generated = generate_two(engine, family(CASES[arch]))
        assert all(0 <= token < engine.n_vocab for token in generated)
    assert len(set(generated)) > 1  # random weights, sampled: not one token over and over


def generate_two(engine: LlamaModel, chat: Family) -> list[int]:
    """Decode the prompt once, share it with a second sequence, then sample both together."""
    prompt = engine.tokenize(chat.render(MESSAGES), add_special=True)
    assert engine.decode([(token, i, 0, i == len(prompt) - 1) for i, token in enumerate(prompt)]) == 0
    engine.share(0, 1, len(prompt))
    sampler = Sampler(SamplingParams(temperature=0.8, seed=SEED), engine.n_vocab)
    last = [engine.sample(sampler, len(prompt) - 1)] * 2
    generated: list[int] = []
    for step in range(GENERATED_TOKENS):
        position = len(prompt) + step
        assert engine.decode([(last[0], position, 0, True), (last[1], position, 1, True)]) == 0
        for index in (0, 1):
            logits = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(engine._ctx, index), (engine.n_vocab,)
            )
            assert np.isfinite(logits).all()
            last[index] = engine.sample(sampler, index)
        generated += last
    sampler.close()
    return generated


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, checkpoints: dict[str, Path]) -> Iterator[Server]:
    directory = tmp_path_factory.mktemp("synthetic-server")
    entries = [
        f'[[models]]\nid = "{model_id(arch)}"\nartifact = {{ path = "{path}" }}\n'
        "context_window = 512\nparallel = 2\n"
        for arch, path in checkpoints.items()
    ]
    catalog = write_catalog(directory / "catalog.toml", "\n".join(entries))
    with running_server(directory, "--catalog", str(catalog), spare_workers="0") as running:
        yield running


@pytest.mark.parametrize("arch", list(CASES))
def test_cirrus_serves_a_chat_completion(server: Server, checkpoints: dict[str, Path], arch: str) -> None:
    with server.client() as client:
        response = client.post(
            "/v1/chat/completions",
            json={"model": model_id(arch), "messages": MESSAGES, "max_tokens": 6, "seed": SEED},
        )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["model"] == model_id(arch)
    # the server rendered the checkpoint's own template and kept its markers whole, as the family renders it
    with loaded(checkpoints[arch]) as engine:
        expected = engine.tokenize(family(CASES[arch]).render(MESSAGES), add_special=True)
    assert body["usage"]["prompt_tokens"] == len(expected)
    assert 1 <= body["usage"]["completion_tokens"] <= 6
    assert body["choices"][0]["finish_reason"] in ("stop", "length")
