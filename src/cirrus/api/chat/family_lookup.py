"""Which chat family a model speaks: the catalog's `family`, else the one its template writes (the catalog's
`chat_template`, else the GGUF's own `tokenizer.chat_template`), else none."""

import asyncio
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from cirrus.catalog import ModelSpec
from cirrus.families import Family, family, family_of_template
from cirrus.store.gguf import read_metadata

TEMPLATE_KEY = "tokenizer.chat_template"


class ArtifactPaths(Protocol):
    async def artifact_path(self, spec: ModelSpec) -> Path: ...


async def model_family(spec: ModelSpec, launcher: ArtifactPaths) -> Family | None:
    if spec.family is not None:
        return family(spec.family)
    if spec.chat_template is not None:
        return family_of_template(spec.chat_template)
    path = await launcher.artifact_path(spec)  # what a cold start fetches anyway; cached per model
    return await asyncio.to_thread(_gguf_family, str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=64)
def _gguf_family(path: str, mtime_ns: int) -> Family | None:
    """Keyed by modification time too, so a re-packed file is read again."""
    template = read_metadata(Path(path)).get(TEMPLATE_KEY)
    return family_of_template(template) if isinstance(template, str) else None
