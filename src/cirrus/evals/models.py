"""What a GGUF file says about itself, read without the engine: architecture, quantization, size, window."""

from dataclasses import dataclass
from pathlib import Path

from cirrus.evals.errors import EvalError
from cirrus.store.gguf import FILE_TYPES, GGUFError, read_metadata

EMBEDDING_ARCHITECTURES = frozenset({"bert", "nomic-bert", "jina-bert-v2"})


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
