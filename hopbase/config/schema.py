"""The configuration schema: one frozen attrs class per section of ``deployments.yaml``.

Each YAML-settable field carries its own check in its metadata (`CHECK_KEY`); fields
marked `RESOLVED_KEY` are filled in at load time and are unknown keys in YAML.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs

# A field check: the parsed value → a problem message, or None when the value is fine.
Check = Callable[[Any], "str | None"]
# attrs metadata keys: a field's Check, and the mark of a field YAML cannot set.
CHECK_KEY = "hopbase_check"
RESOLVED_KEY = "hopbase_resolved"
PROVIDERS = ("openai", "anthropic", "simulated")
STRATEGIES = ("weighted", "latency", "throughput", "least-busy")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Header names whose values are credentials: they may only come from the environment.
SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})


def _above(limit: float) -> Check:
    return lambda value: None if value > limit else f"must be > {limit:g}"


def _at_least(limit: float) -> Check:
    return lambda value: None if value >= limit else f"must be >= {limit:g}"


def _between(low: float, high: float) -> Check:
    return lambda value: None if low < value < high else f"must be > {low:g} and < {high:g}"


def _one_of(*allowed: str) -> Check:
    return lambda value: None if value in allowed else (
        f"must be one of {', '.join(allowed)} (got {value!r})")


def env_name_problem(value: str) -> str | None:
    """The problem with ``value`` as an environment variable name, or None."""
    if _ENV_NAME.match(value):
        return None
    return "must be the name of an environment variable (letters, digits, _), not a secret"


def _ratio(value: float) -> str | None:
    return None if 0 <= value < 1 else "must be >= 0 and < 1"


def _error_status(status: int) -> str | None:
    return None if 400 <= status <= 599 else "must be an HTTP error status (400..599)"


def _non_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def _http_url(value: str) -> str | None:
    parts = urlsplit(value)
    return None if parts.scheme in ("http", "https") and parts.netloc else (
        "must be an http:// or https:// URL")


def _setting(default: Any = attrs.NOTHING, check: Check | None = None, **kwargs: Any) -> Any:
    """An attrs field read from YAML; ``check`` turns a parsed value into a problem or None."""
    return attrs.field(default=default, metadata={CHECK_KEY: check}, **kwargs)


def _resolved(default: Any, **kwargs: Any) -> Any:
    """An attrs field filled in at load time; YAML cannot set it (an unknown key)."""
    return attrs.field(default=default, kw_only=True, metadata={RESOLVED_KEY: True}, **kwargs)


def _redacted_url(url: str | None) -> str:
    """The repr of a URL with any password in it replaced."""
    if url is None:
        return "None"
    parts = urlsplit(url)
    if parts.password is None:
        return repr(url)
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return repr(parts._replace(netloc=netloc).geturl())


@attrs.frozen
class Secret:
    """A value read from the environment; its repr shows only the variable name."""

    env: str
    value: str = attrs.field(repr=False)


@attrs.frozen
class ServerConfig:
    """The listening socket and the stream and body limits."""

    host: str = _setting("127.0.0.1", _non_empty)
    port: int = _setting(8080, lambda port: None if 0 <= port <= 65535 else "must be 0..65535")
    keepalive_interval_s: float = _setting(10.0, _above(0))
    max_body_bytes: int = _setting(26214400, _above(0))
    upstream_connect_timeout_s: float = _setting(10.0, _above(0))
    max_sse_line_bytes: int = _setting(1048576, _above(0))
    shutdown_grace_s: float = _setting(30.0, _at_least(0))
    metrics_key_env: str | None = _setting(None, env_name_problem)
    send_timeout_s: float = _setting(30.0, _above(0))  # a client reading nothing this long: dropped
    stream_buffer_bytes: int = _setting(1048576, _above(0))  # upstream → client buffer per stream
    cors_origins: tuple[str, ...] = _setting(())


@attrs.frozen
class ClientKey:
    """A client key: ``name`` appears in logs and metrics, the key itself is in ``key_env``."""

    name: str = _setting(check=_non_empty)
    key_env: str = _setting(check=env_name_problem)
    rpm: int | None = _setting(None, _above(0))


@attrs.frozen
class AuthConfig:
    """Client keys (empty = open access) and the admin key variable."""

    keys: tuple[ClientKey, ...] = _setting(())
    admin_key_env: str | None = _setting("HOPBASE_ADMIN_KEY", env_name_problem)


@attrs.frozen
class CooldownConfig:
    """When failures put a deployment into cooldown, and for how long."""

    allowed_fails: int = _setting(3, _at_least(1))
    window_s: float = _setting(60.0, _above(0))
    base_s: float = _setting(30.0, _above(0))
    max_s: float = _setting(600.0, _above(0))


@attrs.frozen
class HedgeConfig:
    """One extra attempt after ``after_s`` or the deployment's own first-output percentile."""

    after_s: float | None = _setting(None, _above(0))
    after_percentile: float | None = _setting(None, _between(0, 100))


