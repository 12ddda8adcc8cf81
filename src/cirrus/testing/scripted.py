"""Tiny checkpoints that write a chosen text: after the family's chat prompt, greedy decoding yields the script.

The network is a bigram machine (`bigram.py`): every projection that writes into the residual stream is zero,
so the next token depends on the current one alone. Each text of the script becomes one token (a family marker
is its control token; other text gets a whole-piece token of its own), the token the chat prompt ends with is
chained to the script's first token, and the script's last token to an end-of-generation token. So a script
cannot repeat a token: the same token would need two successors.

A prompt that ends in a token the script writes continues the script from there: with thinking off, GLM's
prompt ends with `</think>`, and a reasoning script's model answers without reasoning.

A `Fallback` gives one scripted token a second choice: its logit is SECOND_LOGIT where the script's own next
token has LOGIT, so greedy decoding writes the fallback's script only where a grammar forbids the first choice.
"""

import dataclasses
from collections.abc import Iterator, Sequence
from itertools import pairwise
from pathlib import Path

import gguf
import numpy as np

from cirrus.families.render import render_template
from cirrus.testing.architectures import RMS_EPS, Architecture, TensorSpec
from cirrus.testing.bigram import (
    BigramWeights,
    ScriptError,
    bigram_weights,
    check_margins,
    next_logits,
)
from cirrus.testing.scripts import (
    ANSWER,
    FORCED_CALLS,
    GLM45_ANSWER,
    GLM45_TOOL_CALL,
    GLM47_ANSWER,
    GLM47_TOOL_CALL,
    KIMI_K2_ANSWER,
    KIMI_K2_TOOL_CALL,
    REASONING,
    SCRIPTS,
    TOOL_REASONING,
    WEATHER_CALL,
    WEATHER_TOOL,
    Fallback,
)
from cirrus.testing.synthetic import WEIGHT_SCALE, architecture, write_gguf
from cirrus.testing.vocab import TOKEN_FAMILIES, TokenFamily, Vocabulary, byte_alphabet, vocabulary

__all__ = [
    "ANSWER",
    "FORCED_CALLS",
    "GLM45_ANSWER",
    "GLM45_TOOL_CALL",
    "GLM47_ANSWER",
    "GLM47_TOOL_CALL",
    "KIMI_K2_ANSWER",
    "KIMI_K2_TOOL_CALL",
    "REASONING",
    "SCRIPTS",
    "TOOL_REASONING",
    "WEATHER_CALL",
    "WEATHER_TOOL",
    "Fallback",
    "ScriptError",
    "end_tokens",
    "prompt_endings",
    "scripted_tokens",
    "token_string",
    "write_scripted",
]

# Tensors that add into the residual stream, by name: attention output (MLA's too), FFN, expert and shared-expert
# down projections. Zeroed, they leave each layer's output equal to its input.
_RESIDUAL_WRITERS = ("attn_output.", "ffn_down.", "ffn_down_exps.", "ffn_down_shexp.")
_PROBE = [{"role": "user", "content": "Hi"}]
_THINKING_ON_THEN_OFF: tuple[dict[str, bool], ...] = ({}, {"enable_thinking": False})
SECOND_LOGIT = 6.0  # a fallback's first token after its `after` token: below LOGIT, above every other logit
SECOND_MARGIN = 4.0  # what the check demands on either side of it


def write_scripted(
    arch: str,
    path: Path,
    *,
    template: str,
    script: Sequence[str],
    seed: int = 0,
    fallback: Fallback | None = None,
) -> Path:
    """Write a checkpoint of `arch` whose greedy output after a prompt rendered by `template` is `script`
    (token texts), then an end-of-generation token: the script's last text when it is one of the family's end
    tokens, else the family's eos. With a `fallback`, its script is the second choice after its `after` token.
    Raises ScriptError when no bigram machine can write it. Returns `path`."""
    spec = architecture(arch)
    family = TOKEN_FAMILIES[spec.tokens]
    texts = scripted_tokens(spec.tokens, script)
    endings = prompt_endings(template, family)
    branch = _branch_tokens(spec.tokens, texts, endings, fallback) if fallback else ()
    vocab = _with_pieces(vocabulary(family), (*texts, *branch))
    successor = _chain(vocab, texts, endings)
    successor.update(pairwise(_ids(vocab, branch)))
    width = _embedding_width(spec, len(vocab.tokens))
    rng = np.random.default_rng(seed)
    weights = bigram_weights(successor, len(vocab.tokens), width, rng)
    if fallback:
        after, second = _ids(vocab, (fallback.after, branch[0]))
        weights = _with_second_choice(weights, successor, after, second, width)
    check_margins(weights, successor, np.ones(width), RMS_EPS)
    description = f"a bigram machine shaped like {spec.describes} that writes one fixed script"
    tensors = _tensors(spec, len(vocab.tokens), weights, rng)
    write_gguf(path, spec, vocab, f"cirrus-scripted-{spec.name}", description, template, tensors)
    return path


def scripted_tokens(token_family: str, script: Sequence[str]) -> tuple[str, ...]:
    """What the model writes: the script's texts, then an end token unless the script ends with one."""
    family = TOKEN_FAMILIES[token_family]
    ends = end_tokens(family)
    if not script or any(not text for text in script):
        raise ScriptError("a script is a non-empty list of non-empty token texts")
    early = [text for text in script[:-1] if text in ends]
    if early:
        raise ScriptError(f"{early[0]!r} ends generation, so only the script's last token may be it")
    texts = tuple(script) if script[-1] in ends else (*script, family.eos)
    repeated = sorted({text for text in texts if texts.count(text) > 1})
    if repeated:
        raise ScriptError(f"a bigram machine cannot repeat a token, and the script repeats {repeated}")
    return texts


