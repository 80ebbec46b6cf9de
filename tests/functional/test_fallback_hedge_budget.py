"""Fallback groups, hedged first output and the retry budget (issue 10)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import openai
from prometheus_client.parser import text_string_to_metric_families

from hopbase.logs import LogQuery
from tests.conftest import StartHopbase, anthropic_deployment, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply, golden_events

MESSAGES = [{"role": "user", "content": "hi"}]


def metric_value(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def scrape(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url + "/metrics") as response:
        return await response.text()


async def test_fallback_group_of_another_protocol_serves_under_the_asked_name(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.default("a1", Reply.status(429, retry_after=30))
    fake.default("a2", Reply.status(429, retry_after=30))
    running = await hopbase(
        {
            "group-a": {
                "fallbacks": ["group-b"],
                "deployments": [openai_deployment(fake, "a1"), openai_deployment(fake, "a2")],
            },
            "group-b": {"deployments": [anthropic_deployment(fake, "b1")]},
        }
    )
    async with openai.AsyncOpenAI(base_url=running.url + "/v1", api_key="x", max_retries=0) as sdk:
        raw = await sdk.chat.completions.with_raw_response.create(
            model="group-a", messages=MESSAGES
        )
    completion = raw.parse()
    assert completion.model == "group-a"
    assert completion.choices[0].message.content == "Hello from b1"
    assert raw.headers["x-hopbase-fallback"] == "group-b"
    assert fake.requests("b1")[0].path == "/v1/messages"
    log = running.gateway.request_log
    assert log is not None
    await log.flush()
    record = (await log.query(LogQuery()))[
        "data"
    ][0]
    assert record["deployment"] == "b1"
    assert record["fallback"] == "group-b"


async def test_fallback_loop_is_a_config_error() -> None:
    from hopbase.config import parse_config
    from hopbase.errors import ConfigError

    deployment = {"id": "x", "provider": "simulated"}
    document = {
        "models": {
            "a": {"fallbacks": ["b"], "deployments": [deployment]},
            "b": {"fallbacks": ["a"], "deployments": [{**deployment, "id": "y"}]},
        }
    }
    try:
        parse_config(document, {})
    except ConfigError as error:
        assert any("loop" in problem or "cycle" in problem for problem in error.problems)
    else:
        raise AssertionError("a fallback loop was accepted")


async def test_hedge_wins_with_the_fast_deployment_and_closes_the_slow_one(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.default("slow", Reply.golden("chat_text.sse", first_delay_s=2.0))
    fake.default("fast", Reply.golden("chat_text.sse", first_delay_s=0.05))
    running = await hopbase(
        {
            "gpt": {
                "hedge": {"after_s": 0.2},
                "deployments": [
                    openai_deployment(fake, "slow", weight=1_000_000),
                    openai_deployment(fake, "fast", weight=0.000001),
                ],
            }
        },
        routing={"stuck_after_s": 10},
    )
    started = time.monotonic()
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            running.url + "/v1/chat/completions",
            json={
                "model": "gpt",
                "messages": MESSAGES,
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ) as response,
    ):
        body = await response.read()
    elapsed = time.monotonic() - started
    assert body.replace(b": hopbase-keepalive\n\n", b"") == b"".join(golden_events("chat_text.sse"))
    assert elapsed < 1.0
    won_at = fake.connections("fast")[0].last_write_at
    await fake.wait_closed("slow", timeout=2.0)
    slow_closed = fake.connections("slow")[0].closed_at
    assert won_at is not None and slow_closed is not None
    assert slow_closed - won_at < 0.5
    snapshot = running.snapshot("slow")
    assert (snapshot.failures_in_window, snapshot.in_flight) == (0, 0)
    text = await scrape(running.url)
    assert metric_value(text, "hopbase_hedges_total", model="gpt", result="started") == 1
    assert (
        metric_value(
            text, "hopbase_upstream_attempts_total", deployment="slow", outcome="cancelled"
        )
        == 1
    )


async def test_non_stream_hedge_wins_with_the_fast_deployment(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.default("slow", Reply.answer(delay_s=2.0))
    fake.default("fast", Reply.answer(delay_s=0.05))
    running = await hopbase(
        {"gpt": {"hedge": {"after_s": 0.2}, "deployments": [
            openai_deployment(fake, "slow", weight=1_000_000),
            openai_deployment(fake, "fast", weight=0.000001),
        ]}},
        routing={"stuck_after_s": 10},
        cache={"enabled": False},
    )
    started = time.monotonic()
    async with aiohttp.ClientSession() as session, session.post(
        running.url + "/v1/chat/completions", json={"model": "gpt", "messages": MESSAGES}
    ) as response:
        body = await response.json()
    assert time.monotonic() - started < 1.0
    assert body["choices"][0]["message"]["content"] == "Hello from fast"
    await fake.wait_closed("slow", timeout=2.0)
    snapshot = running.snapshot("slow")
    assert (snapshot.failures_in_window, snapshot.in_flight) == (0, 0)
    text = await scrape(running.url)
    assert metric_value(text, "hopbase_hedges_total", model="gpt", result="started") == 1
    assert (
        metric_value(
            text, "hopbase_upstream_attempts_total", deployment="slow", outcome="cancelled"
        )
        == 1
    )
    assert (
        metric_value(text, "hopbase_upstream_attempts_total", deployment="fast", outcome="success")
        == 1
    )


async def test_retry_budget_bounds_attempts_when_everything_fails(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.default("a", Reply.status(500))
    fake.default("b", Reply.status(500))
    running = await hopbase(
        {"gpt": {"deployments": [openai_deployment(fake, "a"), openai_deployment(fake, "b")]}},
        routing={
            "max_attempts": 2,
            "retry_budget_ratio": 0.2,
            "cooldown": {"allowed_fails": 100000, "window_s": 60, "base_s": 30, "max_s": 600},
        },
    )
    async with aiohttp.ClientSession() as session:
        for _ in range(100):
            async with session.post(
                running.url + "/v1/chat/completions", json={"model": "gpt", "messages": MESSAGES}
            ) as response:
                assert response.status == 502
    attempts = len(fake.requests("a")) + len(fake.requests("b"))
    assert 100 <= attempts <= 100 * 1.2 + 3
    granted = attempts - 100
    refused = metric_value(
        await scrape(running.url), "hopbase_retry_budget_exhausted_total", model="gpt"
    )
    assert refused == 100 - granted
    await asyncio.sleep(0)
