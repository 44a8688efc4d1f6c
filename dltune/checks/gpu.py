"""Area ``gpu``: per-GPU health from NVML. Every GPU is judged on its own; a lost GPU does not
hide the others. Fields a GPU does not support give ``skip``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from dltune.checks import check, counter_rises
from dltune.checks.xid_catalog import CATALOG_EDITION, CATALOG_URL, XID_CATALOG
from dltune.model import FailureClass, Result, Status
from dltune.records import field, record
from dltune.snapshot import (
    HW_POWER_BRAKE,
    HW_SLOWDOWN,
    HW_THERMAL,
    IDLE,
    REASON_NAMES,
    SW_POWER_CAP,
    SW_THERMAL,
    UNKNOWN_DEVICE,
    Gpu,
    GpuEvent,
    SlurmJobs,
    Snapshot,
)

THERMAL_MARGIN_C = 5
# A reason that held the clocks for at least half of the probe's window persists (not a passing event).
SUSTAINED_SHARE = 0.5
# An enforced limit this far below the default is a lowered one (NVML reports both in mW; a board's
# default can read a few watts off its nominal value).
POWER_LIMIT_LOWERED = 0.98
# Application clocks this far below their default were set lower (nvidia-smi -ac), not rounded.
APP_CLOCK_LOWERED = 0.99


def _subject(gpu: Gpu) -> str:
    return f"{gpu.index}:{gpu.uuid}" if gpu.uuid else str(gpu.index)


def _unavailable(check_id: str, snap: Snapshot) -> Result:
    if snap.nvml.hung:
        return Result(check_id, Status.SKIP, "NVML did not answer: see driver.loaded")
    return Result(check_id, Status.SKIP, f"NVML not available ({snap.nvml.error})")


@record(frozen=True)
class Verdict:
    """A per-GPU judgement; _per_gpu makes it the check's Result for that GPU."""

    status: Status
    summary: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    remedy: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    critical: bool = False


def _per_gpu(check_id: str, snap: Snapshot, judge: Callable[[Gpu], Verdict]) -> list[Result]:
    if not snap.nvml.available:
        return [_unavailable(check_id, snap)]
    if not snap.nvml.gpus:
        return [Result(check_id, Status.SKIP, "no GPUs")]
    # A lost GPU is reported once, by gpu.present; its other checks cannot say anything. Nor can they
    # for a GPU this process may not read (a job's device cgroup hides the node's other GPUs).
    return [
        Result(check_id, Status.SKIP, f"GPU lost: {g.error}", subject=_subject(g))
        if g.error is not None
        else Result(check_id, Status.SKIP, _unreadable_summary(g), subject=_subject(g))
        if g.unreadable is not None
        else _result(check_id, g, judge(g))
        for g in snap.nvml.gpus
    ]


def _result(check_id: str, gpu: Gpu, verdict: Verdict) -> Result:
    return Result(
        check_id,
        verdict.status,
        verdict.summary,
        subject=_subject(gpu),
        evidence=verdict.evidence,
        remedy=verdict.remedy,
        metrics=verdict.metrics,
        critical=verdict.critical,
    )


def _unreadable_summary(gpu: Gpu) -> str:
    return (
        f"not readable by this process (NVML: {gpu.unreadable}): a job's device cgroup hides it; "
        "audit as root or outside the job to judge it"
    )


def expected_gpu_count(snap: Snapshot) -> tuple[int | None, str | None]:
    """How many GPUs the node must have, and who said so: role nvidia_driver's count where it manages
    the driver, else the site's dltune_health_gpu_count (nodes whose driver another party manages)."""
    for role, variable in (("nvidia_driver", "nvidia_driver"), ("health", "dltune_health_gpu_count")):
        count = snap.expected.get(role, {}).get("gpu_count")
        if count is not None:
            return int(count), variable
    return None, None


@check("gpu.present", needs=("manifest:nvidia_driver", "manifest:health"))
def present(snap: Snapshot) -> list[Result]:
    if not snap.nvml.available:
        return [_unavailable("gpu.present", snap)]
    expected, expected_by = expected_gpu_count(snap)
    healthy = [g for g in snap.nvml.gpus if g.error is None and g.unreadable is None]
    unreadable = [g for g in snap.nvml.gpus if g.unreadable is not None]
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
        "nvml_errors": {str(g.index): g.nvml_errors for g in healthy if g.nvml_errors},
        "healthy": len(healthy),
        "unreadable": len(unreadable),
        "expected": expected,
        "expected_by": expected_by,
        "models": sorted({g.name for g in healthy if g.name}),
    }
    hidden = (
        f" ({len(unreadable)} more not readable by this process: NVML says {unreadable[0].unreadable}, "
        "as in a job's device cgroup; not judged)"
        if unreadable
        else ""
    )
    if expected is not None and len(healthy) + len(unreadable) < expected:
        results.append(
            Result(
                "gpu.present",
                Status.FAIL,
                f"{len(healthy)} of {expected} GPUs answer ({expected} expected by {expected_by}){hidden}",
                evidence=evidence,
                critical=True,
                remedy="reseat or replace the missing GPU",
            )
        )
    elif not results and not healthy:
        results.append(_none_present(expected_by, unreadable, evidence))
    elif not results:
        results.append(
            Result(
                "gpu.present",
                Status.PASS,
                f"{len(healthy)} GPU{' answers' if len(healthy) == 1 else 's answer'}{hidden}",
                evidence=evidence,
                metrics={"gpus": float(len(healthy))},
            )
        )
    return results


