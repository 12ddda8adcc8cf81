"""What a GGUF file says about itself, read without the engine: architecture, quantization, size, window."""

from dataclasses import dataclass
from pathlib import Path

from cirrus.evals.errors import EvalError
from cirrus.store.gguf import GGUFError, read_metadata

EMBEDDING_ARCHITECTURES = frozenset({"bert", "nomic-bert", "jina-bert-v2"})
# llama.cpp's llama_ftype values, as general.file_type records them
FILE_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    32: "BF16",
}


@dataclass(frozen=True)
class ModelFile:
    path: Path
    architecture: str
    quantization: str
    size_bytes: int
    context_window: int | None

    @property
    def is_embedding(self) -> bool:
        return self.architecture in EMBEDDING_ARCHITECTURES


def inspect_model(path: Path) -> ModelFile:
    if not path.is_file():
        raise EvalError(f"model file not found: {path}")
    try:
        meta = read_metadata(path)
    except GGUFError as exc:
        raise EvalError(f"{path} is not a readable GGUF model: {exc}") from None
    architecture = str(meta.get("general.architecture", "unknown"))
    window = meta.get(f"{architecture}.context_length")
    file_type = meta.get("general.file_type")
    quantization = FILE_TYPES.get(file_type, f"type {file_type}") if isinstance(file_type, int) else "unknown"
    return ModelFile(
        path, architecture, quantization, path.stat().st_size, window if isinstance(window, int) else None
    )
