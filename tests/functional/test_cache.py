"""The response cache and single-flight (issue 6, SPEC section 8).

End-to-end tests drive HopBase with the official SDKs against the scripted fake
upstream and count what the upstream saw; unit tests cover the in-memory LRU store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp
import anthropic
import openai
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from hopbase.cache import CachedAnswer, MemoryStore, ResponseCache, bypass_requested, cache_key
from routing import FakeClock
from tests.conftest import Running, StartHopbase, anthropic_deployment, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply

# Any: one plain list serves the openai and anthropic SDKs, whose TypedDicts differ
MESSAGES: Any = [{"role": "user", "content": "What is the capital of France?"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a place",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}}]
KEYS = {"KEY_A": "hb-client-key-aaaa", "KEY_B": "hb-client-key-bbbb", "ADMIN": "hb-admin-key-cccc"}
AUTH = {"keys": [{"name": "team-a", "key_env": "KEY_A"}, {"name": "team-b", "key_env": "KEY_B"}],
        "admin_key_env": "ADMIN"}
CACHE = {"enabled": True, "ttl_s": 600, "max_entries": 100}


def client(url: str, key: str = KEYS["KEY_A"]) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


async def start(hopbase: StartHopbase, fake: FakeUpstream, **sections: Any) -> Running:
    """HopBase with group ``gpt`` on openai deployment ``a`` and the two client keys."""
    models = {"gpt": {"deployments": [openai_deployment(fake, "a")]}}
    return await hopbase(models, env=KEYS, auth=AUTH, **{"cache": CACHE, **sections})


async def chat(sdk: openai.AsyncOpenAI, **extra: Any) -> tuple[str | None, str]:
    """One non-stream chat request: its x-hopbase-cache header and the answer's text."""
    raw = await sdk.chat.completions.with_raw_response.create(
        model="gpt", messages=MESSAGES, **extra
    )
    completion = raw.parse()
    return raw.headers.get("x-hopbase-cache"), completion.choices[0].message.content or ""


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for ``condition`` to hold: real network events cannot be driven by a fake clock."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def metric_value(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return 0.0