def _none_present(expected_by: str | None, unreadable: list[Gpu], evidence: dict[str, Any]) -> Result:
    """gpu.present with no GPU to count (none lost, none missing): a node the site expects none of
    passes; none listed with nothing expected, or none this process may read (a job's cgroup), is
    not judged. Never "0 GPUs answer", a pass."""
    if unreadable:
        status, summary = (
            Status.SKIP,
            f"no GPU readable by this process: NVML says {unreadable[0].unreadable} for all "
            f"{len(unreadable)} (as in a job's device cgroup); not judged",
        )
    elif expected_by is None:
        status, summary = (
            Status.SKIP,
            "NVML lists no GPU on this node, and no GPU count is expected "
            "(nvidia_driver, dltune_health_gpu_count)",
        )
    else:
        status, summary = Status.PASS, f"no GPU, as {expected_by} expects"
    return Result("gpu.present", status, summary, evidence=evidence, metrics={"gpus": 0.0})


# Correctable ECC errors are judged by their rate: this many more since the previous audit warns
# (NVIDIA publishes no threshold; NHC's MCELOG_MAX_CORRECTED_RATE for host DIMMs is 9 a day).
CORRECTABLE_RISE_WARN = 10
# Page retirement (pre-Ampere): DCGM's health watch fails at 63 pages retired, or 16 for double-bit
# errors (modules/health/DcgmHealthWatch.cpp); the driver retires at most 64.
RETIRED_PAGES_FAIL, RETIRED_DBE_FAIL = 63, 16


ECC_QUERIES = ("GetTotalEccErrors", "GetRemappedRows", "GetRowRemapperHistogram", "GetRetiredPages")


def _memory_counters(g: Gpu) -> dict[str, int]:
    """The GPU's memory error counters the next audit compares with (evidence["counters"])."""
    named = {
        "corrected_volatile": g.ecc_corrected_volatile,
        "uncorrected_volatile": g.ecc_uncorrected_volatile,
        "remapped_corrected": g.remapped_rows_corrected,
        "remapped_uncorrected": g.remapped_rows_uncorrected,
        "retired_sbe": g.retired_pages_sbe,
        "retired_dbe": g.retired_pages_dbe,
    }
    return {name: value for name, value in named.items() if value is not None}


# long: NVIDIA's memory error management in the order its severity goes, one verdict per GPU
def _judge_ecc(g: Gpu, snap: Snapshot) -> Verdict:
    counters = _memory_counters(g)
    histogram = g.remap_histogram or {}
    evidence: dict[str, Any] = {
        "uncorrected_volatile": g.ecc_uncorrected_volatile,
        "remap_pending": g.remapped_rows_pending,
        "remap_failure": g.remapped_rows_failure,
        "counters": counters,
    }
    if histogram:
        evidence["remap_histogram"] = dict(histogram)
    metrics = {name: float(value) for name, value in counters.items()}
    if g.ecc_uncorrected_volatile is None and g.remapped_rows_failure is None and not counters:
        errors = {q: e for q, e in (g.nvml_errors or {}).items() if q in ECC_QUERIES}
        if errors:
            return Verdict(
                Status.WARN,
                "ECC and row remapping not readable: "
                + "; ".join(f"NVML {query}: {error}" for query, error in sorted(errors.items())),
                evidence={"nvml_errors": errors},
                remedy="reset the GPU or reboot; a GPU whose counters NVML cannot read may be failing",
            )
        return Verdict(Status.SKIP, "ECC and row remapping not supported")
    rose = counter_rises(snap, "gpu.ecc", _subject(g), counters, reset_is_new=True)
    if g.remapped_rows_failure:
        return Verdict(
            Status.FAIL,
            "row remapping failed: the GPU needs replacing",
            evidence=evidence,
            metrics=metrics,
            critical=True,
            remedy="drain and RMA the GPU",
        )
    if g.ecc_uncorrected_volatile:
        return Verdict(
            Status.FAIL,
            f"{g.ecc_uncorrected_volatile} uncorrected ECC errors since boot",
            evidence=evidence,
            metrics=metrics,
            critical=True,
            remedy="drain the node, reset the GPU; replace it if errors come back",
        )
    retired = (g.retired_pages_sbe or 0) + (g.retired_pages_dbe or 0)
    if retired >= RETIRED_PAGES_FAIL or (g.retired_pages_dbe or 0) >= RETIRED_DBE_FAIL:
        return Verdict(
            Status.FAIL,
            f"{retired} memory pages retired ({g.retired_pages_dbe or 0} for double-bit errors): "
            "at the driver's limit",
            evidence=evidence,
            metrics=metrics,
            remedy="plan the GPU's replacement (RMA); DCGM's health watch fails it as well",
        )
    if histogram.get("none"):
        return Verdict(
            Status.FAIL,
            f"{histogram['none']} memory bank(s) with no spare row left: the next uncorrectable error there "
            "cannot be remapped",
            evidence=evidence,
            metrics=metrics,
            remedy="plan the GPU's replacement; run the field diagnostic for the RMA",
        )
    findings = []
    if g.remapped_rows_pending:
        findings.append("a row remap is pending until the GPU is reset")
    if g.retired_pages_pending:
        findings.append("a page retirement is pending until the GPU is reset")
    if histogram.get("low"):
        findings.append(f"{histogram['low']} bank(s) with few spare rows left")
    remaps = (g.remapped_rows_corrected or 0) + (g.remapped_rows_uncorrected or 0)
    if remaps:
        findings.append(
            f"{remaps} row(s) remapped ({g.remapped_rows_corrected or 0} for correctable, "
            f"{g.remapped_rows_uncorrected or 0} for uncorrectable errors)"
        )
    if retired:
        findings.append(f"{retired} page(s) retired")
    if rose.get("corrected_volatile", 0) >= CORRECTABLE_RISE_WARN:
        findings.append(f"{rose['corrected_volatile']} correctable ECC errors since the previous audit")
    if findings:
        return Verdict(
            Status.WARN,
            "; ".join(findings),
            evidence=evidence,
            metrics=metrics,
            remedy="reset the GPU or reboot when idle (a pending remap takes effect then); watch the "
            "counts between audits: a GPU whose memory keeps remapping is wearing out",
        )
    return Verdict(
        Status.PASS,
        "no uncorrected ECC errors, no remap pending"
        + (
            f"; {g.ecc_corrected_volatile} correctable since the driver loaded"
            if g.ecc_corrected_volatile
            else ""
        ),
        evidence=evidence,
        metrics=metrics,
    )


