"""The console's web application (Starlette): a page, its static files, a JSON API per view,
server-sent events pushing each view at most once per second, and, only when actions are
allowed, the action endpoints (without ``allow_actions`` they do not exist: 404)."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import parse_qs

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from readergroup.console.actions import Actions, check_timeout
from readergroup.console.auth import COOKIE, TokenCheck, redact_url
from readergroup.console.views import ConsoleData
from readergroup.core.errors import (
    AccessDeniedError,
    InvalidConfigError,
    ReaderAlreadyOnlineError,
    ReaderGroupError,
    ReaderNotInGroupError,
    RedisUnavailableError,
)
from readergroup.storage.connection import RedisConnection

logger = logging.getLogger(__name__)

STATIC = resources.files("readergroup.console") / "static"
MIN_PUSH_INTERVAL = 1.0
"""Server-sent events push a view at most once per this many seconds."""


@dataclass(frozen=True, kw_only=True)
class ConsoleSettings:
    """How the console runs (``readergroup console`` builds it from its options)."""

    redis_url: str
    allow_actions: bool = False
    token: str | None = None
    tick: float = 1.0
    """Seconds a view read from Redis is shared by every viewer."""
    sample_interval: float = 5.0
    """Seconds between the background samples of every group's lag (the 15-minute charts)."""
    history_seconds: float = 900.0

    def __post_init__(self) -> None:
        if self.tick <= 0 or self.sample_interval <= 0 or self.history_seconds <= 0:
            raise InvalidConfigError("tick, sample_interval and history_seconds must be > 0")
        if self.token is not None and len(self.token) < 8:
            raise InvalidConfigError("the console's token must have at least 8 characters")


def status_of(exc: ReaderGroupError) -> int:
    if isinstance(exc, LookupError | ReaderNotInGroupError):
        return 404
    if isinstance(exc, ReaderAlreadyOnlineError):
        return 409
    if isinstance(exc, AccessDeniedError):
        return 403
    if isinstance(exc, RedisUnavailableError):
        return 503
    return 400


def error_response(exc: ReaderGroupError) -> JSONResponse:
    return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_of(exc))


