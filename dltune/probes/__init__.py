"""Probes: the only code that reads the host. Every read goes through a HostFS root and every
command through a CommandRunner; failures are recorded as data, never raised."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dltune.probes.hostfs import HostFS
from dltune.probes.jobenv import PathInfo, job_paths, read_files, relevant_environ
from dltune.probes.manifest import MANIFEST_DIR, read_manifest
from dltune.probes.mounts import Fstab, Mount, UnparsedLine, parse_fstab, parse_mountinfo
from dltune.probes.mountstats import NfsMountStats, parse_mountstats
from dltune.probes.network import (
    NFS_FSTYPES,
    Responsiveness,
    RouteChoice,
    probe_responsive_many,
    route_to,
)
from dltune.probes.nvml import NVML_TIMEOUT_S, NvmlState, probe_nvml_in_child
from dltune.probes.packages import KernelLog, Package, read_driver_packages, read_kernel_log
from dltune.probes.runner import CommandRunner, RecordedRunner, SubprocessRunner
from dltune.probes.storage import SpaceInfo, data_mount_points, resolve_uuids, space_of
from dltune.probes.watchdog import Deadline
from dltune.text import decimal


@dataclass(frozen=True)
class RebootState:
    required: bool
    packages: tuple[str, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    """Everything the checks judge, read once from the host (or a fixture tree)."""

    root: str
    mounts: tuple[Mount, ...] = ()
    mountinfo_unparsed: tuple[UnparsedLine, ...] = ()
    fstab: Fstab = field(default_factory=Fstab)
    mem_total_kb: int | None = None
    reboot: RebootState = RebootState(required=False)
    expected: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    manifest_dir: str = MANIFEST_DIR
    # role -> why its fragment cannot be used (unreadable, not JSON, wrong shape); "*": the directory
    manifest_problems: Mapping[str, str] = field(default_factory=dict)
    # UUID -> device path; None: looked up and not found; missing key: could not look it up.
    uuid_devices: Mapping[str, str | None] = field(default_factory=dict)
    space: Mapping[str, SpaceInfo] = field(default_factory=dict)
    nvml: NvmlState = field(default_factory=lambda: NvmlState(available=False, error="not probed"))
    nvidia_module_version: str | None = None  # from /proc/driver/nvidia/version
    kernel_modules: frozenset[str] = frozenset()
    # Installed NVIDIA driver packages (None: no dpkg database here).
    driver_packages: tuple[Package, ...] | None = None
    # VIP -> what `ip route get` chose (network area, for the VIPs the nfs_multivip manifest lists)
    vip_routes: Mapping[str, RouteChoice] = field(default_factory=dict)
    # NFS mount point -> whether statfs answered within the timeout (nfs area)
    nfs_responsive: Mapping[str, Responsiveness] = field(default_factory=dict)
    # NFS mount point -> its options and RPC transport(s), from /proc/self/mountstats (nfs area)
    nfs_stats: Mapping[str, NfsMountStats] = field(default_factory=dict)
    kernel_log: KernelLog = field(default_factory=lambda: KernelLog(None, "not probed"))
    # env/staging: the audit's own environment (job variables only), its uid, the dl_env files and
    # slurm.conf by path, lstat facts of $SLURM_TMPDIR, the scratch base and the hooks by path.
    environ: Mapping[str, str] = field(default_factory=dict)
    uid: int = 0
    files: Mapping[str, str | None] = field(default_factory=dict)
    paths: Mapping[str, PathInfo] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    # probe -> what the audit's --timeout cut short (system.audit_timeout names them)
    missed: Mapping[str, str] = field(default_factory=dict)


def collect_snapshot(
    root: str | Path = "/",
    runner: CommandRunner | None = None,
    areas: Iterable[str] | None = None,
    euid: int | None = None,
    nfs_timeout: float = 5.0,
    environ: Mapping[str, str] | None = None,
    nvml_timeout: float = NVML_TIMEOUT_S,
    deadline: Deadline | None = None,
) -> Snapshot:
    """Read the host. With ``areas``, probes that only other areas judge (NVML, statvfs) are left out:
    `--only storage` must not touch a GPU driver that may hang, nor a mount that may. Probes that can
    block in the kernel run in children under ``deadline`` (the audit's --timeout); what it cut short
    is in ``Snapshot.missed``."""
    deadline = deadline or Deadline()
    wanted = None if areas is None else set(areas)

    def needed(*for_areas: str) -> bool:
        return wanted is None or bool(wanted.intersection(for_areas))

    fs = HostFS(root)
    if runner is None:
        # A fixture tree must never be judged with this host's command outputs.
        runner = SubprocessRunner() if fs.root == Path("/") else RecordedRunner.for_fixture_root(fs.root)
    errors: dict[str, str] = {}

    def read(host_path: str) -> str | None:
        try:
            return fs.read_text(host_path)
        except OSError as exc:
            errors[host_path] = f"{type(exc).__name__}: {exc.strerror or exc}"
            return None

    mountinfo = read("/proc/self/mountinfo")
    # No /etc/fstab at all (a container) is an empty table; one that cannot be read is an error.
    fstab = (
        "" if not fs.exists("/etc/fstab") and not fs.path("/etc/fstab").is_symlink() else read("/etc/fstab")
    )
    expected, manifest_problems = read_manifest(fs)
    mountinfo_unparsed: list[UnparsedLine] = []
    mounts = parse_mountinfo(mountinfo, mountinfo_unparsed) if mountinfo is not None else ()
    disks = expected.get("data_disks", {}).get("disks", [])
    uuids = [str(d["uuid"]) for d in disks if isinstance(d, dict) and d.get("uuid")]
    env_wanted = needed("env", "staging")
    job_environ = relevant_environ(
        os.environ if environ is None else environ, dict(expected.get("dl_env", {}).get("variables", {}))
    )
    return Snapshot(
        root=str(fs.root),
        mounts=mounts,
        mountinfo_unparsed=tuple(mountinfo_unparsed),
        fstab=parse_fstab(fstab) if fstab is not None else Fstab(),
        mem_total_kb=_mem_total_kb(read("/proc/meminfo")),
        reboot=_reboot_state(fs),
        expected=expected,
        manifest_problems=manifest_problems,
        uuid_devices=resolve_uuids(fs, runner, uuids),
        space=space_of(fs, data_mount_points(mounts, expected), deadline, mounts)
        if needed("storage")
        else {},
        # NVML answers for the running host only: a fixture tree has no GPUs to ask.
        nvml=(
            NvmlState(False, "NVML is not read under --root")
            if fs.root != Path("/")
            else probe_nvml_in_child(nvml_timeout, deadline)
            if needed("gpu", "driver")
            else NvmlState(False, "not probed: gpu and driver areas not asked for")
        ),
        nvidia_module_version=nvidia_module_version(read_optional(fs, "/proc/driver/nvidia/version")),
        kernel_modules=frozenset(
            line.split(" ", 1)[0] for line in (read_optional(fs, "/proc/modules") or "").splitlines() if line
        ),
        driver_packages=read_driver_packages(fs) if needed("driver") else None,
        vip_routes=(
            {vip: route_to(runner, vip) for vip in _manifest_vips(expected)} if needed("network") else {}
        ),
        # statfs on a dead NFS server would hang: only the nfs area asks, each in a killable child,
        # and never under a fixture --root (the mounts there are not this host's).
        nfs_responsive=(
            _responsive(mounts, nfs_timeout, deadline) if needed("nfs") and fs.root == Path("/") else {}
        ),
        nfs_stats=(
            {m.mount_point: m for m in parse_mountstats(read_optional(fs, "/proc/self/mountstats") or "").nfs}
            if needed("nfs") and any(m.fstype in NFS_FSTYPES for m in mounts)
            else {}
        ),
        kernel_log=(
            read_kernel_log(fs, runner, euid)
            if needed("gpu")
            else KernelLog(None, "not probed: gpu area not asked for")
        ),
        environ=job_environ if env_wanted else {},
        uid=os.getuid(),
        files=read_files(fs, _env_files(expected)) if env_wanted else {},
        paths=job_paths(fs, job_environ, expected, mounts, deadline) if env_wanted else {},
        errors=errors,
        missed=dict(deadline.missed),  # last: after every probe above has run
    )


def _responsive(mounts: Iterable[Mount], timeout: float, deadline: Deadline) -> dict[str, Responsiveness]:
    points = [m.mount_point for m in mounts if m.fstype in NFS_FSTYPES]
    if not points:
        return {}
    found = probe_responsive_many(points, max(deadline.limit(timeout), 0.001))
    if deadline.expired() and any(not r.ok for r in found.values()):
        deadline.missed["nfs"] = "statfs of the NFS mounts (nfs.responsive)"
    return found


def _env_files(expected: Mapping[str, Mapping[str, Any]]) -> list[str]:
    files = [str(p) for p in dict(expected.get("dl_env", {}).get("files", {})).values()]
    slurm = expected.get("slurm_tmpdir", {})
    if slurm.get("manage_conf", True) and isinstance(slurm.get("conf"), str):
        files.append(slurm["conf"])
    return files


def _manifest_vips(expected: Mapping[str, Mapping[str, Any]]) -> list[str]:
    vips = expected.get("nfs_multivip", {}).get("vips", [])
    return [str(v["address"]) for v in vips if isinstance(v, Mapping) and v.get("address")]


def read_optional(fs: HostFS, host_path: str) -> str | None:
    """A file that is absent on many hosts (no GPU driver, no modules): absence is not an error."""
    try:
        return fs.read_text(host_path)
    except OSError:
        return None


def nvidia_module_version(text: str | None) -> str | None:
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 ..."
    match = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9]+(?:\.[0-9]+)+)", text or "")
    return match.group(1) if match else None


def _mem_total_kb(meminfo: str | None) -> int | None:
    for line in (meminfo or "").splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and decimal(parts[1]) is not None:
                return decimal(parts[1])
    return None


def _reboot_state(fs: HostFS) -> RebootState:
    if not fs.exists("/run/reboot-required"):
        return RebootState(required=False)
    try:
        lines = fs.read_text("/run/reboot-required.pkgs").splitlines()
    except OSError:
        lines = []
    # Ubuntu appends a package each time it asks: keep the first mention of each.
    packages = tuple(dict.fromkeys(line.strip() for line in lines if line.strip()))
    return RebootState(required=True, packages=packages)
