"""The services one HopBase process runs on, built from a `Config`.

`Gateway` holds the config, the router and its admission queue, the upstream
transport, the retry budgets, the observers (metrics, request log), the
secret redactor and, with ``state.backend: redis``, the shared state. Views
reach it through ``app[GATEWAY]``. Observers hang off `Gateway.observe`: they
watch and never steer routing.
"""

from __future__ import annotations

import asyncio
import logging
import random
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs

from hopbase import protocols
from hopbase.admission import Admission
from hopbase.auth import ClientLimiter, KeyRing
from hopbase.cache import ResponseCache
from hopbase.config import CacheConfig, Config, DeploymentConfig, ModelConfig, RoutingConfig
from hopbase.logs import RequestLog
from hopbase.metrics import Metrics
from hopbase.proxy.attempt import Attempt
from hopbase.proxy.flow import Exchange
from hopbase.records import RequestRecord
from hopbase.upstream import Transport
from routing import (
    Clock,
    CooldownSettings,
    Deployment,
    GroupPolicy,
    RetryBudget,
    Router,
    SystemClock,
)

if TYPE_CHECKING:
    from hopbase.state import RedisState

log = logging.getLogger("hopbase")


def routing_deployments(config: Config) -> dict[str, list[Deployment]]:
    """The enabled deployments of every model group, as the router sees them."""
    return {
        group: [
            Deployment(
                id=deployment.id,
                model_group=group,
                weight=deployment.weight,
                max_in_flight=deployment.max_in_flight,
                rpm=deployment.rpm,
                tpm=deployment.tpm,
            )
            for deployment in model.deployments
            if deployment.enabled
        ]
        for group, model in config.models.items()
    }


def group_policy(settings: RoutingConfig) -> GroupPolicy:
    cooldown = settings.cooldown
    return GroupPolicy(
        strategy=settings.strategy,
        cooldown=CooldownSettings(
            allowed_fails=cooldown.allowed_fails,
            window_s=cooldown.window_s,
            base_s=cooldown.base_s,
            max_s=cooldown.max_s,
        ),
        explore_ratio=settings.explore_ratio,
        tie_buffer=settings.tie_buffer,
        half_life_s=settings.half_life_s,
    )


def routing_policies(config: Config) -> dict[str, GroupPolicy]:
    return {group: group_policy(model.routing) for group, model in config.models.items()}


def build_cache(settings: CacheConfig, clock: Clock, state: RedisState | None) -> ResponseCache:
    """The response cache: in Redis when routing state is shared there, else in memory."""
    if state is None or not settings.enabled:
        return ResponseCache.build(settings, clock)
    from hopbase.state.cache import RedisStore  # redis-py loads only with state.backend redis

    return ResponseCache(RedisStore(state.client, settings.ttl_s, clock))


@attrs.define
class Redactor:
    """Replaces every configured secret in a text with ``[redacted]``."""

    _secrets: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: Config) -> Redactor:
        values = [key.secret.value for key in config.client_keys]
        values += [
            deployment.api_key.value
            for model in config.models.values()
            for deployment in model.deployments
            if deployment.api_key is not None
        ]
        for secret in (config.admin_key, config.metrics_key):
            if secret is not None:
                values.append(secret.value)
        return cls(tuple(sorted({v for v in values if len(v) >= 4}, key=len, reverse=True)))

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, "[redacted]")
        return text


