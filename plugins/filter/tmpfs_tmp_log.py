"""What role tmpfs_tmp writes about /tmp into the Ansible log: pure functions, unit-tested in
tests/unit/test_tmpfs_tmp_log_filter.py. (The role's decision is plugins/filter/tmpfs_tmp.py's.)

- ``tmpfs_tmp_some_entries``: the entries that keep /tmp from being mounted now, named at most
  SHOWN at a time and the rest counted: /tmp holds other users' file names, and the log is no place
  for all of them.
"""

from __future__ import annotations

from collections.abc import Iterable

# How many entries the message names; the others are only counted ("and 37 more").
SHOWN = 5


def _printable(name: str) -> str:
    """A file name as the log may show it: a control character (a terminal escape, a newline) is `?`."""
    return "".join(char if char.isprintable() else "?" for char in name)


def tmpfs_tmp_some_entries(entries: Iterable[str], shown: int = SHOWN) -> str:
    """The first ``shown`` entries joined with commas, then "and N more" when there are others;
    "" for none. ``shown`` below 1 names none and counts them all ("3 entries")."""
    listed = [str(entry) for entry in entries]
    named = [_printable(entry) for entry in listed[: max(shown, 0)]]
    rest = len(listed) - len(named)
    if not named:
        return "" if not rest else "1 entry" if rest == 1 else f"{rest} entries"
    return ", ".join(named) + (f" and {rest} more" if rest else "")


class FilterModule:
    def filters(self) -> dict[str, object]:
        return {"tmpfs_tmp_some_entries": tmpfs_tmp_some_entries}
