"""Tests for hopbase.config: loading, validation paths, environment resolution, the table."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from hopbase.config import (
    CooldownConfig,
    HedgeConfig,
    RoutingConfig,
    Secret,
    ServerConfig,
    SimulatedConfig,
    format_table,
    load_config,
    parse_config,
)
from hopbase.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent

# The example of SPEC section 2, verbatim.
SPEC_EXAMPLE = """\
server:
  host: 127.0.0.1
  port: 8080
  keepalive_interval_s: 10        # ': hopbase-keepalive' comment cadence during streams
  max_body_bytes: 26214400        # 25 MiB (audio uploads); larger -> 413
  upstream_connect_timeout_s: 10
  max_sse_line_bytes: 1048576     # an upstream SSE line longer than this ends the stream
  shutdown_grace_s: 30            # SIGTERM: streams get this long to finish; exit code 0
auth:
  keys:                           # client keys; an empty list means open access
    - name: team-a                # appears in logs and metrics, never the key itself
      key_env: HOPBASE_KEY_TEAM_A
  admin_key_env: HOPBASE_ADMIN_KEY   # required for /admin/*; unset -> /admin/* answers 403
routing:                          # defaults; each model may override any of these
  strategy: latency               # weighted | latency | throughput | least-busy
  max_attempts: 3                 # attempts per request across deployments
  queue_timeout_s: 30             # wait for a free in-flight slot, then 429
  stuck_after_s: 120              # no upstream output for this long -> the attempt is stuck
  retry_budget_ratio: 0.2         # retries + hedges may add at most this share
  cooldown:
    allowed_fails: 3              # failures inside window_s that trigger a cooldown
    window_s: 60
    base_s: 30                    # first cooldown; doubles on each consecutive cooldown
    max_s: 600
models:
  gpt-5.6-sol:
    strategy: throughput
    stuck_after_s: 150
    fallbacks: [claude-sonnet-5]  # next groups to try when this one cannot answer (no loops)
    hedge: {after_s: 2}           # or {after_percentile: 95}
    deployments:
      - id: openai-a
        provider: openai          # openai | anthropic | simulated
        base_url: https://api.openai.com/v1
        api_key_env: OPENAI_KEY_A
        model: gpt-5.6            # the upstream model name (defaults to the group name)
        weight: 2                 # share of traffic under 'weighted', tie-breaker elsewhere
        max_in_flight: 64         # concurrent upstream requests; 0 = unlimited
        rpm: 500                  # optional request-per-minute ceiling
        tpm: 400000               # optional token-per-minute ceiling
        headers: {}               # extra upstream headers (values may be 'env:NAME')
  demo:
    deployments:
      - id: sim-fast
        provider: simulated
        simulated: {first_output_ms: 50, tokens_per_s: 200}
state:
  backend: memory                 # memory | redis
  redis_url: redis://127.0.0.1:6379/0
logs:
  backend: sqlite                 # sqlite | postgres (shared by all replicas)
  path: hopbase.db                # SQLite file of request records
  dsn_env: HOPBASE_LOG_DSN        # postgres only: postgresql://... in this variable
  retention_days: 30
cache:
  enabled: true
  ttl_s: 600
  max_entries: 10000
"""

# The SPEC example falls back to claude-sonnet-5 without defining it; this completes it.
CLAUDE_GROUP = """\
  claude-sonnet-5:
    deployments:
      - id: anthropic-a
        provider: anthropic
        base_url: https://api.anthropic.com
        api_key_env: ANTHROPIC_KEY_A
