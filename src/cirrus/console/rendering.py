"""Render a console page: Jinja2 with autoescape on, so model output and user data go in as text."""

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from cirrus.console.access import ConsoleUser
from cirrus.console.formatting import format_value, lookup
from cirrus.console.headers import SECURITY_HEADERS
from cirrus.console.nav import nav_for

TEMPLATES = Path(__file__).parent / "templates"
_environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_environment.filters["format"] = format_value
_environment.globals["lookup"] = lookup
# Pages carry the session's CSRF token: never kept by a shared cache or the browser's back/forward cache.
PAGE_HEADERS = {**SECURITY_HEADERS, "Cache-Control": "no-store"}


def render(request: Request, template: str, context: dict[str, Any], status_code: int = 200) -> HTMLResponse:
    """The page, with what base.html needs: the user (principal, session, csrf) and the nav it may see. A page
    rendered before sign-in (the sign-in page itself) has no user, no nav and no CSRF token."""
    user: ConsoleUser | None = getattr(request.state, "console_user", None)
    frame = {
        "request": request,
        "principal": user.principal if user else None,
        "session": user.session if user else None,
        "open_node": user.open_node if user else False,
        "csrf": user.csrf if user else "",
        "nav": nav_for(user.principal, request.url.path) if user else [],
    }
    html = _environment.get_template(template).render({**frame, **context})
    return HTMLResponse(html, status_code=status_code, headers=PAGE_HEADERS)
