"""Reading ``deployments.yaml`` from disk: YAML syntax and duplicate keys, then `parse_config`."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import attrs
import yaml

from hopbase.config.resolve import parse_config
from hopbase.config.schema import Config
from hopbase.errors import ConfigError


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
