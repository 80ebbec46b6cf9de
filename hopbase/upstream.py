"""The upstream transport: one shared aiohttp ClientSession, and the in-process simulator.

`Transport.send` turns (deployment, upstream protocol, wire JSON) into an
`UpstreamResponse`: a status, headers and an async iterator of body chunks;
`Transport.send_media` does the same for the OpenAI Images (JSON) and Audio
(multipart `Upload`) endpoints, which have no protocol module of their own. HTTP
deployments go through aiohttp; ``provider: simulated`` deployments are answered
in-process by `hopbase.sim` with the same interface, so the proxy has one path.

aiohttp defaults that bite, overridden here: ``ClientTimeout.total`` is off (a
stream may last many minutes; stuck detection lives in the proxy), the connector
limit is raised, redirects are never followed (the deployment key must reach
only its own ``base_url``), and the client's own headers are never forwarded.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import aiohttp
import attrs
import orjson
from aiohttp.abc import AbstractResolver, AbstractStreamWriter
from aiohttp.payload import Payload, StringPayload

from hopbase.config import DeploymentConfig, SimulatedConfig
from hopbase.sim.inprocess import RequestCounter, simulated_request
from hopbase.sim.media import simulated_media_request

ANTHROPIC_VERSION = "2023-06-01"

PATHS = {
    "openai_chat": "/chat/completions",
    "openai_responses": "/responses",
    "anthropic_messages": "/v1/messages",
}


class UpstreamResponse(Protocol):
    """What an upstream answered: status, headers, and the body as chunks."""

    status: int
    headers: Mapping[str, str]

    def iter_chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    def close(self) -> None: ...


class HttpResponse:
    """An aiohttp ClientResponse seen through `UpstreamResponse`."""

    __slots__ = ("_response", "status", "headers")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.headers: Mapping[str, str] = response.headers

    def iter_chunks(self) -> AsyncIterator[bytes]:
        # aiohttp's own iterator, not a generator around it: one frame less per stream
        return self._response.content.iter_any()

    async def read(self) -> bytes:
        return await self._response.read()

    def close(self) -> None:
        # close, not release: the connection is dropped at once rather than drained
        self._response.close()


def upstream_protocol(provider: str, client_protocol: str) -> str:
    """The wire protocol HopBase speaks to a deployment of ``provider`` (SPEC section 4)."""
    if provider == "anthropic":
        return "anthropic_messages"
    if provider == "openai":
        return "openai_chat" if client_protocol == "anthropic_messages" else client_protocol
    return client_protocol


def request_headers(
    deployment: DeploymentConfig, protocol: str, client_headers: Mapping[str, str]
) -> dict[str, str]:
    """Headers for one upstream request: content type, the deployment's key, extras."""
    headers = {"Content-Type": "application/json"}
    key = deployment.api_key.value if deployment.api_key is not None else ""
    if protocol == "anthropic_messages":
        headers["x-api-key"] = key
        headers["anthropic-version"] = client_headers.get("anthropic-version", ANTHROPIC_VERSION)
        beta = client_headers.get("anthropic-beta")
        if beta:
            headers["anthropic-beta"] = beta
    else:
        headers["Authorization"] = f"Bearer {key}"
    headers.update(deployment.resolved_headers)
    return headers


