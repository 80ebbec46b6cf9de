"""HTTP routes: the client protocols, health, models, metrics and the admin API.

Every route answers errors in its client protocol's own shape (Anthropic's for
``/v1/messages``, OpenAI's elsewhere) and every response carries ``x-request-id``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import sqlite3
import time
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

import orjson
from aiohttp import web

from hopbase import errors
from hopbase.cache import CACHE_HEADER
from hopbase.config import load_config
from hopbase.errors import LogStoreError
from hopbase.gateway import Gateway
from hopbase.logs import parse_log_query
from hopbase.protocols import anthropic_messages, openai_chat, openai_responses
from hopbase.proxy.flow import Exchange
from hopbase.proxy.stream import Relay
from hopbase.proxy.unary import serve_unary

log = logging.getLogger("hopbase")

GATEWAY: web.AppKey[Gateway] = web.AppKey("gateway", Gateway)
REQUEST_ID: web.RequestKey[str] = web.RequestKey("request_id", str)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_REQUEST_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


def request_id(request: web.Request) -> str:
    """The client's x-request-id when it is sane, else a new one."""
    given = request.headers.get("x-request-id")
    if given and len(given) <= 128 and _REQUEST_ID_CHARS.issuperset(given):
        return given
    return "req_" + secrets.token_hex(12)


def error_protocol(path: str) -> ModuleType:
    return anthropic_messages if path.startswith("/v1/messages") else openai_chat


def error_response(error: errors.GatewayError, protocol: ModuleType) -> web.Response:
    headers = {}
    if error.retry_after_s is not None:
        headers["Retry-After"] = str(max(1, math.ceil(error.retry_after_s)))
    return web.Response(
        status=error.status,
        body=orjson.dumps(protocol.render_error(error)),
        content_type="application/json",
        headers=headers,
    )


