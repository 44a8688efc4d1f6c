"""Filters of role tmpfs_tmp: pure functions, unit-tested in tests/unit/test_tmpfs_tmp_filters.py.

- ``tmpfs_tmp_blocking_entries``: what in /tmp a tmpfs mounted over it now would hide from programs
  that still use it, so the role mounts it at the next boot instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def _glob_pattern(glob: str) -> re.Pattern[str]:
    """`*` matches any run of characters; every other character is itself (no ?, no [...])."""
    return re.compile(".*".join(re.escape(part) for part in glob.split("*")), re.DOTALL)


def tmpfs_tmp_blocking_entries(entries: Iterable[str], hideable: Iterable[str]) -> list[str]:
    """The entries (paths relative to /tmp, one or two levels deep, as `find -printf %P` lists them)
    that block a live mount: an entry blocks unless its top-level name matches a hideable glob, and
    inside the dot-directories (X11's, ICE's: their content is a live socket) any content blocks."""
    patterns = [_glob_pattern(str(glob)) for glob in hideable]
    blocking = []
    for entry in entries:
        top, slash, _ = entry.partition("/")
        hidden_safely = any(pattern.fullmatch(top) for pattern in patterns)
        if not hidden_safely or (slash and top.startswith(".")):
            blocking.append(entry)
    return blocking


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {"tmpfs_tmp_blocking_entries": tmpfs_tmp_blocking_entries}
