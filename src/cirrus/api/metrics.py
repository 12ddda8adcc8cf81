"""`GET /metrics`: the node's Prometheus metrics, optionally for admin tokens only."""

from fastapi import APIRouter, Request, Response

from cirrus.api.context import platform_of, principal_of
from cirrus.auth import Permission
from cirrus.errors import Forbidden

router = APIRouter(tags=["Observability"])


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    platform = platform_of(request)
    if platform.settings.metrics_token_required and not principal_of(request).can(Permission.ADMIN):
        raise Forbidden("reading metrics needs a token with the admin permission")
    body, content_type = platform.metrics.render()
    return Response(body, media_type=content_type)
