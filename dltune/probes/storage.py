"""Storage facts beyond the mount table: which device a UUID names, free space and inodes."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from dltune.probes.hostfs import HostFS
from dltune.probes.mounts import Mount
from dltune.probes.runner import CommandRunner
from dltune.probes.watchdog import Deadline, StatFs, statfs_many

# Filesystems that hold data on local block devices; the audit advises noatime on these.
DATA_FSTYPES = frozenset({"ext4", "ext3", "xfs", "btrfs", "f2fs"})
# Mount points that belong to the OS, not to data (the role's data_disks_system_noatime covers them).
SYSTEM_MOUNT_POINTS = frozenset({"/", "/boot", "/boot/efi", "/usr", "/var", "/var/log"})
STATVFS_TIMEOUT_S = 2.0

# Space and inodes of a filesystem: what statfs answered (one type for the probe and the checks).
SpaceInfo = StatFs


def looks_like_data_mount(mount: Mount) -> bool:
    return (
        mount.fstype in DATA_FSTYPES
        and mount.source.startswith("/dev/")
        and mount.mount_point not in SYSTEM_MOUNT_POINTS
        and not mount.mount_point.startswith(("/snap/", "/var/lib/docker", "/boot/"))
    )


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