@check("gpu.ecc")
def ecc(snap: Snapshot) -> list[Result]:
    """GPU memory: uncorrected errors, row remapping (failure, pending, the banks' spare rows), page
    retirement on older GPUs, and the correctable rate since the previous audit."""
    return _per_gpu("gpu.ecc", snap, lambda g: _judge_ecc(g, snap))


def idle_reading(gpu: Gpu) -> tuple[bool | None, str]:
    """Whether the GPU is idle, and the reading that says so. Load needs evidence of load: utilization
    above 0 % or a compute process. The driver's idle reason alone cannot say "busy": real idle cards
    at P8 with 0 % and no process show "Idle: Not Active" beside "SW Power Cap: Active"
    (tests/fixtures/real/nvidia_smi_q_idle/). Idle: the idle reason, else 0 % utilization or no compute
    process. None: the driver reports none of these."""
    busy = []
    if gpu.utilization_percent:
        busy.append(f"utilization {gpu.utilization_percent} %")
    if gpu.compute_pids:
        busy.append(f"{len(gpu.compute_pids)} compute process(es)")
    if busy:
        return False, " and ".join(busy)
    if gpu.clock_event_reasons is not None and gpu.clock_event_reasons & IDLE:
        return True, "the driver's idle clock-event reason"
    quiet = []
    if gpu.utilization_percent == 0:
        quiet.append("utilization 0 %")
    if gpu.compute_pids == ():
        quiet.append("no compute process")
    if quiet:
        unset = " (the driver's idle reason is not set)" if gpu.clock_event_reasons is not None else ""
        return True, " and ".join(quiet) + unset
    return None, "neither utilization, the compute processes nor the idle reason reported"


def _judge_pcie(g: Gpu) -> Verdict:
    evidence: dict[str, Any] = {
        "gen": g.pcie_gen,
        "gen_max": g.pcie_gen_max,
        "width": g.pcie_width,
        "width_max": g.pcie_width_max,
    }
    if None in (g.pcie_gen, g.pcie_gen_max, g.pcie_width, g.pcie_width_max):
        return Verdict(Status.SKIP, "PCIe link not reported")
    link = f"Gen{g.pcie_gen} x{g.pcie_width} (max Gen{g.pcie_gen_max} x{g.pcie_width_max})"
    idle, reading = idle_reading(g)
    evidence["idle"] = idle
    evidence["idle_by"] = reading
    if g.pcie_width < g.pcie_width_max:  # type: ignore[operator]
        if idle:
            # nvidia-smi --help-query-gpu, pcie.link.width.current: "These may be reduced when the GPU is
            # not in use" (published idle L4 and RTX 5090 at P8 read x8 of x16). Only a width under load
            # (or of unknown load) proves the slot.
            return Verdict(
                Status.WARN,
                f"link narrower than its maximum while idle (idle by {reading}): {link}",
                evidence=evidence,
                remedy="rerun `dltune audit --only gpu` while the GPU trains: a width still below its "
                "maximum then is a seating, riser or slot fault",
            )
        return Verdict(
            Status.FAIL,
            f"link trained narrow: {link}",
            evidence=evidence,
            remedy="reseat the GPU or riser; check the slot and BIOS settings",
        )
    lowered = g.pcie_gen < g.pcie_gen_max  # type: ignore[operator]
    if lowered and idle is False:
        return Verdict(
            Status.WARN,
            f"link below its generation under load ({reading}): {link}",
            evidence=evidence,
            remedy="check BIOS PCIe speed and the riser",
        )
    note = ""
    if lowered:
        note = (
            f" (idle by {reading}: idle GPUs lower the generation to save power)"
            if idle
            else " (the generation is lowered; whether the GPU is busy is not reported: rerun "
            "`dltune audit --only gpu` while it trains to judge it)"
        )
    return Verdict(Status.PASS, f"{link}{note}", evidence=evidence)


