"""Which chat family a model speaks: the catalog's `family`, else the one its template writes (the catalog's
`chat_template`, else the GGUF's own `tokenizer.chat_template`), else none."""

from functools import lru_cache
from typing import Protocol

from cirrus.catalog import ModelSpec
from cirrus.errors import ModelNotInstalled, WorkerStartFailed
from cirrus.families import Family, family, family_of_template
from cirrus.store.gguf import CHAT_TEMPLATE_KEY, MetaValue


class ModelFiles(Protocol):
    async def metadata(self, spec: ModelSpec) -> dict[str, MetaValue]: ...


class Specs(Protocol):
    def get(self, model_id: str) -> ModelSpec: ...


async def model_family(spec: ModelSpec, launcher: ModelFiles, catalog: Specs) -> Family | None:
    """A model that is not installed answers through its fallbacks, which share its task and catalog family
    (checked when the catalog loads): the first one whose file is there names the family."""
    if spec.family is not None:
        return family(spec.family)
    if spec.chat_template is not None:
        return family_of_template(spec.chat_template)
    for candidate in (spec, *(catalog.get(model) for model in spec.fallbacks)):
        try:
            metadata = await launcher.metadata(candidate)  # what a cold start reads anyway; cached per model
        except (ModelNotInstalled, WorkerStartFailed):  # absent, or a pull that failed: try the fallbacks
            continue
        template = metadata.get(CHAT_TEMPLATE_KEY)
        return _family_of_gguf_template(template) if isinstance(template, str) else None
    return None  # nothing installed: the request fails with the model's own 5007 when it starts


@lru_cache(maxsize=64)
def _family_of_gguf_template(template: str) -> Family | None:
    return family_of_template(template)
