"""Prometheus metrics for HopBase, fed by the observer fan-out.

Every metric lives on the `Metrics` object's own `CollectorRegistry` (with the
process and platform collectors), so tests and several apps in one process never
share counters. The families and their labels are the ones in SPEC section 10,
plus ``hopbase_hedges_total{model,result}`` and
``hopbase_retry_budget_exhausted_total{model}``.

Cost on the hot path: ``observe_request`` runs once per finished request and
caches every label child in a dict keyed by its label tuple, because
``.labels()`` validates and locks on every call. The in-flight and cooldown
gauges are not updated on the hot path at all: a custom collector reads them
from the routing snapshots at scrape time, so they are always exact and fall
back to 0 by construction (no increment can ever be lost).

Histogram buckets (seconds) span what LLM calls take, from a cached or
very fast first token to a long reasoning answer::

    0.025 0.05 0.1 0.25 0.5 1 2.5 5 10 20 30 60 120 300

Label values are only model group names, deployment ids, endpoint names,
outcomes, statuses, reasons and cache results; never client keys or prompts. A
``model`` the client sent that is not a configured group (a typo, or a key pasted
into the wrong field) is reported as ``(unknown)``, which also keeps the label
cardinality bounded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import attrs
from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from hopbase.records import RequestRecord

LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
UNKNOWN_MODEL = "(unknown)"
_MODEL_REFRESH_INTERVAL_S = 1.0


class DeploymentSnapshot(Protocol):
    """The part of routing's deployment snapshot that metrics read."""

    @property
    def model_group(self) -> str: ...

    @property
    def id(self) -> str: ...

    @property
    def in_flight(self) -> int: ...

    @property
    def cooldown_active(self) -> bool: ...


class _Deployment(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def model_group(self) -> str: ...


class CooldownEvent(Protocol):
    """The part of routing's ``CooldownStarted`` event that metrics read."""

    @property
    def deployment(self) -> _Deployment: ...

    @property
    def reason(self) -> str: ...


@attrs.define
class _Children:
    """Label children of one metric, cached by label tuple."""

    _metric: MetricWrapperBase
    _cache: dict[tuple[str, ...], Any] = attrs.field(factory=dict)

    def get(self, *values: str) -> Any:
        """The child for these label values, created on first use."""
        child = self._cache.get(values)
        if child is None:
            child = self._cache[values] = self._metric.labels(*values)
        return child


@attrs.define(eq=False)  # the registry keys collectors by identity
class _SnapshotCollector(Collector):
    """Reads in-flight and cooldown gauges from routing snapshots at scrape time."""

    _snapshots: Callable[[], Iterable[DeploymentSnapshot]]
    _on_groups: Callable[[frozenset[str]], None]

    def describe(self) -> Iterator[Metric]:
        """The gauge families without samples, for the registry's duplicate check."""
        return iter(self._families())

    def collect(self) -> Iterator[Metric]:
        """One sample per deployment in each gauge."""
        in_flight, cooldown = self._families()
        groups = set()
        for snapshot in self._snapshots():
            labels = [snapshot.model_group, snapshot.id]
            in_flight.add_metric(labels, snapshot.in_flight)
            cooldown.add_metric(labels, 1.0 if snapshot.cooldown_active else 0.0)
            groups.add(snapshot.model_group)
        self._on_groups(frozenset(groups))
        return iter((in_flight, cooldown))

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily]:
        labels = ["model", "deployment"]
        in_flight = GaugeMetricFamily(
            "hopbase_deployment_in_flight", "Upstream requests in flight.", labels=labels
        )
        cooldown = GaugeMetricFamily(
            "hopbase_deployment_cooldown", "1 while the deployment is cooling down.", labels=labels
        )
        return in_flight, cooldown


