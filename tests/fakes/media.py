"""Realistic OpenAI Images and Audio transcription answers, for the fake upstream.

Field names follow the official SDK's typed models: ``openai.types.ImagesResponse``,
``ImageGenPartialImageEvent``, ``ImageGenCompletedEvent``,
``openai.types.audio.Transcription``, ``TranscriptionTextDeltaEvent`` and
``TranscriptionTextDoneEvent``. Image streams send ``event:`` + ``data:`` pairs,
transcription streams ``data:`` lines; neither ends with ``data: [DONE]``.
"""

from __future__ import annotations

import time
from typing import Any

import attrs
import orjson
from aiohttp import BodyPartReader, web

IMAGES_PATH = "/v1/images/generations"
TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
# A 1x1 transparent PNG.
PIXEL_PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
_IMAGE_SETTINGS = {"background": "opaque", "output_format": "png", "quality": "low"}


@attrs.frozen
class FormFile:
    """A file part of a multipart request, as the fake received it."""

    filename: str | None
    content_type: str | None
    data: bytes = attrs.field(repr=lambda data: f"<{len(data)} bytes>")


async def read_form(request: web.BaseRequest) -> dict[str, Any]:
    """A multipart body as fields: text as ``str``, files as `FormFile` (of any size)."""
    fields: dict[str, Any] = {}
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        data = bytearray()
        while chunk := await part.read_chunk():  # part.read() would stop at 1 MiB
            data += chunk
        if part.filename is None:
            fields[part.name or ""] = data.decode()
        else:
            content_type = part.headers.get("content-type")
            fields[part.name or ""] = FormFile(part.filename, content_type, bytes(data))
    return fields


def is_media(path: str) -> bool:
    """True for the Images and Audio transcription paths."""
    return path.endswith((IMAGES_PATH, TRANSCRIPTIONS_PATH))


def wants_stream(body: dict[str, Any]) -> bool:
    """``stream`` as JSON (a boolean) or as a form field (the text ``true``)."""
    return body.get("stream") is True or body.get("stream") == "true"


def _image_usage(body: dict[str, Any]) -> dict[str, Any]:
    text_tokens = max(1, len(str(body.get("prompt") or "")) // 4)
    return {
        "input_tokens": text_tokens,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": text_tokens},
        "output_tokens": 272,
        "total_tokens": text_tokens + 272,
    }


def image_answer(body: dict[str, Any], text: str) -> dict[str, Any]:
    """A whole ``ImagesResponse``; ``text`` is each image's ``revised_prompt``."""
    count = body.get("n") if isinstance(body.get("n"), int) else 1
    image: dict[str, Any] = {"b64_json": PIXEL_PNG_BASE64, "revised_prompt": text}
    if body.get("response_format") == "url":
        image = {"url": "https://images.fake.invalid/image.png", "revised_prompt": text}
    return {
        "created": int(time.time()), "data": [image] * max(1, count or 1),
        **_IMAGE_SETTINGS, "size": str(body.get("size") or "1024x1024"),
        "usage": _image_usage(body),
    }


def image_stream(body: dict[str, Any]) -> list[bytes]:
    """``partial_images`` partial-image events (0-3), then ``image_generation.completed``."""
    partials = body.get("partial_images")
    count = min(max(partials, 0), 3) if isinstance(partials, int) else 0
    common = {"b64_json": PIXEL_PNG_BASE64, "created_at": int(time.time()), **_IMAGE_SETTINGS,
              "size": str(body.get("size") or "1024x1024")}
    payloads: list[dict[str, Any]] = [
        {"type": "image_generation.partial_image", **common, "partial_image_index": index}
        for index in range(count)
    ]
    payloads.append({"type": "image_generation.completed", **common, "usage": _image_usage(body)})
    return [
        b"event: " + payload["type"].encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"
        for payload in payloads
    ]


def _transcript_usage(text: str) -> dict[str, Any]:
    output_tokens = len(text.split())
    return {"type": "tokens", "input_tokens": 14,
            "input_token_details": {"audio_tokens": 14, "text_tokens": 0},
            "output_tokens": output_tokens, "total_tokens": 14 + output_tokens}


def transcript_answer(body: dict[str, Any], text: str) -> tuple[bytes, str]:
    """A whole transcription in the request's ``response_format``, with its content type."""
    response_format = body.get("response_format") or "json"
    if response_format == "text":
        return text.encode() + b"\n", "text/plain; charset=utf-8"
    if response_format == "srt":
        return f"1\n00:00:00,000 --> 00:00:01,500\n{text}\n\n".encode(), "text/plain; charset=utf-8"
    if response_format == "vtt":
        return f"WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n{text}\n\n".encode(), "text/plain"
    if response_format == "verbose_json":
        verbose = {"task": "transcribe", "language": "english", "duration": 1.5, "text": text,
                   "segments": [], "usage": {"type": "duration", "seconds": 2}}
        return orjson.dumps(verbose), "application/json"
    return orjson.dumps({"text": text, "usage": _transcript_usage(text)}), "application/json"


def transcript_stream(text: str) -> list[bytes]:
    """One ``transcript.text.delta`` per word, then ``transcript.text.done``."""
    words = text.split(" ")
    pieces = [words[0]] + [" " + word for word in words[1:]]
    payloads: list[dict[str, Any]] = [
        {"type": "transcript.text.delta", "delta": piece, "logprobs": None} for piece in pieces
    ]
    payloads.append({"type": "transcript.text.done", "text": text, "logprobs": None,
                     "usage": _transcript_usage(text)})
    return [b"data: " + orjson.dumps(payload) + b"\n\n" for payload in payloads]
