"""GET /v1/models and /v1/models/{model}."""

from typing import Any

from fastapi import APIRouter, Request

from cirrus.api.context import platform_of, principal_of
from cirrus.api.path_parameters import account_parameter
from cirrus.catalog import CatalogEntry
from cirrus.errors import NoSuchModel

router = APIRouter(tags=["OpenAI"])


def _model(entry: CatalogEntry) -> dict[str, Any]:
    return {
        "id": entry.spec.id,
        "object": "model",
        "created": 0,
        "owned_by": entry.spec.id.split("/")[1],
        "installed": entry.installed,
        "context_window": entry.spec.context_window,
    }


async def list_models(request: Request) -> dict[str, Any]:
    """The models the caller's token may use."""
    principal = principal_of(request)
    entries = [e for e in platform_of(request).catalog.entries() if principal.may_use(e.spec.id)]
    return {"object": "list", "data": [_model(entry) for entry in entries]}


async def get_model(model: str, request: Request) -> dict[str, Any]:
    """A model outside the token's scope reads exactly as one that does not exist."""
    if not principal_of(request).may_use(model):
        raise NoSuchModel(f"No such model {model} or task", param="model")
    catalog = platform_of(request).catalog
    spec = catalog.get(model)
    return _model(CatalogEntry(spec, catalog.is_installed(spec)))


for _prefix in ("/v1", "/client/v4/accounts/{account_id}/ai/v1"):
    router.add_api_route(
        f"{_prefix}/models",
        list_models,
        methods=["GET"],
        summary="List models (OpenAI)",
        openapi_extra=account_parameter(_prefix),
    )
    router.add_api_route(
        f"{_prefix}/models/{{model:path}}",
        get_model,
        methods=["GET"],
        summary="Retrieve a model (OpenAI)",
        openapi_extra=account_parameter(_prefix),
    )
