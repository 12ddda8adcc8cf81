"""AI Search instances, Cloudflare's shape: `POST /ai-search/instances` (`id` and the instance's settings), `GET
/ai-search/instances`, `GET` and `DELETE /ai-search/instances/{id}`, under the account's prefix too. An instance
belongs to the account of the token that made it: another account's id is not found. Its models must be catalog
models of the right task that the token may use."""

from typing import Annotated, Any, ClassVar

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field

from cirrus.api.ai_search.calls import require_models
from cirrus.api.ai_search.shapes import instance_object
from cirrus.api.context import platform_of, run_account
from cirrus.api.path_parameters import ACCOUNT_PREFIX, account_parameter
from cirrus.api.workers_ai.schemas import envelope, paged_envelope
from cirrus.catalog import Catalog
from cirrus.errors import CirrusError, InvalidInput, NotFound
from cirrus.platform import Platform
from cirrus.rag.model import Instance
from cirrus.rag.store import RagStore

router = APIRouter(tags=["AI Search"])
# Cloudflare's older instance paths and its namespaced ones; an account has one namespace, "default".
PREFIXES = tuple(
    f"{account}/ai-search{namespace}"
    for account in ("", ACCOUNT_PREFIX)
    for namespace in ("", "/namespaces/default")
)
DEFAULT_EMBEDDING_MODEL = "@cf/sentence-transformers/all-minilm-l6-v2"
DEFAULT_CHAT_MODEL = "@cf/huggingface/smollm2-135m-instruct"
Page = Annotated[int, Query(ge=1)]
PerPage = Annotated[int, Query(ge=1, le=1000)]


class InstanceCreate(BaseModel):
    """Cloudflare's create body; the settings it has that Cirrus does not act on (sources, reranking, caching
    options, public endpoints) are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(description="lowercase letters, digits, '-' and '_'; unique in the account")
    embedding_model: str | None = None
    ai_search_model: str | None = None
    chunk_size: int = Field(default=256, ge=64, le=1024)
    chunk_overlap: int = Field(default=10, ge=0, le=30, description="percent of a chunk repeated in the next")
    hybrid_search_enabled: bool = False
    max_num_results: int = Field(default=10, ge=1, le=50)
    score_threshold: float = Field(default=0.0, ge=0.0, le=1.0)


class AiSearchUnavailable(CirrusError):
    """The gateway's database cannot hold AI Search's index (a PostgreSQL without the pgvector extension)."""

    status = 501
    code = 3000
    openai_code: ClassVar[str | None] = "ai_search_unavailable"


def rag_store(request: Request) -> RagStore:
    store = platform_of(request).gateway.rag
    if store is None:
        raise AiSearchUnavailable(
            "AI Search is off on this server: its PostgreSQL has no pgvector extension (see the server's log)"
        )
    return store


async def instance_of(request: Request, instance_id: str) -> Instance:
    """The caller's account's instance, whose models its token may use; NotFound otherwise."""
    instance = await rag_store(request).instance(run_account(request), instance_id)
    if instance is None:
        raise NotFound(f"no AI Search instance '{instance_id}' in this account", param="id")
    require_models(request, instance.embedding_model, instance.chat_model)
    return instance


async def create_instance(body: InstanceCreate, request: Request) -> Any:
    account = run_account(request)
    platform = platform_of(request)
    embedding = _model(
        platform, body.embedding_model or DEFAULT_EMBEDDING_MODEL, "text-embeddings", "embedding_model"
    )
    chat = _model(platform, body.ai_search_model or DEFAULT_CHAT_MODEL, "text-generation", "ai_search_model")
    require_models(request, embedding, chat)
    instance = await rag_store(request).create_instance(
        account,
        body.id,
        embedding_model=embedding,
        chat_model=chat,
        chunk_size=body.chunk_size,
        chunk_overlap=body.chunk_overlap,
        hybrid=body.hybrid_search_enabled,
        max_num_results=body.max_num_results,
        score_threshold=body.score_threshold,
    )
    return envelope(instance_object(instance))


def _model(platform: Platform, model_id: str, task: str, field: str) -> str:
    catalog: Catalog = platform.catalog
    spec = catalog.get(model_id)
    if spec.task != task:
        raise InvalidInput(f"'{field}' must be a {task} model; {spec.id} is a {spec.task} model", param=field)
    return spec.id


async def list_instances(request: Request, page: Page = 1, per_page: PerPage = 50) -> Any:
    instances = await rag_store(request).instances(run_account(request))
    return paged_envelope([instance_object(instance) for instance in instances], page, per_page)


async def get_instance(instance_id: str, request: Request) -> Any:
    return envelope(instance_object(await instance_of(request, instance_id)))


async def delete_instance(instance_id: str, request: Request) -> Any:
    instance = await instance_of(request, instance_id)
    await rag_store(request).delete_instance(instance.account_id, instance.id)
    return envelope(instance_object(instance))


for _prefix in PREFIXES:
    _extra = account_parameter(_prefix)
    router.add_api_route(
        f"{_prefix}/instances",
        create_instance,
        methods=["POST"],
        summary="Create an AI Search instance",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/instances",
        list_instances,
        methods=["GET"],
        summary="List AI Search instances",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/instances/{{instance_id}}",
        get_instance,
        methods=["GET"],
        summary="Read an AI Search instance",
        openapi_extra=_extra,
    )
    router.add_api_route(
        f"{_prefix}/instances/{{instance_id}}",
        delete_instance,
        methods=["DELETE"],
        summary="Delete an AI Search instance with its items and chunks",
        openapi_extra=_extra,
    )
