"""dltune: audit and benchmark deep-learning training nodes.

The library works without the CLI: ``collect_snapshot`` reads the host, ``run_checks`` judges it,
``dltune.report`` renders the results.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dltune")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+src"

SCHEMA_VERSION = 1
