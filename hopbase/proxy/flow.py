"""Which attempt comes next: retries across deployments, then fallback groups.

A `Plan` walks the requested model group and then its ``fallbacks`` in order.
Within a group it asks the admission queue for a lease on a deployment that has
not failed in this request, up to the group's ``max_attempts``; when the group
cannot answer (all cooling, no capacity past the queue timeout, attempts
exhausted) it moves to the next group. Every retry and hedge must be paid for
from the retry budget, so an incident cannot multiply load.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import attrs

from hopbase import canonical, errors
from hopbase.config import Config, RoutingConfig
from hopbase.proxy.attempt import Attempt
from hopbase.upstream import upstream_protocol
from routing import AllCoolingDown, Deployment, Lease, NoCapacity

if TYPE_CHECKING:
    from hopbase.gateway import Gateway


@attrs.define(eq=False)
class Exchange:
    """One client request on its way through HopBase."""

    id: str
    endpoint: str
    client: ModuleType  # the client protocol module
    request: canonical.Request
    body: dict[str, Any]
    client_headers: dict[str, str]
    key_name: str | None
    model_group: str
    started_at: float
    created_at: float
    attempts: list[Attempt] = attrs.field(factory=list)
    served_group: str | None = None
    cache: str | None = None
    client_disconnected: bool = False
    committed: bool = False  # the 200 SSE response went out
    error_type: str | None = None


def upstream_body(exchange: Exchange, protocol: ModuleType, upstream_model: str) -> dict[str, Any]:
    """The wire JSON for one upstream: the client's own body when protocols match."""
    if protocol is not exchange.client:
        return protocol.render_request(exchange.request, upstream_model)  # type: ignore[no-any-return]
    body = dict(exchange.body)
    body["model"] = upstream_model
    if body.get("stream") and protocol.NAME == "openai_chat":
        options = dict(body.get("stream_options") or {})
        options["include_usage"] = True
        body["stream_options"] = options
    return body


@attrs.define(eq=False)
class Plan:
    """The sequence of attempts one request may make."""

    gateway: Gateway
    exchange: Exchange
    groups: list[str]
    group_index: int = 0
    attempts_in_group: int = 0
    excluded: set[str] = attrs.field(factory=set)
    last_error: errors.GatewayError | None = None
    first_attempt_made: bool = False
    hedged: bool = False  # at most one hedge per request
    # the config the request started under: a reload changes new requests, not this one
    config: Config = attrs.field(kw_only=True)

    @classmethod
    def for_exchange(cls, gateway: Gateway, exchange: Exchange) -> Plan:
        """The plan of ``exchange`` under the config serving now (kept for its whole life)."""
        config = gateway.config
        groups = [exchange.model_group]
        for group in config.models[exchange.model_group].fallbacks:
            if group not in groups and group in config.models:
                groups.append(group)
        return cls(gateway, exchange, groups, config=config)

    def routing(self, group: str) -> RoutingConfig:
        """The routing settings of ``group`` in this request's config (a reload may drop it)."""
        return self.config.models[group].routing

    def note_failure(self, attempt: Attempt, error: errors.GatewayError) -> None:
        """Remember a failed attempt: never this deployment again in this request."""
        self.excluded.add(attempt.id)
        self.last_error = error

    async def next_attempt(self, hedge: bool = False) -> Attempt | errors.GatewayError:
        """A leased attempt on the next usable deployment, or the error to answer with.

        A retry or hedge is paid from the retry budget only when some deployment is
        left to try, so a request with nothing left never spends (or is refused) budget.
        """
        paid = not self.first_attempt_made
        while self.group_index < len(self.groups):
            group = self.groups[self.group_index]
            settings = self.routing(group)
            if self.attempts_in_group < settings.max_attempts and self._untried(group):
                if not paid:
                    if not self.gateway.spend_retry(self.exchange.model_group):
                        return self.last_error or errors.UpstreamFailed("retry budget exhausted")
                    paid = True
                result = await self.gateway.admission.acquire(
                    group, frozenset(self.excluded), settings.queue_timeout_s
                )
                if isinstance(result, Lease):
                    self.attempts_in_group += 1
                    return self._attempt(group, result, hedge)
                self.last_error = _capacity_error(result, self.last_error)
            elif not self._live(group):
                self.last_error = self.last_error or errors.GatewayError(
                    f"model {group!r} has no enabled deployment", status=503, code="no_deployment"
                )
            self.group_index += 1
            self.attempts_in_group = 0
        return self.last_error or errors.UpstreamFailed("no deployment could answer")

    async def hedge_for(self, running: Attempt) -> Attempt | None:
        """The one hedge of this request, on another deployment than ``running``; None if none."""
        self.hedged = True
        model = self.exchange.model_group
        self.excluded.add(running.id)
        try:
            hedge = await self.next_attempt(hedge=True)
        finally:
            self.excluded.discard(running.id)
        if isinstance(hedge, errors.GatewayError):
            self.gateway.hedged(model, "not_started")
            return None
        self.gateway.hedged(model, "started")
        return hedge

    def _live(self, group: str) -> Sequence[Deployment]:
        """The group's deployments in rotation now; none once a reload removed the group."""
        router = self.gateway.router
        return router.deployments(group) if group in router.groups() else ()

    def _untried(self, group: str) -> bool:
        return any(d.id not in self.excluded for d in self._live(group))

    def _attempt(self, group: str, lease: Lease, hedge: bool) -> Attempt:
        if not self.first_attempt_made:
            self.first_attempt_made = True
            self.gateway.budget(group).record_first_attempt()
        attempt = self.make_attempt(group, lease, hedge)
        self.exchange.attempts.append(attempt)
        return attempt

    def make_attempt(self, group: str, lease: Lease, hedge: bool) -> Attempt:
        """The attempt for ``lease``; subclasses for other endpoints override it."""
        deployment = self.gateway.deployment(lease.deployment.id)
        protocol_name = upstream_protocol(deployment.provider, self.exchange.client.NAME)
        protocol = self.gateway.protocols[protocol_name]
        return Attempt(lease, deployment, group, protocol, hedge=hedge)

    def body_for(self, attempt: Attempt) -> dict[str, Any]:
        return upstream_body(self.exchange, attempt.protocol, attempt.deployment.upstream_model)

    def headers_timeout(self, attempt: Attempt) -> float:
        if self.exchange.request.stream:
            return self.config.server.upstream_connect_timeout_s
        return self.routing(attempt.model_group).stuck_after_s


def _capacity_error(
    result: NoCapacity | AllCoolingDown, previous: errors.GatewayError | None
) -> errors.GatewayError:
    seconds = max(1.0, result.retry_after_s)
    capacity_errors = errors.RateLimited | errors.AllCoolingDown
    if previous is not None and not isinstance(previous, capacity_errors):
        return previous
    if isinstance(result, AllCoolingDown):
        return errors.AllCoolingDown(
            "every deployment of this model is cooling down", retry_after_s=seconds
        )
    return errors.RateLimited(
        "every deployment of this model is at capacity", retry_after_s=seconds
    )
