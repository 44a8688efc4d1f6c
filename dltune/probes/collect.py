"""Probes: the only code that reads the host. Every read goes through a HostFS root and every
command through a CommandRunner; failures are recorded as data, never raised."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dltune.probes.clock import read_time_sync
from dltune.probes.cpu import read_cpu_frequency
from dltune.probes.dcgm import read_dcgm
from dltune.probes.fabric import read_fabric
from dltune.probes.hostfs import HostFS
from dltune.probes.jobenv import (
    job_paths,
    parse_env_file,
    parse_slurm_conf,
    read_files,
    relevant_environ,
    slurm_jobs_on,
)
from dltune.probes.manifest import read_ledger, read_manifest
from dltune.probes.memory_errors import read_memory_errors
from dltune.probes.mounts import parse_fstab, parse_mountinfo
from dltune.probes.mountstats import parse_mountstats
from dltune.probes.network import probe_responsive_many, route_to
from dltune.probes.nvme import data_devices, read_nvme_health
from dltune.probes.nvml import NVML_TIMEOUT_S, nvml_in_background
from dltune.probes.packages import read_driver_packages, read_kernel_log
from dltune.probes.runner import CommandRunner, RecordedRunner, SubprocessRunner
from dltune.probes.storage import data_mount_points, meminfo_kb, resolve_uuids, space_of
from dltune.probes.watchdog import Deadline
from dltune.snapshot import (
    NFS_FSTYPES,
    Fabric,
    Fstab,
    KernelLog,
    MemoryErrors,
    Mount,
    NvmlState,
    RebootState,
    Responsiveness,
    Snapshot,
    TimeSync,
    UnparsedLine,
)


# long: every probe into a named local, in the order they run, then the one Snapshot
def collect_snapshot(
    root: str | Path = "/",
    runner: CommandRunner | None = None,
    areas: Iterable[str] | None = None,
    euid: int | None = None,
    nfs_timeout: float = 5.0,
    environ: Mapping[str, str] | None = None,
    nvml_timeout: float = NVML_TIMEOUT_S,
    deadline: Deadline | None = None,
    previous: Mapping[str, Mapping[str, int]] | None = None,
    dcgm_level: int | None = None,
    nvml_future: Future[NvmlState] | None = None,
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

    # The children that mostly wait (dmesg; systemd-detect-virt and timedatectl) run beside the file
    # reads and parsing below rather than one after the other: together they were most of an audit's
    # run time. Their results are taken where they were read before, and errors raise there as before.
    children = ThreadPoolExecutor(max_workers=2, thread_name_prefix="dltune-probe")
    kernel_log_read = (
        children.submit(read_kernel_log, fs, runner, euid) if needed("gpu", "system", "fabric") else None
    )
    time_sync_read = (
        children.submit(read_time_sync, runner, max(deadline.limit(5.0), 0.1)) if needed("system") else None
    )
    children.shutdown(wait=False)  # no more work for it; its two threads end with their child
    mountinfo = read("/proc/self/mountinfo")
    # No /etc/fstab at all (a container) is an empty table; one that cannot be read is an error.
    fstab = (
        "" if not fs.exists("/etc/fstab") and not fs.path("/etc/fstab").is_symlink() else read("/etc/fstab")
    )
    expected, manifest_problems = read_manifest(fs)
    ledger, ledger_problems = read_ledger(fs)
    mountinfo_unparsed: list[UnparsedLine] = []
    mounts = parse_mountinfo(mountinfo, mountinfo_unparsed) if mountinfo is not None else ()
    disks = expected.get("data_disks", {}).get("disks", [])
    uuids = [str(d["uuid"]) for d in disks if isinstance(d, dict) and d.get("uuid")]
    env_wanted = needed("env", "staging")
    job_environ = relevant_environ(
        os.environ if environ is None else environ, dict(expected.get("dl_env", {}).get("variables", {}))
    )
    uuid_devices = resolve_uuids(fs, runner, uuids)
    # NVML answers for the running host only: a fixture tree has no GPUs to ask. Its child spends half
    # a second in the clock window: the other probes run meanwhile (the audit starts it even earlier).
    if nvml_future is None and fs.root == Path("/") and needed("gpu", "driver", "fabric"):
        nvml_future = nvml_in_background(nvml_timeout, deadline)
    files = read_files(fs, _env_files(expected)) if env_wanted else {}
    nvidia_version = read_optional(fs, "/proc/driver/nvidia/version")
    data_points = data_mount_points(mounts, expected) if needed("storage") else []
    device_paths = (
        {name: fs.resolve(name) for name in _device_names(mounts, uuid_devices)} if needed("storage") else {}
    )
    kernel_log = (
        kernel_log_read.result()
        if kernel_log_read is not None
        else KernelLog(None, "not probed: gpu, system and fabric areas not asked for")
    )
    # Each probe into a named local, in the order they run: NVML's answer comes before the Slurm job
    # query that asks only when a GPU runs a process; the deadline's misses are read last.
    fstab_table = parse_fstab(fstab) if fstab is not None else Fstab()
    mem_total_kb = meminfo_kb(read("/proc/meminfo"), "MemTotal")
    reboot = _reboot_state(fs)
    cpu_frequency = read_cpu_frequency(fs) if needed("system") else None
    time_sync = time_sync_read.result() if time_sync_read is not None else TimeSync(error="not probed")
    space = space_of(fs, data_points, deadline, mounts) if needed("storage") else {}
    nvme = (
        read_nvme_health(runner, data_devices(mounts, data_points, device_paths), deadline, euid)
        if needed("storage")
        else ()
    )
    kernel_modules = frozenset(
        line.split(" ", 1)[0] for line in (read_optional(fs, "/proc/modules") or "").splitlines() if line
    )
    driver_packages = read_driver_packages(fs) if needed("driver", "fabric") else None
    fabric = read_fabric(fs, expected, nvidia_version, deadline) if needed("fabric") else Fabric()
    dcgm = read_dcgm(runner, dcgm_level, deadline) if dcgm_level and needed("gpu") else None
    vip_routes = {vip: route_to(runner, vip) for vip in _manifest_vips(expected)} if needed("network") else {}
    # statfs on a dead NFS server would hang: only the nfs area asks, each in a killable child, and
    # never under a fixture --root (the mounts there are not this host's).
    nfs_responsive = (
        _responsive(mounts, nfs_timeout, deadline) if needed("nfs") and fs.root == Path("/") else {}
    )
    nfs_stats = (
        {m.mount_point: m for m in parse_mountstats(read_optional(fs, "/proc/self/mountstats") or "").nfs}
        if needed("nfs") and any(m.fstype in NFS_FSTYPES for m in mounts)
        else {}
    )
    memory_errors = read_memory_errors(fs, kernel_log.text) if needed("system") else MemoryErrors()
    nvml = _nvml_state(nvml_future, fs)
    slurm_jobs = (
        slurm_jobs_on(runner, os.uname().nodename.split(".")[0], max(deadline.limit(5.0), 0.1))
        if needed("gpu") and any(g.compute_pids for g in nvml.gpus)
        else None
    )
    slurm_conf = {
        path: parse_slurm_conf(text, path, read=lambda included: _read_bytes(fs, included))
        for path, text in files.items()
        if path == _slurm_conf_path(expected) and text is not None
    }
    paths = job_paths(fs, job_environ, expected, mounts, deadline) if env_wanted else {}
    return Snapshot(
        root=str(fs.root),
        mounts=mounts,
        mountinfo_unparsed=tuple(mountinfo_unparsed),
        fstab=fstab_table,
        mem_total_kb=mem_total_kb,
        reboot=reboot,
        cpu_frequency=cpu_frequency,
        time_sync=time_sync,
        expected=expected,
        manifest_problems=manifest_problems,
        ledger=ledger,
        ledger_problems=ledger_problems,
        uuid_devices=uuid_devices,
        device_paths=device_paths,
        space=space,
        nvme=nvme,
        nvidia_module_version=nvidia_module_version(nvidia_version),
        kernel_modules=kernel_modules,
        driver_packages=driver_packages,
        fabric=fabric,
        dcgm=dcgm,
        previous=previous or {},
        vip_routes=vip_routes,
        nfs_responsive=nfs_responsive,
        nfs_stats=nfs_stats,
        kernel_log=kernel_log,
        memory_errors=memory_errors,
        nvml=nvml,
        slurm_jobs=slurm_jobs,
        environ=job_environ if env_wanted else {},
        uid=os.getuid(),
        env_values=_env_values(files, expected),
        slurm_conf=slurm_conf,
        paths=paths,
        errors=errors,
        missed=dict(deadline.missed),  # last: after every probe above has run
    )


def _nvml_state(future: Future[NvmlState] | None, fs: HostFS) -> NvmlState:
    if future is not None:
        return future.result()
    if fs.root != Path("/"):
        return NvmlState(False, "NVML is not read under --root")
    return NvmlState(False, "not probed: gpu and driver areas not asked for")


def _responsive(mounts: Iterable[Mount], timeout: float, deadline: Deadline) -> dict[str, Responsiveness]:
    points = [m.mount_point for m in mounts if m.fstype in NFS_FSTYPES]
    if not points:
        return {}
    found = probe_responsive_many(points, max(deadline.limit(timeout), 0.001))
    if deadline.expired() and any(not r.ok for r in found.values()):
        deadline.missed["nfs"] = "statfs of the NFS mounts (nfs.responsive)"
    return found


def _read_bytes(fs: HostFS, host_path: str) -> bytes:
    from dltune.probes.slurm_conf_model import ConfError  # loaded by parse_slurm_conf already

    try:
        with open(fs.path(host_path), "rb") as handle:
            return handle.read()
    except OSError as exc:
        raise ConfError(f"{host_path}: {exc.strerror or exc}") from None


def _slurm_conf_path(expected: Mapping[str, Mapping[str, Any]]) -> str | None:
    slurm = expected.get("slurm_tmpdir", {})
    if slurm.get("manage_conf", True) and isinstance(slurm.get("conf"), str):
        return str(slurm["conf"])
    return None


def _env_files(expected: Mapping[str, Mapping[str, Any]]) -> list[str]:
    files = [str(p) for p in dict(expected.get("dl_env", {}).get("files", {})).values()]
    conf = _slurm_conf_path(expected)
    return [*files, conf] if conf else files


def _env_values(
    files: Mapping[str, str | None], expected: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, str]]:
    kinds = {str(path): str(kind) for kind, path in dict(expected.get("dl_env", {}).get("files", {})).items()}
    return {
        path: parse_env_file(kinds[path], text)
        for path, text in files.items()
        if path in kinds and text is not None
    }


def _device_names(mounts: Iterable[Mount], uuid_devices: Mapping[str, str | None]) -> set[str]:
    """The device paths the storage checks compare: mount sources and the devices UUIDs name."""
    names = {m.source for m in mounts if m.source.startswith("/dev/")}
    return names | {device for device in uuid_devices.values() if device}


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
