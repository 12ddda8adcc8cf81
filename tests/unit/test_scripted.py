"""Scripted checkpoints: the bigram construction, read back from the written file and run in numpy."""

from pathlib import Path

import gguf
import numpy as np
import pytest

from cirrus.families import family, parse_output
from cirrus.testing.architectures import ARCHITECTURES, RMS_EPS
from cirrus.testing.bigram import BigramWeights, bigram_weights, check_margins
from cirrus.testing.scripted import (
    ANSWER,
    REASONING,
    SCRIPTS,
    TOOL_REASONING,
    WEATHER_CALL,
    WEATHER_TOOL,
    ScriptError,
    prompt_endings,
    scripted_tokens,
    token_string,
    write_scripted,
)
from cirrus.testing.vocab import TOKEN_FAMILIES

# family -> (an architecture that speaks its tokens, its token family)
FAMILY_ARCH = {
    "glm45": ("glm4moe", "glm"),
    "glm47": ("deepseek2-glm", "glm"),
    "kimi_k2": ("deepseek2", "kimi"),
}
CASES = [(name, kind) for name in SCRIPTS for kind in ("answer", "tool_call")]


def write(name: str, script: tuple[str, ...] | list[str], path: Path, seed: int = 0) -> Path:
    arch = FAMILY_ARCH[name][0]
    return write_scripted(arch, path, template=family(name).template(), script=script, seed=seed)


def tensor(reader: gguf.GGUFReader, name: str) -> np.ndarray:
    return np.asarray(next(t for t in reader.tensors if t.name == name).data, dtype=np.float64)


def greedy_in_numpy(path: Path, start: str, limit: int) -> list[str]:
    """What the file's bigram machine writes after `start`, computed from its tensors as llama.cpp would."""
    reader = gguf.GGUFReader(path)
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    embeddings, output = tensor(reader, "token_embd.weight"), tensor(reader, "output.weight")
    norm = tensor(reader, "output_norm.weight")
    written, token = [], tokens.index(start)
    for _ in range(limit):
        hidden = embeddings[token] / np.sqrt(np.mean(embeddings[token] ** 2) + RMS_EPS) * norm
        token = int((output @ hidden).argmax())
        written.append(tokens[token])
    return written


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_the_written_bigram_machine_writes_the_script_after_the_prompt(
    name: str, kind: str, tmp_path: Path
) -> None:
    script = SCRIPTS[name][kind]
    tokens = TOKEN_FAMILIES[FAMILY_ARCH[name][1]]
    path = write(name, script, tmp_path / "m.gguf")
    start = prompt_endings(family(name).template(), tokens)[0]
    expected = [token_string(text, tokens) for text in script]
    assert greedy_in_numpy(path, start, len(script)) == expected


@pytest.mark.parametrize("arch", list(ARCHITECTURES))
def test_every_tensor_that_writes_into_the_residual_stream_is_zero(arch: str, tmp_path: Path) -> None:
    name = "kimi_k2" if ARCHITECTURES[arch].tokens == "kimi" else "glm45"
    script = SCRIPTS[name]["answer"]
    path = write_scripted(arch, tmp_path / "m.gguf", template=family(name).template(), script=script)
    reader = gguf.GGUFReader(path)
    writers = [t for t in reader.tensors if "attn_output" in t.name or "ffn_down" in t.name]
    blocks = {t.name.split(".")[1] for t in reader.tensors if t.name.startswith("blk.")}
    assert {t.name.split(".")[1] for t in writers} == blocks  # every block has them
    assert all(not np.asarray(t.data).any() for t in writers)


def test_glm_with_thinking_off_continues_after_the_reasoning(tmp_path: Path) -> None:
    glm = TOKEN_FAMILIES["glm"]
    script = SCRIPTS["glm45"]["answer"]
    path = write("glm45", script, tmp_path / "m.gguf")
    endings = prompt_endings(family("glm45").template(), glm)
    assert endings == ("<|assistant|>", "</think>")
    after = list(script[script.index("</think>") + 1 :])
    assert greedy_in_numpy(path, "</think>", len(after)) == [token_string(text, glm) for text in after]


