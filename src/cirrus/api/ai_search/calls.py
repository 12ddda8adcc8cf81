"""AI Search's model calls, each through the gateway like any other: the query's embedding (its own usage record,
`<request id>/query`) and the answer's generation (the request's own call, so the access log shows it), both for
the caller's token: its scopes, limits, budget and guardrails apply to the instance's models too.

The input guardrails see the client's texts before anything is retrieved, so a refusal names the field the client
sent (`query`, `messages[2].content`) as a plain call's does, rather than where the texts end up (the query's
embedding input, or the answer's messages behind the sources)."""

import contextlib
from collections.abc import Iterator, Sequence

from fastapi import Request

from cirrus.api.context import platform_of
from cirrus.api.inference import gateway_call
from cirrus.errors import InputRefused, ModelForbidden
from cirrus.gateway.call import Call
from cirrus.rag.grounding import SOURCES_FIELD, Field
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


async def check_input(request: Request, model: str, fields: Sequence[Field]) -> None:
    """The texts through the model's and the account's input guardrails, as the pipeline will check them; a
    refusal is metered under the request's id, as a plain call's refusal is."""
    platform = platform_of(request)
    call = gateway_call(request, stream=False)
    spec = platform.pipeline.resolve(call, model)
    await platform.pipeline.check_input(call, spec, fields)


@contextlib.contextmanager
def sources_refusal_named() -> Iterator[None]:
    """Around an answer's generation whose client messages passed `check_input`: a refusal of the first message
    is of the sources retrieved for it (a document holds text the chat model's guardrails refuse)."""
    try:
        yield
    except InputRefused as refused:
        if refused.param != SOURCES_FIELD:
            raise
        raise InputRefused(
            "the sources retrieved for this question were refused by a guardrail policy", param="sources"
        ) from None