def _share_text(share: float | None, window: float | None) -> str:
    if share is None or not window:
        return "in both reads of the reason mask"
    return f"{share:.0%} of a {window:g} s window"


# long: one verdict per clock-event case, judged in this order (hardware, thermal, power cap)
def _judge_clocks(g: Gpu) -> Verdict:
    """What held the clocks over a short window, not one instantaneous mask: NVML's clock-event counters
    give each reason's share of the window (older drivers: the mask read at both ends). A hardware
    slowdown that persists is critical; one seen in passing is a warning. A software power cap is the
    normal state of a loaded A100/H100; it is a finding only where the power limit was lowered."""
    first = g.clock_event_reasons
    if first is None:
        return Verdict(Status.SKIP, "clock event reasons not supported")
    later = g.clock_event_reasons_later if g.clock_event_reasons_later is not None else first
    share = g.clock_event_share or {}
    seen_mask = first | later
    names = [name for bit, name in REASON_NAMES.items() if seen_mask & bit]
    evidence: dict[str, Any] = {
        "reasons": names,
        "mask": hex(first),
        "mask_later": hex(later),
        "window_s": g.clock_window_s,
        "share_of_window": {REASON_NAMES[bit]: round(v, 3) for bit, v in sorted(share.items())}
        if g.clock_event_share is not None
        else None,
        "power_limit_w": g.power_limit_w,
        "power_default_limit_w": g.power_default_limit_w,
    }

    def persists(bit: int) -> bool:
        if bit in share:
            return share[bit] >= SUSTAINED_SHARE
        return bool(first & bit) and bool(later & bit)

    def seen(bit: int) -> bool:
        return bool(seen_mask & bit) or share.get(bit, 0.0) > 0

    def label(bits: list[int]) -> str:
        return ", ".join(
            f"{REASON_NAMES[bit]} ({_share_text(share.get(bit), g.clock_window_s)})" for bit in bits
        )

    hardware = [bit for bit in (HW_SLOWDOWN, HW_THERMAL, HW_POWER_BRAKE) if seen(bit)]
    held = [bit for bit in hardware if persists(bit)]
    if held:
        return Verdict(
            Status.FAIL,
            f"clocks held down by hardware: {label(held)}",
            evidence=evidence,
            critical=True,
            remedy="check cooling, power supply and the PSU/power brake cabling",
        )
    if hardware:
        return Verdict(
            Status.WARN,
            f"hardware slowdown seen but not sustained: {', '.join(REASON_NAMES[b] for b in hardware)}",
            evidence=evidence,
            remedy="rerun `dltune audit --only gpu`; if it recurs, check cooling and power cabling",
        )
    if persists(SW_THERMAL):
        return Verdict(
            Status.WARN,
            f"clocks held down: {label([SW_THERMAL])}",
            evidence=evidence,
            remedy="check airflow and inlet temperature (nvidia-smi -q -d TEMPERATURE)",
        )
    if seen(SW_POWER_CAP) and power_limit_lowered(g):
        return Verdict(
            Status.WARN,
            f"held at a power limit lowered to {g.power_limit_w:.0f} W "
            f"(default {g.power_default_limit_w:.0f} W): {label([SW_POWER_CAP])}",
            evidence=evidence,
            remedy="restore the default power limit (nvidia-smi -pl) unless it was lowered on purpose",
        )
    summary = (
        "at its power limit (the normal state of a loaded GPU)"
        if seen(SW_POWER_CAP)
        else f"clocks free ({', '.join(names) or 'busy'})"
    )
    return Verdict(Status.PASS, summary, evidence=evidence)


def _judge_thermal_power(g: Gpu) -> Verdict:
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
    if g.temperature_c is not None and g.slowdown_c and g.temperature_c >= g.slowdown_c - THERMAL_MARGIN_C:
        problems.append(f"{g.temperature_c} °C, slowdown at {g.slowdown_c} °C")
    if g.power_w is not None and g.power_limit_w and g.power_w > g.power_limit_w * 1.02:
        problems.append(f"{g.power_w:.0f} W over its {g.power_limit_w:.0f} W limit")
    if problems:
        return Verdict(
            Status.WARN,
            "; ".join(problems),
            evidence=evidence,
            metrics=metrics,
            remedy="check cooling and airflow",
        )
    if not metrics:
        return Verdict(Status.SKIP, "temperature and power not reported")
    return Verdict(
        Status.PASS,
        f"{g.temperature_c} °C, {g.power_w or 0:.0f} W",
        evidence=evidence,
        metrics=metrics,
    )


def _judge_persistence(g: Gpu) -> Verdict:
    if g.persistence is None:
        return Verdict(Status.SKIP, "persistence mode not supported")
    if not g.persistence:
        return Verdict(
            Status.WARN,
            "persistence mode is off: every job start pays the driver's initialisation",
            remedy="apply role nvidia_driver (enables nvidia-persistenced)",
        )
    return Verdict(Status.PASS, "persistence mode on")


def power_limit_lowered(g: Gpu) -> bool:
    """The one rule gpu.power_limit and gpu.clocks (a power cap under a lowered limit) share."""
    return (
        g.power_limit_w is not None
        and g.power_default_limit_w is not None
        and g.power_limit_w < g.power_default_limit_w * POWER_LIMIT_LOWERED
    )


