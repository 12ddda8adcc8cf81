"""Greedy decoding takes the logits' argmax directly; it must pick exactly what llama.cpp's greedy sampler picks."""

from pathlib import Path

import llama_cpp
import pytest

from cirrus.catalog import DEFAULT_MODEL, load_catalog
from cirrus.catalog.artifacts import locate
from cirrus.runtime.llama import ContextShape, LlamaModel, Sampler
from cirrus.runtime.params import SamplingParams

pytestmark = pytest.mark.integration


def test_plain_greedy_is_only_greedy_without_penalties() -> None:
    assert Sampler(SamplingParams(temperature=0), 100).plain_greedy
    assert not Sampler(SamplingParams(temperature=0, repetition_penalty=1.1), 100).plain_greedy
    assert not Sampler(SamplingParams(temperature=0, presence_penalty=0.5), 100).plain_greedy
    assert not Sampler(SamplingParams(temperature=0.7), 100).plain_greedy


def test_argmax_picks_what_llama_cpp_s_greedy_sampler_picks(tmp_path: Path) -> None:
    spec = load_catalog(None, tmp_path).get(DEFAULT_MODEL)
    path = locate(spec.artifact, tmp_path)
    assert path is not None
    model = LlamaModel(str(path), ContextShape(kv_cells=512, sequences=1, threads=2))
    greedy = Sampler(SamplingParams(temperature=0), model.n_vocab)
    tokens = model.tokenize("The capital of France is", True)
    model.decode([(token, i, 0, i == len(tokens) - 1) for i, token in enumerate(tokens)])
    picked = []
    for position in range(len(tokens), len(tokens) + 16):
        expected = int(llama_cpp.llama_sampler_sample(greedy.handle, model._ctx, -1))
        token = model.sample(greedy, -1)
        assert token == expected
        picked.append(token)
        model.decode([(token, position, 0, True)])
    assert len(set(picked)) > 1  # it really generated, not one token over and over
    greedy.close()
    model.close()
