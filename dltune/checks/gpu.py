"""Area ``gpu``: per-GPU health from NVML. Every GPU is judged on its own; a lost GPU does not
hide the others. Fields a GPU does not support give ``skip``."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dltune.checks import check
from dltune.model import Result, Status
from dltune.probes import Snapshot
from dltune.probes.nvml import (
    HW_POWER_BRAKE,
    HW_SLOWDOWN,
    HW_THERMAL,
    IDLE,
    REASON_NAMES,
    SW_POWER_CAP,
    SW_THERMAL,
    Gpu,
)

THERMAL_MARGIN_C = 5
HW_REASONS = HW_SLOWDOWN | HW_THERMAL | HW_POWER_BRAKE
SW_REASONS = SW_THERMAL | SW_POWER_CAP


def _subject(gpu: Gpu) -> str:
    return f"{gpu.index}:{gpu.uuid}" if gpu.uuid else str(gpu.index)


def _per_gpu(check_id: str, snap: Snapshot, judge: Callable[[Gpu], Result]) -> list[Result]:
    if not snap.nvml.available:
        return [Result(check_id, Status.SKIP, f"NVML not available ({snap.nvml.error})")]
    if not snap.nvml.gpus:
        return [Result(check_id, Status.SKIP, "no GPUs")]
    # A lost GPU is reported once, by gpu.present; its other checks cannot say anything.
    return [
        judge(g)
        if g.error is None
        else Result(check_id, Status.SKIP, f"GPU lost: {g.error}", subject=_subject(g))
        for g in snap.nvml.gpus
    ]


@check("gpu.present")
def present(snap: Snapshot) -> list[Result]:
    if not snap.nvml.available:
        return [Result("gpu.present", Status.SKIP, f"NVML not available ({snap.nvml.error})")]
    expected = snap.expected.get("nvidia_driver", {}).get("gpu_count")
    healthy = [g for g in snap.nvml.gpus if g.error is None]
    results = [
        Result(
            "gpu.present",
            Status.FAIL,
            f"GPU {g.index} is lost: {g.error}",
            subject=_subject(g),
            critical=True,
            remedy="drain the node; reset the GPU (nvidia-smi -r) or reboot; check XID errors",
        )
        for g in snap.nvml.gpus
        if g.error is not None
    ]
    evidence: dict[str, Any] = {
        "visible": len(snap.nvml.gpus),
        "healthy": len(healthy),
        "expected": expected,
        "models": sorted({g.name for g in healthy if g.name}),
    }
    if expected is not None and len(healthy) < int(expected):
        results.append(
            Result(
                "gpu.present",
                Status.FAIL,
                f"{len(healthy)} of {expected} GPUs answer",
                evidence=evidence,
                critical=True,
                remedy="reseat or replace the missing GPU",
            )
        )
    elif not results:
        results.append(
            Result(
                "gpu.present",
                Status.PASS,
                f"{len(healthy)} GPUs answer",
                evidence=evidence,
                metrics={"gpus": float(len(healthy))},
            )
        )
    return results


@check("gpu.ecc")
def ecc(snap: Snapshot) -> list[Result]:
    def judge(g: Gpu) -> Result:
        evidence = {
            "uncorrected_volatile": g.ecc_uncorrected_volatile,
            "remap_pending": g.remapped_rows_pending,
            "remap_failure": g.remapped_rows_failure,
        }
        if g.ecc_uncorrected_volatile is None and g.remapped_rows_failure is None:
            return Result("gpu.ecc", Status.SKIP, "ECC and row remapping not supported", subject=_subject(g))
        if g.remapped_rows_failure:
            return Result(
                "gpu.ecc",
                Status.FAIL,
                "row remapping failed: the GPU needs replacing",
                subject=_subject(g),
                evidence=evidence,
                critical=True,
                remedy="drain and RMA the GPU",
            )
        if g.ecc_uncorrected_volatile:
            return Result(
                "gpu.ecc",
                Status.FAIL,
                f"{g.ecc_uncorrected_volatile} uncorrected ECC errors since boot",
                subject=_subject(g),
                evidence=evidence,
                critical=True,
                remedy="drain the node, reset the GPU; replace it if errors come back",
            )
        if g.remapped_rows_pending:
            return Result(
                "gpu.ecc",
                Status.WARN,
                "a row remap is pending until the GPU is reset",
                subject=_subject(g),
                evidence=evidence,
                remedy="reset the GPU or reboot when idle",
            )
        return Result(
            "gpu.ecc",
            Status.PASS,
            "no uncorrected ECC errors, no remap pending",
            subject=_subject(g),
            evidence=evidence,
        )

    return _per_gpu("gpu.ecc", snap, judge)


@check("gpu.pcie")
def pcie(snap: Snapshot) -> list[Result]:
    def judge(g: Gpu) -> Result:
        evidence = {
            "gen": g.pcie_gen,
            "gen_max": g.pcie_gen_max,
            "width": g.pcie_width,
            "width_max": g.pcie_width_max,
        }
        if None in (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max):
            return Result("gpu.pcie", Status.SKIP, "PCIe link not reported", subject=_subject(g))
        link = f"Gen{g.pcie_gen} x{g.pcie_width} (max Gen{g.pcie_gen_max} x{g.pcie_width_max})"
        if g.pcie_width < g.pcie_width_max:  # type: ignore[operator]
            return Result(
                "gpu.pcie",
                Status.FAIL,
                f"link trained narrow: {link}",
                subject=_subject(g),
                evidence=evidence,
                remedy="reseat the GPU or riser; check the slot and BIOS settings",
            )
        idle = g.clock_event_reasons is not None and bool(g.clock_event_reasons & IDLE)
        if g.pcie_gen < g.pcie_gen_max and not idle:  # type: ignore[operator]
            return Result(
                "gpu.pcie",
                Status.WARN,
                f"link below its generation under load: {link}",
                subject=_subject(g),
                evidence=evidence,
                remedy="check BIOS PCIe speed and the riser",
            )
        note = " (idle GPUs lower the generation to save power)" if g.pcie_gen < g.pcie_gen_max else ""  # type: ignore[operator]
        return Result("gpu.pcie", Status.PASS, f"{link}{note}", subject=_subject(g), evidence=evidence)

    return _per_gpu("gpu.pcie", snap, judge)


@check("gpu.clocks")
def clocks(snap: Snapshot) -> list[Result]:
    def judge(g: Gpu) -> Result:
        reasons = g.clock_event_reasons
        if reasons is None:
            return Result("gpu.clocks", Status.SKIP, "clock event reasons not supported", subject=_subject(g))
        names = [name for bit, name in REASON_NAMES.items() if reasons & bit]
        evidence = {"reasons": names, "mask": hex(reasons)}
        if reasons & HW_REASONS:
            return Result(
                "gpu.clocks",
                Status.FAIL,
                f"clocks held down by hardware: {', '.join(names)}",
                subject=_subject(g),
                evidence=evidence,
                critical=True,
                remedy="check cooling, power supply and the PSU/power brake cabling",
            )
        if reasons & SW_REASONS:
            return Result(
                "gpu.clocks",
                Status.WARN,
                f"clocks held down: {', '.join(names)}",
                subject=_subject(g),
                evidence=evidence,
                remedy="check airflow and the power limit (nvidia-smi -q -d POWER)",
            )
        return Result(
            "gpu.clocks",
            Status.PASS,
            f"clocks free ({', '.join(names) or 'busy'})",
            subject=_subject(g),
            evidence=evidence,
        )

    return _per_gpu("gpu.clocks", snap, judge)


@check("gpu.thermal_power")
def thermal_power(snap: Snapshot) -> list[Result]:
    def judge(g: Gpu) -> Result:
        metrics = {
            k: float(v)
            for k, v in (
                ("temperature_c", g.temperature_c),
                ("power_w", g.power_w),
                ("power_limit_w", g.power_limit_w),
            )
            if v is not None
        }
        evidence = {
            "temperature_c": g.temperature_c,
            "slowdown_c": g.slowdown_c,
            "power_w": g.power_w,
            "power_limit_w": g.power_limit_w,
        }
        problems = []
        if (
            g.temperature_c is not None
            and g.slowdown_c
            and g.temperature_c >= g.slowdown_c - THERMAL_MARGIN_C
        ):
            problems.append(f"{g.temperature_c} °C, slowdown at {g.slowdown_c} °C")
        if g.power_w is not None and g.power_limit_w and g.power_w > g.power_limit_w * 1.02:
            problems.append(f"{g.power_w:.0f} W over its {g.power_limit_w:.0f} W limit")
        if problems:
            return Result(
                "gpu.thermal_power",
                Status.WARN,
                "; ".join(problems),
                subject=_subject(g),
                evidence=evidence,
                metrics=metrics,
                remedy="check cooling and airflow",
            )
        if not metrics:
            return Result(
                "gpu.thermal_power", Status.SKIP, "temperature and power not reported", subject=_subject(g)
            )
        return Result(
            "gpu.thermal_power",
            Status.PASS,
            f"{g.temperature_c} °C, {g.power_w or 0:.0f} W",
            subject=_subject(g),
            evidence=evidence,
            metrics=metrics,
        )

    return _per_gpu("gpu.thermal_power", snap, judge)


@check("gpu.persistence")
def persistence(snap: Snapshot) -> list[Result]:
    def judge(g: Gpu) -> Result:
        if g.persistence is None:
            return Result(
                "gpu.persistence", Status.SKIP, "persistence mode not supported", subject=_subject(g)
            )
        if not g.persistence:
            return Result(
                "gpu.persistence",
                Status.WARN,
                "persistence mode is off: every job start pays the driver's initialisation",
                subject=_subject(g),
                remedy="apply role nvidia_driver (enables nvidia-persistenced)",
            )
        return Result("gpu.persistence", Status.PASS, "persistence mode on", subject=_subject(g))

    return _per_gpu("gpu.persistence", snap, judge)


# XIDs that mean the hardware (not the application) failed: double-bit ECC, micro-controller
# halts, row-remap failure, NVLink, fallen off the bus, uncontained ECC, GSP errors, unrecovered ECC.
HARDWARE_XIDS = frozenset({48, 61, 62, 64, 74, 79, 95, 119, 120, 140})
XID_LINE = re.compile(r"NVRM: Xid \(PCI:(?P<bus>[0-9a-fA-F:.]+)\): (?P<xid>\d+)")


@check("gpu.xid")
def xid(snap: Snapshot) -> list[Result]:
    log = snap.kernel_log
    if log.text is None:
        return [Result("gpu.xid", Status.SKIP, f"kernel log not read: {log.error}")]
    by_bus: dict[str, list[int]] = {}
    for match in XID_LINE.finditer(log.text):
        by_bus.setdefault(match["bus"].lower(), []).append(int(match["xid"]))
    if not by_bus:
        if not snap.nvml.available and snap.nvidia_module_version is None:
            return [Result("gpu.xid", Status.SKIP, "no XID errors and no NVIDIA driver loaded")]
        return [Result("gpu.xid", Status.PASS, "no XID errors in the kernel log since boot")]
    results = []
    for bus, xids in sorted(by_bus.items()):
        hardware = sorted(set(xids) & HARDWARE_XIDS)
        counts = {str(x): xids.count(x) for x in sorted(set(xids))}
        results.append(
            Result(
                "gpu.xid",
                Status.FAIL if hardware else Status.WARN,
                (
                    f"hardware XID(s) {', '.join(map(str, hardware))} since boot"
                    if hardware
                    else f"XID(s) {', '.join(counts)} since boot (usually raised by an application)"
                ),
                subject=f"PCI:{bus}",
                evidence={"xid_counts": counts},
                metrics={"xid_events": float(len(xids))},
                critical=bool(hardware),
                remedy=(
                    "drain the node; reset the GPU (nvidia-smi -r) or reboot; replace it if it recurs"
                    if hardware
                    else "look at the job that ran when it was logged (`dmesg | grep Xid`)"
                ),
            )
        )
    return results
