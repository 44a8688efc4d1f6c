"""Area ``driver``: the NVIDIA driver is loaded, its kernel module matches its userspace, no nouveau."""

from __future__ import annotations

from dltune.checks import check
from dltune.model import Result, Status
from dltune.probes import Snapshot

# NVML return codes (nvml.h) that mean something about the node rather than about dltune.
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
REBOOT_REMEDY = (
    "reboot the node (drain it first): the driver was upgraded but the old kernel module is loaded"
)


def _is_gpu_node(snap: Snapshot) -> bool:
    return (
        snap.nvml.available
        or snap.nvidia_module_version is not None
        or (snap.nvml.error_code not in (None, NVML_ERROR_LIBRARY_NOT_FOUND))
    )


@check("driver.loaded")
def driver_loaded(snap: Snapshot) -> Result:
    nvml = snap.nvml
    evidence = {
        "nvml_error": nvml.error,
        "nvml_error_code": nvml.error_code,
        "kernel_module_version": snap.nvidia_module_version,
    }
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