@web.middleware
async def envelope(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Request ids on every response; GatewayError rendered in the route's protocol."""
    identifier = request_id(request)
    request[REQUEST_ID] = identifier
    try:
        response = await handler(request)
    except errors.GatewayError as error:
        response = error_response(error, error_protocol(request.path))
    except web.HTTPException as error:
        kind = errors.status_type(error.status)
        gateway_error = kind(error.reason or "error", status=error.status)
        response = error_response(gateway_error, error_protocol(request.path))
    if not response.prepared:
        response.headers["x-request-id"] = identifier
    return response


async def read_json(request: web.Request, max_body_bytes: int) -> dict[str, Any]:
    """The request body as a JSON object.

    Raises:
        errors.BodyTooLarge: over ``max_body_bytes`` (the body is not read).
        errors.InvalidRequest: not JSON, not UTF-8, too deep, or not an object.
    """
    if request.content_length is not None and request.content_length > max_body_bytes:
        raise errors.BodyTooLarge(f"request body is larger than {max_body_bytes} bytes")
    content_type = request.headers.get("Content-Type", "application/json")
    if "json" not in content_type:
        raise errors.InvalidRequest("Content-Type must be application/json")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge as error:
        raise errors.BodyTooLarge(f"request body is larger than {max_body_bytes} bytes") from error
    if len(raw) > max_body_bytes:
        raise errors.BodyTooLarge(f"request body is larger than {max_body_bytes} bytes")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise errors.InvalidRequest(f"request body is not valid JSON: {error.msg}") from None
    if not isinstance(body, dict):
        raise errors.InvalidRequest("request body must be a JSON object")
    return body


def protocol_route(endpoint: str, client: ModuleType) -> Handler:
    """A handler for one client protocol's chat endpoint."""

    async def handle(request: web.Request) -> web.StreamResponse:
        gateway = request.app[GATEWAY]
        key_name = gateway.keys.client(request.headers)
        gateway.client_limiter.admit(key_name, gateway.clock.now())
        body = await read_json(request, gateway.config.server.max_body_bytes)
        parsed = client.parse_request(body)
        if parsed.model not in gateway.config.models:
            raise errors.ModelNotFound(f"model {parsed.model!r} does not exist")
        exchange = Exchange(
            id=request[REQUEST_ID],
            endpoint=endpoint,
            client=client,
            request=parsed,
            body=body,
            client_headers=dict(request.headers) if client is anthropic_messages else {},
            key_name=key_name,
            model_group=parsed.model,
            started_at=asyncio.get_running_loop().time(),
            created_at=time.time(),
        )
        return await serve(gateway, exchange, request)

    return handle


async def serve(gateway: Gateway, exchange: Exchange, request: web.Request) -> web.StreamResponse:
    """Run a chat exchange: streams relayed live, whole answers through the cache."""

    async def run() -> web.StreamResponse:
        if exchange.request.stream:
            return await Relay(gateway, exchange, request).run()
        return await gateway.cache.respond(
            exchange, request.headers, lambda: serve_unary(gateway, exchange)
        )

    return await observed(gateway, exchange, request, run)


async def observed(
    gateway: Gateway,
    exchange: Exchange,
    request: web.Request,
    run: Callable[[], Awaitable[web.StreamResponse]],
) -> web.StreamResponse:
    """Run ``run`` and hand the exchange's record to the observers, whatever happens."""
    status = 500
    try:
        response = await run()
        status = response.status
        return response
    except errors.GatewayError as error:
        status, exchange.error_type = error.status, error.type
        if exchange.cache is None:
            raise
        response = error_response(error, error_protocol(request.path))
        response.headers[CACHE_HEADER] = exchange.cache
        return response
    except asyncio.CancelledError:
        # a committed stream answered 200; before that the client closed the request (nginx's 499)
        status = 200 if exchange.committed else 499
        raise
    finally:
        gateway.observe(exchange, status)


async def models(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    gateway.keys.client(request.headers)
    data = [
        {"id": group, "object": "model", "created": 0, "owned_by": "hopbase"}
        for group in gateway.config.models
    ]
    return json_response({"object": "list", "data": data})


async def healthz(request: web.Request) -> web.Response:
    return json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    enabled = any(
        deployment.enabled
        for model in gateway.config.models.values()
        for deployment in model.deployments
    )
    if not enabled:
        return json_response({"status": "unready", "reason": "no enabled deployment"}, status=503)
    if gateway.state is not None and not gateway.state.connected:
        # still ready: this replica serves on its local state until Redis is back
        return json_response({"status": "degraded", "reason": "redis unreachable"})
    return json_response({"status": "ok"})


async def metrics(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    gateway.keys.check_metrics(request.headers)
    body, content_type = gateway.metrics.render()
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type
    return response


async def admin_deployments(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    gateway.keys.check_admin(request.headers)
    return json_response({"data": [deployment_json(gateway, s) for s in gateway.router.snapshot()]})


def deployment_json(gateway: Gateway, snapshot: Any) -> dict[str, Any]:
    deployment = gateway.deployment(snapshot.id)
    return {
        "model": snapshot.model_group,
        "id": snapshot.id,
        "provider": deployment.provider,
        "enabled": deployment.enabled,
        "inFlight": snapshot.in_flight,
        "maxInFlight": snapshot.max_in_flight,
        "cooldown": {
            "active": snapshot.cooldown_active,
            "reason": snapshot.cooldown_reason,
            "secondsLeft": round(snapshot.cooldown_seconds_left, 3),
            "consecutive": snapshot.consecutive_cooldowns,
        },
        "failuresInWindow": snapshot.failures_in_window,
        "firstOutputMs": _ms(snapshot.first_output_s),
        "tokensPerSecond": _rounded(snapshot.tokens_per_s),
        "rpm": snapshot.rpm,
        "tpm": snapshot.tpm,
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


async def admin_logs(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    gateway.keys.check_admin(request.headers)
    if gateway.request_log is None:
        return json_response({"data": [], "nextCursor": None})
    query = parse_log_query(request.query)
    try:
        return json_response(await gateway.request_log.query(query))
    except (LogStoreError, sqlite3.Error) as error:
        raise errors.GatewayError(str(error), status=503, code="log_unavailable") from None


async def admin_reload(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    gateway.keys.check_admin(request.headers)
    return json_response(reload_config(gateway))


def reload_config(gateway: Gateway) -> dict[str, Any]:
    """Re-read the config file; the old one keeps serving if the new one is invalid."""
    path = gateway.config.source_path
    if path is None:
        raise errors.InvalidRequest("this server was not started from a config file")
    try:
        config = load_config(path)
    except errors.ConfigError as error:
        log.warning("config reload rejected: %s", "; ".join(error.problems))
        raise errors.InvalidRequest("config rejected: " + "; ".join(error.problems)) from None
    gateway.reload(config)
    for line in config.warnings:
        log.warning("%s", line)
    log.info("config reloaded from %s", path)
    return {"status": "reloaded", "models": sorted(config.models)}


def json_response(payload: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(payload), content_type="application/json")


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/chat/completions", protocol_route("chat.completions", openai_chat))
    app.router.add_post("/v1/responses", protocol_route("responses", openai_responses))
    app.router.add_post("/v1/messages", protocol_route("messages", anthropic_messages))
    app.router.add_get("/v1/models", models)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/admin/logs", admin_logs)
    app.router.add_get("/admin/deployments", admin_deployments)
    app.router.add_post("/admin/reload", admin_reload)
