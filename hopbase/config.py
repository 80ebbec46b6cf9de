"""The gateway configuration: ``deployments.yaml`` as frozen attrs classes.

Loading goes ``yaml`` → cattrs (unknown keys forbidden, strict scalar types, a
check per field) → cross-field and file-wide checks (provider needs, hedge,
duplicate ids, the fallback graph) → one `ConfigError` listing every problem by
dotted path, e.g. ``models.gpt-5.6-sol.deployments[1].weight: must be > 0``.
Field problems are collected everywhere at once; the cross-field checks run on
each model group that structured cleanly. Only then is the environment read:
secrets are never written inline, each ``*_env`` key names a variable, and a
deployment whose variables are unset is disabled with a warning instead of
failing the whole file.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, get_args, get_origin
from urllib.parse import urlsplit

import attrs
import cattrs
import yaml
from cattrs.cols import homogenous_tuple_structure_factory
from cattrs.errors import (
    BaseValidationError,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn, mapping_structure_factory, override

from hopbase.errors import ConfigError

_Check = Callable[[Any], "str | None"]
_CHECK = "hopbase_check"
_RESOLVED = "hopbase_resolved"
PROVIDERS = ("openai", "anthropic", "simulated")
STRATEGIES = ("weighted", "latency", "throughput", "least-busy")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Header names whose values are credentials: they may only come from the environment.
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key"})


def _above(limit: float) -> _Check:
    return lambda value: None if value > limit else f"must be > {limit:g}"


def _at_least(limit: float) -> _Check:
    return lambda value: None if value >= limit else f"must be >= {limit:g}"


def _between(low: float, high: float) -> _Check:
    return lambda value: None if low < value < high else f"must be > {low:g} and < {high:g}"


def _one_of(*allowed: str) -> _Check:
    return lambda value: None if value in allowed else (
        f"must be one of {', '.join(allowed)} (got {value!r})")


def _env_name(value: str) -> str | None:
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


def _setting(default: Any = attrs.NOTHING, check: _Check | None = None, **kwargs: Any) -> Any:
    """An attrs field read from YAML; ``check`` turns a parsed value into a problem or None."""
    return attrs.field(default=default, metadata={_CHECK: check}, **kwargs)


def _resolved(default: Any, **kwargs: Any) -> Any:
    """An attrs field filled in at load time; YAML cannot set it (an unknown key)."""
    return attrs.field(default=default, kw_only=True, metadata={_RESOLVED: True}, **kwargs)


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
    metrics_key_env: str | None = _setting(None, _env_name)
    send_timeout_s: float = _setting(30.0, _above(0))  # a client reading nothing this long: dropped
    stream_buffer_bytes: int = _setting(1048576, _above(0))  # upstream → client buffer per stream
    cors_origins: tuple[str, ...] = _setting(())


@attrs.frozen
class ClientKey:
    """A client key: ``name`` appears in logs and metrics, the key itself is in ``key_env``."""

    name: str = _setting(check=_non_empty)
    key_env: str = _setting(check=_env_name)
    rpm: int | None = _setting(None, _above(0))


@attrs.frozen
class AuthConfig:
    """Client keys (empty = open access) and the admin key variable."""

    keys: tuple[ClientKey, ...] = _setting(())
    admin_key_env: str | None = _setting("HOPBASE_ADMIN_KEY", _env_name)


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


_ROUTING_KEYS = tuple(field.name for field in attrs.fields(RoutingConfig))


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
    api_key_env: str | None = _setting(None, _env_name)
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
    """Where routing state lives: this process (memory) or Redis shared by replicas."""

    backend: str = _setting("memory", _one_of("memory", "redis"))
    redis_url: str = _setting("redis://127.0.0.1:6379/0", _non_empty, repr=_redacted_url)


@attrs.frozen
class LogsConfig:
    """The request log store."""

    backend: str = _setting("sqlite", _one_of("sqlite", "postgres"))
    path: str = _setting("hopbase.db", _non_empty)
    dsn_env: str = _setting("HOPBASE_LOG_DSN", _env_name)
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


_SECTIONS: dict[str, type] = {
    "server": ServerConfig, "auth": AuthConfig, "routing": RoutingConfig,
    "state": StateConfig, "logs": LogsConfig, "cache": CacheConfig,
}


class _Invalid(ValueError):
    """A value problem whose message is already operator-ready."""


def _describe(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "a mapping", type(None): "nothing (null)"}
    return names.get(type(value), type(value).__name__)


def _strict(expected: str, accepts: Callable[[Any], bool],
            convert: Callable[[Any], Any] = lambda value: value) -> Callable[[Any, Any], Any]:
    """A scalar hook that rejects cattrs' lenient coercions (``bool('false')``, ``int(2.7)``)."""
    def structure(value: Any, _type: Any) -> Any:
        if not accepts(value):
            raise _Invalid(f"expected {expected}, got {_describe(value)}")
        return convert(value)
    return structure


