"""The environment side of loading: secrets, disabled deployments and start-up warnings.

Only a file that passed every check gets here. Secrets are never written inline:
each ``*_env`` key names a variable, and a deployment whose variables are unset is
disabled with a warning instead of failing the whole file.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from hopbase.config.schema import (
    AuthConfig,
    Config,
    DeploymentConfig,
    ModelConfig,
    ResolvedKey,
    RoutingConfig,
    Secret,
    SimulatedConfig,
)
from hopbase.config.validate import check_data
from hopbase.errors import ConfigError


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


def parse_config(data: object, environ: Mapping[str, str]) -> Config:
    """Validate parsed YAML and resolve its secrets from ``environ``.

    Raises:
        ConfigError: listing every problem, each as ``dotted.path: message``.
    """
    sections, problems, models = check_data(data)
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
