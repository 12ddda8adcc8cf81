"""The models the playground offers a principal: chat models (text generation) and embedding models, from the
catalog, each with whether it is installed; only the ones the principal's token may use."""

from dataclasses import dataclass

from cirrus.auth import Principal
from cirrus.catalog import Catalog


@dataclass(frozen=True)
class PlaygroundModel:
    id: str
    installed: bool
    family: str | None  # a named chat family (GLM, Kimi) writes reasoning apart
    max_tokens_default: int
    context_window: int


@dataclass(frozen=True)
class PlaygroundModels:
    chat: list[PlaygroundModel]
    embeddings: list[PlaygroundModel]

    @property
    def default_chat(self) -> str | None:
        return next((model.id for model in self.chat if model.installed), None)

    @property
    def installed_embeddings(self) -> list[PlaygroundModel]:
        return [model for model in self.embeddings if model.installed]


def playground_models(catalog: Catalog, principal: Principal) -> PlaygroundModels:
    chat: list[PlaygroundModel] = []
    embeddings: list[PlaygroundModel] = []
    for entry in catalog.entries():
        spec = entry.spec
        if not principal.may_use(spec.id):
            continue
        model = PlaygroundModel(
            spec.id, entry.installed, spec.family, spec.max_tokens_default, spec.context_window
        )
        (chat if spec.task == "text-generation" else embeddings).append(model)
    return PlaygroundModels(chat, embeddings)
