"""all-MiniLM-L6-v2 for bench/rag.py: the GGUF the tests convert, cached, run in this process by the worker's own
embeddings engine (cirrus.runtime.encoder.EmbeddingEngine, with the context a worker gives it), so vectors and
their cost are the server's, without the HTTP hop, the pool's queue and the worker's pipe.
"""

import fcntl
import hashlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.integration.minilm import convert_minilm, minilm_folder

from cirrus.config import default_cache_dir
from cirrus.runtime.embedding import BATCH_SEQUENCES, EmbeddingInput
from cirrus.runtime.encoder import EmbeddingEngine
from cirrus.runtime.frames import Frame
from cirrus.runtime.llama import ContextShape, LlamaModel

CONTEXT_TOKENS = 4096  # the catalog's default context window, which a worker's embeddings context gets


class MiniLM:
    def __init__(self, engine: EmbeddingEngine) -> None:
        self._engine = engine

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The texts' unit vectors, as an `embed` frame to a worker gives them."""
        vectors, _ = self._engine.embed(EmbeddingInput(tuple(texts)))
        return vectors


@contextmanager
def minilm(threads: int) -> Iterator[MiniLM]:
    shape = ContextShape(
        kv_cells=CONTEXT_TOKENS,
        sequences=BATCH_SEQUENCES,
        threads=threads,
        batch_tokens=CONTEXT_TOKENS,
        embeddings=True,
    )
    model = LlamaModel(str(cached_gguf()), shape)
    try:
        max_tokens = min(CONTEXT_TOKENS, model.trained_context, model.batch_tokens)
        yield MiniLM(EmbeddingEngine(model, max_tokens, _ignored, lambda _: False))
    finally:
        model.close()


def cached_gguf() -> Path:
    """The F16 GGUF under ~/.cache/cirrus/artifacts, converted on first use (about a minute) per checkpoint."""
    folder = default_cache_dir() / "artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"minilm-f16-{_checkpoint_key()}.gguf"
    with (folder / "minilm-f16.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not path.is_file():
            scratch = Path(tempfile.mkdtemp(dir=folder, prefix=".minilm-"))
            try:
                os.replace(convert_minilm(scratch / "minilm.gguf"), path)
            finally:
                for leftover in scratch.iterdir():
                    leftover.unlink()
                scratch.rmdir()
    return path


def _checkpoint_key() -> str:
    weights = sorted(minilm_folder().glob("*.safetensors"))
    identity = "|".join(f"{path.name}:{path.stat().st_size}" for path in weights)
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def _ignored(frame: Frame) -> None:
    return None
