"""Pure parts of serving embeddings: packing texts into batches, normalising, reading the texts a client sent,
the memory an instance reserves, and refusing a request made for the other task."""

import math

import pytest

from cirrus.api.embeddings import texts_of
from cirrus.catalog.spec import ArtifactRef, ModelSpec
from cirrus.errors import InvalidInput
from cirrus.pool.memory import estimate_embedding_instance, estimate_instance, longest_text
from cirrus.runtime.embedding import EmbeddingInput, normalised, pack
from cirrus.service import require_task
from cirrus.store.gguf import MetaValue

MINILM_METADATA: dict[str, MetaValue] = {
    "general.architecture": "bert",
    "bert.block_count": 6,
    "bert.embedding_length": 384,
    "bert.attention.head_count": 12,
    "bert.context_length": 512,
}


def test_pack_respects_tokens_and_sequences_and_keeps_order() -> None:
    assert pack([3, 3, 3, 3], max_tokens=6, max_sequences=10) == [[0, 1], [2, 3]]
    assert pack([1] * 5, max_tokens=100, max_sequences=2) == [[0, 1], [2, 3], [4]]
    assert pack([6, 1, 6], max_tokens=6, max_sequences=10) == [[0], [1], [2]]
    assert pack([], max_tokens=6, max_sequences=2) == []


def test_normalised_is_unit_length_and_zero_stays_zero() -> None:
    vector = normalised([3.0, 4.0])
    assert vector == pytest.approx([0.6, 0.8])
    assert math.isclose(math.fsum(v * v for v in vector), 1.0)
    assert normalised([0.0, 0.0]) == [0.0, 0.0]


def test_embedding_input_survives_its_frame() -> None:
    inputs = EmbeddingInput(("a", "b"), "input")
    assert EmbeddingInput.from_frame(inputs.to_frame()) == inputs


def test_texts_of_accepts_a_string_or_a_list() -> None:
    assert texts_of("hi", "text") == EmbeddingInput(("hi",), "text")
    assert texts_of(["a", "b"], "input").texts == ("a", "b")
    assert len(texts_of(["x"] * 100, "text").texts) == 100


@pytest.mark.parametrize(
    ("value", "param", "says"),
    [
        ("", "text", "empty string"),
        ([], "text", "empty list"),
        (["x"] * 101, "text", "lists 101 texts"),
        (True, "text", "not a boolean"),
        (1.5, "text", "not a number"),
        (None, "text", "not null"),
        (["a", 7], "text[1]", "not a number"),
        (["a", "b", ""], "text[2]", "empty string"),
        ([{"a": 1}], "text[0]", "not an object"),
    ],
)
def test_texts_of_names_what_is_wrong(value: object, param: str, says: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        texts_of(value, "text")
    assert caught.value.param == param
    assert f"'{param}'" in caught.value.message and says in caught.value.message


def test_an_embeddings_instance_reserves_attention_not_a_generation_cache() -> None:
    weights = 46_000_000
    estimate = estimate_embedding_instance(MINILM_METADATA, weights, 512)
    plain = estimate_instance(MINILM_METADATA, weights, 512)
    assert estimate.weights == weights
    assert estimate.compute - plain.compute >= 12 * 512 * 512 * 4  # every head's scores over one batch
    assert estimate.total < 200 * 1024 * 1024


def test_longest_text_stays_within_the_trained_context() -> None:
    assert longest_text(MINILM_METADATA, 4096) == 512
    assert longest_text(MINILM_METADATA, 256) == 256
    assert longest_text({}, 1024) == 1024


def test_a_request_for_the_other_task_names_the_models_task() -> None:
    spec = ModelSpec(id="@cf/x/minilm", task="text-embeddings", artifact=ArtifactRef(path="/nowhere"))
    require_task(spec, "text-embeddings")
    with pytest.raises(InvalidInput) as caught:
        require_task(spec, "text-generation")
    assert "@cf/x/minilm is a text-embeddings model" in caught.value.message
    assert caught.value.param == "model"