async def test_second_identical_request_is_a_hit_and_the_upstream_sees_one(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        first = await chat(sdk)
        second = await chat(sdk)
    assert first == ("miss", "Hello from a")
    assert second == ("hit", "Hello from a")
    assert len(fake.requests("a")) == 1
    text, _ = running.gateway.metrics.render()
    scraped = text.decode()
    assert metric_value(scraped, "hopbase_cache_requests_total", result="miss") == 1
    assert metric_value(scraped, "hopbase_cache_requests_total", result="hit") == 1


async def test_a_hit_is_logged_without_deployment(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        await chat(sdk)
        await chat(sdk)
    assert running.gateway.request_log is not None
    await running.gateway.request_log.flush()
    headers = {"Authorization": f"Bearer {KEYS['ADMIN']}"}
    async with aiohttp.ClientSession(headers=headers) as session, session.get(
        running.url + "/admin/logs"
    ) as response:
        hit, miss = (await response.json())["data"]
    assert (hit["cache"], hit["deployment"], hit["status"]) == ("hit", None, 200)
    assert hit["attempts"] == []
    assert (miss["cache"], miss["deployment"], miss["key"]) == ("miss", "a", "team-a")


async def test_requests_with_tools_bypass(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        first = await chat(sdk, tools=TOOLS)
        second = await chat(sdk, tools=TOOLS)
    assert (first[0], second[0]) == ("bypass", "bypass")
    assert len(fake.requests("a")) == 2


async def test_streams_always_go_upstream_without_a_cache_header(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        for _ in range(2):
            raw = await sdk.chat.completions.with_raw_response.create(
                model="gpt", messages=MESSAGES, stream=True
            )
            stream = raw.parse()
            assert isinstance(stream, openai.AsyncStream)
            chunks = [chunk async for chunk in stream]
            assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
                "Hello from a"
            )
            assert "x-hopbase-cache" not in raw.headers
    assert len(fake.requests("a")) == 2


async def test_tenants_never_share_answers(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await start(hopbase, fake)
    async with client(running.url, KEYS["KEY_A"]) as team_a, client(
        running.url, KEYS["KEY_B"]
    ) as team_b:
        results = [await chat(team_a), await chat(team_b), await chat(team_b)]
    assert [header for header, _ in results] == ["miss", "miss", "hit"]
    assert len(fake.requests("a")) == 2


async def test_twenty_concurrent_identical_requests_make_one_upstream_call(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.answer(delay_s=0.5))
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        results = await asyncio.gather(*(chat(sdk) for _ in range(20)))
    assert len(fake.requests("a")) == 1
    assert sorted(header or "" for header, _ in results) == ["hit"] * 19 + ["miss"]
    assert {text for _, text in results} == {"Hello from a"}
    assert running.gateway.cache.waiting == 0


async def test_an_upstream_error_is_not_cached(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    fake.script("a", Reply.status(500))
    running = await start(hopbase, fake)
    async with client(running.url) as sdk:
        try:
            await sdk.chat.completions.create(model="gpt", messages=MESSAGES)
        except openai.APIStatusError as error:
            failed = error.response
        else:
            raise AssertionError("the upstream error did not reach the client")
        assert (failed.status_code, failed.headers["x-hopbase-cache"]) == (502, "miss")
        assert await chat(sdk) == ("miss", "Hello from a")
        assert await chat(sdk) == ("hit", "Hello from a")
    assert len(fake.requests("a")) == 2


async def test_followers_of_a_failed_leader_run_their_own_requests(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.json({"error": {"message": "boom"}}, status=500, delay_s=0.5))
    running = await start(hopbase, fake)
    body = {"model": "gpt", "messages": MESSAGES}
    headers = {"Authorization": f"Bearer {KEYS['KEY_A']}"}

    async def post() -> tuple[int, str]:
        async with session.post(running.url + "/v1/chat/completions", json=body) as response:
            await response.read()
            return response.status, response.headers["x-hopbase-cache"]

    async with aiohttp.ClientSession(headers=headers) as session:
        leader = asyncio.create_task(post())
        await until(lambda: len(fake.requests("a")) == 1)
        followers = [asyncio.create_task(post()) for _ in range(3)]
        await until(lambda: running.gateway.cache.waiting == 3)
        results = [await leader] + [await follower for follower in followers]
    assert results == [(502, "miss")] + [(200, "miss")] * 3
    assert len(fake.requests("a")) == 4


async def test_a_leader_whose_client_leaves_does_not_strand_its_followers(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.answer(delay_s=5))
    running = await start(hopbase, fake)
    body = {"model": "gpt", "messages": MESSAGES}
    headers = {"Authorization": f"Bearer {KEYS['KEY_A']}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        url = running.url + "/v1/chat/completions"
        leader = asyncio.create_task(session.post(url, json=body))
        await until(lambda: len(fake.requests("a")) == 1)
        follower = asyncio.create_task(session.post(url, json=body))
        await until(lambda: running.gateway.cache.waiting == 1)
        leader.cancel()
        await fake.wait_closed("a")
        async with asyncio.timeout(2):
            response = await follower
        assert (response.status, response.headers["x-hopbase-cache"]) == (200, "miss")
        assert (await response.json())["choices"][0]["message"]["content"] == "Hello from a"
        response.release()
    assert len(fake.requests("a")) == 2
    async with client(running.url) as sdk:
        assert await chat(sdk) == ("hit", "Hello from a")


async def test_a_follower_whose_client_leaves_does_not_disturb_the_leader(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.answer(delay_s=0.5))
    running = await start(hopbase, fake)
    body = {"model": "gpt", "messages": MESSAGES}
    headers = {"Authorization": f"Bearer {KEYS['KEY_A']}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        url = running.url + "/v1/chat/completions"
        leader = asyncio.create_task(session.post(url, json=body))
        await until(lambda: len(fake.requests("a")) == 1)
        follower = asyncio.create_task(session.post(url, json=body))
        await until(lambda: running.gateway.cache.waiting == 1)
        follower.cancel()
        await until(lambda: running.gateway.cache.waiting == 0)
        response = await leader
        assert (response.status, response.headers["x-hopbase-cache"]) == (200, "miss")
        response.release()
    async with client(running.url) as sdk:
        assert await chat(sdk) == ("hit", "Hello from a")
    assert len(fake.requests("a")) == 1


async def test_cache_control_no_cache_neither_reads_nor_writes(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    no_cache = {"extra_headers": {"Cache-Control": "no-cache"}}
    async with client(running.url) as sdk:
        results = [await chat(sdk, **no_cache), await chat(sdk), await chat(sdk, **no_cache),
                   await chat(sdk)]
    assert [header for header, _ in results] == ["bypass", "miss", "bypass", "hit"]
    assert len(fake.requests("a")) == 3


async def test_entries_expire_after_ttl(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await start(hopbase, fake, cache={"ttl_s": 0.5})
    clock = FakeClock()
    running.gateway.cache = ResponseCache.build(running.config.cache, clock)
    async with client(running.url) as sdk:
        first = await chat(sdk)
        clock.advance(0.4)
        second = await chat(sdk)
        clock.advance(0.1)
        third = await chat(sdk)
    assert [first[0], second[0], third[0]] == ["miss", "hit", "miss"]
    assert len(fake.requests("a")) == 2


async def test_responses_are_cached_only_when_stateless(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await start(hopbase, fake)
    seen = []
    async with client(running.url) as sdk:
        for extra in ({"store": True}, {"store": True}, {}, {"store": False}, {"store": False},
                      {"store": False, "previous_response_id": "resp_1"}):
            raw = await sdk.responses.with_raw_response.create(
                model="gpt", input="What is the capital of France?", **extra
            )
            assert raw.parse().output_text == "Hello from a"
            seen.append(raw.headers.get("x-hopbase-cache"))
    assert seen == ["bypass", "bypass", "bypass", "miss", "hit", "bypass"]
    assert len(fake.requests("a")) == 5


async def test_messages_are_cached(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    models = {"claude": {"deployments": [anthropic_deployment(fake, "m")]}}
    running = await hopbase(models, env=KEYS, auth=AUTH, cache=CACHE)
    seen = []
    async with anthropic.AsyncAnthropic(
        base_url=running.url, api_key=KEYS["KEY_A"], max_retries=0
    ) as sdk:
        for _ in range(2):
            raw = await sdk.messages.with_raw_response.create(
                model="claude", max_tokens=64, messages=MESSAGES
            )
            message = await raw.parse()
            assert message.content[0].type == "text" and message.content[0].text == "Hello from m"
            seen.append(raw.headers.get("x-hopbase-cache"))
    assert seen == ["miss", "hit"]
    assert len(fake.requests("m")) == 1


async def test_a_hit_keeps_the_fallback_header(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    fake.default("a", Reply.status(500))
    models = {"gpt": {"fallbacks": ["backup"], "deployments": [openai_deployment(fake, "a")]},
              "backup": {"deployments": [openai_deployment(fake, "b")]}}
    running = await hopbase(models, env=KEYS, auth=AUTH, cache=CACHE)
    fallbacks = []
    async with client(running.url) as sdk:
        for expected in ("miss", "hit"):
            raw = await sdk.chat.completions.with_raw_response.create(
                model="gpt", messages=MESSAGES
            )
            assert raw.parse().choices[0].message.content == "Hello from b"
            assert raw.headers["x-hopbase-cache"] == expected
            fallbacks.append(raw.headers.get("x-hopbase-fallback"))
    assert fallbacks == ["backup", "backup"]
    assert (len(fake.requests("a")), len(fake.requests("b"))) == (1, 1)


async def test_disabled_cache_sends_no_header(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    running = await start(hopbase, fake, cache={"enabled": False})
    async with client(running.url) as sdk:
        results = [await chat(sdk), await chat(sdk)]
    assert results == [(None, "Hello from a"), (None, "Hello from a")]
    assert len(fake.requests("a")) == 2


def answer(size: int) -> CachedAnswer:
    return CachedAnswer(b"x" * size, "application/json")


async def test_store_evicts_the_least_recently_used_entry_past_max_entries() -> None:
    store = MemoryStore(ttl_s=60, max_entries=2, max_bytes=10_000, clock=FakeClock())
    await store.set("k1", answer(1))
    await store.set("k2", answer(2))
    assert await store.get("k1") == answer(1)  # k1 is now the most recent
    await store.set("k3", answer(3))
    assert [await store.get(key) for key in ("k1", "k2", "k3")] == [answer(1), None, answer(3)]
    assert len(store) == 2


async def test_store_evicts_by_bytes_and_skips_answers_over_the_budget() -> None:
    entry_size = answer(50).size + len("k1")
    store = MemoryStore(ttl_s=60, max_entries=100, max_bytes=2 * entry_size, clock=FakeClock())
    await store.set("k1", answer(50))
    await store.set("k2", answer(50))
    assert store.bytes_used == 2 * entry_size
    await store.set("k3", answer(50))
    assert [await store.get(key) for key in ("k1", "k2", "k3")] == [None, answer(50), answer(50)]
    await store.set("k4", answer(2 * entry_size))
    assert await store.get("k4") is None
    assert (len(store), store.bytes_used) == (2, 2 * entry_size)


async def test_store_replaces_an_entry_and_forgets_expired_ones() -> None:
    clock = FakeClock()
    store = MemoryStore(ttl_s=10, max_entries=10, max_bytes=10_000, clock=clock)
    await store.set("k", answer(100))
    await store.set("k", answer(10))
    assert (len(store), store.bytes_used) == (1, answer(10).size + 1)
    clock.advance(9.9)
    assert await store.get("k") == answer(10)
    clock.advance(0.1)
    assert await store.get("k") is None
    assert (len(store), store.bytes_used) == (0, 0)


def test_only_whole_successful_answers_are_storable() -> None:
    answer = web.Response(body=b"{}", headers={"Content-Type": "application/json",
                                                "x-hopbase-fallback": "backup"})
    assert CachedAnswer.of(answer) == CachedAnswer(b"{}", "application/json", "backup")
    assert CachedAnswer.of(web.Response(status=500, body=b"{}")) is None
    assert CachedAnswer.of(web.StreamResponse()) is None


def test_key_separates_tenants_endpoints_and_groups_but_not_key_order() -> None:
    body = {"model": "gpt", "messages": MESSAGES, "temperature": 0}
    reordered = {"temperature": 0, "messages": MESSAGES, "model": "gpt"}
    base = cache_key("chat.completions", "gpt", "team-a", body)
    assert cache_key("chat.completions", "gpt", "team-a", reordered) == base
    others = {cache_key("chat.completions", "gpt", "team-b", body),
              cache_key("chat.completions", "gpt", None, body),
              cache_key("responses", "gpt", "team-a", body),
              cache_key("chat.completions", "other", "team-a", body)}
    assert len(others) == 4 and base not in others


def test_cache_control_directives() -> None:
    assert bypass_requested({"Cache-Control": "no-cache"})
    assert bypass_requested({"Cache-Control": "max-age=0, No-Store"})
    assert not bypass_requested({"Cache-Control": "max-age=60"})
    assert not bypass_requested({})