def _judge_power_limit(g: Gpu) -> Verdict:
    if g.power_limit_w is None or g.power_default_limit_w is None:
        return Verdict(Status.SKIP, "power limits not reported")
    evidence = {"power_limit_w": g.power_limit_w, "power_default_limit_w": g.power_default_limit_w}
    metrics = {"power_limit_w": g.power_limit_w, "power_default_limit_w": g.power_default_limit_w}
    if power_limit_lowered(g):
        return Verdict(
            Status.WARN,
            f"power limit lowered to {g.power_limit_w:.0f} W (default {g.power_default_limit_w:.0f} W): "
            "the GPU trains slower under load",
            evidence=evidence,
            metrics=metrics,
            remedy="restore it (nvidia-smi -i N -pl <default>) unless it was lowered on purpose",
        )
    return Verdict(
        Status.PASS, f"power limit {g.power_limit_w:.0f} W, the default", evidence=evidence, metrics=metrics
    )


# The per-GPU checks: one judge each, run on every GPU that answers (see _per_gpu).
def _judge_app_clocks(g: Gpu) -> Verdict:
    """Application clocks set below their default (nvidia-smi -ac) cap every kernel's clock."""
    now, default = g.app_clock_mhz, g.app_clock_default_mhz
    if now is None or default is None:
        return Verdict(Status.SKIP, "application clocks not supported")
    evidence = {"app_clock_mhz": now, "app_clock_default_mhz": default}
    if now < default * APP_CLOCK_LOWERED:
        return Verdict(
            Status.WARN,
            f"application clock lowered to {now} MHz (default {default} MHz)",
            evidence=evidence,
            remedy="reset it (nvidia-smi -rac) unless it was lowered on purpose",
        )
    return Verdict(Status.PASS, f"application clock at its default ({default} MHz)", evidence=evidence)


PER_GPU: dict[str, Callable[[Gpu], Verdict]] = {
    "gpu.pcie": _judge_pcie,
    "gpu.clocks": _judge_clocks,
    "gpu.thermal_power": _judge_thermal_power,
    "gpu.persistence": _judge_persistence,
    "gpu.power_limit": _judge_power_limit,
    "gpu.app_clocks": _judge_app_clocks,
}


def _per_gpu_check(
    check_id: str, failure: FailureClass = FailureClass.HARD
) -> Callable[[Snapshot], list[Result]]:
    def run(snap: Snapshot) -> list[Result]:
        return _per_gpu(check_id, snap, PER_GPU[check_id])

    run.__name__ = check_id.split(".")[1]
    return check(check_id, failure=failure)(run)  # type: ignore[return-value]


pcie = _per_gpu_check("gpu.pcie")
# Clocks held down and heat pass with the load or the room's air: transient (debounced).
clocks = _per_gpu_check("gpu.clocks", FailureClass.TRANSIENT)
thermal_power = _per_gpu_check("gpu.thermal_power", FailureClass.TRANSIENT)
persistence = _per_gpu_check("gpu.persistence")
power_limit = _per_gpu_check("gpu.power_limit")
app_clocks = _per_gpu_check("gpu.app_clocks")


LEFT_BEHIND_REMEDY = (
    "kill the processes (their memory and the GPU stay taken until they end) and find the job that "
    "left them (an epilog that kills a job's GPU processes prevents it); drain the node until then"
)


@check("gpu.processes")
def processes(snap: Snapshot) -> list[Result]:
    """Compute processes on a GPU while Slurm runs no job on this node were left behind by a job:
    they hold the GPU's memory and time, and the next job on the node fails or runs slow. Slurm is
    asked (squeue), since a job's cgroups do not exist under every process tracker."""
    if not snap.nvml.available:
        return [_unavailable("gpu.processes", snap)]
    busy = {g.index: list(g.compute_pids) for g in snap.nvml.gpus if g.compute_pids}
    listed = [g for g in snap.nvml.gpus if g.compute_pids is not None]
    if not busy:
        if not listed:
            return [Result("gpu.processes", Status.SKIP, "the driver does not list the GPUs' processes")]
        return [Result("gpu.processes", Status.PASS, f"no compute process on {len(listed)} GPU(s)")]
    running = "; ".join(
        f"GPU {index}: pid {', '.join(map(str, pids))}" for index, pids in sorted(busy.items())
    )
    jobs = snap.slurm_jobs
    evidence: dict[str, Any] = {
        "compute_pids": {str(i): p for i, p in busy.items()},
        "slurm_node": jobs.node if jobs else None,
        "slurm_jobs": list(jobs.job_ids) if jobs else None,
        "slurm_error": jobs.error if jobs else None,
    }
    verdict = _whose(running, jobs)
    return [
        Result(
            "gpu.processes",
            verdict.status,
            verdict.summary,
            evidence=evidence,
            remedy=verdict.remedy,
            critical=verdict.critical,
        )
    ]


