"""YAML data → schema classes through cattrs, with every problem as ``dotted.path: message``.

The converter forbids unknown keys, refuses cattrs' lenient coercions and the wrong
collection shapes, and runs each field's check; `structure_section` flattens cattrs'
nested validation errors into operator-ready lines.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, get_args, get_origin

import attrs
import cattrs
from cattrs.cols import homogenous_tuple_structure_factory
from cattrs.errors import (
    BaseValidationError,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
)
from cattrs.gen import make_dict_structure_fn, mapping_structure_factory, override

from hopbase.config.schema import CHECK_KEY, RESOLVED_KEY, Check, ModelConfig


class _Invalid(ValueError):
    """A value problem whose message is already operator-ready."""


def describe(value: object) -> str:
    """What kind of YAML value ``value`` is, in words ("a string", "a mapping")."""
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             list: "a list", dict: "a mapping", type(None): "nothing (null)"}
    return names.get(type(value), type(value).__name__)


def _strict(expected: str, accepts: Callable[[Any], bool],
            convert: Callable[[Any], Any] = lambda value: value) -> Callable[[Any, Any], Any]:
    """A scalar hook that rejects cattrs' lenient coercions (``bool('false')``, ``int(2.7)``)."""
    def structure(value: Any, _type: Any) -> Any:
        if not accepts(value):
            raise _Invalid(f"expected {expected}, got {describe(value)}")
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
                raise _Invalid(f"expected {expected}, got {describe(value)}")
            return base(value, _type)
        return structure
    return hook_factory


def _checked(field_type: Any, check: Check) -> Callable[[Any, Any], Any]:
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
        if field.metadata.get(RESOLVED_KEY):
            overrides[field.name] = override(omit=True)
        elif check := field.metadata.get(CHECK_KEY):
            overrides[field.name] = override(struct_hook=_checked(field.type, check))
    generated: Callable[[Any, Any], Any] = make_dict_structure_fn(
        cls, _converter, **overrides)  # type: ignore[arg-type]

    def structure(value: Any, structure_type: Any) -> Any:
        if value is None:
            value = {}  # a section whose keys are all commented out
        if not isinstance(value, Mapping):
            raise _Invalid(f"expected a mapping, got {describe(value)}")
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


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path and key else path or key


def _unknown_key(cls: type, key: str) -> str:
    allowed = sorted(f.name for f in attrs.fields(cls) if not f.metadata.get(RESOLVED_KEY))
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


def structure_section(value: object, cls: type, path: str, problems: list[str]) -> Any:
    """``value`` as ``cls``, or None with its problems appended."""
    try:
        return _converter.structure(value, cls)
    except (BaseValidationError, _Invalid) as error:
        problems.extend(_flatten(error, path))
        return None


def structure_models(raw: object, problems: list[str]) -> dict[str, ModelConfig]:
    """The model groups that structured cleanly; the problems of the others are appended."""
    if raw is None:
        problems.append("models: required: at least one model group")
        return {}
    if not isinstance(raw, Mapping):
        problems.append(f"models: expected a mapping of model groups, got {describe(raw)}")
        return {}
    if not raw:
        problems.append("models: at least one model group is required")
    models = {}
    for name, raw_model in raw.items():
        if not isinstance(name, str):
            problems.append(f"models: group name {name!r} must be a string (quote it)")
            continue
        model = structure_section(raw_model, ModelConfig, f"models.{name}", problems)
        if model is not None:
            models[name] = model
    return models
