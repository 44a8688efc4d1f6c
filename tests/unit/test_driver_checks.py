"""driver-area checks on snapshots and fixture files (no GPU: NVML state is given as data)."""

from __future__ import annotations

from dltune.checks.driver import module_version, nouveau
from dltune.model import Status
from dltune.probes import Snapshot, collect_snapshot
from dltune.probes.nvml import NvmlState


def test_module_version_read_from_proc_and_compared_with_userspace(tmp_path) -> None:  # type: ignore[no-untyped-def]
    proc = tmp_path / "proc/driver/nvidia"
    proc.mkdir(parents=True)
    (proc / "version").write_text(
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs@U16)\n"
        "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
    )
    (tmp_path / "proc/modules").write_text("nvidia_uvm 1 0 - Live 0x0\nnouveau 2 0 - Live 0x0\n")
    snap = collect_snapshot(tmp_path)
    assert snap.nvidia_module_version == "570.86.15"
    upgraded = Snapshot(**{**snap.__dict__, "nvml": NvmlState(True, driver_version="580.95.05")})
    r = module_version(upgraded)
    assert r.status is Status.FAIL and r.remedy is not None and r.remedy.startswith("reboot") and r.critical
    same = Snapshot(**{**snap.__dict__, "nvml": NvmlState(True, driver_version="570.86.15")})
    assert module_version(same).status is Status.PASS
    assert nouveau(same).status is Status.FAIL


def test_cpu_node_skips_driver_checks() -> None:
    snap = Snapshot(root="/", nvml=NvmlState(False, "NVML Shared Library Not Found", 12))
    assert module_version(snap).status is Status.SKIP
    assert nouveau(snap).status is Status.SKIP
