"""CORS, only when ``server.cors_origins`` lists origins (no CORS headers otherwise).

A listed origin (or ``*``) gets ``Access-Control-Allow-Origin`` on every answer
and preflight ``OPTIONS`` requests are answered here with 204.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ALLOWED_HEADERS = (
    "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta, x-request-id"
)


def cors_middleware(origins: Iterable[str]) -> Middleware:
    """A middleware allowing browser calls from ``origins``."""
    allowed = frozenset(origins)

    def allow(origin: str | None) -> str | None:
        if origin is None:
            return None
        if "*" in allowed:
            return "*"
        return origin if origin in allowed else None

    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = allow(request.headers.get("Origin"))
        if request.method == "OPTIONS" and origin is not None:
            return web.Response(status=204, headers={
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
                "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                "Access-Control-Max-Age": "600",
                "Vary": "Origin",
            })
        response = await handler(request)
        if origin is not None and not response.prepared:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"
        return response

    return cors
