"""The roles' manifest fragments: ``/etc/dltune/expected.d/<role>.json``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dltune.probes.hostfs import HostFS

MANIFEST_DIR = "/etc/dltune/expected.d"


def read_manifest(fs: HostFS) -> tuple[dict[str, Mapping[str, Any]], dict[str, str]]:
    """Fragments by role, and errors by file name for fragments that could not be used."""
    fragments: dict[str, Mapping[str, Any]] = {}
    errors: dict[str, str] = {}
    directory = fs.path(MANIFEST_DIR)
    if not directory.is_dir():
        return fragments, errors
    for path in sorted(directory.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            errors[path.name] = str(exc)
            continue
        if not isinstance(data, dict) or data.get("schema_version") != 1 or "role" not in data:
            errors[path.name] = "not a schema_version 1 fragment with a role"
            continue
        fragments[str(data["role"])] = data
    return fragments, errors
