"""The door of `noeta web` (ADR-0071): every request passes here first. Its Host must
name this server when it serves on loopback; then it must carry a session (the cookie
/login gives for the token) or the token itself as a bearer; else a 401 login page."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from noeta.web.render import h, page
from noeta.web.security import SESSION_COOKIE, TOKEN_ENV, host_of, token_matches
from noeta.web.site import Site, error_page, whole_number

LOGIN_PATH = "/login"
# A bearer request's session: pages fetched with the token issue forms for it.
BEARER_SESSION = "bearer"
MAX_LOGIN_FORM_BYTES = 4096


class Gate:
    """Refuses what may not pass, and tells the routes which session a request is in
    (`request.state.session`: the CSRF tokens of its forms are bound to it)."""

    def __init__(self, app: ASGIApp, *, site: Site) -> None:
        self.app, self.site = app, site

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        hosts = self.site.allowed_hosts
        if hosts and host_of(request.headers.get("host")) not in hosts:
            refused = error_page(403, "Refused", "this server answers only to its own address")
            await refused(scope, receive, send)
            return
        if scope["path"] == LOGIN_PATH:
            await (await self._login(request))(scope, receive, send)
            return
        session = self._session(request)
        if session is None:
            await _login_page(401, self._why(request))(scope, receive, send)
            return
        scope.setdefault("state", {})["session"] = session
        await self.app(scope, receive, send)

    def _session(self, request: Request) -> str | None:
        if token_matches(_bearer(request.headers.get("authorization")), self.site.token):
            return BEARER_SESSION
        return self.site.sessions.session_of(request.cookies.get(SESSION_COOKIE))

    def _why(self, request: Request) -> str:
        if request.headers.get("authorization"):
            return f"that bearer token is not this server's ({TOKEN_ENV})"
        if request.cookies.get(SESSION_COOKIE):
            return "your session is not this server's (its token changed): log in again"
        return "log in with the link `noeta web` printed, or with its token"

    async def _login(self, request: Request) -> Response:
        """GET /login?token=… (the printed link) or the login form's POST: the token for a
        session cookie. The token itself is never set as a cookie."""
        given = request.query_params.get("token")
        if request.method == "POST":
            length = whole_number(request.headers.get("content-length"))
            if length is None or length > MAX_LOGIN_FORM_BYTES:
                return _login_page(400, "the login form is too large")
            async with request.form(max_files=0, max_fields=2) as data:
                field = data.get("token")
                given = field if isinstance(field, str) else None
        elif request.method != "GET":
            return _login_page(405, "log in with GET or POST")
        if given is None:
            return _login_page(200, "")
        if not token_matches(given, self.site.token):
            return _login_page(401, f"that is not this server's token ({TOKEN_ENV})")
        response = RedirectResponse("/tasks", status_code=303)
        cookie: dict[str, Any] = {"httponly": True, "samesite": "strict", "path": "/"}
        response.set_cookie(
            SESSION_COOKIE, self.site.sessions.new(), secure=self.site.secure_cookie, **cookie
        )
        return response


def _login_page(status_code: int, message: str) -> HTMLResponse:
    said = f'<p class="notice bad">{h(message)}</p>' if message else ""
    body = (
        f"{said}<p>Paste the token (the one in the link <code>noeta web</code> printed, or "
        f"{h(TOKEN_ENV)}):</p>"
        f'<form method="post" action="{LOGIN_PATH}" class="login">'
        '<input type="password" name="token" autocomplete="off" size="40">'
        '<button type="submit">log in</button></form>'
    )
    title = "Log in" if status_code < 400 else "Token needed"
    response = HTMLResponse(page(title, body), status_code=status_code)
    response.headers["Cache-Control"] = "no-store"
    return response


def _bearer(header: str | None) -> str | None:
    scheme, _, value = (header or "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None
