"""dltune: audit and benchmark deep-learning training nodes.

The library works without the CLI: ``collect_snapshot`` reads the host, ``run_checks`` judges it,
``dltune.outputs.report`` renders the results.
"""

from __future__ import annotations

import functools

SCHEMA_VERSION = 1


@functools.cache
def _installed_version() -> str:
    # importlib.metadata costs a probe child (NVML's, on every audit) tens of milliseconds it never
    # needs: the version is looked up on first use only.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dltune")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0.0.0+src"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _installed_version()
    raise AttributeError(f"module 'dltune' has no attribute {name!r}")
