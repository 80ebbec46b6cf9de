"""Images and audio transcriptions end to end: openai SDK → HopBase → fake upstream or simulator."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from aiohttp.test_utils import TestServer

from hopbase import sse
from hopbase.config import SimulatedConfig
from hopbase.sim.media import PIXEL_PNG_BASE64
from hopbase.sim.server import make_sim_app
from tests.conftest import Running, StartHopbase, anthropic_deployment, openai_deployment
from tests.fakes import media
from tests.fakes.upstream import FakeUpstream, Reply

AUDIO = os.urandom(3 * 1024 * 1024)  # 3 MiB that no encoder could shrink or mangle unnoticed
IMAGE = {"model": "media", "prompt": "a fox"}


def client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def sent_body(fake: FakeUpstream, name: str) -> dict[str, Any]:
    """The body of the first request deployment ``name`` received (JSON or form fields)."""
    body = fake.requests(name)[0].body
    assert isinstance(body, dict)
    return body


def pair(fake: FakeUpstream, **extra: Any) -> dict[str, Any]:
    """Deployment a is (all but) always chosen first; b is the one left to retry on."""
    return {"deployments": [openai_deployment(fake, "a", weight=1_000_000, **extra),
                            openai_deployment(fake, "b", weight=0.000001, **extra)]}


async def raw_image_stream(url: str, body: dict[str, Any]) -> bytes:
    """The bytes of a streamed image answer, keepalives left out."""
    async with aiohttp.ClientSession() as session, session.post(
        url + "/v1/images/generations", json=body
    ) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        return (await response.read()).replace(sse.KEEPALIVE, b"")


async def start(hopbase: StartHopbase, fake: FakeUpstream, **extra: Any) -> Running:
    return await hopbase({"media": pair(fake, **extra)})


async def test_image_generation_passes_the_upstream_answer_through(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        result = await sdk.images.generate(model="media", prompt="a red fox", n=2, size="1024x1024")
    assert result.data is not None
    assert [(image.b64_json, image.revised_prompt) for image in result.data] == [
        (media.PIXEL_PNG_BASE64, "Hello from a"), (media.PIXEL_PNG_BASE64, "Hello from a")
    ]
    assert result.usage is not None and result.usage.output_tokens == 272
    sent = fake.requests("a")[0]
    assert sent.path == "/v1/images/generations"
    assert isinstance(sent.body, dict)
    assert (sent.body["model"], sent.body["prompt"], sent.body["n"]) == ("up-model", "a red fox", 2)
    assert sent.headers["authorization"] == "Bearer sk-upstream-secret-0000"
    assert running.snapshot("a").in_flight == 0


async def test_image_stream_yields_two_partials_then_completed(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        stream = await sdk.images.generate(model="media", prompt="a fox", stream=True,
                                           partial_images=2)
        events = [event async for event in stream]
    assert [event.type for event in events] == [
        "image_generation.partial_image", "image_generation.partial_image",
        "image_generation.completed",
    ]
    assert [getattr(event, "partial_image_index", None) for event in events] == [0, 1, None]
    assert events[-1].b64_json == media.PIXEL_PNG_BASE64
    assert sent_body(fake, "a")["partial_images"] == 2


async def test_image_stream_bytes_are_the_upstream_events_then_done(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    events = media.image_stream({"prompt": "a fox", "partial_images": 2})
    fake.script("a", Reply.stream(events))
    running = await start(hopbase, fake)
    received = await raw_image_stream(running.url, {**IMAGE, "stream": True, "partial_images": 2})
    assert received == b"".join(events) + sse.DONE


async def test_an_upstream_done_is_not_doubled(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    events = media.image_stream({"prompt": "a fox"}) + [sse.DONE]
    fake.script("a", Reply.stream(events))
    running = await start(hopbase, fake)
    received = await raw_image_stream(running.url, {**IMAGE, "stream": True})
    assert received == b"".join(events)


async def test_image_stream_cut_after_output_ends_with_an_error_then_done(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    events = media.image_stream({"prompt": "a fox", "partial_images": 2})
    fake.script("a", Reply.stream(events[:2], then="reset"))
    running = await start(hopbase, fake)
    received = await raw_image_stream(running.url, {**IMAGE, "stream": True, "partial_images": 2})
    error = {"error": {"message": "Response stream interrupted, please retry",
                       "type": "server_error", "code": "api_error"}}
    assert received == b"".join(events[:2]) + sse.encode(orjson.dumps(error)) + sse.DONE
    assert len(fake.requests("b")) == 0  # output had started: no retry
    assert running.snapshot("a").failures_in_window == 1


async def test_an_upstream_error_event_is_passed_through_then_done(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    events = media.image_stream({"prompt": "a fox", "partial_images": 1})
    error = b'event: error\ndata: {"type":"error","error":{"message":"moderation","code":null}}\n\n'
    fake.script("a", Reply.stream([events[0], error]))
    running = await start(hopbase, fake)
    received = await raw_image_stream(running.url, {**IMAGE, "stream": True, "partial_images": 1})
    assert received == events[0] + error + sse.DONE


async def test_image_500_from_a_is_retried_on_b(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    fake.script("a", Reply.status(500))
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        result = await sdk.images.generate(model="media", prompt="a fox")
    assert result.data is not None and result.data[0].revised_prompt == "Hello from b"
    assert [len(fake.requests(name)) for name in ("a", "b")] == [1, 1]
    assert running.snapshot("a").failures_in_window == 1
    assert running.snapshot("a").in_flight == running.snapshot("b").in_flight == 0


async def test_image_stream_500_from_a_is_retried_on_b(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(500))
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        stream = await sdk.images.generate(model="media", prompt="a fox", stream=True,
                                           partial_images=1)
        types = [event.type async for event in stream]
    assert types == ["image_generation.partial_image", "image_generation.completed"]
    assert [len(fake.requests(name)) for name in ("a", "b")] == [1, 1]


async def test_upstream_rejection_is_passed_back_and_not_retried(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(400))
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        with pytest.raises(openai.BadRequestError) as raised:
            await sdk.images.generate(model="media", prompt="a fox")
    assert raised.value.body == {"message": "fake status 400 from a", "param": None,
                                 "type": "invalid_request_error", "code": "upstream_rejected"}
    assert len(fake.requests("b")) == 0


async def test_anthropic_only_group_answers_400(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await hopbase({"claude": {"deployments": [anthropic_deployment(fake, "c")]}})
    async with client(running.url) as sdk:
        with pytest.raises(openai.BadRequestError) as raised:
            await sdk.images.generate(model="claude", prompt="a fox")
    assert raised.value.body == {
        "message": "model 'claude' has no openai deployment; "
                   "/v1/images/generations is served by openai deployments only",
        "type": "invalid_request_error", "param": None, "code": "invalid_request",
    }
    assert fake.requests() == []


async def test_a_mixed_group_sends_media_only_to_openai(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    deployments = [anthropic_deployment(fake, "c", weight=1_000_000), openai_deployment(fake, "a")]
    running = await hopbase({"mixed": {"deployments": deployments}})
    async with client(running.url) as sdk:
        for _ in range(3):
            await sdk.images.generate(model="mixed", prompt="a fox")
    assert [len(fake.requests(name)) for name in ("a", "c")] == [3, 0]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"prompt": "a fox"}, 400, "'model' is required and must be a string"),
        ({"model": "nope", "prompt": "a fox"}, 404, "model 'nope' does not exist"),
        ({"model": "media"}, 400, "'prompt' must be a string"),
        ({"model": "media", "prompt": "a fox", "stream": "yes"}, 400, "'stream' must be a boolean"),
    ],
)
async def test_bad_image_requests(
    fake: FakeUpstream, hopbase: StartHopbase, body: dict[str, Any], status: int, message: str
) -> None:
    running = await start(hopbase, fake)
    async with aiohttp.ClientSession() as session, session.post(
        running.url + "/v1/images/generations", json=body
    ) as response:
        assert response.status == status
        assert (await response.json())["error"]["message"] == message
    assert fake.requests() == []


async def test_transcription_of_a_3_mib_upload(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        transcript = await sdk.audio.transcriptions.create(
            file=("speech.mp3", AUDIO, "audio/mpeg"), model="media", language="en"
        )
    assert transcript.text == "Hello from a"
    sent = fake.requests("a")[0]
    assert sent.path == "/v1/audio/transcriptions"
    assert isinstance(sent.body, dict)
    assert sent.body["file"] == media.FormFile("speech.mp3", "audio/mpeg", AUDIO)
    assert (sent.body["model"], sent.body["language"]) == ("up-model", "en")
    assert sent.headers["authorization"] == "Bearer sk-upstream-secret-0000"


async def test_an_upload_is_sent_whole_again_on_retry(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(503))
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        transcript = await sdk.audio.transcriptions.create(file=("a.wav", AUDIO), model="media")
    assert transcript.text == "Hello from b"
    files = [sent_body(fake, name)["file"] for name in ("a", "b")]
    assert [file.data == AUDIO for file in files] == [True, True]


async def test_transcription_text_format_keeps_its_content_type(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    form = aiohttp.FormData()
    form.add_field("model", "media")
    form.add_field("response_format", "text")
    form.add_field("file", b"RIFF....WAVE", filename="a.wav", content_type="audio/wav")
    async with aiohttp.ClientSession() as session, session.post(
        running.url + "/v1/audio/transcriptions", data=form
    ) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
        assert await response.read() == b"Hello from a\n"


async def test_streamed_transcription_yields_deltas_then_done(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake, streaming=True)
    async with client(running.url) as sdk:
        stream = await sdk.audio.transcriptions.create(
            file=("a.wav", AUDIO[:50_000]), model="media", stream=True
        )
        events = [event async for event in stream]
    assert [(event.type, getattr(event, "delta", None)) for event in events] == [
        ("transcript.text.delta", "Hello"), ("transcript.text.delta", " from"),
        ("transcript.text.delta", " a"), ("transcript.text.done", None),
    ]
    assert events[-1].text == "Hello from a"  # type: ignore[union-attr]
    assert sent_body(fake, "a")["stream"] == "true"


async def test_streamed_transcription_needs_a_streaming_deployment(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        with pytest.raises(openai.BadRequestError) as raised:
            await sdk.audio.transcriptions.create(file=("a.wav", b"RIFF"), model="media",
                                                  stream=True)
    assert raised.value.body["message"] == (  # type: ignore[index]
        "model 'media' does not stream transcriptions: no deployment has streaming: true"
    )
    assert fake.requests() == []


async def test_oversize_upload_is_413(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await hopbase({"media": pair(fake)}, server={"max_body_bytes": 1024 * 1024})
    async with client(running.url) as sdk:
        with pytest.raises(openai.APIStatusError) as raised:
            await sdk.audio.transcriptions.create(file=("a.wav", AUDIO), model="media")
    assert raised.value.status_code == 413
    assert raised.value.body == {
        "message": "request body is larger than 1048576 bytes",
        "type": "invalid_request_error", "param": None, "code": "request_too_large",
    }
    assert fake.requests() == []


async def test_oversize_upload_without_content_length_is_413(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await hopbase({"media": pair(fake)}, server={"max_body_bytes": 1024 * 1024})

    async def audio() -> AsyncIterator[bytes]:
        for start_at in range(0, len(AUDIO), 65536):
            yield AUDIO[start_at:start_at + 65536]

    form = aiohttp.MultipartWriter("form-data")
    form.append("media").set_content_disposition("form-data", name="model")
    form.append(audio()).set_content_disposition("form-data", name="file", filename="a.wav")
    async with aiohttp.ClientSession() as session, session.post(
        running.url + "/v1/audio/transcriptions", data=form
    ) as response:
        assert response.status == 413
        assert (await response.json())["error"]["code"] == "request_too_large"
    assert fake.requests() == []


async def test_bad_uploads_are_400(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await start(hopbase, fake)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            running.url + "/v1/audio/transcriptions", data={"model": "media"}
        ) as response:
            assert response.status == 400
            assert (await response.json())["error"]["message"] == (
                "Content-Type must be multipart/form-data"
            )
        form = aiohttp.FormData({"model": "media"}, default_to_multipart=True)
        form.add_field("notes", "no file here")
        async with session.post(running.url + "/v1/audio/transcriptions", data=form) as response:
            assert response.status == 400
            assert (await response.json())["error"]["message"] == (
                "missing the 'file' part (the audio to transcribe)"
            )
    assert fake.requests() == []


async def test_client_gone_mid_image_stream_closes_the_upstream(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    events = media.image_stream({"prompt": "a fox", "partial_images": 3})
    fake.script("a", Reply.stream(events, delay_s=5.0))
    running = await start(hopbase, fake)
    body = {"model": "media", "prompt": "a fox", "stream": True, "partial_images": 3}
    async with aiohttp.ClientSession() as session, session.post(
        running.url + "/v1/images/generations", json=body
    ) as response:
        assert await response.content.readuntil(b"\n\n") == events[0]
    await fake.wait_closed("a")
    snapshot = running.snapshot("a")
    assert (snapshot.in_flight, snapshot.failures_in_window) == (0, 0)


async def test_media_requests_are_counted_and_logged(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        await sdk.images.generate(model="media", prompt="a fox")
        await sdk.audio.transcriptions.create(file=("a.wav", b"RIFF"), model="media")
    scraped = running.gateway.metrics.render()[0].decode()
    for endpoint in ("images.generations", "audio.transcriptions"):
        line = f'hopbase_requests_total{{endpoint="{endpoint}",model="media",status="200"}} 1.0'
        assert line in scraped.splitlines()


async def test_simulated_deployments_answer_images_and_transcriptions(
    hopbase: StartHopbase,
) -> None:
    simulated = {"id": "sim", "provider": "simulated", "streaming": True,
                 "simulated": {"first_output_ms": 1, "tokens_per_s": 400, "output_tokens": 3}}
    running = await hopbase({"sim": {"deployments": [simulated]}})
    async with client(running.url) as sdk:
        stream = await sdk.images.generate(model="sim", prompt="a fox", stream=True,
                                           partial_images=2)
        image_events = [event.type async for event in stream]
        transcript = await sdk.audio.transcriptions.create(file=("a.wav", AUDIO), model="sim")
        words = await sdk.audio.transcriptions.create(file=("a.wav", b"RIFF"), model="sim",
                                                      stream=True)
        deltas = [getattr(event, "delta", None) async for event in words]
    assert image_events == ["image_generation.partial_image"] * 2 + ["image_generation.completed"]
    assert transcript.text == "Lorem ipsum dolor."
    assert deltas == ["Lorem", " ipsum", " dolor.", None]


async def test_a_scripted_simulated_failure_is_retried_on_the_other_deployment(
    hopbase: StartHopbase,
) -> None:
    fast = {"first_output_ms": 1, "tokens_per_s": 1000, "output_tokens": 2}
    failing = {"id": "down", "provider": "simulated", "weight": 1_000_000,
               "simulated": {**fast, "fail_every": 1, "fail_status": 503}}
    healthy = {"id": "up", "provider": "simulated", "weight": 0.000001, "simulated": fast}
    running = await hopbase({"sim": {"deployments": [failing, healthy]}})
    async with client(running.url) as sdk:
        transcript = await sdk.audio.transcriptions.create(file=("a.wav", b"RIFF"), model="sim")
    assert transcript.text == "Lorem ipsum."
    assert running.snapshot("down").failures_in_window == 1


async def test_the_sim_server_speaks_images_and_transcriptions() -> None:
    settings = SimulatedConfig(first_output_ms=1, tokens_per_s=1000, output_tokens=2)
    server = TestServer(make_sim_app(settings))
    await server.start_server()
    try:
        async with client(str(server.make_url("")).rstrip("/")) as sdk:
            result = await sdk.images.generate(model="any", prompt="a fox", n=2)
            transcript = await sdk.audio.transcriptions.create(
                file=("a.wav", AUDIO), model="any", response_format="verbose_json"
            )
    finally:
        await server.close()
    assert result.data is not None
    assert [image.b64_json for image in result.data] == [PIXEL_PNG_BASE64, PIXEL_PNG_BASE64]
    assert (transcript.text, transcript.duration) == ("Lorem ipsum.", round(len(AUDIO) / 16000, 2))
