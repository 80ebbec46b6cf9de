"""Cross-field and file-wide checks, run once every section has structured.

Provider needs, hedges, duplicate deployment ids and the fallback graph are checked
here, and each model group's routing overrides are merged over the defaults (the
merged cooldown needs its own check).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from hopbase.config.schema import (
    ROUTING_KEYS,
    SECRET_HEADERS,
    SECTIONS,
    CooldownConfig,
    DeploymentConfig,
    ModelConfig,
    RoutingConfig,
    env_name_problem,
)
from hopbase.config.structure import describe, structure_models, structure_section


def _deployment_problems(path: str, deployment: DeploymentConfig) -> Iterator[str]:
    if deployment.provider in ("openai", "anthropic"):
        for key in ("base_url", "api_key_env"):
            if getattr(deployment, key) is None:
                yield f"{path}.{key}: required for provider {deployment.provider}"
    if deployment.simulated is not None and deployment.provider != "simulated":
        yield f"{path}.simulated: only allowed with provider simulated"
    for name, value in deployment.headers.items():
        if value.startswith("env:") and (problem := env_name_problem(value[4:])):
            yield f"{path}.headers.{name}: env:NAME {problem}"
        elif not value.startswith("env:") and name.lower() in SECRET_HEADERS:
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
    overrides = {key: getattr(model, key) for key in ROUTING_KEYS
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


def check_data(data: object) -> tuple[dict[str, Any], list[str], dict[str, ModelConfig]]:
    """Structure and validate everything; returns (sections, problems, models)."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        return {}, [f"<top level>: expected a mapping of sections, got {describe(data)}"], {}
    problems: list[str] = []
    allowed = [*SECTIONS, "models"]
    for key in data:
        if key not in allowed:
            guess = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f"did you mean {guess[0]}? " if guess else ""
            problems.append(f"{key}: unknown section ({hint}allowed: {', '.join(sorted(allowed))})")
    sections = {key: structure_section(data.get(key), cls, key, problems) or cls()
                for key, cls in SECTIONS.items()}
    models = structure_models(data.get("models"), problems)
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