def _shaped(factory: Callable[[Any, Any], Any], expected: str, accepts: type,
            empty: object) -> Callable[[Any], Callable[[Any, Any], Any]]:
    """A cattrs collection hook factory that refuses the wrong shape instead of iterating it.

    cattrs turns any iterable into a tuple, so ``fallbacks: b`` would become ``('b',)``'s
    characters; null stands for an empty collection (every entry commented out).
    """
    def hook_factory(structure_type: Any) -> Callable[[Any, Any], Any]:
        base = factory(structure_type, _converter)

        def structure(value: Any, _type: Any) -> Any:
            if value is None:
                return empty
            if not isinstance(value, accepts):
                raise _Invalid(f"expected {expected}, got {_describe(value)}")
            return base(value, _type)
        return structure
    return hook_factory


def _checked(field_type: Any, check: _Check) -> Callable[[Any, Any], Any]:
    base = _converter.get_structure_hook(field_type)

    def structure(value: Any, structure_type: Any) -> Any:
        result = base(value, structure_type)
        if result is not None and (problem := check(result)):
            raise _Invalid(problem)
        return result
    return structure


def _class_hook(cls: type) -> Callable[[Any, Any], Any]:
    """cattrs' generated structurer, with field checks and null read as an empty section."""
    attrs.resolve_types(cls)
    overrides = {}
    for field in attrs.fields(cls):
        if field.metadata.get(_RESOLVED):
            overrides[field.name] = override(omit=True)
        elif check := field.metadata.get(_CHECK):
            overrides[field.name] = override(struct_hook=_checked(field.type, check))
    generated: Callable[[Any, Any], Any] = make_dict_structure_fn(
        cls, _converter, **overrides)  # type: ignore[arg-type]

    def structure(value: Any, structure_type: Any) -> Any:
        if value is None:
            value = {}  # a section whose keys are all commented out
        if not isinstance(value, Mapping):
            raise _Invalid(f"expected a mapping, got {_describe(value)}")
        return generated(value, structure_type)
    return structure