class Sampler:
    """Reads the overview every ``interval`` seconds in the background, so each group's lag
    history fills even while nobody watches."""

    def __init__(self, data: ConsoleData, interval: float) -> None:
        self._data = data
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="console-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._data.overview()
            except ReaderGroupError as exc:
                logger.warning("console: sampling the overview failed: %s", exc, exc_info=exc)
            self._stop.wait(self._interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


class TokenGate:
    """Lets through requests with the token (header or cookie), the login page and the static
    files; sends other page loads to the login page and API calls a 401."""

    def __init__(self, app: ASGIApp, check: TokenCheck) -> None:
        self._app = app
        self._check = check

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self._check.required:
            await self._app(scope, receive, send)
            return
        request = Request(scope)
        path = request.url.path
        open_path = path == "/login" or path.startswith("/static/")
        if open_path or self._check.allows(
            request.headers.get("authorization"), request.cookies.get(COOKIE)
        ):
            await self._app(scope, receive, send)
            return
        response: Response
        if path.startswith("/api/"):
            response = JSONResponse({"error": "a token is required"}, 401)
        else:
            response = RedirectResponse("/login", 303)
        await response(scope, receive, send)


LOGIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>readergroup console</title>
<link rel="stylesheet" href="/static/console.css"></head><body class="login">
<form method="post" action="/login"><h1>readergroup console</h1>{message}
<label>Token <input type="password" name="token" autofocus></label>
<button type="submit">Log in</button></form></body></html>"""


def create_app(settings: ConsoleSettings, connection: RedisConnection) -> Starlette:
    """The console for ``connection`` (which the caller closes)."""
    data = ConsoleData(connection, tick=settings.tick, history_seconds=settings.history_seconds)
    check = TokenCheck(settings.token)
    sampler = Sampler(data, settings.sample_interval)
    push_interval = max(MIN_PUSH_INTERVAL, settings.tick)
    stopping = threading.Event()
    """Set by :class:`~readergroup.console.server.ConsoleServer` before it stops: the live
    streams then end cleanly instead of being cut."""

    async def run(compute: Callable[[], dict[str, Any]]) -> Response:
        try:
            return JSONResponse(await anyio.to_thread.run_sync(compute))
        except ReaderGroupError as exc:
            return error_response(exc)

    def view_of(request: Request) -> Callable[[], dict[str, Any]]:
        params = request.path_params
        if "scope" not in params:
            return data.overview
        scope, name = params["scope"], params["name"]
        if request.url.path.rstrip("/").split("/")[-3] == "stream":
            return lambda: data.stream(scope, name)
        return lambda: data.group(scope, name)

    async def index(request: Request) -> Response:
        return FileResponse(str(STATIC / "index.html"), media_type="text/html")

    async def config(request: Request) -> Response:
        return JSONResponse(
            {
                "actions": settings.allow_actions,
                "redis": redact_url(settings.redis_url),
                "push_interval": push_interval,
                "history_seconds": settings.history_seconds,
            }
        )

    async def view(request: Request) -> Response:
        return await run(view_of(request))

    async def events(request: Request) -> Response:
        compute = view_of(request)

        async def pushes() -> AsyncIterator[str]:
            last = None
            while not stopping.is_set() and not await request.is_disconnected():
                try:
                    payload = json.dumps(await anyio.to_thread.run_sync(compute), default=str)
                except ReaderGroupError as exc:
                    payload = json.dumps({"error": f"{type(exc).__name__}: {exc}"})
                yield f"data: {payload}\n\n" if payload != last else ": unchanged\n\n"
                last = payload
                await anyio.sleep(push_interval)

        return StreamingResponse(
            pushes(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )

    async def login(request: Request) -> Response:
        if request.method == "GET":
            return HTMLResponse(LOGIN_PAGE.format(message=""))
        form = parse_qs((await request.body()).decode("utf-8", "replace"))
        if check.token_ok((form.get("token") or [""])[0]):
            response = RedirectResponse("/", 303)
            response.set_cookie(COOKIE, check.cookie_value(), httponly=True, samesite="strict")
            return response
        return HTMLResponse(LOGIN_PAGE.format(message="<p class=error>Wrong token.</p>"), 401)

    routes = [
        Route("/", index),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/api/config", config),
        *(
            Route(f"{base}{path}", endpoint)
            for base, endpoint in (("/api", view), ("/api/events", events))
            for path in ("/overview", "/stream/{scope}/{name}", "/group/{scope}/{name}")
        ),
        Mount("/static", StaticFiles(directory=str(STATIC)), name="static"),
    ]
    if settings.allow_actions:
        routes[2:2] = action_routes(Actions(connection), run)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        sampler.start()
        try:
            yield
        finally:
            sampler.stop()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(TokenGate, check=check)
    app.state.data = data
    app.state.stopping = stopping
    return app


def action_routes(
    actions: Actions, run: Callable[[Callable[[], dict[str, Any]]], Any]
) -> Iterator[Route]:
    """The POST endpoints of the actions; a body must be JSON (a cross-site form cannot send
    that without the browser asking first, so a login cookie alone cannot be abused)."""

    async def body_of(request: Request) -> dict[str, Any]:
        if request.headers.get("content-type", "").split(";")[0] != "application/json":
            raise InvalidConfigError("send the request body as application/json")
        try:
            body = await request.json()
        except ValueError as exc:
            raise InvalidConfigError(f"the body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise InvalidConfigError("the body must be a JSON object")
        return body

    def action(
        handler: Callable[[str, str, dict[str, Any]], dict[str, Any]],
    ) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            try:
                body = await body_of(request)
            except ReaderGroupError as exc:
                return error_response(exc)
            scope, name = request.path_params["scope"], request.path_params["name"]
            response: Response = await run(lambda: handler(scope, name, body))
            return response

        return endpoint

    def checkpoint(scope: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        checkpoint_name = str(body.get("name") or "").strip()
        if not checkpoint_name:
            raise InvalidConfigError("give the checkpoint a name")
        timeout = check_timeout(body.get("timeout"), 30.0)
        return actions.checkpoint(scope, name, checkpoint_name, timeout)

    def plan(scope: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return actions.plan_reset(scope, name, body)

    def apply(scope: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        timeout = check_timeout(body.get("timeout"), 30.0)
        return actions.apply_reset(scope, name, str(body.get("plan_id", "")), timeout)

    def offline(scope: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return actions.reader_offline(scope, name, str(body.get("reader", "")))

    base = "/api/actions/{scope:str}/{name:str}"
    yield Route(f"{base}/checkpoint", action(checkpoint), methods=["POST"])
    yield Route(f"{base}/reset/plan", action(plan), methods=["POST"])
    yield Route(f"{base}/reset/apply", action(apply), methods=["POST"])
    yield Route(f"{base}/reader-offline", action(offline), methods=["POST"])
