"""OpenAPI declarations for path parameters that a route's handler never reads.

The account-scoped routes (`/client/v4/accounts/{account_id}/...`) take `account_id` in their path, but only
the auth middleware reads it (against the token's account), so FastAPI, which documents the handler's
parameters, would leave it undeclared: an invalid description that schema-driven clients and fuzzers reject.
Declaring it here changes the document only; requests are routed and checked exactly as before.
"""

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter

ACCOUNT_PREFIX = "/client/v4/accounts/{account_id}"
ACCOUNT_ID = {
    "name": "account_id",
    "in": "path",
    "required": True,
    "description": "The account the request acts for; it must be the token's own.",
    "schema": {"type": "string", "title": "Account Id"},
}


def account_parameter(path: str) -> dict[str, Any]:
    """`openapi_extra` for a route on `path`: the `account_id` parameter where the path has one."""
    return {"parameters": [dict(ACCOUNT_ID)]} if path.startswith(ACCOUNT_PREFIX) else {}


OPENAI_PREFIXES = ("/v1", f"{ACCOUNT_PREFIX}/ai/v1")


def add_openai_route(
    router: APIRouter,
    path: str,
    endpoint: Callable[..., Any],
    method: str,
    summary: str,
    openapi_extra: dict[str, Any] | None = None,
) -> None:
    """An OpenAI route (`path` below `/v1`) under `/v1` and, as Workers AI serves it, under the account."""
    for prefix in OPENAI_PREFIXES:
        extra = {**account_parameter(prefix), **(openapi_extra or {})}
        router.add_api_route(
            f"{prefix}{path}", endpoint, methods=[method], summary=summary, openapi_extra=extra
        )
