"""Probes: the only code that reads the host. ``collect_snapshot`` (in ``collect``) reads it all.

The package itself imports nothing: a probe child (NVML's, run as ``python -m dltune.probes.nvml_read``
on every audit) must not pay for importing every other probe.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dltune.probes.collect import collect_snapshot, nvidia_module_version, read_optional

__all__ = ["collect_snapshot", "nvidia_module_version", "read_optional"]


def __getattr__(name: str) -> Any:
    # Only the names above: any other (a submodule not imported yet) must stay an AttributeError, so
    # that `from dltune.probes import nvml_read` imports that submodule and nothing else.
    if name not in __all__:
        raise AttributeError(f"module 'dltune.probes' has no attribute {name!r}")
    return getattr(importlib.import_module("dltune.probes.collect"), name)
