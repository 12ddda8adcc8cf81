"""The arithmetic behind the reports: log-softmax, KL divergence, perplexity, percentiles, cosine."""

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]


def log_softmax(logits: npt.ArrayLike) -> Floats:
    """Row-wise log-probabilities, in float64 so that near-identical distributions compare exactly."""
    values = np.asarray(logits, dtype=np.float64)
    shifted = values - values.max(axis=-1, keepdims=True)
    result: Floats = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return result


def kl_divergence(reference_logprobs: Floats, candidate_logprobs: Floats) -> Floats:
    """KL(reference || candidate) per row, in nats, from log-probabilities."""
    p = np.exp(reference_logprobs)
    result: Floats = (p * (reference_logprobs - candidate_logprobs)).sum(axis=-1)
    return np.maximum(result, 0.0)  # rounding can leave -1e-17 where the rows are equal


def perplexity(token_logprobs: Sequence[float] | Floats) -> float:
    """exp of the mean negative log-likelihood of the observed tokens."""
    values = np.asarray(token_logprobs, dtype=np.float64)
    if values.size == 0:
        raise ValueError("perplexity needs at least one token")
    return math.exp(-float(values.mean()))


def percentile(values: Sequence[float] | Floats, q: float) -> float:
    """The q-th percentile (0-100), linear between the closest ranks; NaN for no values."""
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return math.nan
    return float(np.percentile(array, q))


def cosine(a: npt.ArrayLike, b: npt.ArrayLike) -> Floats:
    """Cosine similarity row by row (or of two vectors)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norms = np.linalg.norm(x, axis=-1) * np.linalg.norm(y, axis=-1)
    result: Floats = (x * y).sum(axis=-1) / np.where(norms == 0, 1.0, norms)
    return result
