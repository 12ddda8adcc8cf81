"""Which chat family a model speaks: the catalog's `family`, else the one its template writes (the catalog's
`chat_template`, else the GGUF's own `tokenizer.chat_template`), else none."""

import asyncio
import contextlib
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from cirrus.catalog import ModelSpec
from cirrus.errors import ModelNotInstalled, WorkerStartFailed
from cirrus.families import Family, family, family_of_template
from cirrus.store.gguf import read_metadata

TEMPLATE_KEY = "tokenizer.chat_template"


class ArtifactPaths(Protocol):
    async def artifact_path(self, spec: ModelSpec) -> Path: ...


class Specs(Protocol):
    def get(self, model_id: str) -> ModelSpec: ...


async def model_family(spec: ModelSpec, launcher: ArtifactPaths, catalog: Specs) -> Family | None:
    """A model that is not installed answers through its fallbacks, which share its task and catalog family
    (checked when the catalog loads): the first one whose file is there names the family."""
    if spec.family is not None:
        return family(spec.family)
    if spec.chat_template is not None:
        return family_of_template(spec.chat_template)
    for candidate in (spec, *(catalog.get(model) for model in spec.fallbacks)):
        try:
            path = await launcher.artifact_path(
                candidate
            )  # what a cold start fetches anyway; cached per model
        except (ModelNotInstalled, WorkerStartFailed):  # absent, or a pull that failed: try the fallbacks
            continue
        return await asyncio.to_thread(_gguf_family, str(path), path.stat().st_mtime_ns)
    return None  # nothing installed: the request fails with the model's own 5007 when it starts


@lru_cache(maxsize=64)
def _gguf_family(path: str, mtime_ns: int) -> Family | None:
    """Keyed by modification time too, so a re-packed file is read again."""
    template = read_metadata(Path(path)).get(TEMPLATE_KEY)
    return family_of_template(template) if isinstance(template, str) else None


async def learn_families(specs: Iterable[ModelSpec], launcher: ArtifactPaths, catalog: Specs) -> None:
    """Read these models' families ahead, so that their first requests do not wait for it."""
    for spec in specs:
        with contextlib.suppress(Exception):
            await model_family(spec, launcher, catalog)
