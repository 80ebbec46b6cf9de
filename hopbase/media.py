"""``POST /v1/images/generations`` and ``POST /v1/audio/transcriptions``, routed like chat.

Both go only to deployments that speak OpenAI's HTTP API (``openai`` and
``simulated``): other deployments of the group and of its fallbacks are left out
of the plan, and a group with none that can serve answers 400. Everything else is
the chat path's: leases, retries before output, cooldowns, fallbacks, hedges,
keepalive, stuck detection, disconnect handling, metrics and the request log.

- Images: the JSON body goes upstream with ``model`` set to the deployment's model.
  A whole answer passes through as it is; ``stream: true`` relays the upstream's
  ``image_generation.partial_image`` and ``image_generation.completed`` events
  byte for byte, then ``data: [DONE]``.
- Audio: the multipart upload is read once before routing (a file keeps the chunks
  it arrived in and is never joined into a second copy), counted against
  ``max_body_bytes`` as it arrives (413), and encoded afresh for each attempt with
  ``model`` replaced. A whole answer passes through in any ``response_format`` with
  its content type; ``stream: true`` is served only by deployments configured with
  ``streaming: true`` (a group with none answers 400) and relays the
  ``transcript.text.*`` events, then ``data: [DONE]``.

Media answers are never cached: they are large and rarely repeat.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import attrs
from aiohttp import BodyPartReader, web

from hopbase import canonical, errors, sse
from hopbase.gateway import Gateway
from hopbase.protocols import openai_media
from hopbase.proxy.attempt import Attempt, Failure
from hopbase.proxy.flow import Exchange, Plan
from hopbase.proxy.stream import Relay
from hopbase.proxy.unary import read_body, run_attempts
from hopbase.upstream import FormPart, Transport, Upload, UpstreamResponse
from hopbase.views import GATEWAY, REQUEST_ID, observed, read_json
from routing import Lease, Outcome

IMAGES_PATH = "/images/generations"  # after the deployment's base_url, which ends in /v1
TRANSCRIPTIONS_PATH = "/audio/transcriptions"
MEDIA_PROVIDERS = frozenset({"openai", "simulated"})
_CHUNK_BYTES = 65536
_ERROR_BODY_LIMIT = 65536


def add_media_routes(app: web.Application) -> None:
    """Serve the two media endpoints on ``app``."""
    app.router.add_post("/v1" + IMAGES_PATH, images)
    app.router.add_post("/v1" + TRANSCRIPTIONS_PATH, transcriptions)


async def images(request: web.Request) -> web.StreamResponse:
    """``POST /v1/images/generations``: JSON in, JSON or SSE out."""
    gateway = request.app[GATEWAY]
    key_name = gateway.keys.client(request.headers)
    body = await read_json(request, gateway.config.server.max_body_bytes)
    group = _model_group(gateway, body.get("model"))
    if not isinstance(body.get("prompt"), str):
        raise errors.InvalidRequest("'prompt' must be a string")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise errors.InvalidRequest("'stream' must be a boolean")
    exchange = _exchange(request, "images.generations", group, stream, body, key_name)
    plan = MediaPlan.for_media(gateway, exchange, IMAGES_PATH)
    return await serve_media(plan, request)


async def transcriptions(request: web.Request) -> web.StreamResponse:
    """``POST /v1/audio/transcriptions``: a multipart upload in, the transcript (or SSE) out."""
    gateway = request.app[GATEWAY]
    key_name = gateway.keys.client(request.headers)
    upload = await read_upload(request, gateway.config.server.max_body_bytes)
    fields = upload.fields()
    group = _model_group(gateway, fields.get("model"))
    if not any(part.name == "file" and part.filename is not None for part in upload.parts):
        raise errors.InvalidRequest("missing the 'file' part (the audio to transcribe)")
    stream = _form_flag(fields.get("stream", "false"), "stream")
    exchange = _exchange(request, "audio.transcriptions", group, stream, dict(fields), key_name)
    plan = MediaPlan.for_media(gateway, exchange, TRANSCRIPTIONS_PATH, upload)
    return await serve_media(plan, request)


def _model_group(gateway: Gateway, model: Any) -> str:
    if not isinstance(model, str) or not model:
        raise errors.InvalidRequest("'model' is required and must be a string")
    if model not in gateway.config.models:
        raise errors.ModelNotFound(f"model {model!r} does not exist")
    return model


def _form_flag(value: str, name: str) -> bool:
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise errors.InvalidRequest(f"'{name}' must be true or false")


def _exchange(
    request: web.Request, endpoint: str, group: str, stream: bool, body: dict[str, Any],
    key_name: str | None,
) -> Exchange:
    return Exchange(
        id=request[REQUEST_ID],
        endpoint=endpoint,
        client=openai_media,
        request=canonical.Request(
            model=group, messages=(), stream=stream, source_protocol=openai_media.NAME
        ),
        body=body,
        client_headers={},
        key_name=key_name,
        model_group=group,
        started_at=asyncio.get_running_loop().time(),
        created_at=time.time(),
    )


async def read_upload(request: web.Request, max_body_bytes: int) -> Upload:
    """The multipart/form-data body: text fields, and files as the chunks they arrived in.

    Raises:
        errors.BodyTooLarge: the body is (or, while it arrives, grows) over ``max_body_bytes``.
        errors.InvalidRequest: not multipart/form-data, malformed, or a field not UTF-8.
    """
    too_large = errors.BodyTooLarge(f"request body is larger than {max_body_bytes} bytes")
    if request.content_length is not None and request.content_length > max_body_bytes:
        raise too_large
    if request.content_type != "multipart/form-data":
        raise errors.InvalidRequest("Content-Type must be multipart/form-data")
    parts: list[FormPart] = []
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise errors.InvalidRequest("nested multipart bodies are not supported")
            chunks = await _read_part(part, request, max_body_bytes, too_large)
            parts.append(_form_part(part, chunks))
    except ValueError as error:  # aiohttp's word for a malformed multipart body
        raise errors.InvalidRequest(f"malformed multipart body: {error}") from None
    return Upload(tuple(parts))


async def _read_part(
    part: BodyPartReader, request: web.Request, max_body_bytes: int, too_large: errors.BodyTooLarge
) -> tuple[bytes, ...]:
    chunks: list[bytes] = []
    while chunk := await part.read_chunk(_CHUNK_BYTES):
        # total_bytes counts what arrived on the wire, so a body without Content-Length stops here
        if request.content.total_bytes > max_body_bytes:
            raise too_large
        chunks.append(bytes(chunk))
    return tuple(chunks)


def _form_part(part: BodyPartReader, chunks: tuple[bytes, ...]) -> FormPart:
    name = part.name or ""
    if part.filename is None:
        try:
            text = b"".join(chunks).decode()
        except UnicodeDecodeError:
            raise errors.InvalidRequest(f"form field {name!r} is not UTF-8") from None
        return FormPart(name, text=text)
    content_type = part.headers.get("Content-Type")
    return FormPart(name, filename=part.filename, content_type=content_type, chunks=chunks)


@attrs.define(eq=False)
class MediaAttempt(Attempt):
    """An attempt sent through `Transport.send_media` to ``path``."""

    path: str = ""
    upload: Upload | None = None  # the audio upload, its model already this deployment's

    async def request(
        self,
        transport: Transport,
        body: dict[str, Any],
        client_headers: Mapping[str, str],
        headers_timeout_s: float,
    ) -> UpstreamResponse:
        """Send ``body`` for images, the upload for audio."""
        payload: dict[str, Any] | Upload = self.upload if self.upload is not None else body
        return await transport.send_media(self.deployment, self.path, payload, headers_timeout_s)


@attrs.define(eq=False)
class MediaPlan(Plan):
    """A `Plan` over the deployments that can serve a media endpoint, making `MediaAttempt`s."""

    path: str = ""
    upload: Upload | None = None

    @classmethod
    def for_media(
        cls, gateway: Gateway, exchange: Exchange, path: str, upload: Upload | None = None
    ) -> MediaPlan:
        """The plan for ``exchange``; raises `errors.InvalidRequest` when its group cannot serve it.

        Deployments of other providers, and for a streamed transcription those without
        ``streaming: true``, are excluded up front in the group and its fallbacks.
        """
        groups = Plan.for_exchange(gateway, exchange).groups
        plan = cls(gateway, exchange, groups, path=path, upload=upload, config=gateway.config)
        streaming = upload is not None and exchange.request.stream
        for group in groups:
            for deployment in gateway.config.models[group].deployments:
                if deployment.provider not in MEDIA_PROVIDERS or (
                    streaming and not deployment.streaming
                ):
                    plan.excluded.add(deployment.id)
        _check_servable(gateway, exchange, plan.excluded, streaming, path)
        return plan

    def make_attempt(self, group: str, lease: Lease, hedge: bool) -> Attempt:
        deployment = self.gateway.deployment(lease.deployment.id)
        upload = self.upload
        if upload is not None:
            upload = upload.with_field("model", deployment.upstream_model)
        return MediaAttempt(
            lease, deployment, group, openai_media, hedge=hedge, path=self.path, upload=upload
        )

    def headers_timeout(self, attempt: Attempt) -> float:
        if self.upload is not None:
            # the upload itself travels before any header can come back
            return self.routing(attempt.model_group).stuck_after_s
        return super().headers_timeout(attempt)


def _check_servable(
    gateway: Gateway, exchange: Exchange, excluded: set[str], streaming: bool, path: str
) -> None:
    group = exchange.model_group
    deployments = gateway.config.models[group].deployments
    if any(deployment.id not in excluded for deployment in deployments):
        return  # disabled or cooling ones are the plan's to report, as for chat
    if streaming and any(d.provider in MEDIA_PROVIDERS for d in deployments):
        raise errors.InvalidRequest(
            f"model {group!r} does not stream transcriptions: no deployment has streaming: true"
        )
    raise errors.InvalidRequest(
        f"model {group!r} has no openai deployment; /v1{path} is served by openai deployments only"
    )


class MediaRelay(Relay):
    """The streaming relay on a `MediaPlan`; the stream always ends with ``data: [DONE]``."""

    def __init__(self, plan: MediaPlan, request: web.Request) -> None:
        super().__init__(plan.gateway, plan.exchange, request)
        self.plan = plan

    def _ending(self, attempt: Attempt, outcome: Outcome, failure: Failure | None) -> bytes:
        if outcome is Outcome.SUCCESS or (failure is not None and failure.forwarded):
            pump = self.pump_objects.get(attempt)
            parser = pump.parser if pump is not None else None
            done = isinstance(parser, openai_media.StreamParser) and parser.upstream_done
            return b"" if done else sse.DONE
        return super()._ending(attempt, outcome, failure)


async def serve_media(plan: MediaPlan, request: web.Request) -> web.StreamResponse:
    """Run a media exchange and hand its record to the observers, whatever happens."""

    async def run() -> web.StreamResponse:
        if plan.exchange.request.stream:
            return await MediaRelay(plan, request).run()
        return await run_attempts(plan, _try_whole)

    return await observed(plan.gateway, plan.exchange, request, run)


async def _try_whole(plan: Plan, attempt: Attempt) -> web.Response | Failure:
    gateway, exchange = plan.gateway, plan.exchange
    failure = await attempt.send(
        gateway.transport, plan.body_for(attempt), {}, plan.headers_timeout(attempt),
        gateway.redact,
    )
    if failure is not None:
        return failure
    assert attempt.response is not None
    content_type = attempt.response.headers.get("Content-Type", "application/json")
    stuck_after_s = plan.routing(attempt.model_group).stuck_after_s
    body = await read_body(attempt, stuck_after_s)
    if isinstance(body, Failure):
        attempt.failure = body
        return body
    attempt.usage = openai_media.answer_usage(body) or canonical.Usage()
    attempt.finish(Outcome.SUCCESS)
    exchange.served_group = attempt.model_group
    headers = {"Content-Type": content_type}
    if attempt.model_group != exchange.model_group:
        headers["x-hopbase-fallback"] = attempt.model_group
    return web.Response(body=body, headers=headers)
