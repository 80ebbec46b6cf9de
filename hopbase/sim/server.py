"""The simulated provider as an HTTP server: ``hopbase sim`` and the benchmark's mock.

It speaks the OpenAI (``POST /v1/chat/completions``, ``POST /v1/responses``,
``POST /v1/images/generations``, ``POST /v1/audio/transcriptions``, ``GET /v1/models``)
and Anthropic (``POST /v1/messages``) wire formats with the same answers as the
in-process provider (`hopbase.sim.inprocess`, `hopbase.sim.media`), so the official
SDKs can talk to it. It accepts any key and any model name.

Speed matters (it is the benchmark's mock): every answer is rendered once, up
front, with orjson; streaming then only waits and writes the prepared bytes.
A scripted reset aborts the TCP connection with an RST.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import orjson
from aiohttp import BodyPartReader, web

from hopbase.sim.generator import RequestCounter, SimulatedSettings
from hopbase.sim.inprocess import JSON_HEADERS, SimulatedResponse, error_body, simulated_request
from hopbase.sim.media import IMAGES_PATH, TRANSCRIPTIONS_PATH, simulated_media_request

ROUTES = {
    "/v1/chat/completions": "openai_chat",
    "/v1/responses": "openai_responses",
    "/v1/messages": "anthropic_messages",
}


@attrs.frozen
class _Simulator:
    settings: SimulatedSettings
    counter: RequestCounter = attrs.field(factory=RequestCounter)


SIMULATOR = web.AppKey("simulator", _Simulator)


def make_sim_app(settings: SimulatedSettings) -> web.Application:
    """An aiohttp application serving the simulated provider under ``settings``."""
    app = web.Application()
    app[SIMULATOR] = _Simulator(settings)
    for path, protocol in ROUTES.items():
        app.router.add_post(path, _answer_handler(protocol))
    for path in (IMAGES_PATH, TRANSCRIPTIONS_PATH):
        app.router.add_post("/v1" + path, _media_handler(path))
    app.router.add_get("/v1/models", _models)
    return app


def run_sim(host: str, port: int, settings: SimulatedSettings) -> None:
    """Serve the simulated provider on ``host``:``port`` until interrupted (the CLI)."""
    web.run_app(
        make_sim_app(settings),
        host=host,
        port=port,
        access_log=None,
        backlog=4096,
        handler_cancellation=True,
        print=lambda message: print(f"hopbase sim: {message}", flush=True),
    )


def _answer_handler(protocol: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            message = "the request body must be a JSON object"
            return web.Response(
                status=400, body=error_body(protocol, 400, message), headers=JSON_HEADERS
            )
        simulator = request.app[SIMULATOR]
        answer = await simulated_request(protocol, body, simulator.settings, simulator.counter)
        return await _respond(request, answer)

    return handle


def _media_handler(path: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """Images take JSON; transcriptions a multipart upload, counted but not kept."""

    async def handle(request: web.Request) -> web.StreamResponse:
        upload_bytes = 0
        body: Any = None
        if request.content_type == "multipart/form-data":
            body, upload_bytes = await _read_form(request)
        else:
            try:
                body = orjson.loads(await request.read())
            except orjson.JSONDecodeError:
                body = None
        if not isinstance(body, dict):
            message = "the request body must be a JSON object or a multipart form"
            return web.Response(
                status=400, body=error_body("openai_chat", 400, message), headers=JSON_HEADERS
            )
        simulator = request.app[SIMULATOR]
        answer = await simulated_media_request(
            path, body, upload_bytes, simulator.settings, simulator.counter
        )
        return await _respond(request, answer)

    return handle


async def _read_form(request: web.Request) -> tuple[dict[str, str], int]:
    """The text fields of a multipart upload, and how many file bytes it carried."""
    fields: dict[str, str] = {}
    upload_bytes = 0
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        if part.filename is not None:
            while chunk := await part.read_chunk():
                upload_bytes += len(chunk)
        elif part.name:
            fields[part.name] = (await part.read()).decode("utf-8", "replace")
    return fields, upload_bytes


async def _respond(request: web.Request, answer: SimulatedResponse) -> web.StreamResponse:
    try:
        if answer.stream:
            return await _stream(request, answer)
        body_bytes = await answer.read()
        return web.Response(status=answer.status, body=body_bytes, headers=answer.headers)
    except ConnectionResetError:
        reset_connection(request)
        # Answering on an aborted connection is a no-op that aiohttp handles quietly.
        return web.Response(status=502)
    finally:
        answer.close()


async def _stream(request: web.Request, answer: SimulatedResponse) -> web.StreamResponse:
    response = web.StreamResponse(status=answer.status, headers=answer.headers)
    await response.prepare(request)
    async for chunk in answer.iter_chunks():
        await response.write(chunk)
    await response.write_eof()
    return response


def reset_connection(request: web.Request) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0), as a crashed upstream would."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _models(request: web.Request) -> web.Response:
    """The model list, in Anthropic's shape when the client says it is one."""
    model: dict[str, Any]
    if "anthropic-version" in request.headers:
        model = {"type": "model", "id": "simulated", "display_name": "Simulated",
                 "created_at": "2025-01-01T00:00:00Z"}
        listing = {"data": [model], "has_more": False, "first_id": "simulated",
                   "last_id": "simulated"}
    else:
        model = {"id": "simulated", "object": "model", "created": 1735689600,
                 "owned_by": "hopbase-sim"}
        listing = {"object": "list", "data": [model]}
    return web.Response(body=orjson.dumps(listing), headers=JSON_HEADERS)