@pytest.mark.parametrize(
    ("name", "endings"),
    [
        ("glm45", ("<|assistant|>", "</think>")),
        ("glm47", ("<think>", "</think>")),
        ("kimi_k2", ("<|im_middle|>",)),
    ],
)
def test_the_prompt_ending_is_found_with_thinking_on_then_off(name: str, endings: tuple[str, ...]) -> None:
    tokens = TOKEN_FAMILIES[FAMILY_ARCH[name][1]]
    assert prompt_endings(family(name).template(), tokens) == endings


def test_each_text_is_one_token_markers_stay_control_tokens(tmp_path: Path) -> None:
    script = SCRIPTS["glm45"]["tool_call"]
    reader = gguf.GGUFReader(write("glm45", script, tmp_path / "m.gguf"))
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    types = list(reader.fields["tokenizer.ggml.token_type"].contents())
    glm = TOKEN_FAMILIES["glm"]
    for text in script:
        kind = types[tokens.index(token_string(text, glm))]
        assert kind == (gguf.TokenType.CONTROL if text in glm.specials else gguf.TokenType.NORMAL)
    assert "get_weatherĊ" in tokens and "</arg_key>Ċ" in tokens  # byte-level spelling of "\n"
    assert len(set(tokens)) == len(tokens)  # llama.cpp refuses a vocabulary with a repeated token


def test_the_family_eos_follows_a_script_without_an_end() -> None:
    assert scripted_tokens("kimi", ["Hi"]) == ("Hi", "<|im_end|>")
    assert scripted_tokens("glm", ["Hi", "<|observation|>"]) == ("Hi", "<|observation|>")


@pytest.mark.parametrize(
    ("script", "problem"),
    [
        (["A", " b", "A"], "repeat"),
        (["A", "<|user|>", "b"], "only the script's last"),
        ([], "non-empty"),
        (["A", ""], "non-empty"),
    ],
)
def test_a_script_no_bigram_machine_can_write_is_refused(script: list[str], problem: str) -> None:
    with pytest.raises(ScriptError, match=problem):
        scripted_tokens("glm", script)


def test_a_script_that_writes_the_prompt_ending_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="prompt ends with '<think>'"):
        write("glm47", ["<think>", "Hi"], tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


def test_a_script_longer_than_the_embedding_width_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="more than the embedding width"):
        write("kimi_k2", [f"w{index}" for index in range(80)], tmp_path / "m.gguf")


def test_a_template_whose_prompt_ends_in_plain_text_is_refused(tmp_path: Path) -> None:
    template = "{% for m in messages %}{{ m.content }}{% endfor %}Answer:"
    with pytest.raises(ScriptError, match="ends with no marker"):
        write_scripted("glm4", tmp_path / "m.gguf", template=template, script=["Hi"])


def test_the_same_seed_writes_the_same_bytes(tmp_path: Path) -> None:
    script = SCRIPTS["kimi_k2"]["answer"]
    first = write("kimi_k2", script, tmp_path / "a.gguf", seed=3).read_bytes()
    assert first == write("kimi_k2", script, tmp_path / "b.gguf", seed=3).read_bytes()
    assert first != write("kimi_k2", script, tmp_path / "c.gguf", seed=4).read_bytes()


def test_bigram_weights_give_each_successor_a_clear_margin() -> None:
    successor = {3: 7, 7: 1, 1: 9, 9: 0}
    weights = bigram_weights(successor, n_vocab=12, width=8, rng=np.random.default_rng(0))
    check_margins(weights, successor, np.ones(8), RMS_EPS)
    broken = weights.output.copy()
    broken[[7, 2]] = broken[[2, 7]]  # token 7's row now belongs to token 2
    with pytest.raises(ScriptError, match="after token 3"):
        check_margins(BigramWeights(weights.embeddings, broken), successor, np.ones(8), RMS_EPS)


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_the_ready_made_scripts_parse_as_the_family_writes_them(name: str) -> None:
    chat = family(name)
    answer = parse_output(chat.output_parser(), "".join(SCRIPTS[name]["answer"][:-1]))
    assert (answer.reasoning, answer.content, answer.tool_calls) == (REASONING, ANSWER, ())
    call = parse_output(chat.output_parser([WEATHER_TOOL]), "".join(SCRIPTS[name]["tool_call"][:-1]))
    assert (call.reasoning, call.content, call.malformed) == (TOOL_REASONING, "", False)
    assert [(c.name, c.arguments) for c in call.tool_calls] == [(WEATHER_CALL[0], '{"city": "Paris"}')]