"""


def spec_example_data() -> Any:
    """The SPEC example plus the claude-sonnet-5 group it names as a fallback."""
    text = SPEC_EXAMPLE.replace("state:\n", CLAUDE_GROUP + "state:\n", 1)
    return yaml.safe_load(text)


def problems_of(data: object, environ: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_config(data, environ or {})
    return caught.value.problems


def simulated_model(**extra: Any) -> dict[str, Any]:
    return {"deployments": [{"id": "sim", "provider": "simulated"}], **extra}


def openai_deployment(deployment_id: str, key_env: str, **extra: Any) -> dict[str, Any]:
    return {"id": deployment_id, "provider": "openai", "base_url": "https://api.openai.com/v1",
            "api_key_env": key_env, **extra}


def test_spec_example_loads_with_its_values() -> None:
    config = parse_config(spec_example_data(), {"OPENAI_KEY_A": "sk-a", "HOPBASE_KEY_TEAM_A": "t"})

    sol = config.models["gpt-5.6-sol"]
    assert list(config.models) == ["gpt-5.6-sol", "demo", "claude-sonnet-5"]
    assert sol.routing == RoutingConfig(strategy="throughput", stuck_after_s=150.0)
    assert sol.hedge == HedgeConfig(after_s=2.0)
    assert sol.fallbacks == ("claude-sonnet-5",)
    openai_a = sol.deployments[0]
    assert (openai_a.upstream_model, openai_a.weight, openai_a.max_in_flight) == ("gpt-5.6", 2, 64)
    assert (openai_a.rpm, openai_a.tpm, openai_a.enabled) == (500, 400000, True)
    assert openai_a.api_key == Secret(env="OPENAI_KEY_A", value="sk-a")
    demo = config.models["demo"].deployments[0]
    assert demo.simulated == SimulatedConfig(first_output_ms=50.0, tokens_per_s=200.0)
    assert (demo.upstream_model, demo.enabled) == ("demo", True)
    assert config.models["demo"].routing == RoutingConfig()
    assert [key.name for key in config.client_keys] == ["team-a"]
    assert config.open_access is False
    assert (config.server.port, config.logs.path) == (8080, "hopbase.db")


def test_spec_example_verbatim_names_its_one_missing_fallback_group() -> None:
    assert problems_of(yaml.safe_load(SPEC_EXAMPLE)) == [
        "models.gpt-5.6-sol.fallbacks[0]: unknown model group claude-sonnet-5 "
        "(groups: gpt-5.6-sol, demo)"]


def test_shipped_file_loads_with_no_keys_and_only_the_demo_enabled() -> None:
    config = load_config(REPO_ROOT / "deployments.yaml", environ={})

    assert config.source_path == str(REPO_ROOT / "deployments.yaml")
    assert [(name, d.id, d.enabled) for name, model in config.models.items()
            for d in model.deployments] == [
        ("demo", "sim-fast", True), ("demo", "sim-steady", True),
        ("gpt-5.6-sol", "openai-a", False), ("gpt-5.6-sol", "openai-b", False),
        ("claude-sonnet-5", "anthropic-a", False)]
    assert config.models["demo"].deployments[1].simulated == SimulatedConfig(120.0, 120.0)
    assert config.models["gpt-5.6-sol"].fallbacks == ("claude-sonnet-5",)
    assert (config.server.host, config.server.port, config.routing) == (
        "127.0.0.1", 8080, RoutingConfig())
    assert (config.open_access, config.logs.path, config.cache.enabled) == (True, "hopbase.db",
                                                                           True)
    assert config.warnings == (
        "deployment openai-a of model gpt-5.6-sol disabled: OPENAI_KEY_A is not set",
        "deployment openai-b of model gpt-5.6-sol disabled: OPENAI_KEY_B is not set",
        "model gpt-5.6-sol has no enabled deployment",
        "deployment anthropic-a of model claude-sonnet-5 disabled: ANTHROPIC_KEY_A is not set",
        "model claude-sonnet-5 has no enabled deployment",
        "auth.keys is empty: open access",
        "HOPBASE_ADMIN_KEY is not set: /admin/* answers 403",
    )


def test_shipped_file_with_every_key_set_enables_everything() -> None:
    environ = {"OPENAI_KEY_A": "a", "OPENAI_KEY_B": "b", "ANTHROPIC_KEY_A": "c",
               "HOPBASE_ADMIN_KEY": "admin"}
    config = load_config(REPO_ROOT / "deployments.yaml", environ=environ)

    assert all(d.enabled for model in config.models.values() for d in model.deployments)
    assert config.admin_key == Secret(env="HOPBASE_ADMIN_KEY", value="admin")
    assert config.warnings == ("auth.keys is empty: open access",)


def test_five_different_mistakes_are_all_reported_with_paths() -> None:
    data = spec_example_data()
    data["server"]["port"] = "eighty"
    data["routing"]["strategy"] = "fastest"
    sol = data["models"]["gpt-5.6-sol"]
    sol["deployments"].append(openai_deployment("openai-b", "OPENAI_KEY_B", weight=0))
    sol["deployments"][0]["provider"] = "azure"
    data["models"]["demo"]["deployments"][0]["simulated"]["tokens_per_s"] = -5

    assert problems_of(data) == [
        "server.port: expected an integer, got a string",
        "routing.strategy: must be one of weighted, latency, throughput, least-busy "
        "(got 'fastest')",
        "models.gpt-5.6-sol.deployments[0].provider: must be one of openai, anthropic, "
        "simulated (got 'azure')",
        "models.gpt-5.6-sol.deployments[1].weight: must be > 0",
        "models.demo.deployments[0].simulated.tokens_per_s: must be > 0",
    ]


def test_several_mistakes_in_one_deployment_are_all_reported() -> None:
    deployment = openai_deployment("a", "KEY", weight=-1, max_in_flight=-2, rpm=0, tpm=1.5,
                                   streaming="yes")
    assert problems_of({"models": {"m": {"deployments": [deployment]}}}) == [
        "models.m.deployments[0].weight: must be > 0",
        "models.m.deployments[0].max_in_flight: must be >= 0",
        "models.m.deployments[0].rpm: must be > 0",
        "models.m.deployments[0].tpm: expected an integer, got a number",
        "models.m.deployments[0].streaming: expected a boolean, got a string",
    ]


def test_unknown_keys_are_rejected_with_their_path_and_allowed_names() -> None:
    data = {"servers": {}, "cache": {"ttl": 5},
            "models": {"m": simulated_model(stategy="latency")}}
    assert problems_of(data) == [
        "servers: unknown section (did you mean server? allowed: auth, cache, logs, models, "
        "routing, server, state)",
        "cache.ttl: unknown key (did you mean ttl_s? allowed: enabled, max_bytes, max_entries, "
        "ttl_s)",
        "models.m.stategy: unknown key (did you mean strategy? allowed: cooldown, deployments, "
        "explore_ratio, fallbacks, half_life_s, hedge, max_attempts, queue_timeout_s, "
        "retry_budget_ratio, strategy, stuck_after_s, tie_buffer)",
    ]


def test_inline_secrets_are_unknown_keys_that_point_to_the_env_variant() -> None:
    data = {"auth": {"keys": [{"name": "team", "key_env": "TEAM_KEY", "key": "hk-1"}]},
            "models": {"m": {"deployments": [openai_deployment("a", "KEY", api_key="sk-1")]}}}
    assert problems_of(data) == [
        "auth.keys[0].key: unknown key: secrets are never written inline; put the value in an "
        "environment variable and use key_env: VARIABLE_NAME",
        "models.m.deployments[0].api_key: unknown key: secrets are never written inline; put "
        "the value in an environment variable and use api_key_env: VARIABLE_NAME",
    ]


def test_resolved_fields_cannot_be_set_from_yaml() -> None:
    deployment = {"id": "a", "provider": "simulated", "enabled": False}
    problems = problems_of({"models": {"m": {"deployments": [deployment]}}})
    assert problems == [
        "models.m.deployments[0].enabled: unknown key (allowed: api_key_env, base_url, headers, "
        "id, max_in_flight, model, provider, rpm, simulated, streaming, tpm, weight)"]


@pytest.mark.parametrize(("deployment", "problem"), [
    ({"id": "a", "provider": "openai", "api_key_env": "K"},
     "models.m.deployments[0].base_url: required for provider openai"),
    ({"id": "a", "provider": "anthropic", "base_url": "https://api.anthropic.com"},
     "models.m.deployments[0].api_key_env: required for provider anthropic"),
    (openai_deployment("a", "K", base_url="api.openai.com/v1"),
     "models.m.deployments[0].base_url: must be an http:// or https:// URL"),
    (openai_deployment("a", "sk-live-123"),
     "models.m.deployments[0].api_key_env: must be the name of an environment variable "
     "(letters, digits, _), not a secret"),
    (openai_deployment("a", "K", simulated={}),
     "models.m.deployments[0].simulated: only allowed with provider simulated"),
    (openai_deployment("a", "K", headers={"Authorization": "Bearer sk-1"}),
     "models.m.deployments[0].headers.Authorization: holds a credential: write env:NAME and "
     "put the value in that environment variable"),
    (openai_deployment("a", "K", headers={"X-Org": "env:not a name"}),
     "models.m.deployments[0].headers.X-Org: env:NAME must be the name of an environment "
     "variable (letters, digits, _), not a secret"),
    ({"provider": "simulated"}, "models.m.deployments[0].id: required"),
    ({"id": "a", "provider": "simulated", "simulated": {"fail_status": 200}},
     "models.m.deployments[0].simulated.fail_status: must be an HTTP error status (400..599)"),
])
def test_deployment_rules(deployment: dict[str, Any], problem: str) -> None:
    assert problems_of({"models": {"m": {"deployments": [deployment]}}}) == [problem]


@pytest.mark.parametrize(("model", "problem"), [
    (simulated_model(hedge={}), "models.m.hedge: set exactly one of after_s, after_percentile"),
    (simulated_model(hedge={"after_s": 1, "after_percentile": 90}),
     "models.m.hedge: set exactly one of after_s, after_percentile"),
    (simulated_model(hedge={"after_percentile": 100}),
     "models.m.hedge.after_percentile: must be > 0 and < 100"),
    (simulated_model(max_attempts=0), "models.m.max_attempts: must be >= 1"),
    (simulated_model(queue_timeout_s=0), "models.m.queue_timeout_s: must be > 0"),
    (simulated_model(fallbacks="other"), "models.m.fallbacks: expected a list, got a string"),
    ({"deployments": []}, "models.m.deployments: must list at least one deployment"),
    ({}, "models.m.deployments: required"),
    (simulated_model(cooldown={"base_s": 900}),
     "models.m.cooldown.max_s: must be >= base_s (900)"),
])
def test_model_rules(model: dict[str, Any], problem: str) -> None:
    assert problems_of({"models": {"m": model}}) == [problem]


@pytest.mark.parametrize(("data", "problem"), [
    (None, "models: required: at least one model group"),
    ({"models": {}}, "models: at least one model group is required"),
    ({"models": ["m"]}, "models: expected a mapping of model groups, got a list"),
    (["models"], "<top level>: expected a mapping of sections, got a list"),
    ({"models": {"m": simulated_model()}, "state": {"backend": "etcd"}},
     "state.backend: must be one of memory, redis (got 'etcd')"),
    ({"models": {"m": simulated_model()}, "logs": {"backend": "mysql"}},
     "logs.backend: must be one of sqlite, postgres (got 'mysql')"),
    ({"models": {"m": simulated_model()}, "server": {"keepalive_interval_s": 0}},
     "server.keepalive_interval_s: must be > 0"),
    ({"models": {"m": simulated_model()}, "cache": {"enabled": "no"}},
     "cache.enabled: expected a boolean, got a string"),
    ({"models": {"m": simulated_model()}, "server": []},
     "server: expected a mapping, got a list"),
])
def test_file_rules(data: object, problem: str) -> None:
    assert problems_of(data) == [problem]


def test_duplicate_deployment_ids_across_groups_are_rejected() -> None:
    data = {"models": {"a": simulated_model(), "b": simulated_model()}}
    assert problems_of(data) == [
        "models.b.deployments[0].id: duplicate deployment id sim "
        "(first at models.a.deployments[0].id)"]


@pytest.mark.parametrize(("fallbacks", "problem"), [
    ({"a": ["b"], "b": ["a"], "c": []}, "models.a.fallbacks: fallback loop a -> b -> a"),
    ({"a": ["b"], "b": ["c"], "c": ["a"]}, "models.a.fallbacks: fallback loop a -> b -> c -> a"),
    ({"a": ["c"], "b": ["c"], "c": ["b"]}, "models.b.fallbacks: fallback loop b -> c -> b"),
])
def test_fallback_loop_is_rejected_once(fallbacks: dict[str, list[str]], problem: str) -> None:
    data = {"models": {name: {"fallbacks": targets,
                              "deployments": [{"id": name, "provider": "simulated"}]}
                       for name, targets in fallbacks.items()}}
    assert problems_of(data) == [problem]


def test_a_wide_loop_free_fallback_graph_is_accepted() -> None:
    names = [f"group-{index}" for index in range(60)]
    data = {"models": {name: {"fallbacks": names[index + 1:],
                              "deployments": [{"id": name, "provider": "simulated"}]}
                       for index, name in enumerate(names)}}
    assert list(parse_config(data, {}).models) == names


def test_fallbacks_to_itself_or_unknown_groups_are_rejected() -> None:
    data = {"models": {"a": simulated_model(fallbacks=["a", "nope", "b", "b"]),
                       "b": {"deployments": [{"id": "2", "provider": "simulated"}]}}}
    assert problems_of(data) == [
        "models.a.fallbacks[3]: b is listed twice",
        "models.a.fallbacks[0]: a model group cannot fall back to itself",
        "models.a.fallbacks[1]: unknown model group nope (groups: a, b)",
    ]


def test_unset_key_disables_only_that_deployment() -> None:
    data = {"models": {"m": {"deployments": [
        openai_deployment("openai-a", "OPENAI_KEY_A"),
        openai_deployment("openai-b", "OPENAI_KEY_B"),
        openai_deployment("openai-c", "OPENAI_KEY_C")]}}}
    config = parse_config(data, {"OPENAI_KEY_B": "sk-b\n", "OPENAI_KEY_C": "  "})

    a, b, c = config.models["m"].deployments
    assert (a.enabled, a.disabled_reason, a.api_key) == (False, "OPENAI_KEY_A is not set", None)
    assert (b.enabled, b.disabled_reason, b.api_key) == (True, None, Secret("OPENAI_KEY_B", "sk-b"))
    assert (c.enabled, c.disabled_reason) == (False, "OPENAI_KEY_C is empty")
    assert config.warnings[:2] == (
        "deployment openai-a of model m disabled: OPENAI_KEY_A is not set",
        "deployment openai-c of model m disabled: OPENAI_KEY_C is empty")


def test_env_header_is_resolved_and_an_unset_one_disables() -> None:
    headers = {"OpenAI-Organization": "env:ORG", "X-Team": "search"}
    data = {"models": {"m": {"deployments": [openai_deployment("a", "KEY", headers=headers)]}}}

    enabled = parse_config(data, {"KEY": "k", "ORG": "org-1"}).models["m"].deployments[0]
    disabled = parse_config(data, {"KEY": "k"}).models["m"].deployments[0]

    assert enabled.resolved_headers == {"OpenAI-Organization": "org-1", "X-Team": "search"}
    assert enabled.enabled is True
    assert {enabled: "usable as a key"}[enabled] == "usable as a key"
    assert (disabled.enabled, disabled.disabled_reason) == (
        False, "ORG is not set (header OpenAI-Organization)")


def test_client_keys_resolve_and_unset_ones_are_warned() -> None:
    data = {"auth": {"keys": [{"name": "team-a", "key_env": "KEY_A", "rpm": 60},
                              {"name": "team-b", "key_env": "KEY_B"}], "admin_key_env": None},
            "models": {"m": simulated_model()}}
    config = parse_config(data, {"KEY_A": "hk-a"})
    nobody = parse_config(data, {})

    assert [(k.name, k.secret, k.rpm) for k in config.client_keys] == [
        ("team-a", Secret("KEY_A", "hk-a"), 60)]
    assert config.warnings == ("client key team-b disabled: KEY_B is not set",)
    assert (nobody.client_keys, nobody.open_access) == ((), False)
    assert nobody.warnings[-1] == "no client key variable is set: every request is refused (401)"


def test_unset_optional_secrets_are_warned_not_errors() -> None:
    data = {"server": {"metrics_key_env": "METRICS_KEY"}, "logs": {"backend": "postgres"},
            "auth": {"admin_key_env": "ADMIN"}, "models": {"m": simulated_model()}}
    config = parse_config(data, {})

    assert (config.metrics_key, config.log_dsn, config.admin_key) == (None, None, None)
    assert config.warnings == (
        "auth.keys is empty: open access",
        "ADMIN is not set: /admin/* answers 403",
        "METRICS_KEY is not set: server.metrics_key_env asks for a key on /metrics",
        "HOPBASE_LOG_DSN is not set: logs.backend postgres has no DSN",
    )


def test_model_overrides_merge_over_routing_defaults() -> None:
    data = {"routing": {"strategy": "weighted", "cooldown": {"base_s": 10, "max_s": 100}},
            "models": {"m": simulated_model(max_attempts=5, cooldown={"allowed_fails": 1}),
                       "n": {"deployments": [{"id": "n1", "provider": "simulated"}]}}}
    config = parse_config(data, {})

    merged = CooldownConfig(allowed_fails=1, window_s=60.0, base_s=10.0, max_s=100.0)
    assert config.models["m"].routing == RoutingConfig(
        strategy="weighted", max_attempts=5, cooldown=merged)
    assert config.models["m"].cooldown == merged
    assert config.models["n"].routing == config.routing
    assert config.models["n"].cooldown is None


def test_null_sections_mean_defaults() -> None:
    data = yaml.safe_load(textwrap.dedent("""\
        server:
        auth:
          keys:
        models:
          m:
            deployments:
              - id: sim
                provider: simulated
    """))
    config = parse_config(data, {"HOPBASE_ADMIN_KEY": "x"})
    assert (config.server, config.auth.keys) == (ServerConfig(), ())
    assert config.models["m"].deployments[0].simulated == SimulatedConfig()


def test_repr_never_contains_a_secret_value() -> None:
    data = spec_example_data()
    data["server"]["metrics_key_env"] = "METRICS_KEY"
    data["logs"] = {"backend": "postgres"}
    data["state"]["redis_url"] = "redis://:redis-pass-7@cache:6379/0"
    data["models"]["gpt-5.6-sol"]["deployments"][0]["headers"] = {"X-Org": "env:ORG"}
    environ = {"OPENAI_KEY_A": "sk-secret-1", "ANTHROPIC_KEY_A": "sk-ant-secret-2",
               "HOPBASE_KEY_TEAM_A": "hk-secret-3", "HOPBASE_ADMIN_KEY": "admin-secret-4",
               "METRICS_KEY": "metrics-secret-5", "ORG": "org-secret-6",
               "HOPBASE_LOG_DSN": "postgresql://u:dsn-secret-7@db/hop"}
    config = parse_config(data, environ)

    text = repr(config) + str(config)
    assert config.metrics_key == Secret("METRICS_KEY", "metrics-secret-5")
    assert config.log_dsn == Secret("HOPBASE_LOG_DSN", "postgresql://u:dsn-secret-7@db/hop")
    for secret in [*environ.values(), "redis-pass-7"]:
        assert secret not in text
    assert "Secret(env='OPENAI_KEY_A')" in text
    assert "redis://:***@cache:6379/0" in text


def test_format_table_aligns_one_row_per_deployment() -> None:
    data = {"models": {
        "demo": {"deployments": [{"id": "sim-fast", "provider": "simulated"}]},
        "gpt-5.6-sol": {"deployments": [
            openai_deployment("openai-a", "OPENAI_KEY_A", model="gpt-5.6", weight=2,
                              max_in_flight=64),
            openai_deployment("openai-b", "OPENAI_KEY_B", weight=0.5)]}}}
    config = parse_config(data, {"OPENAI_KEY_A": "sk"})

    assert format_table(config).splitlines() == [
        "model        deployment  provider   upstream model  weight  max_in_flight  status",
        "demo         sim-fast    simulated  demo            1       unlimited      enabled",
        "gpt-5.6-sol  openai-a    openai     gpt-5.6         2       64             enabled",
        "gpt-5.6-sol  openai-b    openai     gpt-5.6-sol     0.5     unlimited      "
        "disabled: OPENAI_KEY_B is not set",
    ]


def test_load_config_reports_a_missing_file_and_yaml_syntax(tmp_path: Path) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("models:\n  m: [1\n")
    with pytest.raises(ConfigError) as missing:
        load_config(tmp_path / "absent.yaml", {})
    with pytest.raises(ConfigError) as broken:
        load_config(path, {})

    assert missing.value.problems == [
        f"{tmp_path / 'absent.yaml'}: cannot read: No such file or directory"]
    assert broken.value.problems == [
        f"{path}: YAML syntax error: line 3, column 1: while parsing a flow sequence, "
        "expected ',' or ']', but got '<stream end>'"]


def test_load_config_rejects_duplicate_yaml_keys(tmp_path: Path) -> None:
    path = tmp_path / "twice.yaml"
    path.write_text("models:\n  m: {deployments: [{id: a, provider: simulated}]}\n"
                    "  m: {deployments: [{id: b, provider: simulated}]}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, {})
    assert caught.value.problems == [f"{path}: line 3: duplicate key m"]
