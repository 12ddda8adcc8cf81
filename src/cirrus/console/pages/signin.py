"""Sign in with an API token (a POST form: the token never travels in a URL), sign out, and the console's root."""

from fastapi import APIRouter, Depends, Request
from fastapi.responses import RedirectResponse, Response

from cirrus.console.forms import cross_origin, form_fields
from cirrus.console.rendering import render
from cirrus.console.session import COOKIE, console_access, console_user, require_csrf

router = APIRouter()
HOME = "/console/overview"
SIGN_IN = "/console/signin"
WRONG_TOKEN = "That token cannot sign in. Check that you pasted the whole token and that it is still valid."


def see_other(path: str) -> RedirectResponse:
    return RedirectResponse(path, status_code=303)


@router.get("/", include_in_schema=False)
@router.get("/console", include_in_schema=False)
async def root() -> Response:
    return see_other(HOME)


@router.get(SIGN_IN, include_in_schema=False)
async def sign_in_page(request: Request) -> Response:
    if await console_access(request).user(request.cookies.get(COOKIE)) is not None:
        return see_other(HOME)
    return render(request, "signin.html", {"error": None})


@router.post(SIGN_IN, include_in_schema=False)
async def sign_in(request: Request) -> Response:
    access = console_access(request)
    if await access.is_open():
        return see_other(HOME)
    secret = (await form_fields(request)).get("token", "").strip()
    session = None if cross_origin(request) or not secret else await access.sign_in(secret)
    if session is None:
        return render(request, "signin.html", {"error": WRONG_TOKEN}, status_code=401)
    if previous := request.cookies.get(COOKIE):  # not left valid behind the new one
        await access.sign_out(previous)
    response = see_other(HOME)
    response.set_cookie(
        COOKIE,
        session.id,
        max_age=max(0, int(session.expires_at - access.now())),
        path="/",
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )
    return response


@router.post("/console/signout", include_in_schema=False, dependencies=[Depends(require_csrf)])
async def sign_out(request: Request) -> Response:
    user = await console_user(request)
    if user.session is None:  # an open node has no session to end
        return see_other(HOME)
    await console_access(request).sign_out(user.session.id)
    response = see_other(SIGN_IN)
    response.delete_cookie(
        COOKIE, path="/", secure=request.url.scheme == "https", httponly=True, samesite="strict"
    )
    return response
