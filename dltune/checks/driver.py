"""Area ``driver``: the NVIDIA driver is loaded, its kernel module matches its userspace, no nouveau."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dltune.checks import check
from dltune.model import Result, Status
from dltune.snapshot import Snapshot

# NVML return codes (nvml.h) that mean something about the node rather than about dltune.
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
REBOOT_REMEDY = (
    "reboot the node (drain it first): the driver was upgraded but the old kernel module is loaded"
)


def _manifest(snap: Snapshot) -> Mapping[str, Any]:
    return snap.expected.get("nvidia_driver", {})


def _reboot_pending_for_driver(snap: Snapshot) -> bool:
    return snap.reboot.required and "nvidia_driver" in snap.reboot.packages


def _is_gpu_node(snap: Snapshot) -> bool:
    return (
        snap.nvml.available
        or snap.nvidia_module_version is not None
        or (snap.nvml.error_code not in (None, NVML_ERROR_LIBRARY_NOT_FOUND))
    )


# long: one verdict per way a driver fails to load, judged in this order
@check("driver.loaded")
def driver_loaded(snap: Snapshot) -> Result:
    nvml = snap.nvml
    evidence = {
        "nvml_error": nvml.error,
        "nvml_error_code": nvml.error_code,
        "kernel_module_version": snap.nvidia_module_version,
    }
    if nvml.hung:
        return Result(
            "driver.loaded",
            Status.FAIL,
            nvml.error or "NVML did not answer",
            evidence=evidence,
            remedy="a GPU or the driver is wedged: drain the node, look at `dmesg | grep NVRM` (Xid), "
            "reset the GPU (nvidia-smi -r) or reboot",
            critical=True,
        )
    if nvml.available:
        return Result(
            "driver.loaded",
            Status.PASS,
            f"NVIDIA driver {nvml.driver_version} answers through NVML",
            evidence={**evidence, "driver_version": nvml.driver_version},
        )
    if nvml.error_code == NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return Result(
            "driver.loaded",
            Status.FAIL,
            "driver/library version mismatch: NVML refuses to start",
            evidence=evidence,
            remedy=REBOOT_REMEDY,
            critical=True,
        )
    branch = _manifest(snap).get("branch")
    if branch and _reboot_pending_for_driver(snap):
        return Result(
            "driver.loaded",
            Status.WARN,
            f"driver branch {branch} is installed and loads after the pending reboot ({nvml.error})",
            evidence={**evidence, "expected_branch": branch, "reboot_pending": True},
            remedy="reboot the node (drain it first) to load the new driver",
        )
    if branch and nvml.error_code == NVML_ERROR_LIBRARY_NOT_FOUND:
        return Result(
            "driver.loaded",
            Status.FAIL,
            f"role nvidia_driver installed branch {branch}, but there is no NVML library",
            evidence={**evidence, "expected_branch": branch},
            critical=True,
            remedy="apply role nvidia_driver again; check `dpkg -l 'libnvidia-compute-*'`",
        )
    if nvml.error_code == NVML_ERROR_DRIVER_NOT_LOADED or (
        nvml.error_code is not None and nvml.error_code != NVML_ERROR_LIBRARY_NOT_FOUND
    ):
        return Result(
            "driver.loaded",
            Status.FAIL,
            f"the NVIDIA driver does not answer: {nvml.error}",
            evidence=evidence,
            critical=True,
            remedy="apply role nvidia_driver; after an install, reboot so the kernel module loads",
        )
    return Result("driver.loaded", Status.SKIP, f"no NVIDIA driver here ({nvml.error})", evidence=evidence)


@check("driver.module_version")
def module_version(snap: Snapshot) -> Result:
    kernel, user = snap.nvidia_module_version, snap.nvml.driver_version
    evidence = {"kernel_module": kernel, "userspace": user}
    if kernel is None or user is None:
        return Result(
            "driver.module_version", Status.SKIP, "needs both the loaded module and NVML", evidence=evidence
        )
    if kernel != user:
        return Result(
            "driver.module_version",
            Status.FAIL,
            f"kernel module {kernel} but userspace libraries {user}",
            evidence=evidence,
            remedy=REBOOT_REMEDY,
            critical=True,
        )
    return Result(
        "driver.module_version",
        Status.PASS,
        f"kernel module and userspace are both {kernel}",
        evidence=evidence,
    )


@check("driver.nouveau")
def nouveau(snap: Snapshot) -> Result:
    if not _is_gpu_node(snap):
        return Result("driver.nouveau", Status.SKIP, "not an NVIDIA GPU node")
    if "nouveau" in snap.kernel_modules:
        return Result(
            "driver.nouveau",
            Status.FAIL,
            "nouveau is loaded beside the NVIDIA driver",
            remedy="apply role nvidia_driver (blacklists nouveau, updates the initramfs), then reboot",
        )
    return Result("driver.nouveau", Status.PASS, "nouveau is not loaded")


def _major(version: str | None) -> str | None:
    return version.split(".", 1)[0] if version else None


@check("driver.branch", needs=("manifest:nvidia_driver",))
def branch(snap: Snapshot) -> Result:
    expected = _manifest(snap).get("branch")
    loaded = snap.nvml.driver_version or snap.nvidia_module_version
    evidence = {"expected_branch": expected, "loaded_version": loaded}
    if expected is None:
        return Result(
            "driver.branch", Status.SKIP, "no nvidia_driver manifest to compare with", evidence=evidence
        )
    if loaded is None:
        return Result("driver.branch", Status.SKIP, "no driver loaded (see driver.loaded)", evidence=evidence)
    if _major(loaded) == str(expected):
        return Result(
            "driver.branch", Status.PASS, f"driver {loaded} is branch {expected}", evidence=evidence
        )
    pending = _reboot_pending_for_driver(snap)
    return Result(
        "driver.branch",
        Status.WARN if pending else Status.FAIL,
        f"driver {loaded} is loaded but role nvidia_driver installed branch {expected}"
        + (" (a reboot is pending)" if pending else ""),
        evidence={**evidence, "reboot_pending": pending},
        remedy="reboot the node (drain it first)" if pending else "apply role nvidia_driver, then reboot",
    )


@check("driver.packages_held", needs=("manifest:nvidia_driver",))
def packages_held(snap: Snapshot) -> Result:
    installed = snap.driver_packages
    if installed is None:
        return Result("driver.packages_held", Status.SKIP, "no dpkg database on this host")
    manifest = _manifest(snap)
    by_name = {p.name: p for p in installed}
    if manifest:
        wanted = [str(name) for name in manifest.get("held_packages", [])]
        if not wanted:
            return Result("driver.packages_held", Status.SKIP, "nvidia_driver_hold is false: holding is off")
        source = "the packages role nvidia_driver held"
    else:
        wanted = sorted(by_name)
        if not wanted:
            return Result("driver.packages_held", Status.SKIP, "no NVIDIA driver packages installed")
        source = "every installed NVIDIA driver package (no nvidia_driver manifest)"
    loose = [name for name in wanted if name not in by_name or not by_name[name].held]
    evidence = {"checked": wanted, "not_held": loose, "source": source}
    if loose:
        return Result(
            "driver.packages_held",
            Status.WARN,
            f"{len(loose)} driver package(s) not held: an unattended upgrade can split kernel module and "
            f"userspace ({', '.join(loose[:4])}{', ...' if len(loose) > 4 else ''})",
            evidence=evidence,
            remedy="apply role nvidia_driver (nvidia_driver_hold: true), or `apt-mark hold` them",
        )
    return Result(
        "driver.packages_held",
        Status.PASS,
        f"the one driver package is held ({wanted[0]})"
        if len(wanted) == 1
        else f"all {len(wanted)} driver packages are held",
        evidence=evidence,
    )