@attrs.frozen
class RoutingConfig:
    """Routing defaults; a model group may override each of them."""

    strategy: str = _setting("latency", _one_of(*STRATEGIES))
    max_attempts: int = _setting(3, _at_least(1))
    queue_timeout_s: float = _setting(30.0, _above(0))
    stuck_after_s: float = _setting(120.0, _above(0))
    retry_budget_ratio: float = _setting(0.2, _at_least(0))
    cooldown: CooldownConfig = _setting(attrs.Factory(CooldownConfig))
    explore_ratio: float = _setting(0.05, _ratio)
    tie_buffer: float = _setting(0.1, _at_least(0))
    half_life_s: float = _setting(60.0, _above(0))


# The routing settings a model group may override.
ROUTING_KEYS = tuple(field.name for field in attrs.fields(RoutingConfig))


@attrs.frozen
class SimulatedConfig:
    """How the built-in simulated provider behaves (timing, text and scripted failures)."""

    first_output_ms: float = _setting(50.0, _at_least(0))
    tokens_per_s: float = _setting(200.0, _above(0))
    output_tokens: int = _setting(32, _at_least(0))
    text: str | None = None
    fail_status: int | None = _setting(None, _error_status)
    fail_every: int = _setting(0, _at_least(0))  # 0 = never, N = every Nth request, 1 = always
    retry_after_s: float | None = _setting(None, _at_least(0))
    reset_after_chunks: int | None = _setting(None, _at_least(0))
    stall_after_chunks: int | None = _setting(None, _at_least(0))


@attrs.frozen
class DeploymentConfig:
    """One upstream deployment; the fields after ``streaming`` are resolved at load time."""

    id: str = _setting(check=_non_empty)
    provider: str = _setting(check=_one_of(*PROVIDERS))
    base_url: str | None = _setting(None, _http_url, repr=_redacted_url)
    api_key_env: str | None = _setting(None, env_name_problem)
    model: str | None = _setting(None, _non_empty)
    weight: float = _setting(1.0, _above(0))
    max_in_flight: int = _setting(0, _at_least(0))
    rpm: int | None = _setting(None, _above(0))
    tpm: int | None = _setting(None, _above(0))
    headers: Mapping[str, str] = _setting(attrs.Factory(dict), hash=False)
    simulated: SimulatedConfig | None = None
    streaming: bool = False  # the upstream streams audio transcriptions
    upstream_model: str = _resolved(attrs.Factory(lambda self: self.model or "", takes_self=True))
    api_key: Secret | None = _resolved(None)
    resolved_headers: Mapping[str, str] = _resolved(attrs.Factory(dict), repr=False, hash=False)
    enabled: bool = _resolved(True)
    disabled_reason: str | None = _resolved(None)


