"""Filters of role slurm_tmpdir: which filesystem a (possibly not yet existing) path would live on."""

from __future__ import annotations

import re

# The kernel's octal escapes in mountinfo (\040 space, \011 tab, \012 newline, \134 backslash).
OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def fstype_of(path: str, mountinfo: str) -> str:
    """Type of the mount with the longest mount point that is a prefix of ``path`` (mountinfo format); of
    several at that point, the last (on top). The audit's jobenv.fstype_at decides the same."""
    best, best_type = "", "unknown"
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        point = OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), fields[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, best_type = point, right.split()[0]
    return best_type


class FilterModule:
    def filters(self) -> dict:
        return {"slurm_tmpdir_fstype_of": fstype_of}
