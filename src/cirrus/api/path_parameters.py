"""OpenAPI declarations for path parameters that a route's handler never reads.

The account-scoped routes (`/client/v4/accounts/{account_id}/...`) take `account_id` in their path, but only
the auth middleware reads it (against the token's account), so FastAPI, which documents the handler's
parameters, would leave it undeclared: an invalid description that schema-driven clients and fuzzers reject.
Declaring it here changes the document only; requests are routed and checked exactly as before.
"""

from typing import Any

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
