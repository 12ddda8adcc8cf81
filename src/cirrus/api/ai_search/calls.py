"""AI Search's model calls, each through the gateway like any other: the query's embedding (its own usage record,
`<request id>/query`) and the answer's generation (the request's own call, so the access log shows it), both for
the caller's token: its scopes, limits and budget apply to the instance's models too."""

from fastapi import Request

from cirrus.api.context import platform_of
from cirrus.api.inference import gateway_call
from cirrus.errors import ModelForbidden
from cirrus.gateway.call import Call
from cirrus.runtime.embedding import EmbeddingInput
from cirrus.service import EmbeddingRequest


def step_call(request: Request, suffix: str) -> Call:
    """A call of its own for one step of the request, metered under `<request id>/<suffix>`."""
    base = gateway_call(request, stream=False)
    return Call(
        request_id=f"{base.request_id}/{suffix}",
        principal=base.principal,
        route=base.route,
        headers=base.headers,
        collect_log=base.collect_log,
        deadline=base.deadline,
    )


async def embed_query(request: Request, model: str, text: str) -> list[float]:
    platform = platform_of(request)
    call = step_call(request, "query")
    spec = platform.pipeline.resolve(call, model)
    embedding = EmbeddingRequest(
        call.request_id, spec.id, EmbeddingInput((text,), "query"), None, call.deadline
    )
    result = await platform.pipeline.embed(call, embedding)
    return result.vectors[0]


def require_models(request: Request, *models: str) -> None:
    """The caller's token may use every model the instance runs: its model globs apply to AI Search too."""
    principal = gateway_call(request, stream=False).principal
    for model in models:
        if not principal.may_use(model):
            raise ModelForbidden(
                f"this token may not use {model}, which this AI Search instance runs", param="model"
            )