class Metrics:
    """HopBase's Prometheus metrics on a private registry.

    Args:
        snapshots: returns routing's current deployment snapshots; called at scrape
            time for the in-flight and cooldown gauges, and (at most once a second)
            to learn the configured model groups when an unfamiliar one shows up.
        clock: monotonic seconds, injectable for tests.
    """

    def __init__(
        self,
        snapshots: Callable[[], Iterable[DeploymentSnapshot]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self._snapshots = snapshots
        self._clock = clock
        self._model_groups: frozenset[str] = frozenset()
        self._model_groups_read_at = float("-inf")
        self.registry.register(_SnapshotCollector(snapshots, self._set_model_groups))
        self._define_families()

    def _counter(self, name: str, documentation: str, *labels: str) -> _Children:
        return _Children(Counter(name, documentation, labels, registry=self.registry))

    def _histogram(self, name: str, documentation: str, *labels: str) -> _Children:
        metric = Histogram(
            name, documentation, labels, registry=self.registry, buckets=LATENCY_BUCKETS
        )
        return _Children(metric)

    def _define_families(self) -> None:
        """SPEC section 10's metrics, client side then upstream side."""
        counter, histogram = self._counter, self._histogram
        self._requests = counter(
            "hopbase_requests_total", "Client requests answered.", "endpoint", "model", "status"
        )
        self._request_duration = histogram(
            "hopbase_request_duration_seconds",
            "Client request time, arrival to last byte.",
            "endpoint",
            "model",
        )
        self._disconnects = counter(
            "hopbase_client_disconnects_total",
            "Clients gone before the answer ended.",
            "endpoint",
            "model",
        )
        self._keepalives = counter(
            "hopbase_keepalives_total", "Keepalive comments written.", "endpoint"
        )
        self._cache = counter("hopbase_cache_requests_total", "Cache lookups.", "result")
        self._define_upstream_families()

    def _define_upstream_families(self) -> None:
        counter, histogram = self._counter, self._histogram
        self._attempts = counter(
            "hopbase_upstream_attempts_total",
            "Upstream attempts by outcome.",
            "model",
            "deployment",
            "outcome",
        )
        self._first_output = histogram(
            "hopbase_upstream_first_output_seconds",
            "Upstream send to first upstream output chunk.",
            "model",
            "deployment",
        )
        self._last_chunk = histogram(
            "hopbase_upstream_last_chunk_seconds",
            "Upstream send to last upstream chunk.",
            "model",
            "deployment",
        )
        self._tokens = counter(
            "hopbase_tokens_total",
            "Tokens of successful attempts.",
            "model",
            "deployment",
            "kind",
        )
        self._cooldowns = counter(
            "hopbase_cooldowns_total", "Cooldowns started.", "model", "deployment", "reason"
        )
        self._retries = counter(
            "hopbase_retries_total", "Attempts beyond the first, hedges excluded.", "model"
        )
        self._hedges = counter("hopbase_hedges_total", "Hedge attempts.", "model", "result")
        self._budget_exhausted = counter(
            "hopbase_retry_budget_exhausted_total",
            "Retries or hedges refused by the retry budget.",
            "model",
        )

    def observe_request(self, record: RequestRecord) -> None:
        """Count one finished request and each of its upstream attempts."""
        model = self._model_label(record.model)
        self._requests.get(record.endpoint, model, str(record.status)).inc()
        self._request_duration.get(record.endpoint, model).observe(record.duration_s)
        if record.client_disconnected:
            self._disconnects.get(record.endpoint, model).inc()
        retries = 0
        for index, attempt in enumerate(record.attempts):
            group, deployment = attempt.model_group, attempt.deployment
            self._attempts.get(group, deployment, attempt.outcome).inc()
            if attempt.first_output_ms is not None:
                self._first_output.get(group, deployment).observe(attempt.first_output_ms / 1000)
            if attempt.last_chunk_ms is not None:
                self._last_chunk.get(group, deployment).observe(attempt.last_chunk_ms / 1000)
            if attempt.outcome == "success":
                self._tokens.get(group, deployment, "input").inc(attempt.input_tokens)
                self._tokens.get(group, deployment, "output").inc(attempt.output_tokens)
            if index > 0 and not attempt.hedge:
                retries += 1
        if retries:
            self._retries.get(model).inc(retries)

    def cooldown_started(self, event: CooldownEvent) -> None:
        """Count a cooldown that routing just started."""
        deployment = event.deployment
        self._cooldowns.get(deployment.model_group, deployment.id, event.reason).inc()

    def keepalive(self, endpoint: str) -> None:
        """Count one keepalive comment written to a client stream."""
        self._keepalives.get(endpoint).inc()

    def cache_result(self, result: str) -> None:
        """Count one cache lookup by its result (hit, miss, bypass)."""
        self._cache.get(result).inc()

    def hedge(self, model: str, result: str) -> None:
        """Count one hedge attempt and how it ended (for example won, lost)."""
        self._hedges.get(self._model_label(model), result).inc()

    def retry_budget_exhausted(self, model: str) -> None:
        """Count one retry or hedge that the retry budget refused."""
        self._budget_exhausted.get(self._model_label(model)).inc()

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type.

        ``generate_latest`` writes the classic text format (names escaped to
        underscores), which is version 0.0.4; that is the content type
        prometheus-client's own handler sends with it, and every Prometheus accepts it.
        """
        return generate_latest(self.registry), CONTENT_TYPE_PLAIN_0_0_4

    def _model_label(self, model: str) -> str:
        """``model`` if it is a configured group, else ``(unknown)``."""
        if model in self._model_groups:
            return model
        now = self._clock()
        if now - self._model_groups_read_at >= _MODEL_REFRESH_INTERVAL_S:
            self._set_model_groups(frozenset(s.model_group for s in self._snapshots()))
            self._model_groups_read_at = now
            if model in self._model_groups:
                return model
        return UNKNOWN_MODEL

    def _set_model_groups(self, groups: frozenset[str]) -> None:
        self._model_groups = groups
