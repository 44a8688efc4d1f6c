"""driver-area checks on snapshots and fixture files (no GPU: NVML state is given as data)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dltune.checks.driver import branch, driver_loaded, module_version, nouveau, packages_held
from dltune.checks.gpu import xid
from dltune.checks.xid_catalog import XID_CATALOG
from dltune.model import Status
from dltune.probes import collect_snapshot
from dltune.probes.packages import kernel_log_of
from dltune.snapshot import NvmlState, RebootState, Snapshot


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


def _with(snap: Snapshot, **changes: object) -> Snapshot:
    return Snapshot(**{**snap.__dict__, **changes})


DRIVER_MANIFEST = {
    "nvidia_driver": {
        "role": "nvidia_driver",
        "branch": "580",
        "held_packages": ["libnvidia-compute-580-server", "nvidia-utils-580-server"],
    }
}
PENDING = RebootState(required=True, packages=("nvidia_driver",))
NOT_LOADED = NvmlState(False, "Driver Not Loaded", 9)


def test_installed_driver_waiting_for_its_reboot_warns_instead_of_failing() -> None:
    snap = Snapshot(root="/", nvml=NOT_LOADED, expected=DRIVER_MANIFEST, reboot=PENDING)
    r = driver_loaded(snap)
    assert r.status is Status.WARN and "580" in r.summary and r.remedy and "reboot" in r.remedy
    # the same node with no reboot pending: the driver should be there and is not
    assert driver_loaded(_with(snap, reboot=RebootState(required=False))).status is Status.FAIL
    no_library = _with(snap, reboot=RebootState(required=False), nvml=NvmlState(False, "not found", 12))
    assert driver_loaded(no_library).status is Status.FAIL
    # a CPU node without the role: nothing to say
    assert driver_loaded(Snapshot(root="/", nvml=NvmlState(False, "not found", 12))).status is Status.SKIP


def test_loaded_branch_is_compared_with_the_manifest() -> None:
    snap = Snapshot(root="/", nvml=NvmlState(True, driver_version="580.95.05"), expected=DRIVER_MANIFEST)
    assert branch(snap).status is Status.PASS
    old = _with(snap, nvml=NvmlState(True, driver_version="570.86.15"))
    assert branch(old).status is Status.FAIL
    assert branch(_with(old, reboot=PENDING)).status is Status.WARN
    assert branch(_with(snap, expected={})).status is Status.SKIP
    assert branch(_with(snap, nvml=NOT_LOADED)).status is Status.SKIP


DPKG_STATUS = """\
Package: libnvidia-compute-580-server
Status: hold ok installed
Version: 580.178.04-0ubuntu0.22.04.1

Package: nvidia-utils-580-server
Status: {utils_status}
Version: 580.178.04-0ubuntu0.22.04.1

Package: libc6
Status: install ok installed
Version: 2.35-0ubuntu3.8

Package: nvidia-utils-470-server
Status: deinstall ok config-files
Version: 470.256.02-0ubuntu0.22.04.6
"""


def _dpkg_root(tmp_path, utils_status: str):  # type: ignore[no-untyped-def]
    dpkg = tmp_path / "var/lib/dpkg"
    dpkg.mkdir(parents=True, exist_ok=True)
    (dpkg / "status").write_text(DPKG_STATUS.format(utils_status=utils_status))
    return tmp_path


def test_driver_packages_must_be_held(tmp_path) -> None:  # type: ignore[no-untyped-def]
    held = collect_snapshot(_dpkg_root(tmp_path, "hold ok installed"), areas=["driver"])
    assert [p.name for p in held.driver_packages or ()] == [
        "libnvidia-compute-580-server",
        "nvidia-utils-580-server",
    ]
    assert packages_held(_with(held, expected=DRIVER_MANIFEST)).status is Status.PASS
    loose = collect_snapshot(_dpkg_root(tmp_path, "install ok installed"), areas=["driver"])
    r = packages_held(_with(loose, expected=DRIVER_MANIFEST))
    assert r.status is Status.WARN and r.evidence["not_held"] == ["nvidia-utils-580-server"]
    # without a manifest every installed driver package is expected held (best practice)
    assert packages_held(loose).status is Status.WARN
    assert packages_held(Snapshot(root="/")).status is Status.SKIP


KERNEL_LOG = """\
[  812.1] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
[  901.7] NVRM: Xid (PCI:0000:86:00): 13, pid=2222, Graphics Exception: ESR 0x404600=0x80000002
[  902.7] NVRM: Xid (PCI:0000:86:00): 13, pid=2222, Graphics Exception: ESR 0x404600=0x80000002
[  990.0] eth0: link up
"""


def test_xid_errors_since_boot_per_gpu(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The kernel log comes through the recorded-command seam of a fixture tree."""
    (tmp_path / "dltune-commands.json").write_text(
        json.dumps({"dmesg --kernel --notime": {"stdout": KERNEL_LOG}})
    )
    snap = collect_snapshot(tmp_path, areas=["gpu"], euid=0)
    results = {r.subject: r for r in xid(snap)}
    assert results["PCI:0000:3b:00"].status is Status.FAIL and results["PCI:0000:3b:00"].critical
    assert results["PCI:0000:86:00"].status is Status.WARN
    assert results["PCI:0000:86:00"].evidence["events"] == {"Xid 13": 2}
    clean = _with(
        snap, kernel_log=kernel_log_of("eth0: link up\n"), nvml=NvmlState(True, driver_version="580.1")
    )
    assert [r.status for r in xid(clean)] == [Status.PASS]


