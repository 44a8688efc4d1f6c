"""dltune: audit and benchmark deep-learning training nodes.

The library works without the CLI: ``collect_snapshot`` reads the host, ``run_checks`` judges it,
``dltune.outputs.report`` renders the results.
"""

from __future__ import annotations

SCHEMA_VERSION = 1

# The project's one version, written here as well as in pyproject.toml and galaxy.yml
# (tests/unit/test_project.py holds the three together): asking importlib.metadata for it would cost
# every audit, every few minutes on every node, tens of milliseconds of imports for one string.
__version__ = "0.1.0"