def _whose(running: str, jobs: SlurmJobs | None) -> Verdict:
    if jobs is None or not jobs.installed:
        return Verdict(
            Status.PASS, f"compute processes running ({running}); no Slurm on this node to say whose"
        )
    if jobs.error is not None:
        return Verdict(
            Status.WARN,
            f"compute processes running ({running}); Slurm could not say whose: {jobs.error}",
            remedy="check slurmctld (scontrol ping), then rerun the audit",
        )
    if jobs.job_ids:
        return Verdict(
            Status.PASS,
            f"compute processes running ({running}) while Slurm runs job(s) {', '.join(jobs.job_ids)} here",
        )
    return Verdict(
        Status.FAIL,
        f"compute processes left behind: {running}, while Slurm runs no job on {jobs.node}",
        remedy=LEFT_BEHIND_REMEDY,
        critical=True,
    )


# NVIDIA's Xid catalog (checks/xid_catalog.py) gives each code a resolution bucket. RESTART_APP,
# IGNORE and the advice-only buckets leave the GPU usable (warn); RESET_GPU, RESTART_BM (reboot the
# node), CONTACT_SUPPORT and CHECK_MECHANICALS take it out (fail, critical). Xids 144-150 (NVLink)
# state Fatal/Nonfatal in the line itself, and Xid 154 states the recovery action the driver wants;
# both are judged from the line. The catalog's workflows are resolved as its text says for an Xid seen
# alone: WORKFLOW_XID_48 (double-bit ECC) "Solo: RESET_GPU"; WORKFLOW_NVLINK_ERR (Xid 74) decodes
# registers dltune does not read, and most of its outcomes reset the GPU; WORKFLOW_XID_45 "Solo:
# RESTART_FM", never the GPU's fault.
TAKES_GPU_OUT = frozenset(
    {"RESET_GPU", "RESTART_BM", "CONTACT_SUPPORT", "CHECK_MECHANICALS", "NOT_BROUGHT_UP"}
)
WORKFLOW_BUCKETS = {"WORKFLOW_XID_48": "RESET_GPU", "WORKFLOW_NVLINK_ERR": "RESET_GPU"}
# Xid 154's recovery actions (nvmlDeviceGetRecoveryAction): 0 none, 1 GPU reset, 2 node reboot,
# 3 drain P2P, 4 drain and reset.
RECOVERY_BUCKETS = {0: "IGNORE", 1: "RESET_GPU", 2: "RESTART_BM", 3: "RESET_GPU", 4: "RESET_GPU"}
EVENT_BUCKETS = {
    "fallen_off_bus": "RESTART_BM",
    "init_failed": "RESTART_BM",
    "gsp_timeout": "RESET_GPU",
    "not_brought_up": "NOT_BROUGHT_UP",
    "no_gpu_found": "NOT_BROUGHT_UP",
}
# What NVIDIA's catalog advises for the buckets that leave the GPU in service.
BUCKET_ADVICE = {
    "RESTART_APP": "restart the application",
    "IGNORE": "no action needed",
    "RESTART_VM": "restart the VM",
    "CHECK_UVM": "reset the GPU if UVM or vGPU is in use",
    "UPDATE_SWFW": "update the driver or firmware",
    "WORKFLOW_XID_45": "seen alone: restart Fabric Manager",
    "NOT_BROUGHT_UP": "the driver found no GPU, and none is expected on this node",
}
WORST_FIRST = ("RESTART_BM", "RESET_GPU", "NOT_BROUGHT_UP", "CONTACT_SUPPORT", "CHECK_MECHANICALS")
BUCKET_REMEDY = {
    "RESTART_BM": "drain the node and reboot it; replace the GPU if it recurs (`dmesg | grep NVRM`)",
    "RESET_GPU": "drain the node; reset the GPU (nvidia-smi -r -i N) or reboot; replace it if it recurs",
    "CONTACT_SUPPORT": "drain the node and open a case with the vendor (keep `nvidia-bug-report.sh` output)",
    "CHECK_MECHANICALS": "drain the node and check the GPU's auxiliary power cables and seating",
    "NOT_BROUGHT_UP": (
        "drain the node; the driver never brought this GPU up: read the NVRM lines "
        "(`dmesg | grep -i nvidia`); install the driver flavour the GPU needs (open kernel modules "
        "for Blackwell, proprietary for pre-Turing), check the BIOS's above-4G decoding / BAR "
        "settings, reseat or replace the GPU"
    ),
}
UNKNOWN_XID = "UNLISTED"


def _bucket(event: GpuEvent) -> str:
    if event.kind != "xid":
        return EVENT_BUCKETS[event.kind]
    xid_code = event.xid or 0
    if xid_code == 154:
        return RECOVERY_BUCKETS.get(event.recovery_action or 0, "RESET_GPU")
    if 144 <= xid_code <= 150:
        return "RESET_GPU" if event.severity_word == "Fatal" else "RESTART_APP"
    entry = XID_CATALOG.get(xid_code)
    if entry is None or entry.bucket is None:
        return UNKNOWN_XID
    return WORKFLOW_BUCKETS.get(entry.bucket, entry.bucket)


def _advice(buckets: list[str]) -> str:
    said = sorted({BUCKET_ADVICE[b] for b in buckets if b in BUCKET_ADVICE})
    return "NVIDIA's catalog: " + "; ".join(said) if said else "the GPU stays in service"


def _gpus_expected(snap: Snapshot) -> bool:
    """Whether this node should have GPUs: the driver role counted some, NVML or the PCI bus shows one."""
    counted, _ = expected_gpu_count(snap)
    return bool(counted) or bool(snap.nvml.gpus) or any(d.kind == "gpu" for d in snap.fabric.pci)