def test_xid_check_needs_root_where_dmesg_is_restricted(tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "proc/sys/kernel").mkdir(parents=True)
    (tmp_path / "proc/sys/kernel/dmesg_restrict").write_text("1\n")
    (tmp_path / "dltune-commands.json").write_text(
        json.dumps({"dmesg --kernel --notime": {"stdout": KERNEL_LOG}})
    )
    as_user = xid(collect_snapshot(tmp_path, areas=["gpu"], euid=1000))
    assert [(r.status, r.summary) for r in as_user] == [
        (Status.SKIP, "kernel log not read: needs root (kernel.dmesg_restrict=1)")
    ]
    assert len(xid(collect_snapshot(tmp_path, areas=["gpu"], euid=0))) == 2


def _xid_results(log: str) -> dict[str | None, Any]:
    from dltune.snapshot import Snapshot

    return {r.subject: r for r in xid(Snapshot(root="/", kernel_log=kernel_log_of(log)))}


def test_only_messages_since_the_driver_last_loaded_count() -> None:
    """A node rebooted (or a driver reloaded) after a GPU loss stops failing, so a resumed node is not
    drained again for an old Xid; a new event after the load still counts."""
    old_loss = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.\n"
    load = "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05  Tue Oct  8 03:22:07 UTC 2024\n"
    results = _xid_results(old_loss + load)
    assert [r.status for r in results.values()] == [Status.PASS]
    assert results[None].evidence["older_events_ignored"] == 1
    later = "NVRM: Xid (PCI:0000:86:00): 13, pid=2222, Graphics Exception: ESR 0x404600=0x80000002\n"
    assert {s: r.status for s, r in _xid_results(old_loss + load + later).items()} == {
        "PCI:0000:86:00": Status.WARN
    }


def test_nvlink_and_recovery_action_lines_are_judged_by_what_they_state() -> None:
    fatal = "NVRM: Xid (PCI:0000:04:00): 149, NETIR_LINK_DOWN Fatal XC0 i0 Link 03 (0x0 0x0)\n"
    nonfatal = "NVRM: Xid (PCI:0000:05:00): 145, RLW_REMAP Nonfatal XC0 i0 Link 00 (0x4 0x1 0x0 0x0)\n"
    xid154 = "NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from"
    reset = f"{xid154} 0x0 (None) to 0x1 (GPU Reset Required)\n"
    cleared = f"{xid154} 0x1 (GPU Reset Required) to 0x0 (None)\n"
    results = _xid_results(fatal + nonfatal + reset)
    assert results["PCI:0000:04:00"].status is Status.FAIL and results["PCI:0000:04:00"].critical
    assert results["PCI:0000:05:00"].status is Status.WARN
    assert results["PCI:0008:01:00"].status is Status.FAIL
    assert results["PCI:0008:01:00"].evidence["recovery_action"] == "GPU Reset Required"
    assert _xid_results(reset + cleared)["PCI:0008:01:00"].status is Status.WARN


