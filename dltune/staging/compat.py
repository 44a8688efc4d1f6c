"""What dltune needs of the Python it runs on, beyond `requires-python`, checked where it is needed.

`pyproject.toml` admits every Python 3.10 and later: the audit, the checks and the report run on
all of them. Extracting an archive safely (`dltune stage`, `dltune bench --data x.tar`) needs
tarfile's ``data`` filter (PEP 706), which arrived in 3.10.12, 3.11.4 and 3.12, and which some
distributions backport to older patch levels while others (Debian 12's 3.11.2) do not: no version
specifier says that, so the feature itself is asked for, and its absence is a clear refusal instead
of an AttributeError halfway through a copy.
"""

from __future__ import annotations

import platform
import sys
import tarfile

from dltune.model import DltuneError


class UnsupportedPython(DltuneError, RuntimeError):
    """This interpreter lacks something a dltune feature needs; the message names the interpreter."""


def require_tar_data_filter() -> None:
    """Raise ``UnsupportedPython`` unless tarfile has the ``data`` extraction filter."""
    if not hasattr(tarfile, "data_filter"):
        raise UnsupportedPython(
            f"extracting an archive safely needs tarfile's 'data' filter (Python 3.10.12, 3.11.4, 3.12 "
            f"or later), which Python {platform.python_version()} ({sys.executable}) lacks: run dltune "
            "on a newer Python, or stage the unpacked directory instead"
        )