@attrs.define(eq=False)
class Gateway:
    """Everything a request needs, in one place."""

    config: Config
    router: Router
    admission: Admission
    transport: Transport
    metrics: Metrics
    request_log: RequestLog | None
    redact: Redactor
    keys: KeyRing
    clock: Clock
    cache: ResponseCache
    state: RedisState | None = None  # None: state.backend memory, routing state is local
    protocols: dict[str, ModuleType] = attrs.field(factory=lambda: dict(protocols.BY_NAME))
    open_relays: set[Any] = attrs.field(factory=set)  # streaming exchanges in flight
    client_limiter: ClientLimiter = attrs.field(factory=ClientLimiter)
    _budgets: dict[str, RetryBudget] = attrs.field(factory=dict)
    _deployments: dict[str, DeploymentConfig] = attrs.field(factory=dict)

    @classmethod
    def build(cls, config: Config, clock: Clock | None = None, seed: int | None = None) -> Gateway:
        clock = clock or SystemClock()
        router = Router(
            routing_deployments(config), routing_policies(config), clock, random.Random(seed)
        )
        metrics = Metrics(router.snapshot)
        router.add_cooldown_listener(metrics.cooldown_started)
        request_log = _request_log(config)
        state = None
        if config.state.backend == "redis":
            from hopbase.state import RedisState  # redis-py loads only when it is used

            state = RedisState.from_config(config.state, router, clock)
        gateway = cls(
            config=config,
            router=router,
            admission=Admission(router),
            transport=Transport(config.server.upstream_connect_timeout_s),
            metrics=metrics,
            request_log=request_log,
            redact=Redactor.from_config(config),
            keys=KeyRing.from_config(config),
            clock=clock,
            cache=build_cache(config.cache, clock, state),
            state=state,
        )
        gateway._index(config)
        gateway.client_limiter.configure(config)
        return gateway

    def _index(self, config: Config) -> None:
        self._deployments = {
            deployment.id: deployment
            for model in config.models.values()
            for deployment in model.deployments
        }

    def reload(self, config: Config) -> None:
        """Serve ``config`` from now on; routing state of surviving deployments is kept."""
        self.router.reconfigure(routing_deployments(config), routing_policies(config))
        old = self._deployments
        if config.cache != self.config.cache:
            self.cache = build_cache(config.cache, self.clock, self.state)
        if config.state != self.config.state:
            log.warning("state: changes to the state section take effect at the next restart")
        self.config = config
        self._index(config)
        # deployments removed by the reload stay reachable for the streams still on them
        for deployment_id, deployment in old.items():
            self._deployments.setdefault(deployment_id, deployment)
        self.redact = Redactor.from_config(config)
        self.keys = KeyRing.from_config(config)
        self.client_limiter.configure(config)

    def deployment(self, deployment_id: str) -> DeploymentConfig:
        return self._deployments[deployment_id]

    def model(self, group: str) -> ModelConfig | None:
        return self.config.models.get(group)

    def spend_retry(self, model_group: str) -> bool:
        """Ask the group's retry budget for one more attempt (a retry or a hedge)."""
        if self.budget(model_group).try_spend():
            return True
        self.metrics.retry_budget_exhausted(model_group)
        return False

    def budget(self, model_group: str) -> RetryBudget:
        budget = self._budgets.get(model_group)
        if budget is None:
            model = self.config.models.get(model_group)
            ratio = model.routing.retry_budget_ratio if model else 0.2
            budget = self._budgets[model_group] = RetryBudget(ratio, self.clock)
        return budget

    def hedge_delay(self, attempt: Attempt) -> float | None:
        """Seconds after which ``attempt`` gets a hedge, or None when the group has none."""
        model = self.config.models.get(attempt.model_group)
        if model is None or model.hedge is None:
            return None
        if model.hedge.after_s is not None:
            return model.hedge.after_s
        assert model.hedge.after_percentile is not None
        estimate = self.router.first_output_percentile(attempt.id, model.hedge.after_percentile)
        return estimate


    def keepalive(self, exchange: Exchange) -> None:
        self.metrics.keepalive(exchange.endpoint)

    def hedged(self, model_group: str, result: str) -> None:
        self.metrics.hedge(model_group, result)

    def observe(self, exchange: Exchange, status: int) -> RequestRecord:
        """Hand the finished exchange to the observers."""
        record = _record(exchange, status, asyncio.get_running_loop().time())
        self.metrics.observe_request(record)
        if record.cache is not None:
            self.metrics.cache_result(record.cache)
        if self.request_log is not None:
            self.request_log.write(record)
        return record


def _request_log(config: Config) -> RequestLog | None:
    """The request log ``config.logs`` asks for; None when it has nowhere to write."""
    settings = config.logs
    if settings.backend == "postgres":
        if config.log_dsn is None:
            return None  # loading the config already warned that the DSN variable is unset
        from hopbase.logs_postgres import PostgresBackend  # asyncpg loads only when used

        backend = PostgresBackend(config.log_dsn)
        return RequestLog(settings.path, settings.retention_days, backend=backend)
    return RequestLog(settings.path, settings.retention_days) if settings.path else None


def _record(exchange: Exchange, status: int, now: float) -> RequestRecord:
    attempts = tuple(attempt.record() for attempt in exchange.attempts)
    winner = next((a for a in reversed(attempts) if a.outcome == "success"), None)
    if winner is None and exchange.attempts and exchange.attempts[-1].output_started:
        winner = attempts[-1]
    served = winner or (attempts[-1] if attempts else None)
    return RequestRecord(
        id=exchange.id,
        created_at=exchange.created_at,
        endpoint=exchange.endpoint,
        model=exchange.model_group,
        key=exchange.key_name,
        stream=exchange.request.stream,
        status=status,
        duration_s=max(0.0, now - exchange.started_at),
        client_disconnected=exchange.client_disconnected,
        cache=exchange.cache,
        deployment=served.deployment if served else None,
        served_by_group=served.model_group if served else None,
        first_output_ms=winner.first_output_ms if winner else None,
        last_chunk_ms=winner.last_chunk_ms if winner else None,
        input_tokens=sum(a.input_tokens for a in attempts if a.outcome == "success" or a is winner),
        output_tokens=sum(
            a.output_tokens for a in attempts if a.outcome == "success" or a is winner
        ),
        attempts=attempts,
        error_type=exchange.error_type,
    )
