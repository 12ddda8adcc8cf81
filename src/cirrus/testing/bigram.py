"""The weights of a network that is a bigram table: the next token depends on the current token alone.

With every projection that writes into the residual stream set to zero, a transformer's last hidden state is the
final norm of the current token's embedding. Tokens that must be followed get orthonormal embeddings (times
sqrt(width), so an RMS norm leaves them as they are), and the output row of each token that must follow is
its predecessor's direction: after token t the logit of succ(t) is LOGIT and every other logit is 0.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

LOGIT = 16.0  # the chosen successor's logit; every other token's is 0 (up to f16 rounding)
MIN_MARGIN = 8.0  # what the check demands between the successor and the runner-up
NOISE_SCALE = 0.05  # embeddings of tokens that are never followed: as random as write_synthetic's

Matrix = np.ndarray[tuple[int, int], np.dtype[np.float16]]


class ScriptError(ValueError):
    """A script that no bigram machine can write (a repeated token, an end token mid-script, too long)."""


@dataclass(frozen=True)
class BigramWeights:
    embeddings: Matrix  # (n_vocab, width), llama.cpp's token_embd
    output: Matrix  # (n_vocab, width), llama.cpp's output (lm_head)


def bigram_weights(
    successor: Mapping[int, int], n_vocab: int, width: int, rng: np.random.Generator
) -> BigramWeights:
    """Weights that make argmax(logits) after token t be `successor[t]`, for every t in `successor`."""
    followed = sorted(successor)
    if len(followed) > width:
        raise ScriptError(f"{len(followed)} tokens must be followed, more than the embedding width {width}")
    gaussian = rng.standard_normal((width, width))
    basis = np.linalg.qr(gaussian)[0]  # orthonormal columns
    embeddings = NOISE_SCALE * rng.standard_normal((n_vocab, width))
    output = np.zeros((n_vocab, width))
    for column, token in enumerate(followed):
        direction = basis[:, column]
        embeddings[token] = math.sqrt(width) * direction
        output[successor[token]] += LOGIT / math.sqrt(width) * direction
    return BigramWeights(embeddings.astype(np.float16), output.astype(np.float16))


def next_logits(weights: BigramWeights, token: int, norm: np.ndarray, eps: float) -> np.ndarray:
    """What the model computes after `token`: output @ (RMS-normed embedding x the final norm's weight)."""
    embedding = weights.embeddings[token].astype(np.float64)
    hidden = embedding / np.sqrt(np.mean(embedding**2) + eps) * norm
    logits: np.ndarray = weights.output.astype(np.float64) @ hidden
    return logits


def check_margins(weights: BigramWeights, successor: Mapping[int, int], norm: np.ndarray, eps: float) -> None:
    """Raise unless every step's argmax is its successor, ahead of the runner-up by MIN_MARGIN."""
    for token, wanted in successor.items():
        logits = next_logits(weights, token, norm, eps)
        runner_up = float(np.delete(logits, wanted).max())
        if int(logits.argmax()) != wanted or logits[wanted] - runner_up < MIN_MARGIN:
            raise ScriptError(
                f"after token {token} the logit of {wanted} is {logits[wanted]:.2f} against {runner_up:.2f}"
            )
