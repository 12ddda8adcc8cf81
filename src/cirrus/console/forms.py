"""Read a console form. The server's JSON-body middleware relabels every POST body as JSON, so a form's
`application/x-www-form-urlencoded` body is parsed here from its bytes, whatever its label says."""

from urllib.parse import parse_qsl

from fastapi import Request

MAX_FORM_BYTES = 64 * 1024


async def form_fields(request: Request) -> dict[str, str]:
    """The form's fields (the last value of a repeated one); {} for a body that is not a small form."""
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return {}
    try:
        text = body.decode()
    except UnicodeDecodeError:
        return {}
    return dict(parse_qsl(text, keep_blank_values=True))


def cross_origin(request: Request) -> bool:
    """A form sent from another site's page (login CSRF). Browsers say where a request came from in
    `Sec-Fetch-Site`; `Origin` is "null" on our own pages' form posts, whose referrer policy is no-referrer."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return True
    origin = request.headers.get("origin")
    if origin is None:
        return False
    if origin == "null":  # our own pages send it, and say same-origin; a sandboxed frame elsewhere may too
        return site != "same-origin"
    return origin.rstrip("/") != f"{request.url.scheme}://{request.url.netloc}"