def _label(event: GpuEvent) -> str:
    if event.kind == "xid":
        return f"Xid {event.xid}" + (f" {event.severity_word}" if event.severity_word else "")
    return event.kind.replace("_", " ")


# long: groups the log's events per device, then one verdict per device
@check("gpu.xid")
def xid(snap: Snapshot) -> list[Result]:
    log = snap.kernel_log
    if log.text is None:
        return [Result("gpu.xid", Status.SKIP, f"kernel log not read: {log.error}")]
    nvrm = log.nvrm
    since = "since the NVIDIA driver last loaded" if nvrm.driver_loads else "in the kernel log"
    by_device: dict[str, list[GpuEvent]] = {}
    for event in nvrm.events:
        by_device.setdefault(event.device, []).append(event)
    if not by_device:
        if not snap.nvml.available and snap.nvidia_module_version is None and not nvrm.driver_loads:
            return [Result("gpu.xid", Status.SKIP, "no NVIDIA driver messages and no NVIDIA driver loaded")]
        return [
            Result(
                "gpu.xid",
                Status.PASS,
                f"no GPU error {since}",
                evidence={
                    "driver_loads": nvrm.driver_loads,
                    "older_events_ignored": nvrm.dropped_before_load,
                },
            )
        ]
    results = []
    for device, events in sorted(by_device.items()):
        buckets = [_bucket(e) for e in events]
        labels = [_label(e) for e in events]
        # Xid 154 states the current recovery action: a later "to 0x0 (None)" means it was cleared.
        recovery = [e for e in events if e.xid == 154]
        cleared = bool(recovery) and recovery[-1].recovery_action == 0
        taking_out = [
            (label, b)
            for label, b, e in zip(labels, buckets, events, strict=True)
            if b in TAKES_GPU_OUT and not (cleared and e.xid == 154)
        ]
        if device == UNKNOWN_DEVICE and not _gpus_expected(snap):
            # "No NVIDIA GPU found" on a node nobody said has GPUs: the driver loaded on a CPU node.
            taking_out = [(label, b) for label, b in taking_out if label != "no gpu found"]
        serious = sorted({label for label, _ in taking_out})
        worst = next((b for b in WORST_FIRST if b in {b for _, b in taking_out}), None)
        counts = dict(Counter(labels))
        unlisted = sorted({label for label, b in zip(labels, buckets, strict=True) if b == UNKNOWN_XID})
        subject = device if device.startswith("minor") or device == UNKNOWN_DEVICE else f"PCI:{device}"
        evidence = {
            "events": counts,
            "buckets": sorted(set(buckets)),
            "first_lines": [e.line for e in events[:5]],
            "since_driver_load": bool(nvrm.driver_loads),
            "catalog": {
                f"Xid {e.xid}": f"{XID_CATALOG[e.xid].mnemonic}: {XID_CATALOG[e.xid].description}"
                for e in events
                if e.xid in XID_CATALOG
            },
        }
        if recovery:
            evidence["recovery_action"] = recovery[-1].recovery_action_name
        if serious and worst:
            results.append(
                Result(
                    "gpu.xid",
                    Status.FAIL,
                    f"{', '.join(serious)} {since}: "
                    + (
                        "the driver never brought this GPU up"
                        if worst == "NOT_BROUGHT_UP"
                        else f"NVIDIA's catalog says {worst}"
                    ),
                    subject=subject,
                    evidence=evidence,
                    metrics={"xid_events": float(len(events))},
                    critical=True,
                    remedy=BUCKET_REMEDY[worst],
                )
            )
            continue
        results.append(
            Result(
                "gpu.xid",
                Status.WARN,
                f"{', '.join(counts)} {since}"
                + (
                    f" ({', '.join(unlisted)}: no action in {CATALOG_EDITION}; look it up at {CATALOG_URL})"
                    if unlisted
                    else f" ({_advice(buckets)})"
                ),
                subject=subject,
                evidence=evidence,
                metrics={"xid_events": float(len(events))},
                remedy="look at the job that ran when it was logged (`dmesg | grep NVRM`)",
            )
        )
    return results


# NVSwitch SXids (NVIDIA Fabric Manager User Guide DU-09883-001, "NVSwitch SXid errors"; the line
# states Fatal / Non-fatal / Correctable itself, its "Severity" and "Data" companion lines do not).
# Fatal ones take the fabric down for the GPUs behind the switch; NVIDIA lists these as fatal whatever
# the line's own word, and 19084 as needing every GPU and NVSwitch reset.
SXID_FATAL = frozenset(
    {11001, 11009, 11013, 11018, 11019, 11020, 12001, 12002, 12020, 12022, 12024, 12025, 12026, 12027}
    | {12030, 12031, 12032, 14017, 15001, 15006, 15009, 15010, 15012, 15013, 19047, 19048, 19054}
    | {19056, 19058, 19060, 19061, 19063, 19064, 19066, 19067, 19069, 19070, 19084, 20034, 22003}
    | {22011, 22012, 24004, 24005, 24006, 24007}
    | set(range(23001, 23015))
)
# Non-fatal ones NVIDIA says stall NVLink traffic: the jobs on the GPUs abort (with Xid 45).
SXID_ABORTS_JOBS = frozenset({11004, 12028})
SXID_REMEDY = (
    "drain the node; reset the GPUs and NVSwitches (nvidia-smi -r, with Fabric Manager stopped) or "
    "reboot the host, as NVIDIA's Fabric Manager guide says for fatal SXids; replace the baseboard if it "
    "recurs (`dmesg | grep SXid`)"
)


