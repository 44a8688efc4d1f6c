"""A small declarative validator for the JSON that dltune reads (manifest fragments, audit envelopes).

Pure Python on purpose: the audit's runtime core takes no compiled dependency. A schema is a ``Field``;
``validate`` returns every problem as ``$.path: what is wrong`` (empty when the value fits). Keys a
schema does not name are allowed, so a newer role or tool can add keys without breaking older readers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dltune.records import field, record

JSON_TYPE_NAMES = {
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
    type(None): "null",
}


@record(frozen=True)
class Field:
    kinds: tuple[type, ...]
    required: bool = True
    items: Field | None = None  # for lists: every item; for objects without `keys`: every value
    keys: Mapping[str, Field] = field(default_factory=dict)  # for objects: the named keys
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = None


def of(*kinds: type, **options: Any) -> Field:
    return Field(tuple(kinds), **options)


def optional(*kinds: type, **options: Any) -> Field:
    return Field(tuple(kinds), required=False, **options)


def _type_ok(value: Any, kinds: tuple[type, ...]) -> bool:
    # JSON has no int/bool distinction problem in the data, but Python's bool is an int: keep them apart.
    if isinstance(value, bool):
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return any(isinstance(value, kind) and kind is not bool for kind in kinds)


def _expected(kinds: tuple[type, ...]) -> str:
    return " or ".join(JSON_TYPE_NAMES.get(kind, kind.__name__) for kind in kinds)


def validate(value: Any, spec: Field, path: str = "$") -> list[str]:
    if not _type_ok(value, spec.kinds):
        found = JSON_TYPE_NAMES.get(type(value), type(value).__name__)
        return [f"{path}: {_expected(spec.kinds)} expected, found {found}"]
    problems: list[str] = []
    if spec.choices is not None and value not in spec.choices:
        problems.append(f"{path}: {value!r} is not one of {', '.join(map(repr, spec.choices))}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if spec.minimum is not None and value < spec.minimum:
            problems.append(f"{path}: {value} is below {spec.minimum:g}")
        if spec.maximum is not None and value > spec.maximum:
            problems.append(f"{path}: {value} is above {spec.maximum:g}")
    if isinstance(value, (str, list)) and spec.max_length is not None and len(value) > spec.max_length:
        problems.append(f"{path}: longer than {spec.max_length}")
    if isinstance(value, Sequence) and not isinstance(value, str) and spec.items is not None:
        for index, item in enumerate(value):
            problems += validate(item, spec.items, f"{path}[{index}]")
    if isinstance(value, Mapping):
        for key, key_spec in spec.keys.items():
            if key in value:
                problems += validate(value[key], key_spec, f"{path}.{key}")
            elif key_spec.required:
                problems.append(f"{path}: required key {key!r} is missing")
        if spec.items is not None and not spec.keys:
            for key, item in value.items():
                problems += validate(item, spec.items, f"{path}.{key}")
    return problems