class Transport:
    """Sends upstream requests; owns the one ClientSession of the process."""

    def __init__(
        self, connect_timeout_s: float, resolver: AbstractResolver | None = None
    ) -> None:
        self._connect_timeout_s = connect_timeout_s
        # injectable so tests can make DNS fail without a real lookup leaving the machine
        self._resolver = resolver
        self._session: aiohttp.ClientSession | None = None
        self._simulated_counters: dict[str, RequestCounter] = {}

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(
            limit=0, limit_per_host=0, ttl_dns_cache=300, resolver=self._resolver
        )
        timeout = aiohttp.ClientTimeout(
            total=None, connect=None, sock_connect=self._connect_timeout_s
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            auto_decompress=True,
            skip_auto_headers=("User-Agent",),
            json_serialize=lambda value: orjson.dumps(value).decode(),
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(
        self,
        deployment: DeploymentConfig,
        protocol: str,
        body: dict[str, Any],
        client_headers: Mapping[str, str],
        headers_timeout_s: float,
    ) -> UpstreamResponse:
        """Send ``body`` and return once response headers arrived.

        Raises:
            asyncio.TimeoutError: no headers within ``headers_timeout_s``.
            aiohttp.ClientError, OSError: the connection failed.
        """
        if deployment.provider == "simulated":
            return await self._simulate(deployment, protocol, body)
        assert self._session is not None, "Transport.start() was not awaited"
        url = (deployment.base_url or "").rstrip("/") + PATHS[protocol]
        headers = request_headers(deployment, protocol, client_headers)
        async with asyncio.timeout(headers_timeout_s):
            response = await self._session.post(
                url, data=orjson.dumps(body), headers=headers, allow_redirects=False
            )
        return HttpResponse(response)

    async def _simulate(
        self, deployment: DeploymentConfig, protocol: str, body: dict[str, Any]
    ) -> UpstreamResponse:
        counter = self._simulated_counters.get(deployment.id)
        if counter is None:
            counter = self._simulated_counters[deployment.id] = RequestCounter()
        settings = deployment.simulated or SimulatedConfig()
        return await simulated_request(protocol, body, settings, counter)

    async def send_media(
        self,
        deployment: DeploymentConfig,
        path: str,
        body: dict[str, Any] | Upload,
        headers_timeout_s: float,
    ) -> UpstreamResponse:
        """Send an OpenAI media request to ``base_url`` + ``path``: JSON, or a multipart `Upload`.

        Raises:
            asyncio.TimeoutError: no headers within ``headers_timeout_s`` (the upload included).
            aiohttp.ClientError, OSError: the connection failed.
        """
        if deployment.provider == "simulated":
            return await self._simulate_media(deployment, path, body)
        assert self._session is not None, "Transport.start() was not awaited"
        url = (deployment.base_url or "").rstrip("/") + path
        headers = request_headers(deployment, "openai_media", {})
        data: bytes | aiohttp.MultipartWriter
        if isinstance(body, Upload):
            del headers["Content-Type"]  # aiohttp writes multipart/form-data with the boundary
            data = body.writer()
        else:
            data = orjson.dumps(body)
        async with asyncio.timeout(headers_timeout_s):
            response = await self._session.post(
                url, data=data, headers=headers, allow_redirects=False
            )
        return HttpResponse(response)

    async def _simulate_media(
        self, deployment: DeploymentConfig, path: str, body: dict[str, Any] | Upload
    ) -> UpstreamResponse:
        counter = self._simulated_counters.get(deployment.id)
        if counter is None:
            counter = self._simulated_counters[deployment.id] = RequestCounter()
        settings = deployment.simulated or SimulatedConfig()
        if isinstance(body, Upload):
            return await simulated_media_request(
                path, body.fields(), body.file_bytes(), settings, counter
            )
        return await simulated_media_request(path, body, 0, settings, counter)


@attrs.frozen
class FormPart:
    """One part of a multipart upload: a text field, or a file kept as the chunks it arrived in."""

    name: str
    text: str = ""
    filename: str | None = None
    content_type: str | None = None
    chunks: tuple[bytes, ...] = attrs.field(default=(), repr=False)

    @property
    def size(self) -> int:
        return sum(len(chunk) for chunk in self.chunks)


@attrs.frozen
class Upload:
    """A multipart/form-data body held once in memory and encoded afresh for each attempt.

    File parts keep the chunks they were read in, so sending never joins them into a
    second copy of the file.
    """

    parts: tuple[FormPart, ...]

    def fields(self) -> dict[str, str]:
        """The text fields by name (the last one wins when a name repeats)."""
        return {part.name: part.text for part in self.parts if part.filename is None}

    def file_bytes(self) -> int:
        """The size of every file part together."""
        return sum(part.size for part in self.parts if part.filename is not None)

    def with_field(self, name: str, text: str) -> Upload:
        """This upload with text field ``name`` set to ``text`` (replaced where it stands)."""
        return Upload(tuple(
            attrs.evolve(part, text=text)
            if part.name == name and part.filename is None else part
            for part in self.parts
        ))

    def writer(self) -> aiohttp.MultipartWriter:
        """A fresh multipart writer of this upload (a writer is used up by one request)."""
        writer = aiohttp.MultipartWriter("form-data")
        for part in self.parts:
            payload: Payload
            if part.filename is None:
                payload = StringPayload(part.text)
                payload.set_content_disposition("form-data", name=part.name)
            else:
                content_type = part.content_type or "application/octet-stream"
                payload = ChunksPayload(part.chunks, content_type=content_type)
                payload.set_content_disposition(
                    "form-data", name=part.name, filename=part.filename
                )
            writer.append_payload(payload)
        return writer


class ChunksPayload(Payload):
    """Bytes written chunk by chunk, with a known size, from chunks that are never joined."""

    _value: tuple[bytes, ...]

    def __init__(self, chunks: tuple[bytes, ...], content_type: str) -> None:
        super().__init__(chunks, content_type=content_type)
        self._size = sum(len(chunk) for chunk in chunks)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._value).decode(encoding, errors)

    async def as_bytes(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"".join(self._value)

    async def write(self, writer: AbstractStreamWriter) -> None:
        for chunk in self._value:
            await writer.write(chunk)
