"""What the simulated provider answers to OpenAI Images and Audio transcription requests.

`simulated_media_request` answers like `hopbase.sim.inprocess.simulated_request`
does for chat, with the same timing settings and scripted failures:

- ``/images/generations``: after ``first_output_ms`` plus ``output_tokens`` at
  ``tokens_per_s`` the image is done (a tiny PNG, ``n`` times, or URLs when
  ``response_format`` is ``url``). Streamed, ``partial_images`` (0-3) partial-image
  events are spread evenly up to then, followed by ``image_generation.completed``.
- ``/audio/transcriptions``: the transcript is the simulator's usual answer text,
  word by word on the chat schedule when streamed (``transcript.text.delta`` events,
  then ``transcript.text.done``); whole, it comes as ``json``, ``text``,
  ``verbose_json``, ``srt`` or ``vtt`` per ``response_format``. Audio input tokens
  are estimated from the upload's size.

Like real OpenAI streams these end without ``data: [DONE]``; HopBase adds it.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import Any

import orjson

from hopbase import canonical, sse
from hopbase.sim.generator import (
    RequestCounter,
    SimulatedAnswer,
    SimulatedSettings,
    answer_words,
    planned_failure,
)
from hopbase.sim.inprocess import JSON_HEADERS, STREAM_HEADERS, SimulatedResponse, error_body

IMAGES_PATH = "/images/generations"
TRANSCRIPTIONS_PATH = "/audio/transcriptions"
# A 1x1 transparent PNG: every simulated image, partial or final.
PIXEL_PNG_BASE64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
AUDIO_BYTES_PER_S = 16000  # about a 128 kbit/s upload
_MAX_PARTIAL_IMAGES = 3
Chunks = list[tuple[float, bytes]]


async def simulated_media_request(
    path: str,
    body: Mapping[str, Any],
    upload_bytes: int,
    settings: SimulatedSettings,
    counter_state: RequestCounter,
) -> SimulatedResponse:
    """Answer an OpenAI media request as a simulated deployment would.

    Args:
        path: ``/images/generations`` or ``/audio/transcriptions``.
        body: the JSON body, or the text fields of the multipart upload.
        upload_bytes: the size of the uploaded file (0 for images).
        settings: timing, text and scripted failures (`hopbase.config.SimulatedConfig`).
        counter_state: this deployment's `RequestCounter` (keep one per deployment).
    """
    request_id = "req_" + os.urandom(12).hex()
    failure = planned_failure(settings, counter_state.next())
    if failure is not None and failure.kind == "status":
        headers = {**JSON_HEADERS, "x-request-id": request_id}
        if failure.retry_after_s is not None:
            headers["retry-after"] = f"{failure.retry_after_s:g}"
        message = f"simulated failure ({failure.status})"
        error = error_body("openai_chat", failure.status, message)
        return SimulatedResponse(failure.status, headers, [(0.0, error)], False, None)
    stream = body.get("stream") in (True, "true", "True")
    if path == TRANSCRIPTIONS_PATH:
        chunks, content_type = _transcription(body, upload_bytes, settings, stream, request_id)
    else:
        chunks, content_type = _image(body, settings, stream)
    headers = {"content-type": content_type, "x-request-id": request_id}
    if stream:
        headers = {**STREAM_HEADERS, "x-request-id": request_id}
    return SimulatedResponse(200, headers, chunks, stream, failure)


def _image(
    body: Mapping[str, Any], settings: SimulatedSettings, stream: bool
) -> tuple[Chunks, str]:
    first_s = settings.first_output_ms / 1000.0
    done_s = first_s + settings.output_tokens / settings.tokens_per_s
    echo = {
        "background": "opaque", "output_format": "png", "quality": "low",
        "size": str(body.get("size") or "1024x1024"),
    }
    usage = _image_usage(body, settings)
    if stream:
        return _image_events(body, echo, usage, first_s, done_s), STREAM_HEADERS["content-type"]
    count = body["n"] if isinstance(body.get("n"), int) else 1
    image = {"b64_json": PIXEL_PNG_BASE64}
    if body.get("response_format") == "url":
        image = {"url": "https://sim.hopbase.invalid/image.png"}
    answer = {"created": int(time.time()), "data": [image] * max(1, count), **echo, "usage": usage}
    return [(done_s, orjson.dumps(answer))], JSON_HEADERS["content-type"]


def _image_usage(body: Mapping[str, Any], settings: SimulatedSettings) -> dict[str, Any]:
    prompt = body.get("prompt")
    text_tokens = math.ceil(len(prompt) / 4) if isinstance(prompt, str) else 0
    return {
        "input_tokens": text_tokens,
        "input_tokens_details": {"image_tokens": 0, "text_tokens": text_tokens},
        "output_tokens": settings.output_tokens,
        "total_tokens": text_tokens + settings.output_tokens,
    }


def _image_events(
    body: Mapping[str, Any], echo: dict[str, Any], usage: dict[str, Any], first_s: float,
    done_s: float,
) -> Chunks:
    partials = body.get("partial_images")
    count = min(max(partials, 0), _MAX_PARTIAL_IMAGES) if isinstance(partials, int) else 0
    created = int(time.time())
    chunks: Chunks = []
    for index in range(count):
        at_s = first_s + (done_s - first_s) * index / (count + 1)
        event = {"type": "image_generation.partial_image", "b64_json": PIXEL_PNG_BASE64,
                 "created_at": created, **echo, "partial_image_index": index}
        chunks.append((at_s, sse.encode(orjson.dumps(event), event["type"])))
    completed = {"type": "image_generation.completed", "b64_json": PIXEL_PNG_BASE64,
                 "created_at": created, **echo, "usage": usage}
    chunks.append((done_s, sse.encode(orjson.dumps(completed), completed["type"])))
    return chunks


def _transcription(
    body: Mapping[str, Any], upload_bytes: int, settings: SimulatedSettings, stream: bool,
    request_id: str,
) -> tuple[Chunks, str]:
    audio_tokens = max(1, upload_bytes // 1000)
    output_tokens = len(answer_words(settings))
    usage = {"type": "tokens", "input_tokens": audio_tokens,
             "input_token_details": {"audio_tokens": audio_tokens, "text_tokens": 0},
             "output_tokens": output_tokens, "total_tokens": audio_tokens + output_tokens}
    answer = SimulatedAnswer.create(settings, {}, str(body.get("model") or ""), request_id)
    parts = answer.response.parts
    text = "".join(part.text for part in parts if isinstance(part, canonical.TextPart))
    if stream:
        return _transcript_events(answer, text, usage), STREAM_HEADERS["content-type"]
    seconds = upload_bytes / AUDIO_BYTES_PER_S
    content, content_type = transcript_body(str(body.get("response_format") or "json"), text,
                                            seconds, usage)
    return [(answer.duration_s, content)], content_type


def _transcript_events(answer: SimulatedAnswer, text: str, usage: dict[str, Any]) -> Chunks:
    chunks: Chunks = []
    for step in answer.steps:
        data = b"".join(
            sse.encode(orjson.dumps({"type": "transcript.text.delta", "delta": event.text}))
            for event in step.events if isinstance(event, canonical.TextDelta)
        )
        if data:
            chunks.append((step.at_s, data))
    done = {"type": "transcript.text.done", "text": text, "usage": usage}
    chunks.append((answer.duration_s, sse.encode(orjson.dumps(done))))
    return chunks


def transcript_body(
    response_format: str, text: str, seconds: float, usage: dict[str, Any]
) -> tuple[bytes, str]:
    """A whole transcription answer in ``response_format``, with its content type."""
    if response_format == "text":
        return text.encode() + b"\n", "text/plain; charset=utf-8"
    if response_format in ("srt", "vtt"):
        return _subtitles(response_format, text, seconds), "text/plain; charset=utf-8"
    if response_format == "verbose_json":
        segment = {"id": 0, "seek": 0, "start": 0.0, "end": round(seconds, 2), "text": text,
                   "tokens": [], "temperature": 0.0, "avg_logprob": -0.1,
                   "compression_ratio": 1.0, "no_speech_prob": 0.0}
        verbose = {"task": "transcribe", "language": "english", "duration": round(seconds, 2),
                   "text": text, "segments": [segment],
                   "usage": {"type": "duration", "seconds": math.ceil(seconds)}}
        return orjson.dumps(verbose), JSON_HEADERS["content-type"]
    return orjson.dumps({"text": text, "usage": usage}), JSON_HEADERS["content-type"]


def _subtitles(kind: str, text: str, seconds: float) -> bytes:
    separator = "," if kind == "srt" else "."
    end = f"{int(seconds // 3600):02d}:{int(seconds % 3600 // 60):02d}:{seconds % 60:06.3f}"
    cue = f"00:00:00{separator}000 --> {end.replace('.', separator)}\n{text}\n"
    return (f"1\n{cue}\n" if kind == "srt" else f"WEBVTT\n\n{cue}\n").encode()
