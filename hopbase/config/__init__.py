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

    schema.py     the attrs classes, each field with its own check
    structure.py  the cattrs converter and its errors as dotted paths
    validate.py   cross-field and file-wide checks, routing overrides merged
    resolve.py    secrets from the environment, warnings, `parse_config`
    load.py       the YAML file (syntax, duplicate keys), `load_config`
    table.py      the ``hopbase check`` table
"""

from hopbase.config.load import load_config
from hopbase.config.resolve import parse_config
from hopbase.config.schema import (
    PROVIDERS,
    STRATEGIES,
    AuthConfig,
    CacheConfig,
    ClientKey,
    Config,
    CooldownConfig,
    DeploymentConfig,
    HedgeConfig,
    LogsConfig,
    ModelConfig,
    ResolvedKey,
    RoutingConfig,
    Secret,
    ServerConfig,
    SimulatedConfig,
    StateConfig,
)
from hopbase.config.table import format_table

__all__ = [
    "PROVIDERS",
    "STRATEGIES",
    "AuthConfig",
    "CacheConfig",
    "ClientKey",
    "Config",
    "CooldownConfig",
    "DeploymentConfig",
    "HedgeConfig",
    "LogsConfig",
    "ModelConfig",
    "ResolvedKey",
    "RoutingConfig",
    "Secret",
    "ServerConfig",
    "SimulatedConfig",
    "StateConfig",
    "format_table",
    "load_config",
    "parse_config",
]