def end_tokens(family: TokenFamily) -> tuple[str, ...]:
    return tuple(token for token in (family.eos, family.eot, family.eom) if token is not None)


def prompt_endings(template: str, family: TokenFamily) -> tuple[str, ...]:
    """The marker the template's generation prompt ends with: by default first, then with thinking off."""
    endings: list[str] = []
    for switches in _THINKING_ON_THEN_OFF:
        prompt = render_template(template, _PROBE, None, **switches)
        found = [marker for marker in family.specials if prompt.endswith(marker)]
        if not found:
            raise ScriptError(f"the chat template's generation prompt ends with no marker: {prompt[-40:]!r}")
        ending = max(found, key=len)
        if ending not in endings:
            endings.append(ending)
    return tuple(endings)


def token_string(text: str, family: TokenFamily) -> str:
    """How `text` is spelled in the vocabulary: a marker as itself, other text in byte-level BPE's alphabet."""
    if text in family.specials:
        return text
    alphabet = byte_alphabet()
    return "".join(alphabet[byte] for byte in text.encode("utf-8"))


def _with_pieces(base: Vocabulary, texts: Sequence[str]) -> Vocabulary:
    """The family's vocabulary plus one ordinary token for each text it has no single token for."""
    known = set(base.tokens)
    added = [s for s in dict.fromkeys(token_string(t, base.family) for t in texts) if s not in known]
    return dataclasses.replace(
        base,
        tokens=(*base.tokens, *added),
        types=(*base.types, *(int(gguf.TokenType.NORMAL),) * len(added)),
    )


def _chain(vocab: Vocabulary, texts: Sequence[str], endings: Sequence[str]) -> dict[int, int]:
    """successor[token] for the prompt's last token(s) and every scripted token but the end."""
    ids = _ids(vocab, texts)
    primary, *others = endings
    if primary in texts:
        raise ScriptError(f"the prompt ends with {primary!r}, so the script cannot write it")
    successor = dict(pairwise(ids))
    for ending in (primary, *(e for e in others if e not in texts)):
        successor[vocab.id_of(ending)] = ids[0]
    return successor


def _ids(vocab: Vocabulary, texts: Sequence[str]) -> list[int]:
    return [vocab.id_of(token_string(text, vocab.family)) for text in texts]


def _branch_tokens(
    token_family: str, texts: Sequence[str], endings: Sequence[str], fallback: Fallback
) -> tuple[str, ...]:
    """The fallback's texts with their end token; none may be followed elsewhere (a token has one successor)."""
    if fallback.after not in texts[:-1]:
        raise ScriptError(f"the fallback follows {fallback.after!r}, which the script does not write")
    branch = scripted_tokens(token_family, fallback.script)
    shared = sorted(set(branch[:-1]) & {*texts, *endings})
    if shared:
        raise ScriptError(f"a token has one successor, and the fallback writes {shared} as well")
    return branch


def _with_second_choice(
    weights: BigramWeights, successor: dict[int, int], after: int, second: int, width: int
) -> BigramWeights:
    """Give `second` SECOND_LOGIT after `after` (whose embedding is sqrt(width) times its direction); raise
    unless it then trails the first choice and leads every other token by SECOND_MARGIN."""
    output = weights.output.astype(np.float64)
    output[second] += SECOND_LOGIT / width * weights.embeddings[after].astype(np.float64)
    chosen = dataclasses.replace(weights, output=output.astype(np.float16))
    logits = next_logits(chosen, after, np.ones(width), RMS_EPS)
    runner_up = float(np.delete(logits, [successor[after], second]).max())
    if (
        logits[successor[after]] - logits[second] < SECOND_MARGIN
        or logits[second] - runner_up < SECOND_MARGIN
    ):
        raise ScriptError(f"after token {after} the fallback {second} is not a clear second choice")
    return chosen


def _embedding_width(spec: Architecture, n_vocab: int) -> int:
    embedding = next(t for t in spec.tensors(n_vocab) if t.name == "token_embd.weight")
    return embedding.shape[0]


def _tensors(
    spec: Architecture, n_vocab: int, weights: BigramWeights, rng: np.random.Generator
) -> Iterator[tuple[str, np.ndarray]]:
    fixed = {"token_embd.weight": weights.embeddings, "output.weight": weights.output}
    for tensor in spec.tensors(n_vocab):
        if tensor.name in fixed:
            yield tensor.name, fixed[tensor.name]
        else:
            yield tensor.name, _values(tensor, rng)


def _values(tensor: TensorSpec, rng: np.random.Generator) -> np.ndarray:
    """Norms at exactly 1, residual writers at 0, everything else random as in write_synthetic (f16 matrices)."""
    shape = tuple(reversed(tensor.shape))  # numpy's order is outermost first
    if tensor.kind == "norm":
        return np.ones(shape, dtype=np.float32)
    matrix_type = np.float16 if len(shape) > 1 else np.float32
    if any(f".{writer}" in tensor.name for writer in _RESIDUAL_WRITERS):
        return np.zeros(shape, dtype=matrix_type)
    noise = rng.standard_normal(shape, dtype=np.float32)
    if tensor.kind == "bias":
        return (0.01 * noise).astype(np.float32)
    return (WEIGHT_SCALE * noise).astype(matrix_type)
