"""Synthetic checkpoints: what each file declares, that it is reproducible, and that its vocabulary is sound."""

from pathlib import Path

import gguf
import pytest

from cirrus.store.gguf import read_metadata
from cirrus.testing import UnknownArchitecture, write_synthetic
from cirrus.testing.architectures import ARCHITECTURES
from cirrus.testing.vocab import TOKEN_FAMILIES, byte_alphabet, vocabulary

TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
MAX_BYTES = 10 * 1024 * 1024


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_each_checkpoint_declares_its_architecture_tokenizer_and_template(name: str, tmp_path: Path) -> None:
    spec = ARCHITECTURES[name]
    path = write_synthetic(name, tmp_path / f"{name}.gguf", template=TEMPLATE)
    metadata = read_metadata(path)
    family = TOKEN_FAMILIES[spec.tokens]
    assert metadata["general.architecture"] == spec.arch
    assert metadata["tokenizer.ggml.model"] == "gpt2"
    assert metadata["tokenizer.ggml.pre"] == family.pre_tokenizer
    assert metadata["tokenizer.chat_template"] == TEMPLATE
    assert metadata[f"{spec.arch}.vocab_size"] == len(vocabulary(family).tokens)
    assert metadata["tokenizer.ggml.add_bos_token"] is False
    assert 0 < path.stat().st_size < MAX_BYTES


def test_the_same_seed_writes_the_same_bytes_and_another_seed_other_weights(tmp_path: Path) -> None:
    first = write_synthetic("deepseek2", tmp_path / "a.gguf", template=TEMPLATE, seed=3).read_bytes()
    again = write_synthetic("deepseek2", tmp_path / "b.gguf", template=TEMPLATE, seed=3).read_bytes()
    other = write_synthetic("deepseek2", tmp_path / "c.gguf", template=TEMPLATE, seed=4).read_bytes()
    assert first == again
    assert first != other and len(first) == len(other)


def test_no_template_means_no_chat_template_key(tmp_path: Path) -> None:
    metadata = read_metadata(write_synthetic("glm4", tmp_path / "glm4.gguf", template=None))
    assert "tokenizer.chat_template" not in metadata


def test_an_unknown_architecture_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(UnknownArchitecture, match=r"known: .*glm4moe"):
        write_synthetic("llama", tmp_path / "x.gguf", template=None)
    assert not (tmp_path / "x.gguf").exists()


def test_glm4moe_carries_its_nextn_layer_after_the_transformer_layers(tmp_path: Path) -> None:
    reader = gguf.GGUFReader(write_synthetic("glm4moe", tmp_path / "m.gguf", template=None))
    names = {tensor.name for tensor in reader.tensors}
    blocks = int(reader.fields["glm4moe.block_count"].contents())
    nextn = int(reader.fields["glm4moe.nextn_predict_layers"].contents())
    assert f"blk.{blocks - nextn}.nextn.eh_proj.weight" in names
    assert f"blk.{blocks - nextn - 1}.nextn.eh_proj.weight" not in names
    assert "blk.0.ffn_gate.weight" in names and "blk.1.ffn_gate_exps.weight" in names  # dense lead, then MoE


@pytest.mark.parametrize("family_name", list(TOKEN_FAMILIES))
def test_the_vocabulary_covers_every_byte_and_keeps_specials_whole(family_name: str) -> None:
    family = TOKEN_FAMILIES[family_name]
    vocab = vocabulary(family)
    assert len(set(vocab.tokens)) == len(vocab.tokens)
    assert set(byte_alphabet().values()) <= set(vocab.tokens)
    for merge in vocab.merges:
        left, right = merge.split(" ")
        assert {left, right, left + right} <= set(vocab.tokens)
    for special in family.specials:
        assert vocab.types[vocab.id_of(special)] == gguf.TokenType.CONTROL
    normal = [t for t, kind in zip(vocab.tokens, vocab.types, strict=True) if kind == gguf.TokenType.NORMAL]
    assert len(normal) == len(vocab.tokens) - len(family.specials)
    assert {family.bos, family.eos} <= set(family.specials)
