"""Operators' view: metrics after a scripted mix, the request log, admin auth, secrets (issue 5)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
from pathlib import Path

import aiohttp
import pytest

from tests.conftest import StartHopbase, openai_deployment
from tests.fakes.upstream import FakeUpstream, Reply, golden_events
from tests.functional.test_fallback_hedge_budget import metric_value, scrape

MESSAGES = [{"role": "user", "content": "hi"}]
CLIENT_KEY = "hb-client-sentinel-7f3a9c"
ADMIN_KEY = "hb-admin-sentinel-1b2c3d"
UPSTREAM_KEY = "sk-upstream-sentinel-9e8d7c"
AUTH = {"keys": [{"name": "team-a", "key_env": "CLIENT_KEY"}], "admin_key_env": "ADMIN_KEY"}
ENV = {"CLIENT_KEY": CLIENT_KEY, "ADMIN_KEY": ADMIN_KEY, "FAKE_UPSTREAM_KEY": UPSTREAM_KEY}


def pair(fake: FakeUpstream) -> dict:
    return {
        "gpt": {
            "deployments": [
                openai_deployment(fake, "a", weight=1_000_000),
                openai_deployment(fake, "b", weight=0.000001),
            ]
        }
    }


def as_client() -> dict[str, str]:
    return {"Authorization": f"Bearer {CLIENT_KEY}"}


def as_admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN_KEY}"}


async def scripted_mix(url: str, fake: FakeUpstream) -> list[bytes]:
    """success on a; 429 on a then b; reset mid-stream on b; client disconnect on b."""
    events = golden_events("chat_text.sse")
    fake.script("a", Reply.answer(), Reply.status(429, retry_after=30))
    fake.script(
        "b",
        Reply.answer(),
        Reply.stream(events[:3], then="reset"),
        Reply.golden("chat_text.sse", delay_s=0.3),
    )
    bodies = []
    async with aiohttp.ClientSession(headers=as_client()) as session:
        plain = {"model": "gpt", "messages": MESSAGES}
        again = {"model": "gpt", "messages": [{"role": "user", "content": "hi again"}]}
        for body in (plain, again, {**plain, "stream": True}):
            async with session.post(url + "/v1/chat/completions", json=body) as response:
                bodies.append(await response.read())
                assert response.status == 200
        response = await session.post(url + "/v1/chat/completions", json={**plain, "stream": True})
        await response.content.readuntil(b"The")
        response.close()
    await fake.wait_closed("b")
    await asyncio.sleep(0.1)
    return bodies


async def test_metrics_hold_exact_values_after_a_scripted_mix(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await hopbase(pair(fake), env=ENV, auth=AUTH)
    await scripted_mix(running.url, fake)
    text = await scrape(running.url)
    attempts = "hopbase_upstream_attempts_total"
    assert metric_value(text, attempts, deployment="a", outcome="success") == 1
    assert metric_value(text, attempts, deployment="a", outcome="rate_limited") == 1
    assert metric_value(text, attempts, deployment="b", outcome="success") == 1
    assert metric_value(text, attempts, deployment="b", outcome="error") == 1
    assert metric_value(text, attempts, deployment="b", outcome="cancelled") == 1
    assert (
        metric_value(
            text, "hopbase_client_disconnects_total", endpoint="chat.completions", model="gpt"
        )
        == 1
    )
    assert metric_value(text, "hopbase_retries_total", model="gpt") == 1
    assert metric_value(text, "hopbase_cooldowns_total", deployment="a", reason="rate_limited") == 1
    assert metric_value(text, "hopbase_deployment_in_flight", deployment="a") == 0
    assert metric_value(text, "hopbase_deployment_in_flight", deployment="b") == 0
    assert (
        metric_value(
            text, "hopbase_requests_total", endpoint="chat.completions", model="gpt", status="200"
        )
        == 4
    )


async def test_promtool_accepts_the_scrape_and_the_alert_rules(
    fake: FakeUpstream, hopbase: StartHopbase, tmp_path: Path
) -> None:
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool missing: `make test` installs Debian's prometheus"
    running = await hopbase(pair(fake), env=ENV, auth=AUTH)
    await scripted_mix(running.url, fake)
    scraped = await scrape(running.url)
    checked = subprocess.run(
        [promtool, "check", "metrics"], input=scraped.encode(), capture_output=True, check=False
    )
    assert checked.returncode == 0, checked.stderr.decode() + checked.stdout.decode()
    rules = Path(__file__).parents[2] / "deploy" / "alerts.yml"
    checked = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, check=False
    )
    assert checked.returncode == 0, checked.stdout.decode()


async def test_request_log_records_timelines_filters_pages_and_survives_restart(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    running = await hopbase(pair(fake), env=ENV, auth=AUTH)
    await scripted_mix(running.url, fake)
    await running.gateway.request_log.flush()  # type: ignore[union-attr]
    async with aiohttp.ClientSession(headers=as_admin()) as session:
        async with session.get(running.url + "/admin/logs") as response:
            page = await response.json()
        records = page["data"]
        assert [r["stream"] for r in records] == [True, True, False, False]
        disconnected, reset, retried, plain = records
        assert disconnected["clientDisconnected"] is True
        assert [a["outcome"] for a in retried["attempts"]] == ["rate_limited", "success"]
        assert retried["attempts"][0]["status"] == 429
        assert retried["deployment"] == "b"
        assert retried["firstOutputMs"] == retried["attempts"][1]["firstOutputMs"]
        assert reset["attempts"][0]["outcome"] == "error"
        assert plain["key"] == "team-a" and plain["usage"]["totalTokens"] > 0
        async with session.get(running.url + "/admin/logs", params={"deployment": "a"}) as response:
            assert [r["id"] for r in (await response.json())["data"]] == [
                retried["id"],
                plain["id"],
            ]
        async with session.get(
            running.url + "/admin/logs", params={"status": "200", "key": "team-a", "model": "gpt"}
        ) as response:
            assert len((await response.json())["data"]) == 4
        async with session.get(running.url + "/admin/logs", params={"limit": "3"}) as response:
            first = await response.json()
        async with session.get(
            running.url + "/admin/logs", params={"limit": "3", "cursor": first["nextCursor"]}
        ) as response:
            second = await response.json()
        assert [r["id"] for r in first["data"] + second["data"]] == [r["id"] for r in records]
        assert second["nextCursor"] is None
    await running.server.close()
    again = await hopbase(pair(fake), env=ENV, auth=AUTH)
    async with (
        aiohttp.ClientSession(headers=as_admin()) as session,
        session.get(again.url + "/admin/logs") as response,
    ):
        assert [r["id"] for r in (await response.json())["data"]] == [r["id"] for r in records]


@pytest.mark.parametrize(("headers", "status"), [({}, 401), (as_client(), 403), (as_admin(), 200)])
async def test_admin_needs_the_admin_key(
    fake: FakeUpstream, hopbase: StartHopbase, headers: dict, status: int
) -> None:
    running = await hopbase(pair(fake), env=ENV, auth=AUTH)
    async with aiohttp.ClientSession() as session:
        for path in ("/admin/logs", "/admin/deployments"):
            async with session.get(running.url + path, headers=headers) as response:
                assert response.status == status


async def test_admin_deployments_shows_live_state(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    fake.script("a", Reply.status(429, retry_after=30))
    running = await hopbase(pair(fake), env=ENV, auth=AUTH)
    async with aiohttp.ClientSession() as session:
        async with session.post(
            running.url + "/v1/chat/completions",
            headers=as_client(),
            json={"model": "gpt", "messages": MESSAGES},
        ) as response:
            assert response.status == 200
        async with session.get(running.url + "/admin/deployments", headers=as_admin()) as response:
            data = {d["id"]: d for d in (await response.json())["data"]}
    assert data["a"]["cooldown"]["active"] is True
    assert data["a"]["cooldown"]["reason"] == "rate_limited"
    assert 29 < data["a"]["cooldown"]["secondsLeft"] <= 30
    assert data["b"]["inFlight"] == 0 and data["b"]["firstOutputMs"] is not None
    assert data["b"]["rpm"] == 1
    assert set(data["a"]) == {
        "model",
        "id",
        "provider",
        "enabled",
        "inFlight",
        "maxInFlight",
        "cooldown",
        "failuresInWindow",
        "firstOutputMs",
        "tokensPerSecond",
        "rpm",
        "tpm",
    }


async def test_secrets_never_leak_and_never_reach_the_upstream(
    fake: FakeUpstream,
    hopbase: StartHopbase,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = {"error": {"message": f"bad request; you sent key {UPSTREAM_KEY}", "type": "x"}}
    fake.script(
        "a",
        Reply.status(400, body=echo),
        Reply.status(
            500, body={"error": {"message": f"internal: Authorization: Bearer {UPSTREAM_KEY}"}}
        ),
    )
    fake.default("b", Reply.status(401, body={"error": {"message": f"key {UPSTREAM_KEY} refused"}}))
    running = await hopbase(pair(fake), env=ENV, auth=AUTH)
    seen: list[bytes] = []
    async with aiohttp.ClientSession() as session:
        headers = {
            **as_client(),
            "Connection": "keep-alive, x-secret-hop",
            "Proxy-Authorization": "Basic abc",
            "TE": "trailers",
            "x-secret-hop": "1",
        }
        for _ in range(2):
            async with session.post(
                running.url + "/v1/chat/completions",
                headers=headers,
                json={"model": "gpt", "messages": MESSAGES},
            ) as response:
                seen.append(await response.read())
        await running.gateway.request_log.flush()  # type: ignore[union-attr]
        for path, auth in (
            ("/metrics", {}),
            ("/admin/logs", as_admin()),
            ("/admin/deployments", as_admin()),
        ):
            async with session.get(running.url + path, headers=auth) as response:
                seen.append(await response.read())
    assert b"[redacted]" in seen[0]
    captured = capsys.readouterr()
    everything = b"".join(seen) + (caplog.text + captured.out + captured.err).encode()
    assert UPSTREAM_KEY.encode() not in everything
    assert CLIENT_KEY.encode() not in everything
    assert ADMIN_KEY.encode() not in everything
    assert UPSTREAM_KEY not in repr(running.config)
    for recorded in fake.requests():
        values = " ".join(recorded.headers.values())
        assert CLIENT_KEY not in values
        lowered = {name.lower() for name in recorded.headers}
        assert not lowered & {"proxy-authorization", "te", "x-secret-hop", "x-api-key"}


async def test_per_key_rpm_ceiling_answers_429_with_retry_after(
    fake: FakeUpstream, hopbase: StartHopbase
) -> None:
    auth = {**AUTH, "keys": [{"name": "team-a", "key_env": "CLIENT_KEY", "rpm": 2}]}
    running = await hopbase(pair(fake), env=ENV, auth=auth)
    statuses = []
    async with aiohttp.ClientSession(headers=as_client()) as session:
        for index in range(3):
            body = {"model": "gpt", "messages": [{"role": "user", "content": f"q{index}"}]}
            async with session.post(running.url + "/v1/chat/completions", json=body) as response:
                statuses.append(response.status)
                last = response
                payload = await response.json()
    assert statuses == [200, 200, 429]
    assert 55 <= int(last.headers["Retry-After"]) <= 60
    assert payload["error"]["type"] == "rate_limit_error"
    assert len(fake.requests()) == 2


async def test_no_cors_headers_unless_configured(fake: FakeUpstream, hopbase: StartHopbase) -> None:
    plain = await hopbase(pair(fake))
    allowed = await hopbase(pair(fake), server={"cors_origins": ["https://app.example"]})
    origin = {"Origin": "https://app.example"}
    async with aiohttp.ClientSession() as session:
        async with session.get(plain.url + "/v1/models", headers=origin) as response:
            assert "Access-Control-Allow-Origin" not in response.headers
        async with session.get(allowed.url + "/v1/models", headers=origin) as response:
            assert response.headers["Access-Control-Allow-Origin"] == "https://app.example"
        async with session.get(
            allowed.url + "/v1/models", headers={"Origin": "https://evil.example"}
        ) as response:
            assert "Access-Control-Allow-Origin" not in response.headers
        async with session.options(
            allowed.url + "/v1/chat/completions", headers=origin
        ) as response:
            assert response.status == 204
            assert "Authorization" in response.headers["Access-Control-Allow-Headers"]