@attrs.frozen
class ModelConfig:
    """A model group: its deployments, fallbacks, hedge and routing overrides (None = inherit)."""

    deployments: tuple[DeploymentConfig, ...] = _setting()
    fallbacks: tuple[str, ...] = _setting(())
    hedge: HedgeConfig | None = None
    strategy: str | None = _setting(None, _one_of(*STRATEGIES))
    max_attempts: int | None = _setting(None, _at_least(1))
    queue_timeout_s: float | None = _setting(None, _above(0))
    stuck_after_s: float | None = _setting(None, _above(0))
    retry_budget_ratio: float | None = _setting(None, _at_least(0))
    cooldown: CooldownConfig | None = None  # merged over routing.cooldown at load time
    explore_ratio: float | None = _setting(None, _ratio)
    tie_buffer: float | None = _setting(None, _at_least(0))
    half_life_s: float | None = _setting(None, _above(0))
    routing: RoutingConfig = _resolved(attrs.Factory(RoutingConfig))


@attrs.frozen
class StateConfig:
    """Where routing state lives: this process (memory) or Redis shared by replicas.

    Attributes:
        backend: ``memory`` (each process on its own) or ``redis`` (shared).
        redis_url: the Redis server, ``redis://[:password@]host:port/db``.
        sync_interval_s: how often a replica publishes its load and estimates
            to Redis and reads the others' (cooldowns travel at once, by pub/sub).
        lease_s: how long a replica's published load counts after its last
            publication, so a replica that dies leaks no slots past it; keep it
            several sync intervals long.
    """

    backend: str = _setting("memory", _one_of("memory", "redis"))
    redis_url: str = _setting("redis://127.0.0.1:6379/0", _non_empty, repr=_redacted_url)
    sync_interval_s: float = _setting(0.2, _above(0))
    lease_s: float = _setting(3.0, _above(0))


@attrs.frozen
class LogsConfig:
    """The request log store."""

    backend: str = _setting("sqlite", _one_of("sqlite", "postgres"))
    path: str = _setting("hopbase.db", _non_empty)
    dsn_env: str = _setting("HOPBASE_LOG_DSN", env_name_problem)
    retention_days: int = _setting(30, _above(0))


@attrs.frozen
class CacheConfig:
    """The response cache for complete non-streaming answers."""

    enabled: bool = True
    ttl_s: float = _setting(600.0, _above(0))
    max_entries: int = _setting(10000, _above(0))
    max_bytes: int = _setting(67108864, _above(0))


@attrs.frozen
class ResolvedKey:
    """A client key whose variable is set."""

    name: str
    secret: Secret
    rpm: int | None = None


@attrs.frozen
class Config:
    """The whole validated configuration, with secrets resolved from the environment."""

    models: Mapping[str, ModelConfig] = attrs.field(hash=False)
    server: ServerConfig = attrs.Factory(ServerConfig)
    auth: AuthConfig = attrs.Factory(AuthConfig)
    routing: RoutingConfig = attrs.Factory(RoutingConfig)
    state: StateConfig = attrs.Factory(StateConfig)
    logs: LogsConfig = attrs.Factory(LogsConfig)
    cache: CacheConfig = attrs.Factory(CacheConfig)
    client_keys: tuple[ResolvedKey, ...] = ()
    admin_key: Secret | None = None
    metrics_key: Secret | None = None
    log_dsn: Secret | None = None
    warnings: tuple[str, ...] = ()
    source_path: str | None = None

    @property
    def open_access(self) -> bool:
        """True when ``auth.keys`` lists no key at all (not when the listed keys are unset)."""
        return not self.auth.keys


# The top-level sections besides ``models``, by key.
SECTIONS: dict[str, type] = {
    "server": ServerConfig, "auth": AuthConfig, "routing": RoutingConfig,
    "state": StateConfig, "logs": LogsConfig, "cache": CacheConfig,
}
