"""Metrics: exact counter values after a scripted set of requests, gauges from snapshots."""

from __future__ import annotations

import re

import attrs
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hopbase.metrics import UNKNOWN_MODEL, Metrics
from hopbase.records import AttemptRecord, RequestRecord


@attrs.frozen
class FakeSnapshot:
    model_group: str
    id: str
    in_flight: int = 0
    max_in_flight: int = 0
    cooldown_active: bool = False
    cooldown_reason: str | None = None
    cooldown_seconds_left: float = 0.0
    consecutive_cooldowns: int = 0
    failures_in_window: int = 0
    first_output_s: float | None = None
    tokens_per_s: float | None = None
    rpm: int = 0
    tpm: int = 0


@attrs.frozen
class FakeDeployment:
    id: str
    model_group: str


@attrs.frozen
class FakeCooldownStarted:
    deployment: FakeDeployment
    reason: str
    seconds: float
    consecutive: int


@attrs.define
class FakeClock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(metrics: Metrics) -> Samples:
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain; version=0.0.4")
    found: Samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def label_values(found: Samples) -> set[str]:
    return {value for _, labels in found for _, value in labels}


def attempt(deployment: str, outcome: str, status: int | None, **fields: object) -> AttemptRecord:
    return AttemptRecord(deployment, "demo", outcome, status, duration_ms=40.0, **fields)  # type: ignore[arg-type]


def request(request_id: str, *attempts: AttemptRecord, **fields: object) -> RequestRecord:
    defaults: dict[str, object] = dict(
        id=request_id, created_at=1_800_000_000.0, endpoint="chat.completions", model="demo",
        key="team-a", stream=True, status=200, duration_s=1.5, attempts=attempts,
    )
    defaults.update(fields)
    return RequestRecord(**defaults)  # type: ignore[arg-type]


SUCCESS = request(
    "req_1",
    attempt("sim-a", "success", 200, first_output_ms=100.0, last_chunk_ms=900.0,
            input_tokens=10, output_tokens=20),
)
RETRY_AFTER_429 = request(
    "req_2",
    attempt("sim-b", "rate_limited", 429),
    attempt("sim-a", "success", 200, first_output_ms=300.0, last_chunk_ms=2000.0,
            input_tokens=5, output_tokens=7),
)
RESET_MID_STREAM = request(
    "req_3",
    attempt("sim-a", "error", 200, first_output_ms=50.0, input_tokens=3, output_tokens=4,
            error_type="stream_interrupted"),
    error_type="stream_interrupted",
)
CLIENT_DISCONNECT = request(
    "req_4",
    attempt("sim-b", "cancelled", 200, first_output_ms=70.0, output_tokens=2),
    client_disconnected=True,
)


@pytest.fixture
def snapshots() -> list[FakeSnapshot]:
    return [
        FakeSnapshot("demo", "sim-a", in_flight=3, max_in_flight=8),
        FakeSnapshot("demo", "sim-b", cooldown_active=True, cooldown_reason="rate_limited"),
    ]


@pytest.fixture
def metrics(snapshots: list[FakeSnapshot]) -> Metrics:
    observed = Metrics(lambda: snapshots)
    for record in (SUCCESS, RETRY_AFTER_429, RESET_MID_STREAM, CLIENT_DISCONNECT):
        observed.observe_request(record)
    return observed


def test_requests_and_duration(metrics: Metrics) -> None:
    found = samples(metrics)
    labels = dict(endpoint="chat.completions", model="demo")
    assert value(found, "hopbase_requests_total", status="200", **labels) == 4
    assert value(found, "hopbase_request_duration_seconds_count", **labels) == 4
    assert value(found, "hopbase_request_duration_seconds_sum", **labels) == 6.0
    assert value(found, "hopbase_request_duration_seconds_bucket", le="1.0", **labels) == 0
    assert value(found, "hopbase_request_duration_seconds_bucket", le="2.5", **labels) == 4


def test_upstream_attempts_by_outcome(metrics: Metrics) -> None:
    found = samples(metrics)

    def attempts(deployment: str, outcome: str) -> float:
        return value(found, "hopbase_upstream_attempts_total",
                     model="demo", deployment=deployment, outcome=outcome)

    assert attempts("sim-a", "success") == 2
    assert attempts("sim-b", "rate_limited") == 1
    assert attempts("sim-a", "error") == 1
    assert attempts("sim-b", "cancelled") == 1
    assert ("hopbase_upstream_attempts_total", frozenset(
        dict(model="demo", deployment="sim-b", outcome="success").items())) not in found


def test_timing_histograms_only_for_attempts_that_have_them(metrics: Metrics) -> None:
    found = samples(metrics)
    sim_a = dict(model="demo", deployment="sim-a")
    assert value(found, "hopbase_upstream_first_output_seconds_count", **sim_a) == 3
    assert value(found, "hopbase_upstream_first_output_seconds_sum", **sim_a) == pytest.approx(0.45)
    assert value(found, "hopbase_upstream_first_output_seconds_bucket", le="0.1", **sim_a) == 2
    assert value(found, "hopbase_upstream_last_chunk_seconds_count", **sim_a) == 2
    assert value(found, "hopbase_upstream_last_chunk_seconds_sum", **sim_a) == pytest.approx(2.9)
    sim_b = dict(model="demo", deployment="sim-b")
    assert value(found, "hopbase_upstream_first_output_seconds_count", **sim_b) == 1
    assert ("hopbase_upstream_last_chunk_seconds_count", frozenset(sim_b.items())) not in found


