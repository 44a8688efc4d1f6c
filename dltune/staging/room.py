"""Room at a staging destination: free blocks and inodes, its filesystem, and RAM when it is in memory.

The host's tables (/proc/self/mountinfo, /proc/meminfo) are read through HostFS, as the audit's are;
statfs asks the destination itself."""

from __future__ import annotations

import os
from pathlib import Path

from dltune.probes.hostfs import HostFS
from dltune.probes.jobenv import fstype_at
from dltune.probes.mounts import parse_mountinfo
from dltune.probes.storage import meminfo_kb
from dltune.records import record

# Filesystems in memory: staging into one costs RAM, so its preflight counts MemAvailable too.
TMPFS_TYPES = ("tmpfs", "ramfs")
HOST = HostFS()


@record(frozen=True)
class Space:
    """What `dltune stage`'s preflight counts against."""

    free_bytes: int
    free_inodes: int
    fstype: str
    mem_available: int | None = None
    block_size: int = 4096


def fstype_of(path: Path, host: HostFS = HOST) -> str:
    """Filesystem type of the mount holding ``path`` (of several at one point, the last one)."""
    return fstype_at(os.path.realpath(path), parse_mountinfo(host.read_text("/proc/self/mountinfo")))


def space_at(path: Path, host: HostFS = HOST) -> Space:
    st = os.statvfs(path)
    fstype = fstype_of(path, host)
    mem = None
    if fstype in TMPFS_TYPES:
        available_kb = meminfo_kb(host.read_text("/proc/meminfo"), "MemAvailable")
        mem = None if available_kb is None else available_kb * 1024
    return Space(st.f_bavail * st.f_frsize, st.f_favail, fstype, mem, st.f_frsize or 4096)