@check("gpu.sxid")
def sxid(snap: Snapshot) -> list[Result]:
    """NVSwitch errors of the driver's current load, per switch, with NVIDIA's severity."""
    log = snap.kernel_log
    if log.text is None:
        return [Result("gpu.sxid", Status.SKIP, f"kernel log not read: {log.error}")]
    by_switch: dict[str, list[GpuEvent]] = {}
    for event in log.nvrm.switch_events:
        by_switch.setdefault(event.device, []).append(event)
    if not by_switch:
        if not any(d.kind == "nvswitch" for d in snap.fabric.pci) and "nvidia-nvswitch" not in log.text:
            return [
                Result("gpu.sxid", Status.SKIP, "no NVSwitch on the PCI bus and no SXid in the kernel log")
            ]
        return [Result("gpu.sxid", Status.PASS, "no NVSwitch error in the driver's current load")]
    results = []
    for switch, events in sorted(by_switch.items()):
        words: dict[int, str] = {}
        for event in events:
            if event.xid is not None and event.severity_word:
                words.setdefault(event.xid, event.severity_word)
        codes = sorted({e.xid for e in events if e.xid is not None})
        fatal = [c for c in codes if words.get(c) == "Fatal" or c in SXID_FATAL]
        labels = [f"SXid {c} {words.get(c, 'severity not stated')}" for c in codes]
        evidence = {"sxids": labels, "first_lines": [e.line for e in events[:5]]}
        # An SXid prints a line with its severity, then "Severity ..." and "Data {...}" lines: one event.
        stated = sum(1 for e in events if e.severity_word)
        metrics = {"sxid_events": float(stated or len(events))}
        if fatal:
            results.append(
                Result(
                    "gpu.sxid",
                    Status.FAIL,
                    f"NVSwitch fatal error(s) {', '.join(f'SXid {c}' for c in fatal)}: the NVLink "
                    "fabric behind this switch is down",
                    subject=f"PCI:{switch}",
                    evidence=evidence,
                    metrics=metrics,
                    critical=True,
                    remedy=SXID_REMEDY,
                )
            )
            continue
        aborts = [c for c in codes if c in SXID_ABORTS_JOBS]
        results.append(
            Result(
                "gpu.sxid",
                Status.WARN,
                f"NVSwitch non-fatal error(s): {', '.join(labels)}"
                + (
                    f" (SXid {', '.join(map(str, aborts))}: NVLink traffic stalls, jobs abort)"
                    if aborts
                    else ""
                ),
                subject=f"PCI:{switch}",
                evidence=evidence,
                metrics=metrics,
                remedy="watch for repeats; check the NVLink trays if they recur (`dmesg | grep SXid`)",
            )
        )
    return results


FIRMWARE_REMEDY = (
    "flash the odd GPUs to the version the others run (nvflash / the vendor's firmware bundle); a "
    "mix of VBIOS or InfoROM versions in one node behaves differently under load and in DCGM's tests"
)


@check("gpu.firmware")
def firmware(snap: Snapshot) -> Result:
    """VBIOS and InfoROM image versions equal across the node's GPUs of one model."""
    if not snap.nvml.available:
        return _unavailable("gpu.firmware", snap)
    by_model: dict[str, dict[str, dict[str, list[int]]]] = {}
    for gpu in snap.nvml.gpus:
        if gpu.error is not None or gpu.unreadable is not None:
            continue
        model = by_model.setdefault(gpu.name or "unknown model", {"vbios": {}, "inforom": {}})
        if gpu.vbios_version:
            model["vbios"].setdefault(gpu.vbios_version, []).append(gpu.index)
        if gpu.inforom_image:
            model["inforom"].setdefault(gpu.inforom_image, []).append(gpu.index)
    known = {name: kinds for name, kinds in by_model.items() if kinds["vbios"] or kinds["inforom"]}
    if not known:
        return Result("gpu.firmware", Status.SKIP, "NVML reports no VBIOS or InfoROM version")
    evidence = {"models": known}
    mixed = [
        f"{name}: {kind} "
        + ", ".join(
            f"{version} on GPU {', '.join(map(str, gpus))}" for version, gpus in sorted(found.items())
        )
        for name, kinds in sorted(known.items())
        for kind, found in kinds.items()
        if len(found) > 1
    ]
    if mixed:
        return Result(
            "gpu.firmware",
            Status.WARN,
            f"GPUs of one model run different firmware: {'; '.join(mixed)}",
            evidence=evidence,
            remedy=FIRMWARE_REMEDY,
        )
    described = "; ".join(
        f"{name}: VBIOS {', '.join(kinds['vbios']) or 'unknown'}, "
        f"InfoROM {', '.join(kinds['inforom']) or 'unknown'}"
        for name, kinds in sorted(known.items())
    )
    return Result("gpu.firmware", Status.PASS, f"one firmware per model: {described}", evidence=evidence)