def test_tokens_come_from_successful_attempts(metrics: Metrics) -> None:
    found = samples(metrics)
    sim_a = dict(model="demo", deployment="sim-a")
    assert value(found, "hopbase_tokens_total", kind="input", **sim_a) == 15
    assert value(found, "hopbase_tokens_total", kind="output", **sim_a) == 27
    sim_b = dict(model="demo", deployment="sim-b", kind="output")
    assert ("hopbase_tokens_total", frozenset(sim_b.items())) not in found


def test_retries_and_client_disconnects(metrics: Metrics) -> None:
    found = samples(metrics)
    assert value(found, "hopbase_retries_total", model="demo") == 1
    assert value(found, "hopbase_client_disconnects_total",
                 endpoint="chat.completions", model="demo") == 1


def test_hedge_attempt_is_not_a_retry(snapshots: list[FakeSnapshot]) -> None:
    metrics = Metrics(lambda: snapshots)
    metrics.observe_request(request(
        "req_5",
        attempt("sim-a", "cancelled", None),
        attempt("sim-b", "success", 200, hedge=True),
    ))
    metrics.hedge("demo", "won")
    found = samples(metrics)
    assert ("hopbase_retries_total", frozenset({("model", "demo")})) not in found
    assert value(found, "hopbase_hedges_total", model="demo", result="won") == 1


def test_gauges_are_read_from_snapshots_at_scrape_time(
    metrics: Metrics, snapshots: list[FakeSnapshot]
) -> None:
    found = samples(metrics)
    assert value(found, "hopbase_deployment_in_flight", model="demo", deployment="sim-a") == 3
    assert value(found, "hopbase_deployment_in_flight", model="demo", deployment="sim-b") == 0
    assert value(found, "hopbase_deployment_cooldown", model="demo", deployment="sim-a") == 0
    assert value(found, "hopbase_deployment_cooldown", model="demo", deployment="sim-b") == 1
    snapshots[:] = [FakeSnapshot("demo", "sim-a"), FakeSnapshot("demo", "sim-b")]
    found = samples(metrics)
    assert value(found, "hopbase_deployment_in_flight", model="demo", deployment="sim-a") == 0
    assert value(found, "hopbase_deployment_cooldown", model="demo", deployment="sim-b") == 0


def test_event_counters(metrics: Metrics) -> None:
    event = FakeCooldownStarted(FakeDeployment("sim-b", "demo"), "rate_limited", 30.0, 1)
    metrics.cooldown_started(event)
    metrics.cooldown_started(event)
    metrics.keepalive("messages")
    metrics.cache_result("hit")
    metrics.cache_result("hit")
    metrics.cache_result("miss")
    metrics.retry_budget_exhausted("demo")
    found = samples(metrics)
    assert value(found, "hopbase_cooldowns_total",
                 model="demo", deployment="sim-b", reason="rate_limited") == 2
    assert value(found, "hopbase_keepalives_total", endpoint="messages") == 1
    assert value(found, "hopbase_cache_requests_total", result="hit") == 2
    assert value(found, "hopbase_cache_requests_total", result="miss") == 1
    assert value(found, "hopbase_retry_budget_exhausted_total", model="demo") == 1


def test_unconfigured_model_never_becomes_a_label(snapshots: list[FakeSnapshot]) -> None:
    clock = FakeClock()
    metrics = Metrics(lambda: snapshots, clock=clock)
    secret = "sk-proj-AbCdEf0123456789AbCdEf0123456789"
    metrics.observe_request(request("req_6", model=secret, status=404, key=None))
    found = samples(metrics)
    assert value(found, "hopbase_requests_total",
                 endpoint="chat.completions", model=UNKNOWN_MODEL, status="404") == 1
    assert secret not in label_values(found)


def test_new_model_group_is_learned_from_snapshots(snapshots: list[FakeSnapshot]) -> None:
    clock = FakeClock()
    metrics = Metrics(lambda: snapshots, clock=clock)
    metrics.observe_request(request("req_7", model="demo"))
    snapshots.append(FakeSnapshot("later", "sim-c"))
    metrics.observe_request(request("req_8", model="later"))
    clock.now += 1.0
    metrics.observe_request(request("req_9", model="later"))
    found = samples(metrics)
    chat = dict(endpoint="chat.completions", status="200")
    assert value(found, "hopbase_requests_total", model="demo", **chat) == 1
    assert value(found, "hopbase_requests_total", model=UNKNOWN_MODEL, **chat) == 1
    assert value(found, "hopbase_requests_total", model="later", **chat) == 1


def test_no_secret_like_label_values(metrics: Metrics) -> None:
    secret_like = re.compile(r"^(sk-|sk_|Bearer |team-a$)|[A-Za-z0-9]{32,}")
    leaked = {label for label in label_values(samples(metrics)) if secret_like.search(label)}
    assert leaked == set()


def test_process_collectors_are_registered(metrics: Metrics) -> None:
    names = {name for name, _ in samples(metrics)}
    assert "python_info" in names
    assert "process_cpu_seconds_total" in names

