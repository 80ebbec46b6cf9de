"""make_app(config): the aiohttp application with its routes, state and lifecycle."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.typedefs import Middleware

from hopbase.config import Config
from hopbase.cors import cors_middleware
from hopbase.gateway import Gateway
from hopbase.media import add_media_routes
from hopbase.views import GATEWAY, add_routes, envelope

log = logging.getLogger("hopbase")


def make_app(config: Config, gateway: Gateway | None = None) -> web.Application:
    """The HopBase application serving ``config``.

    ``client_max_size`` is one byte over ``max_body_bytes`` so the view, not aiohttp,
    answers an oversized body, in the client protocol's shape.
    """
    middlewares: list[Middleware] = [envelope]
    if config.server.cors_origins:
        middlewares.insert(0, cors_middleware(config.server.cors_origins))
    app = web.Application(
        client_max_size=config.server.max_body_bytes + 1,
        middlewares=middlewares,
        # keepalive_timeout also bounds a head that never finishes (slowloris); nginx's default
        handler_args={"max_field_size": 16384, "max_line_size": 16384, "keepalive_timeout": 75},
    )
    app[GATEWAY] = gateway or Gateway.build(config)
    add_routes(app)
    add_media_routes(app)
    app.on_startup.append(_start)
    app.on_shutdown.append(_drain)
    app.on_cleanup.append(_stop)
    return app


async def _start(app: web.Application) -> None:
    gateway = app[GATEWAY]
    # the log first: if its database cannot be opened, nothing else was opened to leak
    if gateway.request_log is not None:
        await gateway.request_log.start()
    await gateway.transport.start()
    if gateway.state is not None:
        await gateway.state.start()
    for line in gateway.config.warnings:
        log.warning("%s", line)


async def _drain(app: web.Application) -> None:
    """Graceful shutdown: streams get ``shutdown_grace_s`` to finish, then an error event."""
    gateway = app[GATEWAY]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + gateway.config.server.shutdown_grace_s
    if gateway.open_relays:
        log.info("shutting down: waiting for %d open streams", len(gateway.open_relays))
    while gateway.open_relays and loop.time() < deadline:
        await asyncio.sleep(0.05)
    for relay in list(gateway.open_relays):
        relay.shut_down()
    ended_by = loop.time() + 1.0
    while gateway.open_relays and loop.time() < ended_by:
        await asyncio.sleep(0.01)
    if gateway.request_log is not None:
        await gateway.request_log.flush()


async def _stop(app: web.Application) -> None:
    gateway = app[GATEWAY]
    if gateway.state is not None:
        await gateway.state.close()
    await gateway.transport.close()
    if gateway.request_log is not None:
        await gateway.request_log.close()
