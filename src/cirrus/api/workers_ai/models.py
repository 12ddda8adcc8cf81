"""GET /ai/models/search: the catalog, as Workers AI lists its models."""

import uuid
from typing import Any

from fastapi import APIRouter, Query, Request

from cirrus.api.context import platform_of, principal_of
from cirrus.api.path_parameters import ACCOUNT_PREFIX, account_parameter
from cirrus.api.workers_ai.schemas import paged_envelope
from cirrus.catalog import CatalogEntry

router = APIRouter(tags=["Workers AI"])
TASKS = {
    "text-generation": ("Text Generation", "Family of generative text models that write text."),
    "text-embeddings": (
        "Text Embeddings",
        "Feature extraction models transform raw data into numerical features that can be processed while "
        "preserving the information in the original data set.",
    ),
}


def model_record(entry: CatalogEntry) -> dict[str, Any]:
    spec = entry.spec
    name, description = TASKS[spec.task]
    properties: dict[str, object] = {
        "context_window": spec.context_window,
        "max_tokens_default": spec.max_tokens_default,
        "price_input_per_million": spec.pricing.input_per_million,
        "price_output_per_million": spec.pricing.output_per_million,
        "installed": entry.installed,
        "pinned": spec.pinned,
    }
    described = {
        "family": spec.family,
        "architecture": spec.architecture,
        "parameters_billions": spec.parameters,
        "active_parameters_billions": spec.active_parameters,
    }
    properties.update({key: value for key, value in described.items() if value is not None})
    if spec.lora_base is not None:  # as Workers AI marks the models that take fine-tunes
        properties["lora"] = True
    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, spec.id)),
        "name": spec.id,
        "description": spec.description,
        "task": {"id": spec.task, "name": name, "description": description},
        "tags": [],
        "properties": [
            {"property_id": key, "value": str(value).lower() if isinstance(value, bool) else str(value)}
            for key, value in properties.items()
        ],
    }


def _matches(entry: CatalogEntry, task: str | None, search: str | None) -> bool:
    spec = entry.spec
    if task and task.lower() not in (spec.task, TASKS[spec.task][0].lower()):
        return False
    return not search or search.lower() in f"{spec.id} {spec.description}".lower()


async def search_models(
    request: Request,
    task: str | None = None,
    search: str | None = None,
    page: int = Query(default=1, ge=1),
    per_page: int = Query(default=50, ge=1, le=1000),
) -> dict[str, Any]:
    principal = principal_of(request)
    entries = [
        e
        for e in platform_of(request).catalog.entries()
        if principal.may_use(e.spec.id) and _matches(e, task, search)
    ]
    return paged_envelope([model_record(entry) for entry in entries], page, per_page)


router.add_api_route("/ai/models/search", search_models, methods=["GET"], summary="Search the model catalog")
router.add_api_route(
    f"{ACCOUNT_PREFIX}/ai/models/search",
    search_models,
    methods=["GET"],
    summary="Search the model catalog",
    openapi_extra=account_parameter(ACCOUNT_PREFIX),
)