def test_an_xid_missing_from_the_catalog_or_without_its_action_is_a_warning_that_says_so() -> None:
    """Never silently harmless: a code newer than the catalog (999) and one the catalog lists without
    an immediate action (167, PCIE_FATAL_TIMEOUT) are warnings naming the catalog's edition."""
    for code in (999, 167):
        result = _xid_results(f"NVRM: Xid (PCI:0000:65:00): {code}, something new\n")["PCI:0000:65:00"]
        assert result.status is Status.WARN and "no action in NVIDIA Xid catalog" in result.summary, result


@pytest.mark.parametrize(
    ("code", "bucket"),
    [
        (46, "RESET_GPU"),
        (110, "RESET_GPU"),
        (136, "RESET_GPU"),
        (155, "RESET_GPU"),
        (156, "RESET_GPU"),
        (158, "RESET_GPU"),
        (143, "RESET_GPU"),
        (109, "RESET_GPU"),
        (48, "RESET_GPU"),
        (74, "RESET_GPU"),
        (79, "RESTART_BM"),
        (61, "CONTACT_SUPPORT"),
        (54, "CHECK_MECHANICALS"),
    ],
)
def test_xids_the_catalog_says_take_the_gpu_out_fail_critically(code: int, bucket: str) -> None:
    """NVIDIA's catalog (October 2025): these buckets, or the workflows resolved for an Xid seen alone
    (48 "Solo: RESET_GPU"), take the GPU out of service: the node is drained."""
    result = _xid_results(f"NVRM: Xid (PCI:0000:65:00): {code}, pid=1, name=python\n")["PCI:0000:65:00"]
    assert (result.status, result.critical) == (Status.FAIL, True), result
    assert bucket in result.evidence["buckets"] and bucket in result.summary


@pytest.mark.parametrize("code", [13, 31, 43, 45, 63, 92, 121, 160, 157, 151, 159])
def test_xids_the_catalog_leaves_the_gpu_usable_are_warnings(code: int) -> None:
    """RESTART_APP, IGNORE and the advice-only buckets (RESTART_VM, CHECK_UVM, WORKFLOW_XID_45): the
    GPU stays in service, the line is still reported."""
    result = _xid_results(f"NVRM: Xid (PCI:0000:65:00): {code}, pid=1, name=python\n")["PCI:0000:65:00"]
    assert (result.status, result.critical) == (Status.WARN, False), result


def test_every_catalog_code_has_a_bucket_dltune_judges() -> None:
    """No bucket in the table falls through to a KeyError or a silent pass."""
    for code in XID_CATALOG:
        result = _xid_results(f"NVRM: Xid (PCI:0000:65:00): {code}, x\n")["PCI:0000:65:00"]
        assert result.status in (Status.WARN, Status.FAIL), (code, result)


def test_no_gpu_found_drains_a_gpu_node_and_only_warns_where_no_gpu_is_expected() -> None:
    """The driver loaded on a node built from the GPU image but without GPUs says "No NVIDIA GPU
    found": no reason to drain it; on a node the driver role counted GPUs on, it is the loss of all."""
    log = "NVRM: No NVIDIA GPU found.\n"
    (cpu_node,) = xid(Snapshot(root="/", kernel_log=kernel_log_of(log)))
    assert (cpu_node.status, cpu_node.critical) == (
        Status.WARN,
        False,
    ) and "none is expected" in cpu_node.summary
    counted = {"nvidia_driver": {"gpu_count": 8}}
    (gpu_node,) = xid(Snapshot(root="/", kernel_log=kernel_log_of(log), expected=counted))
    assert (gpu_node.status, gpu_node.critical) == (Status.FAIL, True)


def test_a_probe_failure_belongs_to_the_load_whose_banner_follows_it() -> None:
    """Without the Nvlink line (old drivers), a second banner starts a new load that keeps the probe
    failure printed before it; with the Nvlink line, a GPU lost between it and the banner stays in
    that load."""
    banner = "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05\n"
    old_xid = "NVRM: Xid (PCI:0000:3b:00): 13, pid=1, Graphics Exception\n"
    probe = "nvidia: probe of 0000:5d:00.0 failed with error -1\n"
    results = _xid_results(banner + old_xid + probe + banner)
    assert {s: r.status for s, r in results.items()} == {"PCI:0000:5d:00": Status.FAIL}
    start = "nvidia-nvlink: Nvlink Core is being initialized, major device number 509\n"
    lost = "NVRM: GPU at 0000:3b:00.0 has fallen off the bus.\n"
    results = _xid_results(start + lost + banner)
    assert results["PCI:0000:3b:00"].status is Status.FAIL