_converter = cattrs.Converter(forbid_extra_keys=True, detailed_validation=True)
_converter.register_structure_hook(str, _strict("a string", lambda v: isinstance(v, str)))
_converter.register_structure_hook(bool, _strict("a boolean", lambda v: isinstance(v, bool)))
_converter.register_structure_hook(
    int, _strict("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)))
_converter.register_structure_hook(
    float, _strict("a number", lambda v: isinstance(v, int | float) and not isinstance(v, bool),
                   float))
_converter.register_structure_hook_factory(
    lambda t: get_origin(t) is tuple and get_args(t)[1:] == (Ellipsis,),
    _shaped(homogenous_tuple_structure_factory, "a list", list, ()))
_converter.register_structure_hook_factory(
    lambda t: get_origin(t) is Mapping, _shaped(mapping_structure_factory, "a mapping", dict, {}))
_converter.register_structure_hook_factory(attrs.has, _class_hook)


def _deployment_problems(path: str, deployment: DeploymentConfig) -> Iterator[str]:
    if deployment.provider in ("openai", "anthropic"):
        for key in ("base_url", "api_key_env"):
            if getattr(deployment, key) is None:
                yield f"{path}.{key}: required for provider {deployment.provider}"
    if deployment.simulated is not None and deployment.provider != "simulated":
        yield f"{path}.simulated: only allowed with provider simulated"
    for name, value in deployment.headers.items():
        if value.startswith("env:") and (problem := _env_name(value[4:])):
            yield f"{path}.headers.{name}: env:NAME {problem}"
        elif not value.startswith("env:") and name.lower() in _SECRET_HEADERS:
            yield (f"{path}.headers.{name}: holds a credential: write env:NAME and put the value "
                   "in that environment variable")


def _model_problems(name: str, model: ModelConfig) -> Iterator[str]:
    """Problems across one group's fields (each field on its own is already checked)."""
    path = f"models.{name}"
    if not model.deployments:
        yield f"{path}.deployments: must list at least one deployment"
    for index, target in enumerate(model.fallbacks):
        if target in model.fallbacks[:index]:
            yield f"{path}.fallbacks[{index}]: {target} is listed twice"
    hedge = model.hedge
    if hedge is not None and (hedge.after_s is None) == (hedge.after_percentile is None):
        yield f"{path}.hedge: set exactly one of after_s, after_percentile"
    for index, deployment in enumerate(model.deployments):
        yield from _deployment_problems(f"{path}.deployments[{index}]", deployment)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path and key else path or key


def _unknown_key(cls: type, key: str) -> str:
    allowed = sorted(f.name for f in attrs.fields(cls) if not f.metadata.get(_RESOLVED))
    if f"{key}_env" in allowed:
        return (f"unknown key: secrets are never written inline; put the value in an "
                f"environment variable and use {key}_env: VARIABLE_NAME")
    guess = difflib.get_close_matches(key, allowed, n=1)
    hint = f"did you mean {guess[0]}? " if guess else ""
    return f"unknown key ({hint}allowed: {', '.join(allowed)})"


def _flatten(error: BaseException, path: str) -> Iterator[str]:
    """Operator-ready ``path: message`` lines for a (nested) structuring error."""
    if isinstance(error, ClassValidationError):
        class_notes, others = error.group_exceptions()
        for sub, class_note in class_notes:
            yield from _flatten(sub, _join(path, class_note.name))
        for sub in others:
            yield from _flatten(sub, path)
    elif isinstance(error, IterableValidationError):
        item_notes, others = error.group_exceptions()
        for sub, item_note in item_notes:
            index = item_note.index
            yield from _flatten(sub, f"{path}[{index}]" if isinstance(index, int)
                                else _join(path, index))
        for sub in others:
            yield from _flatten(sub, path)
    elif isinstance(error, ForbiddenExtraKeysError):
        for key in sorted(map(str, error.extra_fields)):
            yield f"{_join(path, key)}: {_unknown_key(error.cl, key)}"
    elif isinstance(error, KeyError):
        yield f"{path}: required"
    elif isinstance(error, _Invalid):
        yield f"{path}: {error}"
    else:
        yield f"{path}: {type(error).__name__}: {error}"


def _structure(value: object, cls: type, path: str, problems: list[str]) -> Any:
    """``value`` as ``cls``, or None with its problems appended."""
    try:
        return _converter.structure(value, cls)
    except (BaseValidationError, _Invalid) as error:
        problems.extend(_flatten(error, path))
        return None


def _structure_models(raw: object, problems: list[str]) -> dict[str, ModelConfig]:
    if raw is None:
        problems.append("models: required: at least one model group")
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"models: expected a mapping of model groups, got {_describe(raw)}")
        return {}
    if not raw:
        problems.append("models: at least one model group is required")
    models = {}
    for name, raw_model in raw.items():
        if not isinstance(name, str):
            problems.append(f"models: group name {name!r} must be a string (quote it)")
        elif (model := _structure(raw_model, ModelConfig, f"models.{name}", problems)) is not None:
            models[name] = model
    return models


def _duplicate_id_problems(models: Mapping[str, ModelConfig]) -> Iterator[str]:
    first_seen: dict[str, str] = {}
    for name, model in models.items():
        for index, deployment in enumerate(model.deployments):
            path = f"models.{name}.deployments[{index}].id"
            if deployment.id in first_seen:
                yield (f"{path}: duplicate deployment id {deployment.id} "
                       f"(first at {first_seen[deployment.id]})")
            else:
                first_seen[deployment.id] = path


def _fallback_problems(models: Mapping[str, ModelConfig], group_names: list[str]) -> Iterator[str]:
    for name, model in models.items():
        for index, target in enumerate(model.fallbacks):
            path = f"models.{name}.fallbacks[{index}]"
            if target == name:
                yield f"{path}: a model group cannot fall back to itself"
            elif target not in group_names:
                yield f"{path}: unknown model group {target} (groups: {', '.join(group_names)})"
    yield from _loop_problems(models)


def _loop_problems(models: Mapping[str, ModelConfig]) -> Iterator[str]:
    """One problem per loop found in the fallback graph (self-references are reported apart).

    A depth-first walk that visits each group once, so `hopbase check` stays linear in
    the number of fallback edges; a loop is drawn from its member that comes first in
    the file.
    """
    order = list(models)
    finished: set[str] = set()
    active: list[str] = []

    def walk(name: str) -> Iterator[str]:
        active.append(name)
        for target in models[name].fallbacks:
            if target in active and target != name:
                members = active[active.index(target):]
                first = members.index(min(members, key=order.index))
                loop = [*members[first:], *members[:first], members[first]]
                yield f"models.{loop[0]}.fallbacks: fallback loop {' -> '.join(loop)}"
            elif target in models and target not in finished and target not in active:
                yield from walk(target)
        active.pop()
        finished.add(name)
    for start in order:
        if start not in finished:
            yield from walk(start)


def _resolve_routing(defaults: RoutingConfig, model: ModelConfig,
                     raw_model: Mapping[str, Any]) -> RoutingConfig:
    """``defaults`` with the model's overrides; a partial ``cooldown`` merges key by key."""
    overrides = {key: getattr(model, key) for key in _ROUTING_KEYS
                 if getattr(model, key) is not None}
    if model.cooldown is not None:
        given = set(raw_model.get("cooldown") or {})
        overrides["cooldown"] = attrs.evolve(defaults.cooldown, **{
            field.name: getattr(model.cooldown, field.name)
            for field in attrs.fields(CooldownConfig) if field.name in given})
    return attrs.evolve(defaults, **overrides)


def _cooldown_problems(path: str, cooldown: CooldownConfig) -> list[str]:
    if cooldown.max_s < cooldown.base_s:
        return [f"{path}.max_s: must be >= base_s ({cooldown.base_s:g})"]
    return []


def _read_secret(environ: Mapping[str, str], name: str) -> tuple[Secret | None, str]:
    """The secret in ``name``, or None and why not."""
    value = environ.get(name)
    if value is None:
        return None, f"{name} is not set"
    if not value.strip():
        return None, f"{name} is empty"
    return Secret(env=name, value=value.strip()), ""


def _resolve_deployment(deployment: DeploymentConfig, group: str,
                        environ: Mapping[str, str]) -> DeploymentConfig:
    reasons, api_key, headers = [], None, {}
    if deployment.api_key_env is not None:
        api_key, reason = _read_secret(environ, deployment.api_key_env)
        if api_key is None:
            reasons.append(reason)
    for name, value in deployment.headers.items():
        if not value.startswith("env:"):
            headers[name] = value
            continue
        secret, reason = _read_secret(environ, value[4:])
        if secret is None:
            reasons.append(f"{reason} (header {name})")
        else:
            headers[name] = secret.value
    simulated = deployment.simulated
    if deployment.provider == "simulated" and simulated is None:
        simulated = SimulatedConfig()
    return attrs.evolve(
        deployment, upstream_model=deployment.model or group, api_key=api_key,
        resolved_headers=headers, simulated=simulated, enabled=not reasons,
        disabled_reason="; ".join(reasons) or None)


def _resolve_models(models: Mapping[str, ModelConfig], routings: Mapping[str, RoutingConfig],
                    environ: Mapping[str, str], warnings: list[str]) -> dict[str, ModelConfig]:
    resolved = {}
    for name, model in models.items():
        deployments = tuple(_resolve_deployment(d, name, environ) for d in model.deployments)
        for deployment in deployments:
            if not deployment.enabled:
                warnings.append(f"deployment {deployment.id} of model {name} disabled: "
                                f"{deployment.disabled_reason}")
        if not any(deployment.enabled for deployment in deployments):
            warnings.append(f"model {name} has no enabled deployment")
        cooldown = None if model.cooldown is None else routings[name].cooldown
        resolved[name] = attrs.evolve(model, deployments=deployments, routing=routings[name],
                                      cooldown=cooldown)
    if not any(d.enabled for model in resolved.values() for d in model.deployments):
        warnings.append("no deployment is enabled: /readyz answers 503")
    return resolved


def _resolve_keys(auth: AuthConfig, environ: Mapping[str, str],
                  warnings: list[str]) -> tuple[ResolvedKey, ...]:
    keys = []
    for key in auth.keys:
        secret, reason = _read_secret(environ, key.key_env)
        if secret is None:
            warnings.append(f"client key {key.name} disabled: {reason}")
        else:
            keys.append(ResolvedKey(name=key.name, secret=secret, rpm=key.rpm))
    if not auth.keys:
        warnings.append("auth.keys is empty: open access")
    elif not keys:
        warnings.append("no client key variable is set: every request is refused (401)")
    return tuple(keys)


def _resolve_optional(name: str | None, environ: Mapping[str, str], warnings: list[str],
                      consequence: str) -> Secret | None:
    if name is None:
        return None
    secret, reason = _read_secret(environ, name)
    if secret is None:
        warnings.append(f"{reason}: {consequence}")
    return secret


def _check_data(data: object) -> tuple[dict[str, Any], list[str], dict[str, ModelConfig]]:
    """Structure and validate everything; returns (sections, problems, models)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        return {}, [f"<top level>: expected a mapping of sections, got {_describe(data)}"], {}
    problems: list[str] = []
    allowed = [*_SECTIONS, "models"]
    for key in data:
        if key not in allowed:
            guess = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {guess[0]}? " if guess else ""
            problems.append(f"{key}: unknown section ({hint}allowed: {', '.join(sorted(allowed))})")
    sections = {key: _structure(data.get(key), cls, key, problems) or cls()
                for key, cls in _SECTIONS.items()}
    models = _structure_models(data.get("models"), problems)
    raw_models: Mapping[Any, Any] = data.get("models") or {}
    names = [name for name in raw_models if isinstance(name, str)]
    for name, model in models.items():
        problems += _model_problems(name, model)
    problems += _duplicate_id_problems(models)
    problems += _fallback_problems(models, names)
    problems += _cooldown_problems("routing.cooldown", sections["routing"].cooldown)
    for name, model in models.items():
        sections[f"models.{name}"] = routing = _resolve_routing(
            sections["routing"], model, raw_models[name])
        if model.cooldown is not None:
            problems += _cooldown_problems(f"models.{name}.cooldown", routing.cooldown)
    return sections, problems, models


def parse_config(data: object, environ: Mapping[str, str]) -> Config:
    """Validate parsed YAML and resolve its secrets from ``environ``.

    Raises:
        ConfigError: listing every problem, each as ``dotted.path: message``.
    """
    sections, problems, models = _check_data(data)
    if problems:
        raise ConfigError(problems)
    warnings: list[str] = []
    server, auth, logs = sections["server"], sections["auth"], sections["logs"]
    routings = {name: sections[f"models.{name}"] for name in models}
    resolved_models = _resolve_models(models, routings, environ, warnings)
    client_keys = _resolve_keys(auth, environ, warnings)
    admin_key = _resolve_optional(auth.admin_key_env, environ, warnings, "/admin/* answers 403")
    metrics_key = _resolve_optional(server.metrics_key_env, environ, warnings,
                                    "server.metrics_key_env asks for a key on /metrics")
    log_dsn = None
    if logs.backend == "postgres":
        log_dsn = _resolve_optional(logs.dsn_env, environ, warnings,
                                    "logs.backend postgres has no DSN")
    return Config(
        models=resolved_models, server=server, auth=auth, routing=sections["routing"],
        state=sections["state"], logs=logs, cache=sections["cache"], client_keys=client_keys,
        admin_key=admin_key, metrics_key=metrics_key, log_dsn=log_dsn, warnings=tuple(warnings))


class _Loader(yaml.SafeLoader):
    """SafeLoader that records duplicate mapping keys instead of silently keeping the last."""

    duplicates: list[str]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            if not isinstance(key, str | int | float | bool):
                continue  # an unhashable key is left to the constructor's own error
            if key in seen:
                line = key_node.start_mark.line + 1
                self.duplicates.append(f"line {line}: duplicate key {key}")
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def _read_yaml(path: str) -> tuple[object, list[str]]:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise ConfigError([f"{path}: cannot read: {error.strerror or error}"]) from error
    loader = _Loader(text)
    loader.duplicates = []
    try:
        return loader.get_single_data(), [f"{path}: {d}" for d in loader.duplicates]
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        context = f"{error.context}, " if error.context else ""
        raise ConfigError([f"{path}: YAML syntax error: {where}{context}{error.problem}"]) from None
    except yaml.YAMLError as error:
        raise ConfigError([f"{path}: YAML syntax error: {error}"]) from None
    finally:
        loader.dispose()


def load_config(path: str | os.PathLike[str], environ: Mapping[str, str] | None = None) -> Config:
    """Read, validate and resolve a ``deployments.yaml`` (``environ`` defaults to os.environ).

    Raises:
        ConfigError: a missing file, a YAML syntax error, or every problem in the file.
    """
    source = os.fspath(path)
    data, duplicates = _read_yaml(source)
    try:
        config = parse_config(data, os.environ if environ is None else environ)
    except ConfigError as error:
        raise ConfigError([*duplicates, *error.problems]) from None
    if duplicates:
        raise ConfigError(duplicates)
    return attrs.evolve(config, source_path=source)


def format_table(config: Config) -> str:
    """The model → deployment table that ``hopbase check`` prints, columns aligned."""
    rows = [("model", "deployment", "provider", "upstream model", "weight", "max_in_flight",
             "status")]
    for name, model in config.models.items():
        for deployment in model.deployments:
            rows.append((
                name, deployment.id, deployment.provider, deployment.upstream_model,
                f"{deployment.weight:g}",
                str(deployment.max_in_flight) if deployment.max_in_flight else "unlimited",
                "enabled" if deployment.enabled else f"disabled: {deployment.disabled_reason}"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        padded = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=True)]
        lines.append("  ".join([*padded, row[-1]]))
    return "\n".join(lines)
