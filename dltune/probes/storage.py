"""Storage facts beyond the mount table: which device a UUID names, free space and inodes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from dltune.probes.hostfs import HostFS
from dltune.probes.runner import CommandRunner
from dltune.probes.watchdog import Deadline, statfs_many
from dltune.snapshot import Mount, SpaceInfo, StatFs, looks_like_data_mount
from dltune.text import decimal

STATVFS_TIMEOUT_S = 2.0


def data_mount_points(mounts: Iterable[Mount], expected: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The role's data disks when it left a manifest, else the mounts that look like data."""
    fragment = expected.get("data_disks")
    if fragment is not None:
        return [str(d["mount_point"]) for d in fragment.get("disks", []) if isinstance(d, dict)]
    return sorted({m.mount_point for m in mounts if looks_like_data_mount(m)})


def resolve_uuids(fs: HostFS, runner: CommandRunner, uuids: Iterable[str]) -> dict[str, str | None]:
    """Device of each filesystem UUID: udev's by-uuid link, else `blkid -U` (root, or its cache)."""
    found: dict[str, str | None] = {}
    for uuid in uuids:
        link = fs.path(f"/dev/disk/by-uuid/{uuid}")
        if link.is_symlink():
            # Resolve by name, as the host sees it: a fixture tree's links point outside the tree.
            found[uuid] = os.path.normpath(os.path.join("/dev/disk/by-uuid", os.readlink(link)))
            continue
        answer = runner.run(["blkid", "-U", uuid])
        if answer.ok and answer.stdout.strip():
            found[uuid] = answer.stdout.strip()
        elif answer.returncode == 2 and os.geteuid() == 0:
            found[uuid] = None  # blkid probed every device as root and none has this UUID
    return found


def space_of(
    fs: HostFS,
    mount_points: Iterable[str],
    deadline: Deadline | None = None,
    mounts: Iterable[Mount] = (),
) -> dict[str, SpaceInfo]:
    """Space and inodes of each data mount, statfs in children under a deadline (a hung disk or a
    dead network mount costs the timeout, never the audit); a mount that did not answer is absent.
    One statfs per filesystem: the bind mounts of a host with many containers share their answer."""
    points = list(mount_points)
    device_of = {m.mount_point: m.device for m in mounts if m.device}
    asked: dict[str, str] = {}  # filesystem (device, or the mount point itself) -> a mount point of it
    for mp in points:
        asked.setdefault(device_of.get(mp, mp), mp)
    limit = deadline.limit(STATVFS_TIMEOUT_S) if deadline else STATVFS_TIMEOUT_S
    host_paths = {mp: str(fs.path(mp)) for mp in asked.values()}
    answers = statfs_many(list(host_paths.values()), limit) if asked else {}
    # One SpaceInfo per filesystem, shared by its mount points (50,000 bind mounts: one object).
    spaces: dict[str, SpaceInfo] = {}
    for filesystem, mp in asked.items():
        answer = answers.get(host_paths[mp])
        if isinstance(answer, StatFs):
            spaces[filesystem] = answer
        elif deadline and deadline.expired():
            deadline.missed[f"statfs {mp}"] = f"statfs of {mp} (storage.data_space)"
    result: dict[str, SpaceInfo] = {}
    for mp in points:
        space = spaces.get(device_of.get(mp, mp))
        if space is not None:
            result[mp] = space
    return result


def meminfo_kb(meminfo: str | None, key: str) -> int | None:
    """A /proc/meminfo value in kB (None when absent or not a number of ASCII digits)."""
    for line in (meminfo or "").splitlines():
        name, _, rest = line.partition(":")
        if name == key:
            parts = rest.split()
            return decimal(parts[0]) if parts else None
    return None
